// Convolution, pooling, Resize, GridSample and DeformConv kernels on (N, C, *spatial) tensors.
// Float types compute in float32 and store once; pure data movement (im2col) goes by element size.
#include <float.h>

#include "common.cuh"

// Helpers live in a namespace: every .cu file is compiled as one translation unit.
namespace spatial {

// Sliding-window geometry over up to 3 spatial dims; fewer dims are padded in front with unit dims
// (in = out = kernel = stride = dilation = 1, pads 0), so every kernel loops over exactly 3.

__device__ __forceinline__ int64_t prod3(const int64_t d[3]) { return d[0] * d[1] * d[2]; }

// Flat index i (last dim fastest) -> coordinates over dims d.
__device__ __forceinline__ void unravel3(int64_t i, const int64_t d[3], int64_t c[3]) {
  c[2] = i % d[2];
  i /= d[2];
  c[1] = i % d[1];
  c[0] = i / d[1];
}

// --- Conv: im2col ------------------------------------------------------------------------------
// cols[p][k][l] = x[p][o_l * stride - pad_begin + k * dilation] (0 outside the input), for every
// (image, channel) plane p, kernel tap k and output position l: per image a (C * K, L) matrix whose row
// order matches W's (M, C / group, *kernel) layout, so each group's GEMM is W_g (M_g, C_g * K) . cols_g.
template <typename T>
__device__ void im2col(int64_t total, const T* x, T* cols, Window w) {
  const int64_t L = prod3(w.out), K = prod3(w.kernel), plane = prod3(w.in);
  GRID_LOOP(i, total) {
    int64_t o[3], k[3];
    unravel3(i % L, w.out, o);
    unravel3((i / L) % K, w.kernel, k);
    const int64_t p = i / (L * K);
    int64_t src = 0;
    bool inside = true;
    for (int d = 0; d < 3; d++) {
      int64_t c = o[d] * w.stride[d] - w.pad_begin[d] + k[d] * w.dilation[d];
      inside = inside && c >= 0 && c < w.in[d];
      src = src * w.in[d] + c;
    }
    cols[i] = inside ? x[p * plane + src] : T(0);  // all-zero bits: +0.0 in every float type
  }
}

// y[i] += bias[(i / inner) % channels]: Conv's bias after the GEMM (whose float16/bfloat16 output is
// already rounded: the one place a result rounds twice).
template <typename T>
__device__ void add_channel_bias(int64_t n, T* y, const T* bias, int64_t channels, int64_t inner) {
  GRID_LOOP(i, n) st(y + i, ld(y + i) + ld(bias + (i / inner) % channels));
}

// --- ConvTranspose: col2im as a gather ----------------------------------------------------------
// cols holds, per image, W^T . x: (M, K, L_in), each input pixel's contribution to a kernel-sized patch.
// Output position o (full coordinate f = o + pad_begin) receives tap k of input pixel j wherever
// f = j * stride + k * dilation; each output element sums its own taps, so no atomics are needed.
// w.in is the ConvTranspose input's spatial shape, w.out the output's.
template <typename T>
__device__ void col2im(int64_t total, const T* cols, const T* bias, T* y, int64_t channels, Window w) {
  const int64_t plane_out = prod3(w.out), K = prod3(w.kernel), L = prod3(w.in);
  GRID_LOOP(i, total) {
    int64_t o[3];
    unravel3(i % plane_out, w.out, o);
    const int64_t nm = i / plane_out;  // image * channels + output channel
    const T* patch = cols + nm * K * L;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < w.kernel[0]; k0++) {
      int64_t t0 = o[0] + w.pad_begin[0] - k0 * w.dilation[0];
      if (t0 < 0 || t0 % w.stride[0]) continue;
      int64_t j0 = t0 / w.stride[0];
      if (j0 >= w.in[0]) continue;
      for (int64_t k1 = 0; k1 < w.kernel[1]; k1++) {
        int64_t t1 = o[1] + w.pad_begin[1] - k1 * w.dilation[1];
        if (t1 < 0 || t1 % w.stride[1]) continue;
        int64_t j1 = t1 / w.stride[1];
        if (j1 >= w.in[1]) continue;
        for (int64_t k2 = 0; k2 < w.kernel[2]; k2++) {
          int64_t t2 = o[2] + w.pad_begin[2] - k2 * w.dilation[2];
          if (t2 < 0 || t2 % w.stride[2]) continue;
          int64_t j2 = t2 / w.stride[2];
          if (j2 >= w.in[2]) continue;
          int64_t tap = (k0 * w.kernel[1] + k1) * w.kernel[2] + k2;
          acc += ld(patch + tap * L + (j0 * w.in[1] + j1) * w.in[2] + j2);
        }
      }
    }
    if (bias) acc += ld(bias + nm % channels);
    st(y + i, acc);
  }
}

