/* ONNX NonMaxSuppression (and MaxRoiPool, below), float32, answering as ORT's CPU kernels do.
 * Per batch and class, the candidates (the boxes scoring above score_threshold, when one is given)
 * are visited by score, higher first, the lower box index first among equal scores; a candidate is
 * kept unless its intersection over union with a box kept before it (same class) exceeds
 * iou_threshold; at most max_per_class are kept. The candidates sit in a binary heap, so a class
 * that fills its quota early costs O(n + kept log n), not a sort. A candidate is compared with all
 * the kept boxes at once (a vectorized loop over their corners, stored by coordinate). Every IoU is
 * computed with ORT's float32 operations in ORT's order (corners ordered per axis and areas computed
 * once per box), so borderline overlaps decide alike: products are never fused into sums (FMA). */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "simd.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

typedef struct { float y0, x0, y1, x1, area; } NmsBox;

/* The boxes kept for a class, by coordinate. */
typedef struct { float *y0, *x0, *y1, *x1, *area; } NmsKept;

/* C++'s std::max / std::min: the first operand unless the second compares greater / less (NaN
 * coordinates then decide as in ORT) */
static inline float nms_max(float a, float b) { return a < b ? b : a; }
static inline float nms_min(float a, float b) { return b < a ? b : a; }

static inline void nms_box(const float* b, int center_point_box, NmsBox* out) {
  if (center_point_box) { /* [x_center, y_center, width, height] */
    float half_w = b[2] / 2, half_h = b[3] / 2;
    out->x0 = b[0] - half_w;
    out->x1 = b[0] + half_w;
    out->y0 = b[1] - half_h;
    out->y1 = b[1] + half_h;
    out->area = b[2] * b[3];
  } else { /* [y1, x1, y2, x2], any two opposite corners; ties keep the second as the minimum */
    out->x0 = b[1] >= b[3] ? b[3] : b[1];
    out->x1 = b[1] >= b[3] ? b[1] : b[3];
    out->y0 = b[0] >= b[2] ? b[2] : b[0];
    out->y1 = b[0] >= b[2] ? b[0] : b[2];
    out->area = (out->y1 - out->y0) * (out->x1 - out->x0);
  }
}

/* Whether candidate c overlaps one of the n kept boxes by more than the threshold. ORT returns
 * "not suppressed" as soon as the x or the y extents do not overlap or the intersection is not
 * positive; with NaN any of its tests fails alike. */
static inline int nms_suppressed(const NmsBox* c, const NmsKept* kept, size_t n, float iou_threshold) {
  int any = 0;
  for (size_t k = 0; k < n; k++) {
    float x0 = nms_max(c->x0, kept->x0[k]), x1 = nms_min(c->x1, kept->x1[k]);
    float y0 = nms_max(c->y0, kept->y0[k]), y1 = nms_min(c->y1, kept->y1[k]);
    float inter = (x1 - x0) * (y1 - y0);
    float uni = c->area + kept->area[k] - inter;
    any |= (x1 > x0) & (y1 > y0) & (inter > 0.0f) & (inter / uni > iou_threshold);
  }
  return any;
}

/* Whether box a is visited before box b. */
static inline int nms_first(const float* s, int32_t a, int32_t b) {
  return s[a] > s[b] || (s[a] == s[b] && a < b);
}

static inline void nms_sift_down(int32_t* heap, size_t size, size_t i, const float* s) {
  int32_t item = heap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= size) break;
    if (child + 1 < size && nms_first(s, heap[child + 1], heap[child])) child++;
    if (!nms_first(s, heap[child], item)) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = item;
}

