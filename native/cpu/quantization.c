/* MatMulNBits (com.microsoft): Y[M, N] = A[M, K] x dequant(B)[K, N] (+ bias), float32 A and Y.
 *
 * B is ORT's layout: [N, nb, blob] uint8 with nb = ceil(K / bs) blocks of bs values along K, blob = bs * bits / 8
 * bytes, low bits first; scales [N, nb]; zero points either packed uint8 [N, ceil(nb * bits / 8)] or float [N, nb]
 * (default 2^(bits-1)). Constant 4- and 8-bit weights (uint8 or default zero points) are packed once at Compile
 * (seamless_matmul_nbits_pack_panels): every 32 columns side by side as mnb_int8_wide_vnni, mnb_int8_panels_avx2
 * and the float path's mnb_float_panels read them.
 *
 * Two compute types, chosen as stock ORT (MLAS) chooses them:
 * - int8 (accuracy_level 4): each block of A is quantized to int8 (scale = max|a| / 127,
 *   q = round-half-even(a * (127 / max|a|)), as MLAS does); block dot products are exact int32
 *   sums of q_a * q_b, scaled by scale_a * scale_b; the zero point enters as
 *   - zp * scale_b * (scale_a * sum(q_a)). With AVX-512 VNNI (vpdpbusd: u8 x s8) or AVX2
 *   (vpmaddubsw) a 64-value chunk of a row of B is one vector.
 * - float: each block of B is dequantized ((q - zp) * scale) and multiplied in float32.
 *
 * Decode (M = 1) is a GEMV that streams B once; rows of A are processed in tiles of 4 so B is
 * unpacked once per tile. 4-bit B with the default zero point (the builder's int4 decoders) has its
 * own kernels with everything in registers: mnb_int8_wide_vnni (weights packed as panels, any rows; or prompts of
 * MNB_WIDE_ROWS rows or more, 8-bit B too: 32 columns of B copied side by side, a block's sums scaled once),
 * mnb_int8_row1_vnni4 (decode over the row layout), and
 * mnb_int8_tile4x4_vnni4 and mnb_int8_tile4x2_vnni4 (shorter prompts, the columns past the wide passes). Work is
 * split over N into tasks for the caller's thread pool (parallel.h: ORT's intra-op pool inside the EP, serial
 * otherwise).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"
#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MNB_X86 1
#endif

#define MNB_CHUNK 64 /* values of K per vector step */
#define MNB_TILE 4   /* rows of A per pass over a row of B */
#define MNB_AHEAD 2  /* software prefetch distance, in tiles of rows of B ... */
#define MNB_AHEAD_BYTES 8192 /* ... or 1 tile when a tile is larger than this (L1 stays for A) */
#define MNB_WIDE_ROWS 8  /* prompts of this many rows or more take mnb_int8_wide_vnni */

typedef struct {
  /* quantized A (int8 path) */
  const int8_t* qa;      /* [M, kq]: each full 64-chunk in the order the B unpack yields (see below) */
  const float* lane_sa;  /* [M, chunks, 16]: A block scale of each 32-bit lane of a chunk */
  const float* sa;       /* [M, nb] */
  const float* asum;     /* [M, nb]: sa * sum of the block's q_a */
  const int32_t* init;   /* default zero point only: [M, units, 16] = -zp * (lane sums of q_a), the starting
                          * value of each unit's int32 lanes (unit: a chunk if bs < 64, else a block) */
  const int32_t* qsum;   /* default zero point, a prompt (mnb_int8_wide_vnni): [M, nb] = -zp * sum of the
                          * block's q_a */
  size_t kq, chunks;
  /* float A (float path) */
  const float* a;
  const float* a_perm;   /* [M, kq]: A with each full 64-chunk in the int8 path's order (AVX-512 float path) */
  const float* a_group;  /* one row of 4-bit B (AVX-512): A's full 128-groups lane-major, a_group[g, s, j] = a[g, 8j + s] */
  const float* a_block;  /* ... and the sum of A over each block */
  const float* a_pad;    /* the float path on panels: A [M, nb bs], zero past K */
  size_t groups;
  /* weights */
  const uint8_t* b;
  const float* scales;
  const uint8_t* zp_u8;
  const float* zp_f32;
  const float* bias;
  float* y;
  size_t m, n, k, nb, bs, bits, blob, tasks;
  int panels;             /* b and scales hold full 32 columns as panels (seamless_matmul_nbits_pack_panels) */
  int32_t lane_block[16]; /* int8 path, bs < 64: the block (within its chunk) of each 32-bit lane */
} MnbJob;

/* Values of a block row of B, unpacked to uint8 (natural order). */
static inline void mnb_unpack(const uint8_t* src, size_t bits, size_t count, uint8_t* dst) {
  if (bits == 8) {
    memcpy(dst, src, count);
  } else if (bits == 4) {
    for (size_t i = 0; i < count / 2; i++) {
      dst[2 * i] = src[i] & 15;
      dst[2 * i + 1] = src[i] >> 4;
    }
  } else {
    for (size_t i = 0; i < count; i++) dst[i] = (src[i * bits / 8] >> ((i * bits) % 8)) & ((1 << bits) - 1);
  }
}

static inline float mnb_zero_point(const MnbJob* job, size_t n, size_t blk) {
  if (job->zp_f32) return job->zp_f32[n * job->nb + blk];
  if (job->zp_u8) {
    size_t per_row = (job->nb * job->bits + 7) / 8;
    size_t bit = blk * job->bits;
    return (float)((job->zp_u8[n * per_row + bit / 8] >> (bit % 8)) & ((1 << job->bits) - 1));
  }
  return (float)(1 << (job->bits - 1));
}

/* Block b of the int8 path: position of value i of the block inside qa's row. Full 64-chunks of a
 * 4-bit row are stored "even values, then odd values" (the low nibbles of 32 bytes, then the high
 * ones); 8-bit rows and the tail (values past the last full chunk) keep the natural order. */
static inline size_t mnb_qa_pos(size_t bits, size_t chunks, size_t value) {
  size_t c = value / MNB_CHUNK;
  if (bits != 4 || c >= chunks) return value;
  size_t v = value % MNB_CHUNK;
  return c * MNB_CHUNK + (v & 1 ? 32 + v / 2 : v / 2);
}

/* ---- A quantization (int8 path) -------------------------------------------------------- */

SEAMLESS_SIMD static void mnb_quantize_rows(const float* a, size_t m, size_t k, size_t bs, size_t nb, size_t bits,
                                            int8_t* qa, size_t kq, size_t chunks, float* sa, float* asum,
                                            float* lane_sa, int32_t* init, int32_t* qsum) {
  int8_t* tmp = (int8_t*)malloc(kq);
  if (!tmp) return;
  const int shift = __builtin_ctzl(bs);
  for (size_t r = 0; r < m; r++) {
    const float* ar = a + r * k;
    int8_t* qr = qa + r * kq;
    /* natural order into tmp, one block at a time (vectorizable loops, no divisions) */
    for (size_t blk = 0; blk < nb; blk++) {
      size_t begin = blk * bs, len = begin + bs <= k ? bs : k - begin;
      const float* x = ar + begin;
      float amax = 0.0f;
      for (size_t i = 0; i < len; i++) {
        float v = fabsf(x[i]);
        amax = v > amax ? v : amax;
      }
      float scale = amax / 127.0f;
      float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
      int8_t* t = tmp + begin;
      int32_t sum = 0;
      for (size_t i = 0; i < len; i++) {
        int32_t q = (int32_t)rintf(x[i] * inv);
        t[i] = (int8_t)q;
        sum += q;
      }
      for (size_t i = len; i < bs; i++) t[i] = 0;
      sa[r * nb + blk] = scale;
      asum[r * nb + blk] = scale * (float)sum;
      if (qsum) qsum[r * nb + blk] = -(1 << (bits - 1)) * sum;
    }
    memset(tmp + nb * bs, 0, kq - nb * bs);
    /* stored order: 4-bit full chunks as even values, then odd ones */
    if (bits == 4) {
      for (size_t c = 0; c < chunks; c++) {
        const int8_t* src = tmp + c * MNB_CHUNK;
        int8_t* dst = qr + c * MNB_CHUNK;
        for (size_t p = 0; p < MNB_CHUNK / 2; p++) {
          dst[p] = src[2 * p];
          dst[MNB_CHUNK / 2 + p] = src[2 * p + 1];
        }
      }
      memcpy(qr + chunks * MNB_CHUNK, tmp + chunks * MNB_CHUNK, kq - chunks * MNB_CHUNK);
    } else {
      memcpy(qr, tmp, kq);
    }
    /* lane l of chunk c covers 4 bytes of the chunk: values 8(l%8).. (4-bit) or 4l.. (8-bit) */
    for (size_t c = 0; c < chunks; c++)
      for (size_t l = 0; l < 16; l++) {
        size_t value = c * MNB_CHUNK + (bits == 4 ? 8 * (l % 8) : 4 * l);
        lane_sa[(r * chunks + c) * 16 + l] = sa[r * nb + (value >> shift)];
      }
    if (init) { /* the default zero point folded into each unit's starting lanes */
      size_t cpu = bs >= MNB_CHUNK ? bs / MNB_CHUNK : 1, units = chunks / cpu;
      int32_t zp = 1 << (bits - 1);
      for (size_t u = 0; u < units; u++) {
        int32_t lanes[16] = {0};
        for (size_t c = u * cpu; c < (u + 1) * cpu; c++)
          for (size_t l = 0; l < 16; l++)
            lanes[l] += qr[c * MNB_CHUNK + 4 * l] + qr[c * MNB_CHUNK + 4 * l + 1] + qr[c * MNB_CHUNK + 4 * l + 2] +
                        qr[c * MNB_CHUNK + 4 * l + 3];
        for (size_t l = 0; l < 16; l++) init[(r * units + u) * 16 + l] = -zp * lanes[l];
      }
    }
  }
  free(tmp);
}

/* ---- int8 GEMM: scalar reference (any bits, any x86 level) ------------------------------- */

static void mnb_int8_rows_scalar(const MnbJob* job, size_t n0, size_t n1) {
  uint8_t* w = (uint8_t*)malloc(job->bs);
  for (size_t n = n0; n < n1; n++) {
    const uint8_t* brow = job->b + n * job->nb * job->blob;
    for (size_t r = 0; r < job->m; r++) {
      float acc = 0.0f;
      for (size_t blk = 0; blk < job->nb; blk++) {
        mnb_unpack(brow + blk * job->blob, job->bits, job->bs, w);
        int32_t dot = 0;
        for (size_t i = 0; i < job->bs; i++)
          dot += (int32_t)w[i] * job->qa[r * job->kq + mnb_qa_pos(job->bits, job->chunks, blk * job->bs + i)];
        float sb = job->scales[n * job->nb + blk];
        acc += (float)dot * (job->sa[r * job->nb + blk] * sb) -
               mnb_zero_point(job, n, blk) * sb * job->asum[r * job->nb + blk];
      }
      job->y[r * job->n + n] = acc + (job->bias ? job->bias[n] : 0.0f);
    }
  }
  free(w);
}

/* Blocks past the last full 64-chunk (only when bs < 64 and nb * bs is not a multiple of 64). */
static float mnb_int8_tail(const MnbJob* job, size_t n, size_t r, const uint8_t* brow) {
  uint8_t w[MNB_CHUNK];
  float acc = 0.0f;
  for (size_t blk = job->chunks * MNB_CHUNK / job->bs; blk < job->nb; blk++) {
    mnb_unpack(brow + blk * job->blob, job->bits, job->bs, w);
    const int8_t* q = job->qa + r * job->kq + blk * job->bs;
    int32_t dot = 0;
    for (size_t i = 0; i < job->bs; i++) dot += (int32_t)w[i] * q[i];
    acc += (float)dot * (job->sa[r * job->nb + blk] * job->scales[n * job->nb + blk]);
  }
  return acc;
}