// --- MaxPool / AveragePool ----------------------------------------------------------------------
// POOL_MAX_*: stock's CPU paths (kernels/cpu/spatial.py stock_max_pool_path), which treat NaN and -inf each
// their own way: its own LOOP, MLAS's SCALAR loop, its VECTOR kernels (2-D, 3-D) and its GLOBAL kernel.

// MLAS's two maxima: maxps keeps the running value r only where it is greater (a NaN either side gives v);
// std::max takes v only where it is greater (a NaN v is dropped, a NaN r stays).
__device__ __forceinline__ float maxps(float r, float v) { return r > v ? r : v; }
__device__ __forceinline__ float std_max(float r, float v) { return r < v ? v : r; }

// MLAS's vector kernel for output (o, j): per kernel column, the kernel's rows (and planes) of that input
// column folded into one value (whole vectors of 4 columns by maxps, the rest by std::max; 2-D from the first
// row, 3-D from the lowest float), the lowest float outside the input; then those folded by maxps. Rows follow
// MLAS's unsigned arithmetic: a window starting past the end reads from row 0.
template <typename T>
__device__ float mlas_vector_max(const T* xp, const int64_t o[3], const Window& w, bool from_lowest) {
  int64_t lo[2], hi[2];
  for (int d = 0; d < 2; d++) {
    const int64_t s = o[d] * w.stride[d] - w.pad_begin[d];
    const uint64_t end = (uint64_t)(s + w.kernel[d]);
    lo[d] = (uint64_t)s >= (uint64_t)w.in[d] ? 0 : s;
    hi[d] = end < (uint64_t)w.in[d] ? (int64_t)end : w.in[d];
  }
  const int64_t width = w.in[2], vector_cols = width / 4 * 4;
  float r = 0.0f;
  for (int64_t t = 0; t < w.kernel[2]; t++) {
    const int64_t c = o[2] * w.stride[2] + t - w.pad_begin[2];
    float f = -FLT_MAX;
    if (c >= 0 && c < width) {
      bool first = !from_lowest;
      if (first) f = c < vector_cols ? NAN : -FLT_MAX;  // no rows at all (pads at least the kernel)
      for (int64_t r0 = lo[0]; r0 < hi[0]; r0++)
        for (int64_t r1 = lo[1]; r1 < hi[1]; r1++) {
          const float v = ld(xp + (r0 * w.in[1] + r1) * width + c);
          f = first ? v : c < vector_cols ? maxps(f, v) : std_max(f, v);
          first = false;
        }
    }
    r = t ? maxps(r, f) : f;
  }
  return r;
}

