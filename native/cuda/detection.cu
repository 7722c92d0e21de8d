// MaxRoiPool, float32, answering as ORT's CPU kernel does (native/cpu/detection.c says how): one
// thread per output value. An ROI whose batch index is out of range gives zeros and is reported (its
// number: args.h GpuCheck).
#include <cfloat>

#include "common.cuh"

__device__ __forceinline__ int64_t roi_corner(float v) {  // NaN / beyond int: INT_MIN, as x86 converts
  return v == v && v > -2147483648.0f && v < 2147483648.0f ? (int64_t)v : (int64_t)INT_MIN;
}

__device__ __forceinline__ int64_t roi_clip(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

extern "C" __global__ void seamless_max_roi_pool_f32(int64_t total, const float* x, int64_t batches,
                                                     int64_t channels, int64_t height, int64_t width,
                                                     const float* rois, int64_t pooled_h, int64_t pooled_w,
                                                     float scale, float* y, GpuCheck check) {
  dependent_launch();
  GRID_LOOP(i, total) {
    int64_t pw = i % pooled_w, ph = i / pooled_w % pooled_h, c = i / (pooled_w * pooled_h) % channels;
    const float* roi = rois + i / (pooled_w * pooled_h * channels) * 5;
    float b = roi[0];
    if (!(b > -1.0f && b < (float)batches)) {
      if (i % (pooled_w * pooled_h * channels) == 0) report_bad(check, i / (pooled_w * pooled_h * channels));
      y[i] = 0.0f;
      continue;
    }
    int64_t x0 = roi_corner(roundf(__fmul_rn(roi[1], scale))), y0 = roi_corner(roundf(__fmul_rn(roi[2], scale)));
    int64_t x1 = roi_corner(roundf(__fmul_rn(roi[3], scale))), y1 = roi_corner(roundf(__fmul_rn(roi[4], scale)));
    int64_t roi_h = max(y1 - y0 + 1, (int64_t)1), roi_w = max(x1 - x0 + 1, (int64_t)1);
    float bin_h = __fdiv_rn((float)roi_h, (float)pooled_h), bin_w = __fdiv_rn((float)roi_w, (float)pooled_w);
    int64_t h0 = roi_clip((int64_t)floorf(__fmul_rn((float)ph, bin_h)) + y0, height);
    int64_t h1 = roi_clip((int64_t)ceilf(__fmul_rn((float)(ph + 1), bin_h)) + y0, height);
    int64_t w0 = roi_clip((int64_t)floorf(__fmul_rn((float)pw, bin_w)) + x0, width);
    int64_t w1 = roi_clip((int64_t)ceilf(__fmul_rn((float)(pw + 1), bin_w)) + x0, width);
    const float* plane = x + (((int64_t)b * channels + c) * height) * width;
    float m = (h1 <= h0 || w1 <= w0) ? 0.0f : -FLT_MAX;
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) {
        float v = plane[h * width + w];
        m = v < m ? m : v;
      }
    y[i] = m;
  }
}