/* sum over blocks of zp * scale_b * asum: the zero-point term subtracted from the raw dot. */
SEAMLESS_SIMD static float mnb_zp_term(const MnbJob* job, size_t n, size_t r) {
  const float* sb = job->scales + n * job->nb;
  const float* as = job->asum + r * job->nb;
  float acc[8] = {0};
  size_t blk = 0;
  if (!job->zp_u8 && !job->zp_f32) {
    for (; blk + 8 <= job->nb; blk += 8)
      for (size_t j = 0; j < 8; j++) acc[j] += sb[blk + j] * as[blk + j];
    for (; blk < job->nb; blk++) acc[0] += sb[blk] * as[blk];
    float v = 0.0f;
    for (size_t j = 0; j < 8; j++) v += acc[j];
    return v * (float)(1 << (job->bits - 1));
  }
  for (; blk < job->nb; blk++) acc[blk % 8] += mnb_zero_point(job, n, blk) * sb[blk] * as[blk];
  float v = 0.0f;
  for (size_t j = 0; j < 8; j++) v += acc[j];
  return v;
}

/* ---- panels: 32 columns of B side by side (mnb_int8_wide_vnni's layout, below) ---------------- */

/* Rows n0 .. n0 + 31 of a per-block array [n, nb] (scales, float zero points) as one panel [nb][32]. */
static void mnb_panel_blocks(const float* rows, size_t n0, size_t nb, float* panel) {
  for (size_t i = 0; i < 32; i++)
    for (size_t blk = 0; blk < nb; blk++) panel[blk * 32 + i] = rows[(n0 + i) * nb + blk];
}

/* Rows n0 .. n0 + 31 of B (row layout) and their scales as one panel: words [count][2][64] bytes, scales [nb][2][16]. */
static void mnb_panel_copy(const uint8_t* b, const float* scales, size_t n0, size_t nb, size_t row_bytes, size_t count,
                           uint8_t* words, float* panel_scales) {
  for (size_t i = 0; i < 32; i++) {
    const uint8_t* row = b + (n0 + i) * row_bytes;
    uint8_t* lane = words + (i / 16) * 64 + (i % 16) * 4;
    for (size_t w = 0; w < count; w++) memcpy(lane + w * 128, row + 4 * w, 4);
  }
  mnb_panel_blocks(scales, n0, nb, panel_scales);
}

/* Row r of b [n, row_bytes] packed by seamless_matmul_nbits_pack_panels, with its scales and float zero points (zp
 * NULL: none), back in the row layout: mnb_panel_copy's inverse in a panel; the rows after the last panel as they
 * are. */
void seamless_matmul_nbits_panel_row(const uint8_t* b, const float* scales, const float* zp, size_t n, size_t r,
                                     size_t nb, size_t row_bytes, uint8_t* row, float* row_scales, float* row_zp) {
  if (r >= n / 32 * 32) {
    memcpy(row, b + r * row_bytes, row_bytes);
    memcpy(row_scales, scales + r * nb, nb * sizeof(float));
    if (zp) memcpy(row_zp, zp + r * nb, nb * sizeof(float));
    return;
  }
  const size_t i = r % 32, count = row_bytes / 4;
  const uint8_t* lane = b + (r - i) * row_bytes + (i / 16) * 64 + (i % 16) * 4;
  for (size_t w = 0; w < count; w++) memcpy(row + 4 * w, lane + w * 128, 4);
  for (size_t blk = 0; blk < nb; blk++) {
    row_scales[blk] = scales[(r - i) * nb + blk * 32 + i];
    if (zp) row_zp[blk] = zp[(r - i) * nb + blk * 32 + i];
  }
}

#ifdef MNB_X86
/* lane -> block-within-chunk, for bs < 64 (the permutexvar index of the chunk's scales) */
static inline void mnb_lane_blocks(size_t bits, size_t bs, int32_t idx[16]) {
  for (int l = 0; l < 16; l++) idx[l] = (int32_t)((bits == 4 ? 8 * (l % 8) : 4 * l) / bs);
}

/* 64 weights of a row of B as one vector of uint8, in the order the int8 path stores A. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) static inline __m512i mnb_load_w512(
    const uint8_t* p, size_t bits) {
  if (bits == 8) return _mm512_loadu_si512(p);
  /* 32 bytes in both halves; low nibbles in the first half, high nibbles in the second */
  const __m512i shifts = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL,
                                          0x0004000400040004LL, 0, 0, 0, 0);
  __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)p));
  return _mm512_and_si512(_mm512_srlv_epi16(raw, shifts), _mm512_set1_epi8(15));
}

#define MNB_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* The scales of a chunk's blocks (blocks under a chunk: the first `smask` bits' worth) on the lanes that hold
 * their values (idx: MnbJob.lane_block). */
static inline __attribute__((always_inline)) MNB_VNNI __m512 mnb_chunk_scales(__m512i idx, __mmask16 smask,
                                                                              const float* p) {
  return _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(smask, p));
}

/* y[at..at+3] = the horizontal sums of a0..a3 (one transpose-add network) + bias[n..n+3] */
static inline __attribute__((always_inline)) MNB_VNNI void mnb_store4(const MnbJob* job, size_t at, size_t n, __m512 a0,
                                                                     __m512 a1, __m512 a2, __m512 a3) {
  __m512 t0 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
  __m512 t1 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
  __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD));
  u = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, 0x4E));
  u = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, 0xB1));
  __m128 sums = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                                0, 0, 0), u));
  if (job->bias) sums = _mm_add_ps(sums, _mm_loadu_ps(job->bias + n));
  _mm_storeu_ps(job->y + at, sums);
}

/* Rows r0..r0+tile_rows-1 of A against tile_cols consecutive rows n0.. of B: tile_rows x tile_cols dot products. tile_rows and tile_cols are
 * compile-time constants at every call site (always_inline), so accumulators stay in registers. */
static inline __attribute__((always_inline)) MNB_VNNI void mnb_vnni_tile(const MnbJob* job, size_t n0, size_t r0,
                                                                        const size_t tile_rows, const size_t tile_cols) {
  const size_t chunks = job->chunks, bs = job->bs, nb = job->nb, kq = job->kq;
  const size_t cstride = job->bits == 4 ? 32 : 64; /* bytes of B per chunk */
  const size_t bpc = bs < MNB_CHUNK ? MNB_CHUNK / bs : 1;    /* blocks per chunk */
  const size_t cpb = bs >= MNB_CHUNK ? bs / MNB_CHUNK : 1;   /* chunks per block */
  const size_t units = chunks / cpb;
  const int32_t* init = job->init;
  const size_t row_bytes = nb * job->blob;
  const uint8_t* brow[4];
  const float* sb[4];
  /* prefetch ~4-8 KB ahead: two tiles, more when tiles are small, one when a tile is large */
  const size_t tile_bytes = tile_cols * row_bytes;
  const size_t ahead_tiles = tile_bytes > MNB_AHEAD_BYTES ? 1 : tile_bytes * MNB_AHEAD >= 4096 ? MNB_AHEAD
                                                                                                : 4096 / tile_bytes + 1;
  for (size_t j = 0; j < tile_cols; j++) {
    brow[j] = job->b + (n0 + j) * nb * job->blob;
    sb[j] = job->scales + (n0 + j) * nb;
  }
  __m512 acc[MNB_TILE][4];
  for (size_t t = 0; t < tile_rows; t++)
    for (size_t j = 0; j < tile_cols; j++) acc[t][j] = _mm512_setzero_ps();
  if (bs >= MNB_CHUNK) {
    for (size_t blk = 0; blk < nb; blk++) {
      __m512i dot[MNB_TILE][4];
      for (size_t t = 0; t < tile_rows; t++) {
        __m512i d0 = init ? _mm512_loadu_si512(init + ((r0 + t) * units + blk) * 16) : _mm512_setzero_si512();
        for (size_t j = 0; j < tile_cols; j++) dot[t][j] = d0;
      }
      for (size_t c = blk * cpb; c < (blk + 1) * cpb; c++) {
        __m512i w[4];
        const char* ahead = (const char*)(brow[0] + ahead_tiles * tile_cols * row_bytes) + c * tile_cols * cstride;
        for (size_t o = 0; o < tile_cols * cstride; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
        for (size_t j = 0; j < tile_cols; j++) w[j] = mnb_load_w512(brow[j] + c * cstride, job->bits);
        for (size_t t = 0; t < tile_rows; t++) {
          __m512i qa = _mm512_loadu_si512(job->qa + (r0 + t) * kq + c * MNB_CHUNK);
          for (size_t j = 0; j < tile_cols; j++) dot[t][j] = _mm512_dpbusd_epi32(dot[t][j], w[j], qa);
        }
      }
      if (blk % 4 == 0) /* 16 bytes of the tile's scales per block */
        _mm_prefetch((const char*)(sb[0] + ahead_tiles * tile_cols * nb + blk * tile_cols), _MM_HINT_T0);
      for (size_t t = 0; t < tile_rows; t++)
        for (size_t j = 0; j < tile_cols; j++) {
          __m512 s = _mm512_set1_ps(job->sa[(r0 + t) * nb + blk] * sb[j][blk]);
          acc[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t][j]), s, acc[t][j]);
        }
    }
  } else {
    const __m512i idx = _mm512_loadu_si512(job->lane_block);
    const __mmask16 smask = (__mmask16)((1u << bpc) - 1);
    const size_t sstep = tile_cols * bpc * sizeof(float); /* bytes of the tile's scales per chunk */
    for (size_t c = 0; c < chunks; c++) {
      __m512i w[4];
      __m512 sbv[4];
      /* two tiles ahead: a tile's rows of B (and of scales) are contiguous, stream through them */
      const char* ahead = (const char*)(brow[0] + ahead_tiles * tile_cols * row_bytes) + c * tile_cols * cstride;
      for (size_t o = 0; o < tile_cols * cstride; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
      if ((c * sstep) % 64 < sstep)
        _mm_prefetch((const char*)(sb[0] + ahead_tiles * tile_cols * nb) + c * sstep, _MM_HINT_T0);
      for (size_t j = 0; j < tile_cols; j++) {
        w[j] = mnb_load_w512(brow[j] + c * cstride, job->bits);
        sbv[j] = mnb_chunk_scales(idx, smask, sb[j] + c * bpc);
      }
      for (size_t t = 0; t < tile_rows; t++) {
        __m512i d0 = init ? _mm512_loadu_si512(init + ((r0 + t) * units + c) * 16) : _mm512_setzero_si512();
        __m512i qa = _mm512_loadu_si512(job->qa + (r0 + t) * kq + c * MNB_CHUNK);
        __m512 las = _mm512_loadu_ps(job->lane_sa + ((r0 + t) * chunks + c) * 16);
        for (size_t j = 0; j < tile_cols; j++) {
          __m512i d = _mm512_dpbusd_epi32(d0, w[j], qa);
          acc[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sbv[j], las), acc[t][j]);
        }
      }
    }
  }
  if (tile_rows == 1 && tile_cols == 4 && init && chunks * MNB_CHUNK == nb * bs) { /* the decode GEMV's case */
    mnb_store4(job, r0 * job->n + n0, n0, acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
    return;
  }
  for (size_t t = 0; t < tile_rows; t++)
    for (size_t j = 0; j < tile_cols; j++) {
      size_t r = r0 + t, n = n0 + j;
      float v = _mm512_reduce_add_ps(acc[t][j]);
      if (chunks * MNB_CHUNK < nb * bs) v += mnb_int8_tail(job, n, r, brow[j]);
      if (!init) v -= mnb_zp_term(job, n, r);
      job->y[r * job->n + n] = v + (job->bias ? job->bias[n] : 0.0f);
    }
}