// MLAS's global kernel over one plane, a warp: element j joins lane j % 4 by maxps from the lowest float (the
// lanes' closed form: NaN where the lane's last element is NaN, else the maximum of what follows its last NaN,
// or of the lane and the lowest float where it has none), the lanes combined 0 with 2, 1 with 3, then the two; the last n % 4 by std::max.
template <typename T>
__device__ float mlas_global_max(const T* xp, int64_t n) {
  const int lane = threadIdx.x;  // 32 threads: thread t only sees elements of lane t % 4
  const int64_t full = n / 4 * 4;
  int64_t last_nan = -1;
  for (int64_t j = lane; j < full; j += 32)
    if (isnan(ld(xp + j))) last_nan = j;
  for (int off = 4; off < 32; off *= 2) last_nan = max(last_nan, __shfl_xor_sync(0xffffffffu, last_nan, off));
  float best = last_nan < 0 ? -FLT_MAX : -INFINITY;  // the lowest float is lost to a NaN
  for (int64_t j = lane; j < full; j += 32)
    if (j > last_nan) best = fmaxf(best, ld(xp + j));
  for (int off = 4; off < 32; off *= 2) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, off));
  const int64_t lane_last = full - 4 + lane % 4;  // the lane's last element
  if (full && last_nan == lane_last) best = NAN;
  float l[4];
  for (int i = 0; i < 4; i++) l[i] = __shfl_sync(0xffffffffu, best, i);
  const float a = l[0] > l[2] ? l[0] : l[2], b = l[1] > l[3] ? l[1] : l[3];
  float r = a > b ? a : b;
  for (int64_t j = full; j < n; j++) r = std_max(r, ld(xp + j));
  return r;
}

// One output element per thread over its window. Taps outside the input never contribute to the value;
// AveragePool divides by the taps inside the input, or (count_include_pad) inside the input and its
// explicit pads: taps added by ceil_mode past the end pads never count, as in ORT. POOL_SUM: the
// plain sum (LpPool's, of |x|^p).
template <typename T>
__device__ void pool(int64_t total, const T* x, T* y, int mode, Window w) {
  const int64_t plane_out = prod3(w.out), plane_in = prod3(w.in);
  GRID_LOOP(i, total) {
    int64_t o[3];
    unravel3(i % plane_out, w.out, o);
    const T* xp = x + (i / plane_out) * plane_in;
    if (mode == POOL_MAX_VECTOR_2D || mode == POOL_MAX_VECTOR_3D) {
      st(y + i, mlas_vector_max(xp, o, w, mode == POOL_MAX_VECTOR_3D));
      continue;
    }
    // MLAS's scalar loop starts its max at the lowest finite value; stock's own at the first element inside
    float best = mode == POOL_MAX_LOOP ? -INFINITY : -FLT_MAX, sum = 0.0f;
    int64_t inside = 0, counted = 0;
    int64_t start[3];
    for (int d = 0; d < 3; d++) start[d] = o[d] * w.stride[d] - w.pad_begin[d];
    for (int64_t k0 = 0; k0 < w.kernel[0]; k0++) {
      int64_t c0 = start[0] + k0 * w.dilation[0];
      for (int64_t k1 = 0; k1 < w.kernel[1]; k1++) {
        int64_t c1 = start[1] + k1 * w.dilation[1];
        for (int64_t k2 = 0; k2 < w.kernel[2]; k2++) {
          int64_t c2 = start[2] + k2 * w.dilation[2];
          // taps start at or after -pad_begin, so only the end of the padded extent needs a test
          counted += c0 < w.in[0] + w.pad_end[0] && c1 < w.in[1] + w.pad_end[1] && c2 < w.in[2] + w.pad_end[2];
          if (c0 < 0 || c0 >= w.in[0] || c1 < 0 || c1 >= w.in[1] || c2 < 0 || c2 >= w.in[2]) continue;
          float v = ld(xp + (c0 * w.in[1] + c1) * w.in[2] + c2);
          best = inside || mode != POOL_MAX_LOOP ? std_max(best, v) : v;
          sum += v;
          inside++;
        }
      }
    }
    if (mode == POOL_MAX_SCALAR || mode == POOL_MAX_LOOP)
      st(y + i, best);
    else if (mode == POOL_SUM)
      st(y + i, sum);
    else
      st(y + i, inside ? sum / (float)(mode == POOL_AVERAGE_WITH_PADS ? counted : inside) : 0.0f);
  }
}

// --- Resize (nearest, linear) -------------------------------------------------------------------