SEAMLESS_SIMD int64_t seamless_nms_f32(const float* boxes, const float* scores, size_t batches, size_t classes,
                                       size_t n, size_t max_per_class, float iou_threshold, int has_score_threshold,
                                       float score_threshold, int center_point_box, int32_t* selected,
                                       int64_t* counts) {
  int32_t* heap = (int32_t*)malloc(n * sizeof(int32_t) + 1);
  float* kept_block = (float*)malloc(5 * max_per_class * sizeof(float) + 1);
  if (!heap || !kept_block) {
    free(heap);
    free(kept_block);
    return -1;
  }
  NmsKept kept_boxes = {kept_block, kept_block + max_per_class, kept_block + 2 * max_per_class,
                        kept_block + 3 * max_per_class, kept_block + 4 * max_per_class};
  int64_t total = 0;
  for (size_t b = 0; b < batches; b++) {
    for (size_t c = 0; c < classes; c++) {
      const float* s = scores + (b * classes + c) * n;
      size_t size = 0;
      for (size_t i = 0; i < n; i++) { /* without a branch: half the scores may pass, in no order */
        heap[size] = (int32_t)i;
        size += !has_score_threshold || s[i] > score_threshold;
      }
      for (size_t i = size / 2; i-- > 0;) nms_sift_down(heap, size, i, s);
      int32_t* kept = selected + total;
      size_t n_kept = 0;
      while (size > 0 && n_kept < max_per_class) {
        int32_t top = heap[0];
        heap[0] = heap[--size];
        nms_sift_down(heap, size, 0, s);
        NmsBox box; /* corners of the boxes visited only: a class may stop after a few */
        nms_box(boxes + (b * n + (size_t)top) * 4, center_point_box, &box);
        if (nms_suppressed(&box, &kept_boxes, n_kept, iou_threshold)) continue;
        kept_boxes.y0[n_kept] = box.y0;
        kept_boxes.x0[n_kept] = box.x0;
        kept_boxes.y1[n_kept] = box.y1;
        kept_boxes.x1[n_kept] = box.x1;
        kept_boxes.area[n_kept] = box.area;
        kept[n_kept++] = top;
      }
      counts[b * classes + c] = (int64_t)n_kept;
      total += (int64_t)n_kept;
    }
  }
  free(heap);
  free(kept_block);
  return total;
}

/* The [batch, class, box] rows of the boxes seamless_nms_f32 selected. */
void seamless_nms_rows(const int32_t* selected, const int64_t* counts, size_t batches, size_t classes,
                       int64_t* rows) {
  for (size_t bc = 0; bc < batches * classes; bc++)
    for (int64_t k = 0; k < counts[bc]; k++, selected++, rows += 3) {
      rows[0] = (int64_t)(bc / classes);
      rows[1] = (int64_t)(bc % classes);
      rows[2] = *selected;
    }
}

/* ONNX MaxRoiPool, float32, answering as ORT's CPU kernel does: each ROI's corners scaled and
 * rounded half away from zero, a malformed ROI taken as 1 x 1, the bins' edges from float32
 * arithmetic, clipped to the image; an empty bin is 0; a bin's maximum starts at -FLT_MAX (not -inf)
 * and takes each value unless it compares less, row by row (NaN then decides as in ORT). Corners
 * that are NaN or beyond the int range read as INT_MIN, as x86 converts them (ORT's int arithmetic
 * is undefined there; ours is 64-bit). Returns 0, or 1 + the first ROI whose batch index is out of
 * range (the caller checks them first). */
static inline int64_t roi_corner(float v) {
  return v == v && v > -2147483648.0f && v < 2147483648.0f ? (int64_t)v : INT32_MIN;
}

static inline int64_t roi_clip(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

int64_t seamless_max_roi_pool_f32(const float* x, int64_t batches, int64_t channels, int64_t height, int64_t width,
                              const float* rois, int64_t num_rois, int64_t pooled_h, int64_t pooled_w,
                              float scale, float* y) {
  for (int64_t n = 0; n < num_rois; n++) {
    const float* roi = rois + n * 5;
    float b = roi[0];
    if (!(b > -1.0f && b < (float)batches)) return n + 1;
    int64_t x0 = roi_corner(roundf(roi[1] * scale)), y0 = roi_corner(roundf(roi[2] * scale));
    int64_t x1 = roi_corner(roundf(roi[3] * scale)), y1 = roi_corner(roundf(roi[4] * scale));
    int64_t roi_h = y1 - y0 + 1 > 1 ? y1 - y0 + 1 : 1, roi_w = x1 - x0 + 1 > 1 ? x1 - x0 + 1 : 1;
    float bin_h = (float)roi_h / (float)pooled_h, bin_w = (float)roi_w / (float)pooled_w;
    for (int64_t c = 0; c < channels; c++) {
      const float* plane = x + (((int64_t)b * channels + c) * height) * width;
      float* out = y + (n * channels + c) * pooled_h * pooled_w;
      for (int64_t ph = 0; ph < pooled_h; ph++) {
        int64_t h0 = roi_clip((int64_t)floorf((float)ph * bin_h) + y0, height);
        int64_t h1 = roi_clip((int64_t)ceilf((float)(ph + 1) * bin_h) + y0, height);
        for (int64_t pw = 0; pw < pooled_w; pw++) {
          int64_t w0 = roi_clip((int64_t)floorf((float)pw * bin_w) + x0, width);
          int64_t w1 = roi_clip((int64_t)ceilf((float)(pw + 1) * bin_w) + x0, width);
          float m = (h1 <= h0 || w1 <= w0) ? 0.0f : -FLT_MAX;
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              float v = plane[h * width + w];
              m = v < m ? m : v;
            }
          out[ph * pooled_w + pw] = m;
        }
      }
    }
  }
  return 0;
}

#pragma GCC pop_options