/* The decode GEMV (M = 1) with 4-bit B and the default zero point folded (job->init, no tail): four rows of B
 * per pass over A, with bits, pointers and accumulators in registers (the general tile, whose shape and bits are
 * runtime values, kept them on the stack). Returns the first column it left to the caller (n1 - n0 not a
 * multiple of 4). */
MNB_VNNI static size_t mnb_int8_row1_vnni4(const MnbJob* job, size_t n0, size_t n1) {
  const size_t chunks = job->chunks, nb = job->nb, bs = job->bs, row_bytes = nb * job->blob;
  const int8_t* qa = job->qa;
  const int32_t* init = job->init;
  const float* las = job->lane_sa;
  const __m512i idx = _mm512_loadu_si512(job->lane_block);
  const size_t bpc = bs < MNB_CHUNK ? MNB_CHUNK / bs : 1, cpb = bs >= MNB_CHUNK ? bs / MNB_CHUNK : 1;
  const __mmask16 smask = (__mmask16)((1u << bpc) - 1);
  /* prefetch 4-8 KB ahead: two tiles, more when tiles are small, one when a tile is large (as mnb_vnni_tile) */
  const size_t tile_bytes = 4 * row_bytes, scale_step = (16 * nb + chunks - 1) / chunks;
  const size_t ahead_tiles = tile_bytes > MNB_AHEAD_BYTES ? 1 : tile_bytes * MNB_AHEAD >= 4096 ? MNB_AHEAD
                                                                                              : 4096 / tile_bytes + 1;
  size_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    /* row j of the tile at b0 + j * row_bytes (and its scales at s0 + j * nb): base and stride addressing, so the
     * four rows take no registers of their own */
    const uint8_t* b0 = job->b + n * row_bytes;
    const float* s0 = job->scales + n * nb;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    /* the tile ahead_tiles on (a tile's rows of B and of scales are contiguous): 128 bytes of B a chunk, its
     * scales' 16 nb bytes spread evenly over the chunks */
    const char* ahead = (const char*)(b0 + ahead_tiles * 4 * row_bytes);
    const char* ahead_s = (const char*)(s0 + ahead_tiles * 4 * nb);
#define MNB_PREFETCH(c)                                                                 \
    do {                                                                                \
      _mm_prefetch(ahead + (c) * 128, _MM_HINT_T0);                                     \
      _mm_prefetch(ahead + (c) * 128 + 64, _MM_HINT_T0);                                \
      if ((c) * scale_step % 64 < scale_step) _mm_prefetch(ahead_s + (c) * scale_step, _MM_HINT_T0); \
    } while (0)
    size_t c = 0;
    if (bpc == 2) { /* blocks of 32: two chunks' four block scales from one load, their products with A's in one
                     * 128-bit multiply (the same products as the per-chunk path's) */
      const __m512i idx_next = _mm512_add_epi32(idx, _mm512_set1_epi32(2));
      for (; c + 2 <= chunks; c += 2) {
        MNB_PREFETCH(c);
        MNB_PREFETCH(c + 1);
        const __m512i q = _mm512_loadu_si512(qa + c * MNB_CHUNK), q1 = _mm512_loadu_si512(qa + (c + 1) * MNB_CHUNK);
        const __m512i d0 = _mm512_loadu_si512(init + c * 16), d1 = _mm512_loadu_si512(init + (c + 1) * 16);
        const __m128 sa4 = _mm_loadu_ps(job->sa + 2 * c);
        const size_t at = c * 32;
#define MNB_COLUMN2(acc, b, s)                                                                                     \
        do {                                                                                                        \
          const __m512 s4 = _mm512_castps128_ps512(_mm_mul_ps(_mm_loadu_ps(s + 2 * c), sa4));                       \
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d0, mnb_load_w512(b + at, 4), q)),          \
                                _mm512_permutexvar_ps(idx, s4), acc);                                               \
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d1, mnb_load_w512(b + at + 32, 4), q1)),    \
                                _mm512_permutexvar_ps(idx_next, s4), acc);                                          \
        } while (0)
        MNB_COLUMN2(acc0, b0, s0);
        MNB_COLUMN2(acc1, b0 + row_bytes, s0 + nb);
        MNB_COLUMN2(acc2, b0 + 2 * row_bytes, s0 + 2 * nb);
        MNB_COLUMN2(acc3, b0 + 3 * row_bytes, s0 + 3 * nb);
#undef MNB_COLUMN2
      }
    }
    if (bs < MNB_CHUNK) { /* a chunk holds bpc blocks: per-lane scales */
      for (; c < chunks; c++) {
        MNB_PREFETCH(c);
        const __m512i q = _mm512_loadu_si512(qa + c * MNB_CHUNK), d0 = _mm512_loadu_si512(init + c * 16);
        const __m512 la = _mm512_loadu_ps(las + c * 16);
        const size_t at = c * 32, sat = c * bpc;
#define MNB_COLUMN(acc, b, s)                                                                                     \
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d0, mnb_load_w512(b + at, 4), q)),          \
                              _mm512_mul_ps(mnb_chunk_scales(idx, smask, s + sat), la), acc)
        MNB_COLUMN(acc0, b0, s0);
        MNB_COLUMN(acc1, b0 + row_bytes, s0 + nb);
        MNB_COLUMN(acc2, b0 + 2 * row_bytes, s0 + 2 * nb);
        MNB_COLUMN(acc3, b0 + 3 * row_bytes, s0 + 3 * nb);
#undef MNB_COLUMN
      }
    } else { /* a block spans cpb chunks: int32 sums per block, one scale each */
      for (size_t blk = 0; blk < nb; blk++) {
        __m512i d0 = _mm512_loadu_si512(init + blk * 16), d1 = d0, d2 = d0, d3 = d0;
        for (size_t c = blk * cpb; c < (blk + 1) * cpb; c++) {
          MNB_PREFETCH(c);
          const __m512i q = _mm512_loadu_si512(qa + c * MNB_CHUNK);
          const size_t at = c * 32;
          d0 = _mm512_dpbusd_epi32(d0, mnb_load_w512(b0 + at, 4), q);
          d1 = _mm512_dpbusd_epi32(d1, mnb_load_w512(b0 + row_bytes + at, 4), q);
          d2 = _mm512_dpbusd_epi32(d2, mnb_load_w512(b0 + 2 * row_bytes + at, 4), q);
          d3 = _mm512_dpbusd_epi32(d3, mnb_load_w512(b0 + 3 * row_bytes + at, 4), q);
        }
        const float sa = job->sa[blk];
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(sa * s0[blk]), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(sa * s0[nb + blk]), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2), _mm512_set1_ps(sa * s0[2 * nb + blk]), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d3), _mm512_set1_ps(sa * s0[3 * nb + blk]), acc3);
      }
    }
    mnb_store4(job, n, n, acc0, acc1, acc2, acc3);
  }
#undef MNB_PREFETCH
  return n;
}

/* Prompts (M > 1), the same case with blocks under a chunk (the builder's 32): four rows of A by four rows of B a
 * tile, all sixteen accumulators and the tile's weights and scales in registers. */
MNB_VNNI static void mnb_int8_tile4x4_vnni4(const MnbJob* job, size_t n, size_t r0) {
  const size_t chunks = job->chunks, nb = job->nb, kq = job->kq, row_bytes = nb * job->blob;
  const size_t bpc = MNB_CHUNK / job->bs;
  const __m512i idx = _mm512_loadu_si512(job->lane_block);
  const __mmask16 smask = (__mmask16)((1u << bpc) - 1);
  const uint8_t* b0 = job->b + n * row_bytes;
  const float* s0 = job->scales + n * nb;
  const int8_t* qa = job->qa + r0 * kq;
  const int32_t* init = job->init + r0 * chunks * 16;
  const float* las = job->lane_sa + r0 * chunks * 16;
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
  __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
  for (size_t c = 0; c < chunks; c++) {
#define MNB_W(j) mnb_load_w512(b0 + (j) * row_bytes + c * 32, 4)
#define MNB_S(j) mnb_chunk_scales(idx, smask, s0 + (j) * nb + c * bpc)
    const __m512i w0 = MNB_W(0), w1 = MNB_W(1), w2 = MNB_W(2), w3 = MNB_W(3);
    const __m512 s0v = MNB_S(0), s1v = MNB_S(1), s2v = MNB_S(2), s3v = MNB_S(3);
#define MNB_ROW(t, x0, x1, x2, x3)                                                                                \
    do {                                                                                                          \
      const __m512i q = _mm512_loadu_si512(qa + (t) * kq + c * MNB_CHUNK);                                       \
      const __m512i d = _mm512_loadu_si512(init + ((t) * chunks + c) * 16);                                     \
      const __m512 la = _mm512_loadu_ps(las + ((t) * chunks + c) * 16);                                         \
      x0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d, w0, q)), _mm512_mul_ps(s0v, la), x0);       \
      x1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d, w1, q)), _mm512_mul_ps(s1v, la), x1);       \
      x2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d, w2, q)), _mm512_mul_ps(s2v, la), x2);       \
      x3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(d, w3, q)), _mm512_mul_ps(s3v, la), x3);       \
    } while (0)
    MNB_ROW(0, a00, a01, a02, a03);
    MNB_ROW(1, a10, a11, a12, a13);
    MNB_ROW(2, a20, a21, a22, a23);
    MNB_ROW(3, a30, a31, a32, a33);
#undef MNB_ROW
#undef MNB_S
#undef MNB_W
  }
  mnb_store4(job, r0 * job->n + n, n, a00, a01, a02, a03);
  mnb_store4(job, (r0 + 1) * job->n + n, n, a10, a11, a12, a13);
  mnb_store4(job, (r0 + 2) * job->n + n, n, a20, a21, a22, a23);
  mnb_store4(job, (r0 + 3) * job->n + n, n, a30, a31, a32, a33);
}

/* Prompts with blocks of a chunk or more: four rows of A by two rows of B a tile (B read once per four rows), each
 * block's int32 sums and the tile's accumulators in registers (sixteen of them). */
MNB_VNNI static void mnb_int8_tile4x2_vnni4(const MnbJob* job, size_t n, size_t r0) {
  const size_t nb = job->nb, kq = job->kq, row_bytes = nb * job->blob, cpb = job->bs / MNB_CHUNK;
  const uint8_t *b0 = job->b + n * row_bytes, *b1 = b0 + row_bytes;
  const float *s0 = job->scales + n * nb, *s1 = s0 + nb;
  const int8_t* qa = job->qa + r0 * kq;
  const int32_t* init = job->init + r0 * nb * 16;
  const float* sa = job->sa + r0 * nb;
  __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
  for (size_t blk = 0; blk < nb; blk++) {
    __m512i d00 = _mm512_loadu_si512(init + blk * 16), d01 = d00;
    __m512i d10 = _mm512_loadu_si512(init + (nb + blk) * 16), d11 = d10;
    __m512i d20 = _mm512_loadu_si512(init + (2 * nb + blk) * 16), d21 = d20;
    __m512i d30 = _mm512_loadu_si512(init + (3 * nb + blk) * 16), d31 = d30;
    for (size_t c = blk * cpb; c < (blk + 1) * cpb; c++) {
      const __m512i w0 = mnb_load_w512(b0 + c * 32, 4), w1 = mnb_load_w512(b1 + c * 32, 4);
#define MNB_ROW(t, x0, x1)                                                   \
      do {                                                                   \
        const __m512i q = _mm512_loadu_si512(qa + (t) * kq + c * MNB_CHUNK); \
        x0 = _mm512_dpbusd_epi32(x0, w0, q);                                 \
        x1 = _mm512_dpbusd_epi32(x1, w1, q);                                 \
      } while (0)
      MNB_ROW(0, d00, d01);
      MNB_ROW(1, d10, d11);
      MNB_ROW(2, d20, d21);
      MNB_ROW(3, d30, d31);
#undef MNB_ROW
    }
    const float w0 = s0[blk], w1 = s1[blk];
#define MNB_SCALE(t, x0, x1, a0, a1)                                                             \
    do {                                                                                         \
      const float st = sa[(t) * nb + blk];                                                       \
      a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x0), _mm512_set1_ps(st * w0), a0);                 \
      a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x1), _mm512_set1_ps(st * w1), a1);                 \
    } while (0)
    MNB_SCALE(0, d00, d01, a00, a01);
    MNB_SCALE(1, d10, d11, a10, a11);
    MNB_SCALE(2, d20, d21, a20, a21);
    MNB_SCALE(3, d30, d31, a30, a31);