// Per-axis tables computed on the host (the same float32 coordinate arithmetic as the CPU kernel):
// for output coordinate j of axis d, entry t = table_offset[d] + j gives the two input positions
// lo[t], hi[t] and the weight of hi, weight[t]. Nearest mode uses lo only.

template <typename T>
__device__ void resize(int64_t n, const T* x, T* y, const int64_t* lo, const int64_t* hi, const float* weight,
                       ResizeAxes r) {
  GRID_LOOP(i, n) {
    int64_t lo_off[SEAMLESS_MAX_DIMS], hi_off[SEAMLESS_MAX_DIMS];
    float w[SEAMLESS_MAX_DIMS];
    int64_t rest = i;
    for (int d = r.rank - 1; d >= 0; d--) {
      int64_t t = r.table_offset[d] + rest % r.out_dims[d];
      rest /= r.out_dims[d];
      lo_off[d] = lo[t] * r.in_strides[d];
      hi_off[d] = hi[t] * r.in_strides[d];
      w[d] = weight[t];
    }
    // every corner of the blended axes: each subset `s` of them takes hi there and lo elsewhere
    float acc = 0.0f;
    for (int s = r.blended;; s = (s - 1) & r.blended) {
      float f = 1.0f;
      int64_t off = 0;
      for (int d = 0; d < r.rank; d++) {
        bool use_hi = (s >> d) & 1;
        off += use_hi ? hi_off[d] : lo_off[d];
        if ((r.blended >> d) & 1) f *= use_hi ? w[d] : 1.0f - w[d];
      }
      acc += f * ld(x + off);
      if (s == 0) break;
    }
    st(y + i, acc);
  }
}

// CausalConvWithState: y[b, c, t] = bias[c] + sum_j w[c, j] * v[b, c, t + j * dilation] with v = past ++ x per
// (b, c) and past absent as zeros; state[b, c, i] = v[b, c, n + i]. x and y channels first [B, C, n], or token major
// (args.h ConvPieces: x [B, n, pieces * C], its blocks gating the input and the output; y [B, n, C]); past and
// state [B, C, span]. The grid's first rows * n elements are y's (in y's order), the rest the state's. Rounded as
// the nodes it stands for: a gated input and the output before its gate to T, bias, then the taps in order, no FMA.
template <typename T>
__device__ __forceinline__ T conv_input(const T* x, int64_t at, int64_t channels, ConvPieces p) {
  if (p.in_gate < 0) return x[at + p.value * channels];
  T v;
  st(&v, __fmul_rn(ld(x + at + p.value * channels), ld(x + at + p.in_gate * channels)));
  return v;
}

template <typename T>
__device__ void causal_conv(int64_t rows, int64_t channels, int64_t n, int64_t k, int64_t dilation, int silu,
                            ConvPieces p, const T* x, const T* w, const T* bias, const T* past,
                            const int32_t* lengths, T* y, T* state) {
  const int64_t span = (k - 1) * dilation, ny = rows * n;
  const int64_t step = p.token_major ? channels * p.pieces : 1;  // between x's positions of one channel
  GRID_LOOP(e, ny + rows * span) {
    int64_t row, t;  // row: (b, c); x's element (b, c, i) lies at x[first + i * step] (of the value block)
    if (e < ny) {
      row = p.token_major ? e / (n * channels) * channels + e % channels : e / n;
      t = p.token_major ? e / channels % n : e % n;
    } else {
      row = (e - ny) / span;
    }
    const int64_t c = row % channels, first = p.token_major ? row / channels * n * step + c : row * n;
    const T* pr = past ? past + row * span : nullptr;
    if (e < ny) {
      float acc = bias ? ld(bias + c) : 0.0f;
      for (int64_t j = 0; j < k; j++) {
        const int64_t i = t + j * dilation;
        T v = i >= span ? conv_input(x, first + (i - span) * step, channels, p) : pr ? pr[i] : T(0.0f);
        acc = __fadd_rn(acc, __fmul_rn(ld(w + c * k + j), ld(&v)));
      }
      if (silu) acc = acc / (1.0f + expf(-acc));
      if (p.out_gate >= 0) acc = __fmul_rn(rounded<T>(acc), ld(x + first + t * step + p.out_gate * channels));
      st(y + e, acc);
    } else {
      // the state ends at the real length: a padded prompt's (lengths: seqlens_k, batch-major), clamped to [0, n]
      const int64_t real = lengths ? min(max((int64_t)lengths[row / channels] + 1, (int64_t)0), n) : n;
      const int64_t i = real + (e - ny) - row * span;
      state[e - ny] = i >= span ? conv_input(x, first + (i - span) * step, channels, p) : pr ? pr[i] : T(0.0f);
    }
  }
}

}  // namespace spatial