#undef MNB_SCALE
  }
  const __m512 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
  for (size_t t = 0; t < 4; t++)
    for (size_t j = 0; j < 2; j++)
      job->y[(r0 + t) * job->n + n + j] = _mm512_reduce_add_ps(acc[t][j]) + (job->bias ? job->bias[n + j] : 0.0f);
}

/* Prompts, 4- or 8-bit B with the default zero point (job->qsum), any block size: 32 columns of B at a time copied
 * into `words` with 16 columns side by side in a vector (lane i: 4 bytes of column i), so that one vpdpbusd meets 4
 * values of A, broadcast, with 16 columns, and a block's int32 sums are converted and scaled once (the per-chunk
 * tiles convert after every vpdpbusd: a third as many products an instruction). 4-bit: word w of a row of B (bytes
 * 4w..4w+3, chunk w / 8) holds in its low nibbles the values at qa's positions 64 (w / 8) + 4 (w % 8) + 0..3 and in
 * its high nibbles those 32 on (mnb_qa_pos); 8-bit: the values at 4w..4w+3. Block b is words b bs bits / 32 on.
 * words: [count][2][64] bytes, scales: [nb][2][16] floats, both 64-byte aligned. */
static size_t mnb_wide_words(const MnbJob* job) { return job->chunks * MNB_CHUNK * job->bits / 32; }

/* rows r0 .. r0 + R - 1 of the 32 columns from n0 (R: 1 to 4; bits: 4 or 8, job->bits) */
static inline __attribute__((always_inline)) MNB_VNNI void mnb_wide_tile(const MnbJob* job, const uint8_t* words,
                                                                         const float* scales, const float* zps,
                                                                         size_t n0, size_t r0, const int R,
                                                                         const int bits) {
  const size_t nb = job->nb, kq = job->kq, wpb = job->bs * bits / 32;
  const __m512i low4 = _mm512_set1_epi8(15), high4 = _mm512_set1_epi8((char)0xF0);
  /* one or two rows (decode): a row's two sums are chains of dependent vpdpbusd (latency-bound), so the high nibbles
   * stay in place (16 x their value, one mask, no shift) in sums of their own, shifted back at the block's end */
  const int split = bits == 4 && R <= 2;
  __m512 f[4][2];
  for (int r = 0; r < R; r++) f[r][0] = f[r][1] = _mm512_setzero_ps();
  for (size_t blk = 0; blk < nb; blk++) {
    __m512i d[4][2], h[2][2];
    for (int r = 0; r < R; r++)
      d[r][0] = d[r][1] = zps ? _mm512_setzero_si512() : _mm512_set1_epi32(job->qsum[(r0 + r) * nb + blk]);
    if (split)
      for (int r = 0; r < R; r++) h[r][0] = h[r][1] = _mm512_setzero_si512();
    for (size_t w = blk * wpb; w < (blk + 1) * wpb; w++) {
      const __m512i p0 = _mm512_loadu_si512(words + w * 128), p1 = _mm512_loadu_si512(words + w * 128 + 64);
      if (bits == 8) {
        for (int r = 0; r < R; r++) {
          int32_t q;
          memcpy(&q, job->qa + (r0 + r) * kq + 4 * w, 4);
          const __m512i a = _mm512_set1_epi32(q);
          d[r][0] = _mm512_dpbusd_epi32(d[r][0], p0, a);
          d[r][1] = _mm512_dpbusd_epi32(d[r][1], p1, a);
        }
        continue;
      }
      const size_t at = (w / 8) * MNB_CHUNK + 4 * (w % 8);
      if (split) {
        const __m512i lo0 = _mm512_and_si512(p0, low4), hi0 = _mm512_and_si512(p0, high4);
        const __m512i lo1 = _mm512_and_si512(p1, low4), hi1 = _mm512_and_si512(p1, high4);
        for (int r = 0; r < R; r++) {
          int32_t q_lo, q_hi;
          memcpy(&q_lo, job->qa + (r0 + r) * kq + at, 4);
          memcpy(&q_hi, job->qa + (r0 + r) * kq + at + 32, 4);
          const __m512i a_lo = _mm512_set1_epi32(q_lo), a_hi = _mm512_set1_epi32(q_hi);
          d[r][0] = _mm512_dpbusd_epi32(d[r][0], lo0, a_lo);
          d[r][1] = _mm512_dpbusd_epi32(d[r][1], lo1, a_lo);
          h[r][0] = _mm512_dpbusd_epi32(h[r][0], hi0, a_hi);
          h[r][1] = _mm512_dpbusd_epi32(h[r][1], hi1, a_hi);
        }
        continue;
      }
      const __m512i lo0 = _mm512_and_si512(p0, low4), hi0 = _mm512_and_si512(_mm512_srli_epi16(p0, 4), low4);
      const __m512i lo1 = _mm512_and_si512(p1, low4), hi1 = _mm512_and_si512(_mm512_srli_epi16(p1, 4), low4);
      for (int r = 0; r < R; r++) {
        int32_t q_lo, q_hi;
        memcpy(&q_lo, job->qa + (r0 + r) * kq + at, 4);
        memcpy(&q_hi, job->qa + (r0 + r) * kq + at + 32, 4);
        const __m512i a_lo = _mm512_set1_epi32(q_lo), a_hi = _mm512_set1_epi32(q_hi);
        d[r][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(d[r][0], lo0, a_lo), hi0, a_hi);
        d[r][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(d[r][1], lo1, a_lo), hi1, a_hi);
      }
    }
    if (split) /* exact: every high product is a multiple of 16 */
      for (int r = 0; r < R; r++) {
        d[r][0] = _mm512_add_epi32(d[r][0], _mm512_srai_epi32(h[r][0], 4));
        d[r][1] = _mm512_add_epi32(d[r][1], _mm512_srai_epi32(h[r][1], 4));
      }
    const __m512 s0 = _mm512_loadu_ps(scales + blk * 32), s1 = _mm512_loadu_ps(scales + blk * 32 + 16);
    for (int r = 0; r < R; r++) {
      const __m512 sa = _mm512_set1_ps(job->sa[(r0 + r) * nb + blk]);
      f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][0]), _mm512_mul_ps(s0, sa), f[r][0]);
      f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][1]), _mm512_mul_ps(s1, sa), f[r][1]);
    }
    if (zps) { /* - zp scale_b (scale_a sum(q_a)) */
      const __m512 z0 = _mm512_mul_ps(_mm512_loadu_ps(zps + blk * 32), s0);
      const __m512 z1 = _mm512_mul_ps(_mm512_loadu_ps(zps + blk * 32 + 16), s1);
      for (int r = 0; r < R; r++) {
        const __m512 as = _mm512_set1_ps(job->asum[(r0 + r) * nb + blk]);
        f[r][0] = _mm512_fnmadd_ps(z0, as, f[r][0]);
        f[r][1] = _mm512_fnmadd_ps(z1, as, f[r][1]);
      }
    }
  }
  const __m512 b0 = job->bias ? _mm512_loadu_ps(job->bias + n0) : _mm512_setzero_ps();
  const __m512 b1 = job->bias ? _mm512_loadu_ps(job->bias + n0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(job->y + (r0 + r) * job->n + n0, _mm512_add_ps(f[r][0], b0));
    _mm512_storeu_ps(job->y + (r0 + r) * job->n + n0 + 16, _mm512_add_ps(f[r][1], b1));
  }
}

static inline __attribute__((always_inline)) MNB_VNNI void mnb_wide_rows(const MnbJob* job, const uint8_t* words,
                                                                         const float* scales, const float* zps,
                                                                         size_t n0, size_t r0, const int R) {
  if (job->bits == 4)
    mnb_wide_tile(job, words, scales, zps, n0, r0, R, 4);
  else
    mnb_wide_tile(job, words, scales, zps, n0, r0, R, 8);
}

/* Columns n0 .. n1 in passes of 32; returns the first column it left (fewer than 32, or no scratch: the tiles'). */
MNB_VNNI static size_t mnb_int8_wide_vnni(const MnbJob* job, size_t n0, size_t n1) {
  const size_t nb = job->nb, row_bytes = nb * job->blob, count = mnb_wide_words(job);
  uint8_t* words = job->panels ? NULL : (uint8_t*)aligned_alloc(64, count * 128);
  float* scales = job->panels ? NULL : (float*)aligned_alloc(64, nb * 32 * sizeof(float));
  size_t n = n0;
  if (job->panels || (words && scales))
    for (; n + 32 <= n1; n += 32) {
      const uint8_t* w = job->panels ? job->b + n * row_bytes : words;
      const float* s = job->panels ? job->scales + n * nb : scales;
      const float* z = job->panels && job->zp_f32 ? job->zp_f32 + n * nb : NULL; /* else the default, in qsum */
      if (!job->panels) mnb_panel_copy(job->b, job->scales, n, nb, row_bytes, count, words, scales);
      size_t r = 0;
      for (; r + 4 <= job->m; r += 4) mnb_wide_rows(job, w, s, z, n, r, 4);
      switch (job->m - r) {
        case 3: mnb_wide_rows(job, w, s, z, n, r, 3); break;
        case 2: mnb_wide_rows(job, w, s, z, n, r, 2); break;
        case 1: mnb_wide_rows(job, w, s, z, n, r, 1); break;
      }
    }
  free(words);
  free(scales);
  return n;
}

MNB_VNNI static void mnb_int8_rows_vnni(const MnbJob* job, size_t n0, size_t n1) {
  size_t n = job->qsum ? mnb_int8_wide_vnni(job, n0, n1) : n0;
  if (job->m == 1 && job->bits == 4 && job->init) /* decode, the common case */
    n = mnb_int8_row1_vnni4(job, n, n1);
  else if (job->m == 1) /* decode: four rows of B per pass over the row of A */
    for (; n + 4 <= n1; n += 4) mnb_vnni_tile(job, n, 0, 1, 4);
  else if (job->bits == 4 && job->init && job->bs < MNB_CHUNK) /* a prompt, the common case */
    for (; n + 4 <= n1; n += 4) {
      size_t r = 0;
      for (; r + 4 <= job->m; r += 4) mnb_int8_tile4x4_vnni4(job, n, r);
      for (; r < job->m; r++) mnb_vnni_tile(job, n, r, 1, 4);
    }
  else if (job->bits == 4 && job->init) /* ... and with larger blocks */
    for (; n + 2 <= n1; n += 2) {
      size_t r = 0;
      for (; r + 4 <= job->m; r += 4) mnb_int8_tile4x2_vnni4(job, n, r);
      for (; r < job->m; r++) mnb_vnni_tile(job, n, r, 1, 2);
    }
  for (; n + 2 <= n1; n += 2) {
    size_t r = 0;
    for (; r + 4 <= job->m; r += 4) mnb_vnni_tile(job, n, r, 4, 2);
    switch (job->m - r) {
      case 3: mnb_vnni_tile(job, n, r, 3, 2); break;
      case 2: mnb_vnni_tile(job, n, r, 2, 2); break;
      case 1: mnb_vnni_tile(job, n, r, 1, 2); break;
    }
  }
  for (; n < n1; n++) {
    size_t r = 0;
    for (; r + 4 <= job->m; r += 4) mnb_vnni_tile(job, n, r, 4, 1);
    switch (job->m - r) {
      case 3: mnb_vnni_tile(job, n, r, 3, 1); break;
      case 2: mnb_vnni_tile(job, n, r, 2, 1); break;
      case 1: mnb_vnni_tile(job, n, r, 1, 1); break;
    }
  }
}

/* AVX2: the same chunk layout as two 256-bit halves (lanes 0-7: bytes 0-31, lanes 8-15: 32-63);
 * u8 x s8 products via vpmaddubsw, whose int16 pair sums cannot saturate for 4-bit weights; 8-bit
 * weights are split as (w & 127) + 128 * (w >> 7) to stay within int16. */
__attribute__((target("avx2,fma"))) static inline __m256i mnb_dot_avx2(__m256i w, __m256i a, size_t bits) {
  const __m256i ones = _mm256_set1_epi16(1);
  if (bits == 4) return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), ones);
  __m256i lo7 = _mm256_and_si256(w, _mm256_set1_epi8(127));
  __m256i top = _mm256_and_si256(_mm256_srli_epi16(w, 7), _mm256_set1_epi8(1));
  __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(lo7, a), ones);
  __m256i e = _mm256_madd_epi16(_mm256_maddubs_epi16(top, a), ones);
  return _mm256_add_epi32(d, _mm256_slli_epi32(e, 7));
}

#define MNB_AVX2 __attribute__((target("avx2,fma")))

/* mnb_wide_tile's arithmetic on a half panel (16 columns: words' and scales' pointers at the half) in 256-bit vectors
 * without VNNI, rows r0 .. r0 + R - 1 (R: 1 or 2, what 16 registers hold). 4-bit: vpmaddubsw's int16 pairs of the low
 * and the high nibbles summed over up to 4 words (|sum| <= 4 * 2 * 2 * 15 * 127 < 2^15), then vpmaddwd to int32;
 * 8-bit: mnb_dot_avx2's split of each weight. */
static inline __attribute__((always_inline)) MNB_AVX2 void mnb_panel_tile_avx2(const MnbJob* job, const uint8_t* words,
                                                                              const float* scales, const float* zps,
                                                                              size_t n0, size_t r0, const int R,
                                                                              const int bits) {
  const size_t nb = job->nb, kq = job->kq, wpb = job->bs * bits / 32;
  const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  __m256 f[2][2];
  for (int r = 0; r < R; r++) f[r][0] = f[r][1] = _mm256_setzero_ps();
  for (size_t blk = 0; blk < nb; blk++) {
    __m256i d[2][2];
    for (int r = 0; r < R; r++)
      d[r][0] = d[r][1] = zps ? _mm256_setzero_si256() : _mm256_set1_epi32(job->qsum[(r0 + r) * nb + blk]);
    for (size_t w0 = blk * wpb; w0 < (blk + 1) * wpb; w0 += 4) {
      __m256i s16[2][2];
      for (int r = 0; r < R; r++) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
      for (size_t w = w0; w < w0 + 4 && w < (blk + 1) * wpb; w++) {
        const __m256i p0 = _mm256_loadu_si256((const __m256i*)(words + w * 128));
        const __m256i p1 = _mm256_loadu_si256((const __m256i*)(words + w * 128 + 32));
        if (bits == 8) {
          for (int r = 0; r < R; r++) {
            int32_t q;
            memcpy(&q, job->qa + (r0 + r) * kq + 4 * w, 4);
            const __m256i a = _mm256_set1_epi32(q);
            d[r][0] = _mm256_add_epi32(d[r][0], mnb_dot_avx2(p0, a, 8));
            d[r][1] = _mm256_add_epi32(d[r][1], mnb_dot_avx2(p1, a, 8));
          }
          continue;
        }
        const __m256i lo0 = _mm256_and_si256(p0, low4), hi0 = _mm256_and_si256(_mm256_srli_epi16(p0, 4), low4);
        const __m256i lo1 = _mm256_and_si256(p1, low4), hi1 = _mm256_and_si256(_mm256_srli_epi16(p1, 4), low4);
        const size_t at = (w / 8) * MNB_CHUNK + 4 * (w % 8);
        for (int r = 0; r < R; r++) {
          int32_t q_lo, q_hi;
          memcpy(&q_lo, job->qa + (r0 + r) * kq + at, 4);
          memcpy(&q_hi, job->qa + (r0 + r) * kq + at + 32, 4);
          const __m256i a_lo = _mm256_set1_epi32(q_lo), a_hi = _mm256_set1_epi32(q_hi);
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_add_epi16(_mm256_maddubs_epi16(lo0, a_lo),
                                                                   _mm256_maddubs_epi16(hi0, a_hi)));
          s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_add_epi16(_mm256_maddubs_epi16(lo1, a_lo),
                                                                   _mm256_maddubs_epi16(hi1, a_hi)));
        }
      }
      if (bits == 4)
        for (int r = 0; r < R; r++) {
          d[r][0] = _mm256_add_epi32(d[r][0], _mm256_madd_epi16(s16[r][0], ones));
          d[r][1] = _mm256_add_epi32(d[r][1], _mm256_madd_epi16(s16[r][1], ones));
        }
    }
    const __m256 s0 = _mm256_loadu_ps(scales + blk * 32), s1 = _mm256_loadu_ps(scales + blk * 32 + 8);
    for (int r = 0; r < R; r++) {
      const __m256 sa = _mm256_set1_ps(job->sa[(r0 + r) * nb + blk]);
      f[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r][0]), _mm256_mul_ps(s0, sa), f[r][0]);
      f[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r][1]), _mm256_mul_ps(s1, sa), f[r][1]);
    }
    if (zps) { /* - zp scale_b (scale_a sum(q_a)) */
      const __m256 z0 = _mm256_mul_ps(_mm256_loadu_ps(zps + blk * 32), s0);
      const __m256 z1 = _mm256_mul_ps(_mm256_loadu_ps(zps + blk * 32 + 8), s1);
      for (int r = 0; r < R; r++) {
        const __m256 as = _mm256_set1_ps(job->asum[(r0 + r) * nb + blk]);
        f[r][0] = _mm256_fnmadd_ps(z0, as, f[r][0]);
        f[r][1] = _mm256_fnmadd_ps(z1, as, f[r][1]);
      }
    }
  }
  const __m256 b0 = job->bias ? _mm256_loadu_ps(job->bias + n0) : _mm256_setzero_ps();
  const __m256 b1 = job->bias ? _mm256_loadu_ps(job->bias + n0 + 8) : _mm256_setzero_ps();
  for (int r = 0; r < R; r++) {
    _mm256_storeu_ps(job->y + (r0 + r) * job->n + n0, _mm256_add_ps(f[r][0], b0));
    _mm256_storeu_ps(job->y + (r0 + r) * job->n + n0 + 8, _mm256_add_ps(f[r][1], b1));
  }
}

static inline __attribute__((always_inline)) MNB_AVX2 void mnb_panel_rows_avx2(const MnbJob* job,
                                                                               const uint8_t* words,
                                                                               const float* scales, const float* zps,
                                                                               size_t n0, size_t r0, const int R) {
  if (job->bits == 4)
    mnb_panel_tile_avx2(job, words, scales, zps, n0, r0, R, 4);
  else
    mnb_panel_tile_avx2(job, words, scales, zps, n0, r0, R, 8);
}

/* Weights packed as panels (job->panels), columns n0 .. n1 in passes of 32, each as two halves; returns the first
 * column it left (the rows past the last panel). */
MNB_AVX2 static size_t mnb_int8_panels_avx2(const MnbJob* job, size_t n0, size_t n1) {
  const size_t nb = job->nb, row_bytes = nb * job->blob;
  size_t n = n0;
  for (; n + 32 <= n1; n += 32)
    for (size_t h = 0; h < 2; h++) {
      const uint8_t* words = job->b + n * row_bytes + h * 64;
      const float* scales = job->scales + n * nb + h * 16;
      const float* zps = job->zp_f32 ? job->zp_f32 + n * nb + h * 16 : NULL;
      size_t r = 0;
      for (; r + 2 <= job->m; r += 2) mnb_panel_rows_avx2(job, words, scales, zps, n + h * 16, r, 2);
      if (r < job->m) mnb_panel_rows_avx2(job, words, scales, zps, n + h * 16, r, 1);
    }
  return n;
}

MNB_AVX2 static void mnb_int8_rows_avx2(const MnbJob* job, size_t n0, size_t n1) {
  if (job->panels) n0 = mnb_int8_panels_avx2(job, n0, n1);
  const size_t chunks = job->chunks, bs = job->bs, nb = job->nb, kq = job->kq;
  const size_t cstride = job->bits == 4 ? 32 : 64;
  const __m256i low4 = _mm256_set1_epi8(15);
  const size_t bpc = bs < MNB_CHUNK ? MNB_CHUNK / bs : 1;
  int32_t idx_arr[16];
  mnb_lane_blocks(job->bits, bs, idx_arr);
  for (size_t n = n0; n < n1; n++) {
    const uint8_t* brow = job->b + n * nb * job->blob;
    const float* sb = job->scales + n * nb;
    for (size_t r = 0; r < job->m; r++) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      const int8_t* qr = job->qa + r * kq;
      for (size_t c = 0; c < chunks; c++) {
        __m256i w0, w1;
        if (job->bits == 4) {
          __m256i raw = _mm256_loadu_si256((const __m256i*)(brow + c * cstride));
          w0 = _mm256_and_si256(raw, low4);
          w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        } else {
          w0 = _mm256_loadu_si256((const __m256i*)(brow + c * cstride));
          w1 = _mm256_loadu_si256((const __m256i*)(brow + c * cstride + 32));
        }
        __m256i d0 = mnb_dot_avx2(w0, _mm256_loadu_si256((const __m256i*)(qr + c * MNB_CHUNK)), job->bits);
        __m256i d1 = mnb_dot_avx2(w1, _mm256_loadu_si256((const __m256i*)(qr + c * MNB_CHUNK + 32)), job->bits);
        float s[16];
        const float* ls = job->lane_sa + (r * chunks + c) * 16;
        size_t blk0 = c * MNB_CHUNK / bs;
        for (int l = 0; l < 16; l++) s[l] = ls[l] * sb[bs >= MNB_CHUNK ? blk0 : c * bpc + (size_t)idx_arr[l]];
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_loadu_ps(s), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_loadu_ps(s + 8), acc1);
      }
      float lanes[8];
      _mm256_storeu_ps(lanes, _mm256_add_ps(acc0, acc1));
      float v = 0.0f;
      for (int l = 0; l < 8; l++) v += lanes[l];
      v += mnb_int8_tail(job, n, r, brow) - mnb_zp_term(job, n, r);
      job->y[r * job->n + n] = v + (job->bias ? job->bias[n] : 0.0f);
    }
  }
}
#endif

static int mnb_forced_level = -1;

/* Tests: force the int8 kernel's instruction set (0 scalar, 1 AVX2, 2 AVX-512 VNNI; -1 automatic).
 * A level the CPU lacks falls back to automatic; weights packed as panels take AVX2 at least. */
void seamless_matmul_nbits_set_isa(int level) { mnb_forced_level = level; }

static int mnb_cpu_level(void) {
#ifdef MNB_X86
  static int level = -1;
  if (level < 0) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
      level = 2;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      level = 1;
    else
      level = 0;
  }
  return level;
#else
  return 0;
#endif
}

static int mnb_level(void) {
  const int level = mnb_cpu_level();
  return mnb_forced_level >= 0 && mnb_forced_level <= level ? mnb_forced_level : level;
}