extern "C" __global__ void seamless_im2col_2(int64_t total, const uint16_t* x, uint16_t* cols, Window w) { dependent_launch();
  spatial::im2col(total, x, cols, w);
}
extern "C" __global__ void seamless_im2col_4(int64_t total, const uint32_t* x, uint32_t* cols, Window w) { dependent_launch();
  spatial::im2col(total, x, cols, w);
}
extern "C" __global__ void seamless_im2col_8(int64_t total, const uint64_t* x, uint64_t* cols, Window w) { dependent_launch();
  spatial::im2col(total, x, cols, w);  // float64: ConvInteger's exact sums
}

#define SPATIAL_KERNELS(S, T)                                                                                          \
  extern "C" __global__ void seamless_conv_bias_##S(int64_t n, T* y, const T* bias, int64_t channels,                  \
                                                    int64_t inner) { dependent_launch();                               \
    spatial::add_channel_bias(n, y, bias, channels, inner);                                                            \
  }                                                                                                                    \
  extern "C" __global__ void seamless_col2im_##S(int64_t total, const T* cols, const T* bias, T* y, int64_t channels,  \
                                                 Window w) { dependent_launch();                              \
    spatial::col2im(total, cols, bias, y, channels, w);                                                                \
  }                                                                                                                    \
  extern "C" __global__ void seamless_pool_##S(int64_t total, const T* x, T* y, int mode, Window w) { dependent_launch(); \
    spatial::pool(total, x, y, mode, w);                                                                               \
  }                                                                                                                    \
  extern "C" __global__ void seamless_global_max_pool_##S(const T* x, T* y, int64_t plane) { dependent_launch();     \
    const float v = spatial::mlas_global_max(x + blockIdx.x * plane, plane);                                           \
    if (threadIdx.x == 0) st(y + blockIdx.x, v);                                                                      \
  }                                                                                                                    \
  extern "C" __global__ void seamless_resize_##S(int64_t n, const T* x, T* y, const int64_t* lo, const int64_t* hi,    \
                                                 const float* weight, ResizeAxes r) { dependent_launch();     \
    spatial::resize(n, x, y, lo, hi, weight, r);                                                                       \
  }
FOR_FLOATS(SPATIAL_KERNELS)
#undef SPATIAL_KERNELS

#define CAUSAL_CONV(S, T)                                                                                              \
  extern "C" __global__ void seamless_causal_conv_##S(int64_t rows, int64_t channels, int64_t n, int64_t k,          \
                                                      int64_t dilation, int silu, ConvPieces pieces, const T* x,       \
                                                      const T* w, const T* bias, const T* past,                        \
                                                      const int32_t* lengths, T* y, T* state) {                        \
    dependent_launch();                                                                                                \
    spatial::causal_conv(rows, channels, n, k, dilation, silu, pieces, x, w, bias, past, lengths, y, state);         \
  }
FOR_FLOATS(CAUSAL_CONV)
#undef CAUSAL_CONV


// GridSample (1 to 3 spatial dims), as kernels/cpu/spatial.py: a thread per output element sums its
// taps (1, 2 or 4 per axis: nearest, linear, cubic with a = -0.75) in the CPU kernel's order, the grid's
// coordinates in float32 (the grid lists the innermost axis first); padding zeros (taps outside count
// 0), border (coordinates clamped; cubic clamps each tap instead) or reflection (coordinates and taps
// reflected off [low, high], any number of bounces).
namespace grid_sample {


__device__ float reflect(float x, float low, float high) {
  float span = __fsub_rn(high, low);
  if (span <= 0.0f) return low;
  if (x >= low && x <= high) return x;
  bool below = x < low;
  float dx = below ? __fsub_rn(low, x) : __fsub_rn(x, high);
  float bounces = floorf(__fdiv_rn(dx, span));
  float r = __fsub_rn(dx, __fmul_rn(bounces, span));
  bool even = fmodf(bounces, 2.0f) == 0.0f;
  return below ? (even ? __fadd_rn(low, r) : __fsub_rn(high, r)) : (even ? __fsub_rn(high, r) : __fadd_rn(low, r));
}

__device__ float cubic(float d) {  // Keys' kernel, a = -0.75, as kernels/cpu/spatial.py's _cubic in float32
  const float a = -0.75f;
  d = fabsf(d);
  if (d <= 1.0f) return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(a + 2.0f, d), a + 3.0f), d), d), 1.0f);
  if (d < 2.0f)
    return __fsub_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(a, d), 5.0f * a), d), 8.0f * a), d), 4.0f * a);
  return 0.0f;
}

// One axis' taps of the coordinate g in [-1, 1]: indices (clamped), weights and whether inside.
__device__ int taps(float g, int length, const GridSampleShape& s, int* index, float* weight, bool* inside) {
  float coord = s.align ? __fmul_rn(__fdiv_rn(__fadd_rn(g, 1.0f), 2.0f), (float)(length - 1))
                        : __fdiv_rn(__fsub_rn(__fmul_rn(__fadd_rn(g, 1.0f), (float)length), 1.0f), 2.0f);
  float low = s.align ? 0.0f : -0.5f, high = s.align ? (float)(length - 1) : __fsub_rn((float)length, 0.5f);
  if (s.mode == 0) coord = rintf(coord);
  if (s.padding == 1 && s.mode != 2) coord = fminf(fmaxf(coord, 0.0f), (float)(length - 1));
  else if (s.padding == 2) coord = reflect(coord, low, high);
  int count = s.mode == 0 ? 1 : s.mode == 1 ? 2 : 4;
  float x0 = floorf(coord);
  for (int k = 0; k < count; k++) {
    float at = s.mode == 0 ? rintf(coord) : s.mode == 1 ? x0 + k : x0 + (k - 1);
    weight[k] = s.mode == 0 ? 1.0f : s.mode == 1 ? (k ? __fsub_rn(coord, x0) : __fsub_rn(1.0f, __fsub_rn(coord, x0)))
                                   : cubic(__fsub_rn(at, coord));
    if (s.padding == 0) {
      inside[k] = at >= 0.0f && at < (float)length;
    } else {
      if (s.padding == 2) at = truncf(reflect(at, low, high));
      inside[k] = true;
    }
    index[k] = (int)fminf(fmaxf(at, 0.0f), (float)(length - 1));
  }
  return count;
}

template <typename T>
__device__ void sample(const T* x, const T* grid, T* y, GridSampleShape s) {
  GRID_LOOP(o, s.n * s.c * s.points) {
    int64_t point = o % s.points, ch = (o / s.points) % s.c, b = o / (s.points * s.c);
    const T* g = grid + (b * s.points + point) * s.nd;
    int index[3][4], count[3] = {1, 1, 1};
    float weight[3][4] = {{1.0f}, {1.0f}, {1.0f}};
    bool inside[3][4] = {{true}, {true}, {true}};
    int64_t size = 1;
    for (int i = 0; i < s.nd; i++) {
      count[i] = taps(ld(g + s.nd - 1 - i), s.dims[i], s, index[i], weight[i], inside[i]);
      size *= s.dims[i];
    }
    for (int i = s.nd; i < 3; i++) index[i][0] = 0;
    const T* image = x + (b * s.c + ch) * size;
    float acc = 0.0f;
    for (int k0 = 0; k0 < count[0]; k0++)
      for (int k1 = 0; k1 < count[1]; k1++)
        for (int k2 = 0; k2 < count[2]; k2++) {
          float w = __fmul_rn(__fmul_rn(weight[0][k0], s.nd > 1 ? weight[1][k1] : 1.0f), s.nd > 2 ? weight[2][k2] : 1.0f);
          bool in = inside[0][k0] && (s.nd < 2 || inside[1][k1]) && (s.nd < 3 || inside[2][k2]);
          int64_t at = index[0][k0];
          if (s.nd > 1) at = at * s.dims[1] + index[1][k1];
          if (s.nd > 2) at = at * s.dims[2] + index[2][k2];
          acc = __fadd_rn(acc, __fmul_rn(in ? w : 0.0f, ld(image + at)));
        }
    st(y + o, acc);
  }
}

}  // namespace grid_sample