static int mnb_panel_shape(size_t k, size_t bits, size_t bs) {
  if ((bits != 4 && bits != 8) || bs < 16 || (bs & (bs - 1)) || k == 0 || mnb_cpu_level() < 1) return 0;
  return ((k + bs - 1) / bs * bs) % MNB_CHUNK == 0; /* whole 64-value chunks: no tail (the fold's condition) */
}

int seamless_matmul_nbits_panels(size_t n, size_t k, size_t bits, size_t bs) {
  return n >= 32 && mnb_panel_shape(k, bits, bs);
}

/* (any n: rows [r0, r0 + n) of a larger B are packed by passing its pointers at r0, r0 a multiple of 32; pb, ps, pz
 * either new arrays or b, scales, zp themselves: packed in place, a panel's rows copied out first) */
int seamless_matmul_nbits_pack_panels(const uint8_t* b, const float* scales, const float* zp, size_t n, size_t k,
                                      size_t bits, size_t bs, uint8_t* pb, float* ps, float* pz) {
  if (!mnb_panel_shape(k, bits, bs)) return 1;
  const size_t nb = (k + bs - 1) / bs, row_bytes = nb * bs * bits / 8, count = nb * bs * bits / 32;
  const size_t full = n / 32 * 32;
  const int in_place = pb == b;
  if (in_place != (ps == scales) || (zp && in_place != (pz == zp))) return 1;
  uint8_t* rows = in_place ? (uint8_t*)malloc(32 * row_bytes) : NULL;
  float* blocks = in_place ? (float*)malloc(2 * 32 * nb * sizeof(float)) : NULL;
  if (in_place && (!rows || !blocks)) {
    free(rows);
    free(blocks);
    return 2;
  }
  for (size_t n0 = 0; n0 < full; n0 += 32) {
    const uint8_t* src = b;
    const float *src_scales = scales, *src_zp = zp;
    size_t at = n0;
    if (in_place) { /* this panel's rows, then its place */
      memcpy(rows, b + n0 * row_bytes, 32 * row_bytes);
      memcpy(blocks, scales + n0 * nb, 32 * nb * sizeof(float));
      if (zp) memcpy(blocks + 32 * nb, zp + n0 * nb, 32 * nb * sizeof(float));
      src = rows;
      src_scales = blocks;
      src_zp = zp ? blocks + 32 * nb : NULL;
      at = 0;
    }
    mnb_panel_copy(src, src_scales, at, nb, row_bytes, count, pb + n0 * row_bytes, ps + n0 * nb);
    if (zp) mnb_panel_blocks(src_zp, at, nb, pz + n0 * nb);
  }
  if (!in_place) { /* the rows past the last panel stay as they are */
    memcpy(pb + full * row_bytes, b + full * row_bytes, (n - full) * row_bytes);
    memcpy(ps + full * nb, scales + full * nb, (n - full) * nb * sizeof(float));
    if (zp) memcpy(pz + full * nb, zp + full * nb, (n - full) * nb * sizeof(float));
  }
  free(rows);
  free(blocks);
  return 0;
}

/* A task's columns: where the kernels read panels (packed, or copied: job->qsum), whole passes of 32 columns, the
 * last task taking the columns after them too. */
static void mnb_task_columns(const MnbJob* job, size_t task, size_t* n0, size_t* n1) {
  if (job->panels || job->qsum) {
    size_t p0, p1;
    seamless_task_range(job->n / 32, job->tasks, task, &p0, &p1);
    *n0 = p0 * 32;
    *n1 = task + 1 == job->tasks ? job->n : p1 * 32;
  } else {
    seamless_task_range(job->n, job->tasks, task, n0, n1);
  }
}

static void mnb_int8_task(void* user, size_t task) {
  const MnbJob* job = (const MnbJob*)user;
  size_t n0, n1;
  mnb_task_columns(job, task, &n0, &n1);
  int level = job->bits == 2 ? 0 : mnb_level();
  if (job->panels && level < 1) level = 1; /* panels are packed for AVX2 at least */
#ifdef MNB_X86
  if (level == 2) { mnb_int8_rows_vnni(job, n0, n1); return; }
  if (level == 1) { mnb_int8_rows_avx2(job, n0, n1); return; }
#endif
  mnb_int8_rows_scalar(job, n0, n1);
}

/* ---- float path ------------------------------------------------------------------------- */

/* Weights packed as panels: a value of A broadcast against a word's 32 lanes (the columns), a block's sums less
 * zp sum(a), times its scales; rows of A in tiles of 4 share the unpacking, even and odd values in sums of their own
 * (two chains). Plain C the compiler vectorizes per target clone. */
static inline __attribute__((always_inline)) void mnb_float_panel_tile(const MnbJob* job, size_t n0, size_t r0,
                                                                      const int R, const size_t bits) {
  const size_t nb = job->nb, kp = nb * job->bs, row_bytes = nb * job->blob;
  const size_t vpw = 32 / bits, wpb = job->bs * bits / 32;
  const uint32_t mask = (1u << bits) - 1;
  const uint8_t* words = job->b + n0 * row_bytes;
  const float* scales = job->scales + n0 * nb;
  const float* zps = job->zp_f32 ? job->zp_f32 + n0 * nb : NULL;
  const float* a = job->a_pad + r0 * kp;
  float f[4][32];
  for (int r = 0; r < R; r++)
    for (int i = 0; i < 32; i++) f[r][i] = 0.0f;
  for (size_t blk = 0; blk < nb; blk++) {
    float c[4][32], e[4][32], as[4], z[32];
    for (int r = 0; r < R; r++) {
      as[r] = 0.0f;
      for (int i = 0; i < 32; i++) c[r][i] = e[r][i] = 0.0f;
    }
    for (size_t w = blk * wpb; w < (blk + 1) * wpb; w++) {
      uint32_t lane[32];
      memcpy(lane, words + w * 128, 128);
      for (size_t j = 0; j < vpw; j += 2) {
        float v[32], u[32];
        for (int i = 0; i < 32; i++) v[i] = (float)((lane[i] >> (bits * j)) & mask);
        for (int i = 0; i < 32; i++) u[i] = (float)((lane[i] >> (bits * (j + 1))) & mask);
        for (int r = 0; r < R; r++) {
          const float x = a[r * kp + w * vpw + j], x1 = a[r * kp + w * vpw + j + 1];
          as[r] += x + x1;
          for (int i = 0; i < 32; i++) c[r][i] += v[i] * x;
          for (int i = 0; i < 32; i++) e[r][i] += u[i] * x1;
        }
      }
    }
    for (int i = 0; i < 32; i++) z[i] = zps ? zps[blk * 32 + i] : (float)(1 << (bits - 1));
    for (int r = 0; r < R; r++)
      for (int i = 0; i < 32; i++) f[r][i] += (c[r][i] + e[r][i] - z[i] * as[r]) * scales[blk * 32 + i];
  }
  for (int r = 0; r < R; r++)
    for (int i = 0; i < 32; i++) job->y[(r0 + r) * job->n + n0 + i] = f[r][i] + (job->bias ? job->bias[n0 + i] : 0.0f);
}

/* Columns n0 .. n1 in passes of 32; returns the first column it left (the rows past the last panel). */
SEAMLESS_SIMD static size_t mnb_float_panels(const MnbJob* job, size_t n0, size_t n1) {
  size_t n = n0;
  for (; n + 32 <= n1; n += 32) { /* bits a constant in each call: the shifts and loops unrolled */
    size_t r = 0;
    for (; r + 4 <= job->m; r += 4)
      job->bits == 4 ? mnb_float_panel_tile(job, n, r, 4, 4) : mnb_float_panel_tile(job, n, r, 4, 8);
    for (; r < job->m; r++)
      job->bits == 4 ? mnb_float_panel_tile(job, n, r, 1, 4) : mnb_float_panel_tile(job, n, r, 1, 8);
  }
  return n;
}

/* Generic: dequantize a block, then multiply-accumulate (auto-vectorized per target clone). */
SEAMLESS_SIMD static void mnb_float_rows_generic(const MnbJob* job, size_t n0, size_t n1) {
  const size_t bs = job->bs, nb = job->nb, k = job->k;
  uint8_t* q = (uint8_t*)malloc(bs);
  float* w = (float*)malloc(bs * sizeof(float));
  float* acc = (float*)malloc(job->m * 16 * sizeof(float));
  if (!q || !w || !acc) goto done;
  for (size_t n = n0; n < n1; n++) {
    const uint8_t* brow = job->b + n * nb * job->blob;
    memset(acc, 0, job->m * 16 * sizeof(float));
    for (size_t blk = 0; blk < nb; blk++) {
      float s = job->scales[n * nb + blk], z = mnb_zero_point(job, n, blk);
      mnb_unpack(brow + blk * job->blob, job->bits, bs, q);
      for (size_t i = 0; i < bs; i++) w[i] = ((float)q[i] - z) * s;
      size_t begin = blk * bs, len = begin + bs <= k ? bs : k - begin;
      for (size_t r = 0; r < job->m; r++) {
        const float* ar = job->a + r * k + begin;
        float* ac = acc + r * 16;
        size_t i = 0;
        for (; i + 16 <= len; i += 16)
          for (size_t j = 0; j < 16; j++) ac[j] += ar[i + j] * w[i + j];
        for (; i < len; i++) ac[i % 16] += ar[i] * w[i];
      }
    }
    for (size_t r = 0; r < job->m; r++) {
      float v = 0.0f;
      for (size_t j = 0; j < 16; j++) v += acc[r * 16 + j];
      job->y[r * job->n + n] = v + (job->bias ? job->bias[n] : 0.0f);
    }
  }
done:
  free(q);
  free(w);
  free(acc);
}

#ifdef MNB_X86
#define MNB_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* AVX-512: a 64-value chunk of row n of B dequantized into 4 vectors (4-bit: in the int8 path's
 * order, even values then odd, which job->a_perm matches), FMA with rows r0..r0+tile_rows-1 of A
 * (tile_rows is a constant at each call site, so the accumulators stay in registers). */
static inline __attribute__((always_inline)) MNB_AVX512 void mnb_float_tile(const MnbJob* job, size_t n, size_t r0,
                                                                          const size_t tile_rows) {
  const size_t bs = job->bs, nb = job->nb, chunks = job->chunks, kq = job->kq;
  const size_t cstride = job->bits == 4 ? 32 : 64;
  const size_t row_bytes = nb * job->blob;
  const int bs_shift = __builtin_ctzl(bs);
  const __m256i low4 = _mm256_set1_epi8(15);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i upper16 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
  const uint8_t* brow = job->b + n * row_bytes;
  const float* sb = job->scales + n * nb;
  __m512 acc[MNB_TILE][2]; /* two accumulators per row: independent FMA chains */
  for (size_t t = 0; t < tile_rows; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  for (size_t c = 0; c < chunks; c++) {
    _mm_prefetch((const char*)(brow + MNB_AHEAD * row_bytes + c * cstride), _MM_HINT_T0);
    __m128i piece[4];
    if (job->bits == 4) {
      __m256i raw = _mm256_loadu_si256((const __m256i*)(brow + c * cstride));
      __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      piece[0] = _mm256_castsi256_si128(lo);
      piece[1] = _mm256_extracti128_si256(lo, 1);
      piece[2] = _mm256_castsi256_si128(hi);
      piece[3] = _mm256_extracti128_si256(hi, 1);
    } else {
      for (int v = 0; v < 4; v++) piece[v] = _mm_loadu_si128((const __m128i*)(brow + c * cstride + 16 * v));
    }
    /* dequantization: (q - zp) * scale; 4-bit values through a 16-entry table per block */
    const size_t blk0 = (c * MNB_CHUNK) >> bs_shift, nbc = bs < MNB_CHUNK ? MNB_CHUNK >> bs_shift : 1;
    __m512 table[4], scale[4], shift[4];
    for (size_t i = 0; i < nbc; i++) {
      float sc = sb[blk0 + i], z = mnb_zero_point(job, n, blk0 + i);
      scale[i] = _mm512_set1_ps(sc);
      shift[i] = _mm512_set1_ps(-z * sc);
      if (job->bits == 4) table[i] = _mm512_fmadd_ps(iota, scale[i], shift[i]);
    }
    __m512 w[4];
    for (int v = 0; v < 4; v++) {
      /* the value (within the chunk) of this vector's first lane: 4-bit pieces hold bytes
       * 0-15 / 16-31 of the low, then the high nibbles: values 0, 32 (even), 1, 33 (odd) */
      size_t first = job->bits == 4 ? (size_t)(v % 2) * 32 + (size_t)(v / 2) : (size_t)v * 16;
      size_t i = first >> bs_shift; /* block within the chunk */
      __m512i qi = _mm512_cvtepu8_epi32(piece[v]);
      if (job->bits == 8)
        w[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(qi), scale[i], shift[i]);
      else if (bs == 16) /* lanes 8-15 (values 16 and up) are the next block */
        w[v] = _mm512_permutex2var_ps(table[i], _mm512_or_si512(qi, upper16), table[i + 1]);
      else
        w[v] = _mm512_permutexvar_ps(qi, table[i]);
    }
    for (size_t t = 0; t < tile_rows; t++) {
      const float* ar = job->a_perm + (r0 + t) * kq + c * MNB_CHUNK;
      acc[t][0] = _mm512_fmadd_ps(_mm512_loadu_ps(ar), w[0], acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(_mm512_loadu_ps(ar + 16), w[1], acc[t][1]);
      acc[t][0] = _mm512_fmadd_ps(_mm512_loadu_ps(ar + 32), w[2], acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(_mm512_loadu_ps(ar + 48), w[3], acc[t][1]);
    }
  }
  for (size_t t = 0; t < tile_rows; t++) {
    size_t r = r0 + t;
    float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
    for (size_t blk = (chunks * MNB_CHUNK) >> bs_shift; blk < nb; blk++) { /* blocks past the last full chunk */
      uint8_t q[MNB_CHUNK];
      mnb_unpack(brow + blk * job->blob, job->bits, bs, q);
      float sc = sb[blk], z = mnb_zero_point(job, n, blk);
      size_t end = (blk + 1) * bs < job->k ? (blk + 1) * bs : job->k;
      for (size_t i = blk * bs; i < end; i++) v += job->a[r * job->k + i] * (((float)q[i - blk * bs] - z) * sc);
    }
    job->y[r * job->n + n] = v + (job->bias ? job->bias[n] : 0.0f);
  }
}

/* One row of A against 4-bit B, AVX-512: 128 values (64 bytes) of row n of B a step, as 16 dwords; nibble s of dword
 * j is value 8j + s, so a shift brings it to lane j's low bits and one permute of the table 0..15 gives it as a float.
 * The products accumulate unscaled (every value of lane j in a step lies in one block: blocks hold a multiple of 8
 * values), then each lane's sum times its block's scale; the zero points come off as sum_b zero_b scale_b sum_b(A). */
MNB_AVX512 static void mnb_float_row1_avx512(const MnbJob* job, size_t n0, size_t n1) {
  const size_t bs = job->bs, nb = job->nb, row_bytes = nb * job->blob;
  const int bs_shift = __builtin_ctzl(bs);
  const __m512 values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lane_block = bs <= 128 ? _mm512_srli_epi32(_mm512_slli_epi32(lanes, 3), bs_shift) : _mm512_setzero_si512();
  for (size_t n = n0; n < n1; n++) {
    const uint8_t* brow = job->b + n * row_bytes;
    const float* sb = job->scales + n * nb;
    __m512 acc = _mm512_setzero_ps();
    for (size_t g = 0; g < job->groups; g++) {
      _mm_prefetch((const char*)(brow + MNB_AHEAD * row_bytes + g * 64), _MM_HINT_T0);
      const __m512i dw = _mm512_loadu_si512((const void*)(brow + g * 64));
      const float* ag = job->a_group + g * 128;
      __m512 part[4];
      for (int s = 0; s < 4; s++) {
        const __m512 lo = _mm512_permutexvar_ps(_mm512_srli_epi32(dw, 4 * s), values);
        const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(dw, 4 * s + 16), values);
        part[s] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(ag + 16 * (s + 4)), _mm512_mul_ps(lo, _mm512_loadu_ps(ag + 16 * s)));
      }
      const size_t base = (g * 128) >> bs_shift, left = nb - base;
      const __m512 blocks = _mm512_maskz_loadu_ps((__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1), sb + base);
      const __m512 scale = _mm512_permutexvar_ps(lane_block, blocks);
      acc = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(part[0], part[1]), _mm512_add_ps(part[2], part[3])), scale, acc);
    }
    float v = _mm512_reduce_add_ps(acc);
    for (size_t i = job->groups * 128; i < job->k; i++) /* the values past the last full group */
      v += job->a[i] * (float)((brow[i / 2] >> (4 * (i & 1))) & 15) * sb[i >> bs_shift];
    for (size_t blk = 0; blk < nb; blk++) v -= mnb_zero_point(job, n, blk) * sb[blk] * job->a_block[blk];
    job->y[n] = v + (job->bias ? job->bias[n] : 0.0f);
  }
}

MNB_AVX512 static void mnb_float_rows_avx512(const MnbJob* job, size_t n0, size_t n1) {
  for (size_t n = n0; n < n1; n++) {
    size_t r = 0;
    for (; r + 4 <= job->m; r += 4) mnb_float_tile(job, n, r, 4);
    switch (job->m - r) {
      case 3: mnb_float_tile(job, n, r, 3); break;
      case 2: mnb_float_tile(job, n, r, 2); break;
      case 1: mnb_float_tile(job, n, r, 1); break;
    }
  }
}

/* mnb_float_panel_tile's arithmetic, in the same order (the same results), in AVX-512 registers: a row's 32 columns
 * two vectors, its even and odd values' sums four (the plain-C tile's sums went through memory at 4 rows: 1.6x). */
static inline __attribute__((always_inline)) MNB_AVX512 void mnb_float_panel_tile512(const MnbJob* job, size_t n0,
                                                                                    size_t r0, const int R,
                                                                                    const size_t bits) {
  const size_t nb = job->nb, kp = nb * job->bs, row_bytes = nb * job->blob;
  const size_t vpw = 32 / bits, wpb = job->bs * bits / 32;
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  const uint8_t* words = job->b + n0 * row_bytes;
  const float* scales = job->scales + n0 * nb;
  const float* zps = job->zp_f32 ? job->zp_f32 + n0 * nb : NULL;
  const float* a = job->a_pad + r0 * kp;
  __m512 f[4][2];
  for (int r = 0; r < R; r++) f[r][0] = f[r][1] = _mm512_setzero_ps();
  for (size_t blk = 0; blk < nb; blk++) {
    __m512 c[4][2], e[4][2];
    float as[4];
    for (int r = 0; r < R; r++) {
      c[r][0] = c[r][1] = e[r][0] = e[r][1] = _mm512_setzero_ps();
      as[r] = 0.0f;
    }
    for (size_t w = blk * wpb; w < (blk + 1) * wpb; w++) {
      const __m512i p0 = _mm512_loadu_si512(words + w * 128), p1 = _mm512_loadu_si512(words + w * 128 + 64);
      for (size_t j = 0; j < vpw; j += 2) {
        const __m512 v0 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(p0, bits * j), mask));
        const __m512 v1 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(p1, bits * j), mask));
        const __m512 u0 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(p0, bits * (j + 1)), mask));
        const __m512 u1 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(p1, bits * (j + 1)), mask));
        for (int r = 0; r < R; r++) {
          const float x = a[r * kp + w * vpw + j], x1 = a[r * kp + w * vpw + j + 1];
          as[r] += x + x1;
          const __m512 bx = _mm512_set1_ps(x), bx1 = _mm512_set1_ps(x1);
          c[r][0] = _mm512_fmadd_ps(v0, bx, c[r][0]);
          c[r][1] = _mm512_fmadd_ps(v1, bx, c[r][1]);
          e[r][0] = _mm512_fmadd_ps(u0, bx1, e[r][0]);
          e[r][1] = _mm512_fmadd_ps(u1, bx1, e[r][1]);
        }
      }
    }
    const __m512 s0 = _mm512_loadu_ps(scales + blk * 32), s1 = _mm512_loadu_ps(scales + blk * 32 + 16);
    const __m512 z0 = zps ? _mm512_loadu_ps(zps + blk * 32) : _mm512_set1_ps((float)(1 << (bits - 1)));
    const __m512 z1 = zps ? _mm512_loadu_ps(zps + blk * 32 + 16) : z0;
    for (int r = 0; r < R; r++) {
      const __m512 sum_a = _mm512_set1_ps(as[r]);
      f[r][0] = _mm512_fmadd_ps(_mm512_fnmadd_ps(z0, sum_a, _mm512_add_ps(c[r][0], e[r][0])), s0, f[r][0]);
      f[r][1] = _mm512_fmadd_ps(_mm512_fnmadd_ps(z1, sum_a, _mm512_add_ps(c[r][1], e[r][1])), s1, f[r][1]);
    }
  }
  const __m512 b0 = job->bias ? _mm512_loadu_ps(job->bias + n0) : _mm512_setzero_ps();
  const __m512 b1 = job->bias ? _mm512_loadu_ps(job->bias + n0 + 16) : _mm512_setzero_ps();
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(job->y + (r0 + r) * job->n + n0, _mm512_add_ps(f[r][0], b0));
    _mm512_storeu_ps(job->y + (r0 + r) * job->n + n0 + 16, _mm512_add_ps(f[r][1], b1));
  }
}

MNB_AVX512 static size_t mnb_float_panels_avx512(const MnbJob* job, size_t n0, size_t n1) {
  size_t n = n0;
  for (; n + 32 <= n1; n += 32) {
    size_t r = 0;
    for (; r + 4 <= job->m; r += 4)
      job->bits == 4 ? mnb_float_panel_tile512(job, n, r, 4, 4) : mnb_float_panel_tile512(job, n, r, 4, 8);
    for (; r < job->m; r++)
      job->bits == 4 ? mnb_float_panel_tile512(job, n, r, 1, 4) : mnb_float_panel_tile512(job, n, r, 1, 8);
  }
  return n;
}
#endif

static void mnb_float_task(void* user, size_t task) {
  const MnbJob* job = (const MnbJob*)user;
  size_t n0, n1;
  mnb_task_columns(job, task, &n0, &n1);
  if (job->panels) {
#ifdef MNB_X86
    n0 = mnb_level() == 2 ? mnb_float_panels_avx512(job, n0, n1) : mnb_float_panels(job, n0, n1);
#else
    n0 = mnb_float_panels(job, n0, n1);
#endif
    if (n0 == n1) return;
  }
#ifdef MNB_X86
  if (job->a_group) {
    mnb_float_row1_avx512(job, n0, n1);
    return;
  }
  if (job->a_perm && job->bits != 2 && mnb_level() == 2) {
    mnb_float_rows_avx512(job, n0, n1);
    return;
  }
#endif
  mnb_float_rows_generic(job, n0, n1);
}

/* ---- entry point -------------------------------------------------------------------------- */