#define GRID_SAMPLE(S, T)                                                                                    \
  extern "C" __global__ void seamless_grid_sample_##S(const T* x, const T* grid, T* y, GridSampleShape s) { \
    dependent_launch();                                                                                      \
    grid_sample::sample<T>(x, grid, y, s);                                                                   \
  }
FOR_FLOATS(GRID_SAMPLE)

// DeformConv's columns, as kernels/cpu/spatial.py: for every (n, c, tap ky, kx, output y, x) the input
// sampled bilinearly (zero outside) at the tap's place plus its offset, times the mask; laid out
// [n, c, kh, kw, oh, ow], which is [n, group, c / group * kh * kw, oh * ow] for the GEMM by W.
namespace deform {


template <typename T>
__device__ void columns(const T* x, const T* offset, const T* mask, float* out, DeformShape s) {
  int64_t taps = (int64_t)s.kh * s.kw, plane = s.oh * s.ow;
  GRID_LOOP(i, s.n * s.c * taps * plane) {
    int64_t ox = i % s.ow, oy = (i / s.ow) % s.oh, tap = (i / plane) % taps, ch = (i / (plane * taps)) % s.c;
    int64_t b = i / (plane * taps * s.c);
    int64_t og = ch / (s.c / s.offset_groups), ky = tap / s.kw, kx = tap % s.kw;
    int64_t at = ((b * s.offset_groups + og) * taps + tap) * 2 * plane + oy * s.ow + ox;  // offset [n, og, tap, 2, oh, ow]
    float py = (float)(oy * s.stride_h - s.top + ky * s.dilation_h) + ld(offset + at);
    float px = (float)(ox * s.stride_w - s.left + kx * s.dilation_w) + ld(offset + at + plane);
    float m = mask ? ld(mask + ((b * s.offset_groups + og) * taps + tap) * plane + oy * s.ow + ox) : 1.0f;
    float y0 = floorf(py), x0 = floorf(px), acc = 0.0f;
    const T* image = x + (b * s.c + ch) * s.height * s.width;
    for (int dy = 0; dy < 2; dy++)
      for (int dx = 0; dx < 2; dx++) {
        float yi = y0 + dy, xi = x0 + dx;
        float w = (1.0f - fabsf(py - yi)) * (1.0f - fabsf(px - xi));
        bool inside = yi >= 0.0f && yi < (float)s.height && xi >= 0.0f && xi < (float)s.width;
        int64_t row = (int64_t)fminf(fmaxf(yi, 0.0f), (float)(s.height - 1));
        int64_t col = (int64_t)fminf(fmaxf(xi, 0.0f), (float)(s.width - 1));
        acc += ld(image + row * s.width + col) * (inside ? w * m : 0.0f);
      }
    out[i] = acc;
  }
}

}  // namespace deform

#define DEFORM_COLUMNS(S, T)                                                                                   \
  extern "C" __global__ void seamless_deform_columns_##S(const T* x, const T* offset, const T* mask, float* out, \
                                                         DeformShape s) {                                     \
    dependent_launch();                                                                                        \
    deform::columns<T>(x, offset, mask, out, s);                                                               \
  }
FOR_FLOATS(DEFORM_COLUMNS)