/* Returns 0 on success, 1 for an unsupported configuration, 2 when out of memory. */
int seamless_matmul_nbits_f32(const float* a, size_t m, size_t k, const uint8_t* b, const float* scales,
                              const uint8_t* zp_u8, const float* zp_f32, const float* bias, float* y, size_t n,
                              size_t bits, size_t bs, int int8, int panels, void* par_fn, void* par_ctx) {
  if ((bits != 2 && bits != 4 && bits != 8) || bs < 16 || (bs & (bs - 1)) || bs * bits % 8) return 1;
  if (panels && (zp_u8 || !seamless_matmul_nbits_panels(n, k, bits, bs))) return 1;
  if (m == 0 || n == 0) return 0;
  MnbJob job;
  memset(&job, 0, sizeof(job));
  job.a = a;
  job.b = b;
  job.scales = scales;
  job.zp_u8 = zp_u8;
  job.zp_f32 = zp_f32;
  job.bias = bias;
  job.panels = panels;
  job.y = y;
  job.m = m;
  job.n = n;
  job.k = k;
  job.bs = bs;
  job.bits = bits;
  job.nb = (k + bs - 1) / bs;
  job.blob = bs * bits / 8;
  /* tasks of >= 16 output columns, at least ~32 KB of weights each */
  size_t row_bytes = job.nb * job.blob + job.nb * 4;
  size_t grain = (32768 / (row_bytes ? row_bytes : 1)) + 1;
  job.tasks = seamless_task_count(n, grain < 16 ? 16 : grain);
  job.chunks = (job.nb * bs) / MNB_CHUNK;
  job.kq = ((job.nb * bs + MNB_CHUNK - 1) / MNB_CHUNK) * MNB_CHUNK;
#ifdef MNB_X86
  mnb_lane_blocks(bits, bs, job.lane_block);
#endif
  float* a_pad = NULL; /* the float path on panels reads A in whole blocks */
  if (!int8 && panels) {
    if (job.nb * bs > k) {
      a_pad = (float*)calloc(m * job.nb * bs, sizeof(float));
      if (!a_pad) return 2;
      for (size_t r = 0; r < m; r++) memcpy(a_pad + r * job.nb * bs, a + r * k, k * sizeof(float));
    }
    job.a_pad = a_pad ? a_pad : a;
    if (job.tasks > n / 32) job.tasks = n / 32;
  }
  const int rows_left = !panels || n % 32; /* columns the row layout's kernels take */
  if (!int8 && rows_left && m == 1 && bits == 4 && bs <= 256 && mnb_level() == 2) {  /* mnb_float_row1_avx512 */
    job.groups = (job.nb * bs < k ? job.nb * bs : k) / 128;
    float* a_group = (float*)malloc((job.groups * 128 + job.nb + 1) * sizeof(float));
    if (!a_group) {
      free(a_pad);
      return 2;
    }
    float* a_block = a_group + job.groups * 128;
    for (size_t g = 0; g < job.groups; g++)
      for (size_t i = 0; i < 128; i++) a_group[g * 128 + (i % 8) * 16 + i / 8] = a[g * 128 + i];
    for (size_t blk = 0; blk < job.nb; blk++) {
      float sum = 0.0f;
      for (size_t i = blk * bs; i < (blk + 1) * bs && i < k; i++) sum += a[i];
      a_block[blk] = sum;
    }
    job.a_group = a_group;
    job.a_block = a_block;
    seamless_run_tasks(par_fn, par_ctx, job.tasks, mnb_float_task, &job);
    free(a_group);
    free(a_pad);
    return 0;
  }
  if (!int8) {
    float* a_perm = NULL;
    if (rows_left && bits != 2 && mnb_level() == 2) {
      a_perm = (float*)malloc((m * job.kq + 1) * sizeof(float));
      if (!a_perm) {
        free(a_pad);
        return 2;
      }
      for (size_t r = 0; r < m; r++) {
        float* pr = a_perm + r * job.kq;
        memset(pr, 0, job.kq * sizeof(float));
        for (size_t i = 0; i < k; i++) pr[mnb_qa_pos(bits, job.chunks, i)] = a[r * k + i];
      }
    }
    job.a_perm = a_perm;
    seamless_run_tasks(par_fn, par_ctx, job.tasks, mnb_float_task, &job);
    free(a_perm);
    free(a_pad);
    return 0;
  }
  int8_t* qa = (int8_t*)aligned_alloc(64, m * job.kq);
  float* sa = (float*)malloc(m * job.nb * sizeof(float));
  float* asum = (float*)malloc(m * job.nb * sizeof(float));
  float* lane_sa = (float*)malloc((m * job.chunks * 16 + 1) * sizeof(float));
  /* the VNNI kernel folds the default zero point into its int32 lanes (no tail blocks only) */
  int fold = panels ? !zp_f32 : !zp_u8 && !zp_f32 && bits != 2 && mnb_level() == 2 && job.chunks * MNB_CHUNK == job.nb * bs;
  /* the row kernels' start values: not needed where panels cover every column */
  int32_t* init = fold && rows_left ? (int32_t*)malloc((m * job.chunks * 16 + 1) * sizeof(int32_t)) : NULL;
  int wide = panels || (fold && m >= MNB_WIDE_ROWS && n >= 32);
  if (wide && job.tasks > n / 32) job.tasks = n / 32;
  int32_t* qsum = wide ? (int32_t*)malloc(m * job.nb * sizeof(int32_t)) : NULL;
  int rc = 2;
  if (qa && sa && asum && lane_sa && (init || !fold || !rows_left) && (qsum || !wide)) {
    mnb_quantize_rows(a, m, k, bs, job.nb, bits, qa, job.kq, job.chunks, sa, asum, lane_sa, init, qsum);
    job.init = init;
    job.qsum = qsum;
    job.qa = qa;
    job.sa = sa;
    job.asum = asum;
    job.lane_sa = lane_sa;
    seamless_run_tasks(par_fn, par_ctx, job.tasks, mnb_int8_task, &job);
    rc = 0;
  }
  free(qa);
  free(sa);
  free(asum);
  free(lane_sa);
  free(init);
  free(qsum);
  return rc;
}

/* ---- GatherBlockQuantized: rows of a 2-D block-quantized uint8 table ------------------------ */

/* out[i, :] = (q(data[idx[i], :]) - zp) * scale for i < n; the table has `rows` rows of `cols`
 * logical values, quantized along the row in blocks of bs (scales [rows, cols / bs], packed
 * zero points [rows, ceil(cols / bs * bits / 8)] or NULL: 2^(bits-1)). Negative indices count
 * from the end; out-of-range indices give zero rows (as stock's). 0, or 2 (out of memory: nothing written). */
int seamless_gather_block_quantized_f32(const uint8_t* data, size_t rows, size_t cols, const int64_t* idx, size_t n,
                                        const float* scales, const uint8_t* zp, size_t bits, size_t bs, int panels,
                                        float* out) {
  const size_t row_bytes = cols * bits / 8, nb = (cols + bs - 1) / bs, zp_row = (nb * bits + 7) / 8;
  uint8_t* q = (uint8_t*)malloc(cols + 8 + (panels ? row_bytes : 0));
  float* row_scales = panels ? (float*)malloc(nb * sizeof(float)) : NULL;
  if (!q || (panels && !row_scales)) {
    free(q);
    free(row_scales);
    return 2;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t r = idx[i] < 0 ? idx[i] + (int64_t)rows : idx[i];
    float* o = out + i * cols;
    if (r < 0 || r >= (int64_t)rows) {
      memset(o, 0, cols * sizeof(float));
      continue;
    }
    const uint8_t* src = data + (size_t)r * row_bytes;
    const float* sc = scales + (size_t)r * nb;
    if (panels) {
      seamless_matmul_nbits_panel_row(data, scales, NULL, rows, (size_t)r, nb, row_bytes, q + cols + 8, row_scales,
                                      NULL);
      src = q + cols + 8;
      sc = row_scales;
    }
    mnb_unpack(src, bits, cols, q);
    for (size_t blk = 0; blk < nb; blk++) {
      float s = sc[blk];
      float z = (float)(1 << (bits - 1));
      if (zp) {
        size_t bit = blk * bits;
        z = (float)((zp[(size_t)r * zp_row + bit / 8] >> (bit % 8)) & ((1 << bits) - 1));
      }
      size_t end = (blk + 1) * bs < cols ? (blk + 1) * bs : cols;
      for (size_t c = blk * bs; c < end; c++) o[c] = ((float)q[c] - z) * s;
    }
  }
  free(q);
  free(row_scales);
  return 0;
}

/* QMoE expert weights in CUTLASS's SM80 mixed-GEMM layout (what ORT's CUDA QMoE reads for weights_prepacked -1 and 1:
 * [experts, k, n / pack] bytes) back to the raw layout [experts, n, k / pack] (pack = 8 / bits), raw rows [row0,
 * row1) of the experts * n. The layout, from the raw element (n, k) on: rows k permuted within groups of 128 / bits for
 * the tensor cores' fragment loads, the [k, n] grid stored column by column (n-major), 16 / bits columns interleaved per
 * tile of 64 rows, and the elements of each 32-bit word split into its even then its odd ones; the values are the raw
 * ones. 0, or 1 (bits other than 4 and 8, k not a multiple of 64 or n of 16 / bits), 2 (out of memory): nothing
 * written. */
int seamless_raw_experts(const uint8_t* prepacked, uint8_t* raw, size_t n, size_t k, int bits, size_t row0,
                         size_t row1) {
  if ((bits != 4 && bits != 8) || k % 64 || n % (size_t)(16 / bits)) return 1;
  const size_t group = 128 / bits, interleave = 16 / bits, word = 32 / bits, tiles = k / 64;
  const size_t expert_bytes = n * k * bits / 8;
  /* 8 bits: element i's place past its column's start (a multiple of 64, so a word's order does not depend on the
   * column); 4 bits: the same arithmetic is a nibble transpose, spelled out below */
  uint32_t* place = bits == 8 ? (uint32_t*)malloc(k * sizeof(uint32_t)) : NULL;
  if (bits == 8 && !place) return 2;
  for (size_t i = 0; place && i < k; i++) {
    size_t in_group = i % group, c = in_group / 8, a = in_group % 8 / 2;
    size_t row = i - in_group + a * (group / 4) + c * 2 + in_group % 2;  /* the fragment-load order */
    size_t at = row / 64 * interleave * 64 + row % 64;                   /* the interleaved column tiles */
    size_t q = at % word;
    place[i] = (uint32_t)(at + (q & 1 ? word / 2 + q / 2 : q / 2) - q);  /* even elements of a word, then odd */
  }
  for (size_t r = row0; r < row1; r++) {
    const size_t col = r % n;
    const uint8_t* pre = prepacked + r / n * expert_bytes;
    const size_t base = (col / interleave * tiles * interleave + col % interleave) * 64;
    uint8_t* out = raw + r * (k * bits / 8);
    if (bits == 8) {
      for (size_t i = 0; i < k; i++) out[i] = pre[base + place[i]];
      continue;
    }
    /* 4 bits: place's arithmetic makes each 32 elements of a 64-row tile 16 bytes of it, element 8 j + m from nibble
     * 4 m + j (a nibble transpose: little-endian halfword m holds elements m, m + 8, m + 16, m + 24); a column's tiles
     * 128 bytes apart (its 4 interleaved columns, 32 bytes each). tests/kernels/test_moe.py holds it to the builder's
     * packer. */
    for (size_t t = 0; t < tiles; t++) {
      for (size_t half = 0; half < 2; half++) {
        const uint8_t* src = pre + base / 2 + t * 128 + half * 16;
        uint16_t u[8];
        memcpy(u, src, sizeof u);
        for (int j = 0; j < 4; j++) {
          uint32_t w = 0;
          for (int m = 0; m < 8; m++) w |= (uint32_t)((u[m] >> (4 * j)) & 15) << (4 * m);
          memcpy(out + t * 32 + half * 16 + 4 * j, &w, sizeof w);
        }
      }
    }
  }
  free(place);
  return 0;
}
