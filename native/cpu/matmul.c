/* Single-precision GEMM: C[M,N] = A[M,K] . B[K,N] (+ bias[N] or row_bias[M]), B pre-packed into panels of
 * 16 columns (zero-padded) so the inner loop reads it contiguously. Tiles of MR rows x 16
 * columns are accumulated in registers; tiles are shared out on the caller's thread pool.
 * Two builds of the tile kernel: AVX-512 (MR = 12, one zmm per row) and AVX2/FMA (MR = 6, two
 * ymm per row, the classic 6x16 shape), chosen at run time; a plain C build for other CPUs. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

#define NR 16
#define MR_MAX 12
#define PACK_A_MIN_MACS (1 << 20)   /* below, packing A (an allocation and a copy) costs more than it gains */
#define L2_PANEL_BYTES (512 * 1024)  /* packed B a block of panels holds: within L2 while every row block reads it */

typedef float v16 __attribute__((vector_size(64), aligned(4)));  /* unaligned-safe loads */

size_t seamless_sgemm_packed_size(size_t K, size_t N) { return ((N + NR - 1) / NR) * K * NR; }

/* Panel `panel` of B (K x N, row stride ldb; or, with trans_b, stored as N x K): K x 16 floats, zero-padded. */
static void pack_panel(const float* B, size_t K, size_t N, size_t ldb, int trans_b, size_t panel, float* dst) {
  size_t n0 = panel * NR, width = N - n0 < NR ? N - n0 : NR;
  for (size_t k = 0; k < K; k++) {
    for (size_t j = 0; j < width; j++) dst[k * NR + j] = trans_b ? B[(n0 + j) * ldb + k] : B[k * ldb + n0 + j];
    for (size_t j = width; j < NR; j++) dst[k * NR + j] = 0.0f;
  }
}

/* Pack all of B into ceil(N/16) panels of K x 16 floats. */
void seamless_sgemm_pack_b(const float* B, size_t K, size_t N, size_t ldb, int trans_b, float* packed) {
  for (size_t p = 0; p < (N + NR - 1) / NR; p++) pack_panel(B, K, N, ldb, trans_b, p, packed + p * K * NR);
}

/* One MR x 16 tile over all of K: rows of A at stride lda, a packed B panel, results to out
 * (MR rows of 16 at stride 16). */
#define DEFINE_TILE(name, MR, attrs)                                                       \
  attrs static void name(const float* a, size_t lda, const float* bp, size_t K, float* out) { \
    v16 acc[MR];                                                                           \
    for (int i = 0; i < MR; i++) acc[i] = (v16){0};                                        \
    for (size_t k = 0; k < K; k++) {                                                       \
      v16 b = *(const v16*)(bp + k * NR);                                                  \
      _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) acc[i] += a[i * lda + k] * b;  \
    }                                                                                      \
    for (int i = 0; i < MR; i++) *(v16*)(out + i * NR) = acc[i];                           \
  }

/* The same over a row block of A packed k-major (ap[k * MR + i]): the broadcasts at constant offsets from one
 * pointer, so the loop keeps no register per row of A. */
#define DEFINE_PACKED_TILE(name, MR, attrs)                                                      \
  attrs static void name(const float* ap, size_t lda, const float* bp, size_t K, float* out) {   \
    (void)lda;                                                                                   \
    v16 acc[MR];                                                                                 \
    for (int i = 0; i < MR; i++) acc[i] = (v16){0};                                              \
    for (size_t k = 0; k < K; k++, ap += MR, bp += NR) {                                         \
      v16 b = *(const v16*)bp;                                                                   \
      _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) acc[i] += ap[i] * b;                 \
    }                                                                                            \
    for (int i = 0; i < MR; i++) *(v16*)(out + i * NR) = acc[i];                                 \
  }

/* An MR x 32 tile's sums over K, each broadcast of A feeding two FMAs: 2 MR FMAs for MR + 2 loads (a one-panel
 * tile: MR for MR + 1, at the load ports' limit). A_AT(i) is row i's value at k, A_NEXT steps every row to k + 1;
 * B's row k is 32 floats at ROW0 and ROW1 (16 each, expressions of k), AHEAD a statement at each k (B_AHEAD below);
 * then bias0 and bias1 (16 values each, the columns') or row_bias (MR values, the rows') where given; rows of 16
 * stored to out0 and out1 at stride ldo. */
#define WIDE_TILE_BODY(MR, A_AT, A_NEXT, ROW0, ROW1, AHEAD)                                      \
  v16 acc0[MR], acc1[MR];                                                                        \
  for (int i = 0; i < MR; i++) acc0[i] = acc1[i] = (v16){0};                                     \
  for (size_t k = 0; k < K; k++, A_NEXT) {                                                       \
    AHEAD;                                                                                       \
    v16 b0 = *(const v16*)(ROW0), b1 = *(const v16*)(ROW1);                                      \
    _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {                                      \
      acc0[i] += A_AT(i) * b0;                                                                   \
      acc1[i] += A_AT(i) * b1;                                                                   \
    }                                                                                            \
  }                                                                                              \
  if (bias0) {                                                                                   \
    v16 c0 = *(const v16*)bias0, c1 = *(const v16*)bias1;                                        \
    for (int i = 0; i < MR; i++) {                                                               \
      acc0[i] += c0;                                                                             \
      acc1[i] += c1;                                                                             \
    }                                                                                            \
  }                                                                                              \
  if (row_bias)                                                                                  \
    for (int i = 0; i < MR; i++) {                                                               \
      acc0[i] += row_bias[i];                                                                    \
      acc1[i] += row_bias[i];                                                                    \
    }                                                                                            \
  for (int i = 0; i < MR; i++) {                                                                 \
    *(v16*)(out0 + i * ldo) = acc0[i];                                                           \
    *(v16*)(out1 + i * ldo) = acc1[i];                                                           \
  }

/* AHEAD for packed panels: their rows 16 k ahead (a row of a panel is one cache line) asked for now. A model's
 * constant B is read once a run from beyond L2: without it 12 chained MiniLM-sized products took ~10 % more than
 * the same alone, and MiniLM ~8 % more (Sapphire Rapids VM, 2026-12-07: docs/benchmarks/cpu.md) */
#define B_AHEAD \
  (__builtin_prefetch(bp0 + (k + 16) * NR, 0, 3), __builtin_prefetch(bp1 + (k + 16) * NR, 0, 3))

/* Two adjacent packed panels of B at once (straight into C where both are whole), A packed k-major (MR values a k;
 * lda unused) */
#define PACKED_A(i) ap[i]
#define DEFINE_WIDE_TILE(name, MR, attrs)                                                                \
  attrs static void name(const float* ap, size_t lda, const float* bp0, const float* bp1, size_t K,      \
                         float* out0, float* out1, size_t ldo, const float* bias0, const float* bias1,   \
                         const float* row_bias) {                                                        \
    (void)lda;                                                                                           \
    WIDE_TILE_BODY(MR, PACKED_A, ap += MR, bp0 + k * NR, bp1 + k * NR, B_AHEAD)                          \
  }

/* The same with A's rows read in place (row stride lda): no packing at each product, which cost more than the
 * packed broadcasts saved (7-10 % of MiniLM's products). Rows 4 apart share a pointer, the others at 1-3 strides
 * from it (one addressing mode each: no register a row, none spilled). */
#define IN_PLACE_A(i) ((i) < 4 ? a0 : (i) < 8 ? a4 : a8)[(i) % 4 == 0 ? 0 : (i) % 4 == 1 ? lda : (i) % 4 == 2 ? lda2 : lda3]
#define DEFINE_IN_PLACE_WIDE_TILE(name, MR, attrs)                                                       \
  attrs static void name(const float* a0, size_t lda, const float* bp0, const float* bp1, size_t K,      \
                         float* out0, float* out1, size_t ldo, const float* bias0, const float* bias1,   \
                         const float* row_bias) {                                                        \
    const float *a4 = MR > 4 ? a0 + 4 * lda : a0, *a8 = MR > 8 ? a0 + 8 * lda : a0;                      \
    size_t lda2 = 2 * lda, lda3 = 3 * lda;                                                               \
    WIDE_TILE_BODY(MR, IN_PLACE_A, (a0++, a4++, a8++), bp0 + k * NR, bp1 + k * NR, B_AHEAD)              \
  }

typedef void (*WideTileFn)(const float*, size_t, const float*, const float*, size_t, float*, float*, size_t,
                           const float*, const float*, const float*);

/* The same over B read in place: B[k, j] = x[off[k] + j] for the tile's 32 columns (a convolution's taps over a
 * plane, spatial.c); MR = 1: a row of A itself */
#define DEFINE_INDIRECT_TILE(name, MR, attrs)                                                            \
  attrs static void name(const float* ap, const float* x, const int64_t* off, size_t K, float* out0,     \
                         size_t ldo, const float* row_bias) {                                            \
    const float *bias0 = NULL, *bias1 = NULL;                                                            \
    float* out1 = out0 + NR;                                                                             \
    WIDE_TILE_BODY(MR, PACKED_A, ap += MR, x + off[k], x + off[k] + NR, (void)0)                         \
  }

#if defined(__x86_64__) && defined(__GNUC__)
DEFINE_WIDE_TILE(wide_avx512, 12, __attribute__((target("avx512f"))))
DEFINE_WIDE_TILE(wide8_avx512, 8, __attribute__((target("avx512f"))))
DEFINE_WIDE_TILE(wide4_avx512, 4, __attribute__((target("avx512f"))))
DEFINE_IN_PLACE_WIDE_TILE(in_place_avx512, 12, __attribute__((target("avx512f"))))
DEFINE_IN_PLACE_WIDE_TILE(in_place8_avx512, 8, __attribute__((target("avx512f"))))
DEFINE_IN_PLACE_WIDE_TILE(in_place4_avx512, 4, __attribute__((target("avx512f"))))
DEFINE_PACKED_TILE(packed_avx512, 12, __attribute__((target("avx512f"))))
DEFINE_INDIRECT_TILE(indirect_avx512, 12, __attribute__((target("avx512f"))))
DEFINE_INDIRECT_TILE(indirect8_avx512, 8, __attribute__((target("avx512f"))))
DEFINE_INDIRECT_TILE(indirect4_avx512, 4, __attribute__((target("avx512f"))))
DEFINE_INDIRECT_TILE(indirect1_avx512, 1, __attribute__((target("avx512f"))))
DEFINE_PACKED_TILE(packed_avx2, 6, __attribute__((target("avx2,fma"))))
DEFINE_TILE(tile_avx512, 12, __attribute__((target("avx512f"))))
DEFINE_TILE(quad_avx512, 4, __attribute__((target("avx512f"))))
DEFINE_TILE(row_avx512, 1, __attribute__((target("avx512f"))))
DEFINE_TILE(tile_avx2, 6, __attribute__((target("avx2,fma"))))
DEFINE_TILE(quad_avx2, 4, __attribute__((target("avx2,fma"))))
DEFINE_TILE(row_avx2, 1, __attribute__((target("avx2,fma"))))
#endif
DEFINE_TILE(tile_generic, 4, )
DEFINE_PACKED_TILE(packed_generic, 4, )
DEFINE_TILE(row_generic, 1, )

typedef void (*TileFn)(const float*, size_t, const float*, size_t, float*);

typedef struct {
  size_t M, N, K, lda, ldc, mr, m_blocks, tiles, tasks, block_panels;
  const float *A, *packed, *bias;
  const float* row_bias;   /* M values added to C's rows (a convolution's), or NULL; never with bias */
  float* C;
  TileFn tile, quad, row;  /* mr rows at once; the last, short block 4 rows and 1 row at a time */
  TileFn packed_tile;      /* mr rows of packed_a */
  /* 12, 8 and 4 rows by two panels, A packed (packed_wide) or read in place (in_place_wide); NULL without AVX-512
   * (mr = 12 with it) */
  WideTileFn packed_wide[3], in_place_wide[3];
  size_t cw, ctiles;       /* panels per column tile (2 where the wide tiles run), column tiles */
  const float* packed_a;   /* A's row blocks (seamless_sgemm_pack_a), each k-major: the full ones (mr rows), then
                              the short block's 8s and 4s where the wide tiles run; or NULL: A read in place */
  /* batched products: B unpacked (packed == NULL), items at these element strides */
  const float* B;
  size_t ldb, batch, stride_a, stride_b, stride_c;
  int trans_b;
  float* scratch;  /* cw x K x 16 floats per task for packing B panels (batched products) */
} GemmJob;

/* One panel of a tile: rows of A from m0 against the panel, into out (rows of 16). */
static void panel_tile(const GemmJob* job, const float* a, size_t m0, size_t rows, const float* bp, float* out) {
  if (rows == job->mr && job->packed_a)
    job->packed_tile(job->packed_a + m0 * job->K, 0, bp, job->K, out);
  else if (rows == job->mr)
    job->tile(a, job->lda, bp, job->K, out);
  else
    for (size_t i = 0; i < rows; i += rows - i >= 4 ? 4 : 1)
      (rows - i >= 4 ? job->quad : job->row)(a + i * job->lda, job->lda, bp, job->K, out + i * NR);
}

/* A tile's rows by the wide tiles, 12, 8 and 4 at a time (each call's rows `step` floats after the last's in a,
 * row stride lda), outputs at stride ldo (out1 16 floats after out0 where they are C's); returns the rows done,
 * the last 0-3 left. */
static size_t wide_rows(WideTileFn const wide[3], const float* a, size_t step, size_t lda, size_t rows,
                        const float* b0, const float* b1, size_t K, float* out0, float* out1, size_t ldo,
                        const float* bias, const float* row_bias) {
  size_t i = 0;
  while (rows - i >= 4) {
    size_t left = rows - i, n = left >= 12 ? 12 : left >= 8 ? 8 : 4;
    wide[n == 12 ? 0 : n == 8 ? 1 : 2](a + i * step, lda, b0, b1, K, out0 + i * ldo, out1 + i * ldo, ldo, bias,
                                       bias ? bias + NR : NULL, row_bias ? row_bias + i : NULL);
    i += n;
  }
  return i;
}

/* Rows [from, rows) of a tile's sums, panel p's at out[p] (rows of NR floats), into C from c (the tile's corner, row
 * stride ldc): `width` columns (one or two panels), plus bias (the tile's columns') or row_bias (its rows') where
 * given */
static void store_tile(float out[2][MR_MAX * NR], size_t from, size_t rows, size_t width, float* c, size_t ldc,
                       const float* bias, const float* row_bias) {
  for (size_t i = from; i < rows; i++)
    for (size_t p = 0; p * NR < width; p++) {
      const size_t n = width - p * NR < NR ? width - p * NR : NR;
      float* ci = c + i * ldc + p * NR;
      const float* o = out[p] + i * NR;
      if (bias)
        for (size_t j = 0; j < n; j++) ci[j] = o[j] + bias[p * NR + j];
      else if (row_bias)
        for (size_t j = 0; j < n; j++) ci[j] = o[j] + row_bias[i];
      else
        memcpy(ci, o, n * sizeof(float));
    }
}

static void gemm_task(void* user, size_t task) {
  GemmJob* job = user;
  float out[2][MR_MAX * NR];
  float* panel_buf = job->scratch ? job->scratch + task * job->cw * job->K * NR : NULL;
  size_t begin, end, K = job->K, per_item = job->tiles, ctiles = job->ctiles;
  size_t panels = (job->N + NR - 1) / NR, block_ct = job->block_panels / job->cw ? job->block_panels / job->cw : 1;
  size_t packed_item = (size_t)-1, packed_ct = (size_t)-1;
  seamless_task_range(per_item * job->batch, job->tasks, task, &begin, &end);
  for (size_t t = begin; t < end; t++) {
    size_t item = t / per_item, tile = t % per_item, ct, m0;
    if (job->packed && block_ct >= ctiles) {  /* all of packed B fits in L2: row blocks outer */
      ct = tile % ctiles;
      m0 = tile / ctiles * job->mr;
    } else if (job->packed) {
      /* packed B: blocks of panels that fit in L2, and within a block row blocks outer (an A block stays in L1
       * across the block's panels) */
      size_t per_block = job->m_blocks * block_ct, block = tile / per_block, rest = tile % per_block;
      size_t in_block = ctiles - block * block_ct < block_ct ? ctiles - block * block_ct : block_ct;
      ct = block * block_ct + rest % in_block;
      m0 = rest / in_block * job->mr;
    } else {  /* unpacked B: column tiles outer, so each one's panels are packed once per task */
      ct = tile / job->m_blocks;
      m0 = tile % job->m_blocks * job->mr;
    }
    size_t rows = job->M - m0 < job->mr ? job->M - m0 : job->mr;
    size_t first = ct * job->cw, count = panels - first < job->cw ? panels - first : job->cw;
    const float* a = job->A + item * job->stride_a + m0 * job->lda;
    const float *b0 = job->packed ? job->packed + first * K * NR : panel_buf, *b1 = count == 2 ? b0 + K * NR : NULL;
    if (!job->packed && (item != packed_item || ct != packed_ct))
      for (size_t p = 0; p < count; p++)
        pack_panel(job->B + item * job->stride_b, K, job->N, job->ldb, job->trans_b, first + p, panel_buf + p * K * NR);
    packed_item = item;
    packed_ct = ct;
    /* where both panels are whole, the wide tiles' sums (and bias) go straight into C: rows [0, direct) */
    size_t direct = 0, whole = count == 2 && (first + 2) * NR <= job->N;
    float* c = job->C + item * job->stride_c + m0 * job->ldc + first * NR;
    const float* bias = whole && job->bias ? job->bias + first * NR : NULL;
    const float* row_bias = whole && job->row_bias ? job->row_bias + m0 : NULL;
    size_t ldo = whole ? job->ldc : NR;
    if (count == 2) {
      size_t i = job->packed_a ? wide_rows(job->packed_wide, job->packed_a + m0 * K, K, 0, rows, b0, b1, K,
                                           whole ? c : out[0], whole ? c + NR : out[1], ldo, bias, row_bias)
                               : wide_rows(job->in_place_wide, a, job->lda, job->lda, rows, b0, b1, K,
                                           whole ? c : out[0], whole ? c + NR : out[1], ldo, bias, row_bias);
      direct = whole ? i : 0;
      for (; i < rows; i++)
        for (size_t p = 0; p < 2; p++) job->row(a + i * job->lda, job->lda, p ? b1 : b0, K, out[p] + i * NR);
    } else {
      for (size_t p = 0; p < count; p++) panel_tile(job, a, m0, rows, p ? b1 : b0, out[p]);
    }
    const size_t width = job->N - first * NR < count * NR ? job->N - first * NR : count * NR;
    store_tile(out, direct, rows, width, c, job->ldc, job->bias ? job->bias + first * NR : NULL,
               job->row_bias ? job->row_bias + m0 : NULL);
  }
}

static int forced_isa = -1;

/* Tests: force the tiles' instruction set (0 plain C, 1 AVX2, 2 AVX-512 (no AMX), 3 AVX-512 and AMX; -1 automatic);
 * one the CPU lacks falls back to automatic. A packed A (seamless_sgemm_pack_a) is laid out for the set in force when
 * it was packed. */
void seamless_sgemm_set_isa(int level) { forced_isa = level; }

static void choose_kernel(GemmJob* job) {
  job->mr = 4; job->tile = job->quad = tile_generic; job->row = row_generic; job->packed_tile = packed_generic;
  for (int i = 0; i < 3; i++) job->packed_wide[i] = job->in_place_wide[i] = NULL;
  if (forced_isa == 0) return;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && forced_isa != 1) {
    job->mr = 12; job->tile = tile_avx512; job->quad = quad_avx512; job->row = row_avx512;
    job->packed_tile = packed_avx512;
    job->packed_wide[0] = wide_avx512; job->packed_wide[1] = wide8_avx512; job->packed_wide[2] = wide4_avx512;
    job->in_place_wide[0] = in_place_avx512; job->in_place_wide[1] = in_place8_avx512;
    job->in_place_wide[2] = in_place4_avx512;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    job->mr = 6; job->tile = tile_avx2; job->quad = quad_avx2; job->row = row_avx2;
    job->packed_tile = packed_avx2;
  }
#endif
}

/* A (M x K, row stride lda) packed once for seamless_sgemm (M * K floats): a constant's, e.g. a convolution's
 * weights, k-major in blocks of choose_kernel's mr rows, then (where the wide tiles run) the short block's 8s and
 * 4s; the last rows that fill no block are left out (read in place), and all of A where it has no full block. */
void seamless_sgemm_pack_a(size_t M, size_t K, const float* A, size_t lda, float* packed_a) {
  GemmJob job = {0};
  choose_kernel(&job);
  size_t full_rows = M / job.mr * job.mr;
  for (size_t m0 = 0, w = job.mr; full_rows && w; m0 += w) {
    size_t left = M - m0;
    w = m0 < full_rows ? job.mr : !job.packed_wide[0] ? 0 : left >= 8 ? 8 : left >= 4 ? 4 : 0;
    for (size_t k = 0; k < K; k++)
      for (size_t i = 0; i < w; i++) packed_a[m0 * K + k * w + i] = A[(m0 + i) * lda + k];
  }
}

/* Whether to pack A once for this product rather than read it in place. The in-place tiles read 12 rows 4 lda
 * floats apart: past 512 floats a row (a row block beyond half of L1), rows whose stride is a multiple of 2 KB share
 * a few L1 sets (6 rows a set; 12 at a multiple of 4 KB) and evict each other: measured 7 % and 20 % slower
 * (K 1024-5120, AMD Zen 4). Packing costs ~35 / N of the product (a pass over A per call): paid where it is
 * smaller, and for the widest products (an LM head over a prompt), where it is negligible. wide: the AVX-512 wide
 * tiles run (the rule above); without them, the one-panel tiles' rule from before in-place tiles. */
static int pack_a_pays(int wide, size_t M, size_t N, size_t K, size_t lda) {
  if (!wide)  /* the AVX2 and plain tiles (one panel): packed A where the product is large enough to repay it */
    return N >= 4 * NR && M * N * K >= PACK_A_MIN_MACS;
  if (N >= 16384) return 1;
  if (K <= 512 || lda % 512) return 0;
  return N >= (lda % 1024 ? 1024 : 256);
}

/* Returns 0, or -1 when the packing scratch of a batched product cannot be allocated. */
static int run_gemm(GemmJob* job, void* par_fn, void* par_ctx) {
  choose_kernel(job);
  if (!job->M || !job->N || !job->batch) return 0;
  job->m_blocks = (job->M + job->mr - 1) / job->mr;
  job->block_panels = L2_PANEL_BYTES / ((job->K ? job->K : 1) * NR * sizeof(float));
  if (!job->block_panels) job->block_panels = 1;
  if (job->M < job->mr) job->packed_a = NULL;  /* seamless_sgemm_pack_a left it unpacked */
  float* owned_a = NULL;
  if (!job->packed_a && job->packed && job->batch == 1 && job->M >= job->mr &&
      pack_a_pays(job->packed_wide[0] != NULL, job->M, job->N, job->K, job->lda) &&
      (owned_a = aligned_alloc(64, (job->M * job->K * sizeof(float) + 63) & ~(size_t)63))) {
    seamless_sgemm_pack_a(job->M, job->K, job->A, job->lda, owned_a);
    job->packed_a = owned_a;
  }
  /* the wide tiles where they run: two panels at a time (A packed or in place) */
  job->cw = job->packed_wide[0] ? 2 : 1;
  job->ctiles = ((job->N + NR - 1) / NR + job->cw - 1) / job->cw;
  job->tiles = job->m_blocks * job->ctiles;
  size_t all = job->tiles * job->batch;
  job->tasks = seamless_task_count(job->batch * job->M * job->N * (job->K ? job->K : 1), 1 << 18);
  if (job->tasks > all) job->tasks = all;
  /* on cache lines (K x 16 floats a panel: a multiple of 64 bytes): the panel loads never straddle two */
  if (!job->packed &&
      !(job->scratch = aligned_alloc(64, job->tasks * job->cw * (job->K ? job->K : 1) * NR * sizeof(float))))
    return -1;
  seamless_run_tasks(par_fn, par_ctx, job->tasks, gemm_task, job);
  free(job->scratch);
  free(owned_a);
  return 0;
}

/* ---- AMX: float32 products on bf16 tiles at float32 accuracy (Sapphire Rapids and later) ----
 * Every value is split exactly into three bf16 (x = hi + mid + lo, each the next 8 significant bits, truncated),
 * and the six partial products above float32's rounding (hi.hi, hi.mid, mid.hi, hi.lo, mid.mid, lo.hi) are summed
 * in float32 by the tiles: 6 bf16 products cost less than one float32 FMA per value. The three dropped ones are
 * below 2^-23 of the product. A constant B is split once (seamless_sgemm_split_b), A at every product. Infinities
 * do not split (inf - inf): a B holding one gets no split, a product whose A holds one runs the float32 tiles.
 * Tiles: C 0-3 (32 x 32 floats), A 4-5 (two 16-row blocks of 32 k), B 6-7 (two 16-column blocks of 32 k, pairs of
 * k interleaved as the tiles read them). */
#define AMX_MIN_DEPTH 64  /* below, splitting A costs more than the tiles gain */
#define AMX_A_BYTES (3 * 2 * 64 * 4096)  /* a row group's split A: 64 rows of 4096 k, 128 of 2048 ... (in L2) */

/* The 32-wide blocks covering x (the tiles' rows, columns and depth) */
static size_t amx_blocks(size_t x) { return (x + 31) / 32; }

/* bf16 values (uint16) a split B holds per column block: 3 pieces x kp / 2 pairs of k x 32 columns x 2 */
static size_t amx_block_values(size_t K) { return 3 * (32 * amx_blocks(K)) / 2 * 64; }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes[16];
  uint8_t rows[16];
} AmxConfig;

/* Whether this CPU has AMX-BF16 and the kernel lets this process use its tile state (asked once) */
static int amx_usable(void) {
  static int usable = -1;
  if (usable < 0) {
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const int cpu = (d >> 22 & 1) && (d >> 24 & 1) && __builtin_cpu_supports("avx512bw"); /* AMX-BF16, AMX-TILE */
    usable = cpu && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  }
  return usable;
}

/* The bf16 pieces of 16 floats, each in its lanes' upper halves (truncated: exact) */
AMX_TARGET static inline void amx_split(__m512 x, __m512i piece[3]) {
  const __m512i upper = _mm512_set1_epi32((int)0xFFFF0000u);
  const __m512i hi = _mm512_and_si512(_mm512_castps_si512(x), upper);
  const __m512 rest = _mm512_sub_ps(x, _mm512_castsi512_ps(hi));
  const __m512i mid = _mm512_and_si512(_mm512_castps_si512(rest), upper);
  piece[0] = hi;
  piece[1] = mid;
  piece[2] = _mm512_castps_si512(_mm512_sub_ps(rest, _mm512_castsi512_ps(mid)));
}

/* The first n lanes of 16 (all from 16 on) */
AMX_TARGET static inline __mmask16 amx_lanes(size_t n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }

/* Lanes of x that are infinite or NaN */
AMX_TARGET static inline __mmask16 amx_nonfinite(__m512 x) {
  const __m512i exponent = _mm512_set1_epi32(0x7F800000);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exponent), exponent);
}

/* Returns 1 (and a split of no use) where B holds an infinity or NaN */
AMX_TARGET static int amx_split_b(const float* packed, size_t K, size_t N, uint16_t* split) {
  const size_t kp = 32 * amx_blocks(K), panels = (N + NR - 1) / NR, plane = kp / 2 * 64;
  const __m512i upper = _mm512_set1_epi32((int)0xFFFF0000u);
  __mmask16 bad = 0;
  for (size_t cb = 0; cb < amx_blocks(N); cb++)
    for (size_t h = 0; h < 2; h++) {
      const float* bp = 2 * cb + h < panels ? packed + (2 * cb + h) * K * NR : NULL;
      uint16_t* b = split + cb * amx_block_values(K) + h * 32;
      for (size_t k = 0; k < kp; k += 2) {
        const __m512 even = bp && k < K ? _mm512_loadu_ps(bp + k * NR) : _mm512_setzero_ps();
        const __m512 odd = bp && k + 1 < K ? _mm512_loadu_ps(bp + (k + 1) * NR) : _mm512_setzero_ps();
        bad |= amx_nonfinite(even) | amx_nonfinite(odd);
        __m512i pe[3], po[3];
        amx_split(even, pe);
        amx_split(odd, po);
        for (int s = 0; s < 3; s++)  /* a pair a 32-bit lane: k's bf16 low, k + 1's high */
          _mm512_storeu_si512(b + s * plane + k / 2 * 64,
                              _mm512_or_si512(_mm512_srli_epi32(pe[s], 16), _mm512_and_si512(po[s], upper)));
      }
    }
  return bad != 0;
}

typedef struct {
  size_t M, N, K, lda, ldc, kp, row_blocks, col_blocks, tasks;
  const float *A, *bias, *row_bias;
  const uint16_t* b_split;
  float* C;
  uint16_t* a_split;  /* 3 x [row_blocks * 32][kp] bf16, zero-padded */
  int nonfinite[AMX_A_BYTES / (3 * 2 * 32 * AMX_MIN_DEPTH)];  /* per row block of A */
} AmxJob;

/* Rows [32 t, 32 t + 32) of A split into a_split (zeros past M and K) */
AMX_TARGET static void amx_split_a(void* user, size_t t) {
  AmxJob* job = user;
  const size_t kp = job->kp, plane = job->row_blocks * 32 * kp;
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  __mmask16 bad = 0;
  for (size_t m = 32 * t; m < 32 * t + 32; m++) {
    const float* a = job->A + m * job->lda;
    for (size_t k = 0; k < kp; k += 32) {
      __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
      if (m < job->M && k < job->K) {
        const size_t n = job->K - k < 32 ? job->K - k : 32;
        x0 = _mm512_maskz_loadu_ps(amx_lanes(n), a + k);
        x1 = _mm512_maskz_loadu_ps(amx_lanes(n > 16 ? n - 16 : 0), a + k + 16);
      }
      bad |= amx_nonfinite(x0) | amx_nonfinite(x1);
      __m512i p0[3], p1[3];
      amx_split(x0, p0);
      amx_split(x1, p1);
      for (int s = 0; s < 3; s++)  /* the upper halves of 32 floats, in order */
        _mm512_storeu_si512(job->a_split + s * plane + m * kp + k, _mm512_permutex2var_epi16(p0[s], odd, p1[s]));
    }
  }
  job->nonfinite[t] = bad != 0;
}

/* C 0-3 += A piece (tiles 4, 5) . B piece s (tiles 6, 7) */
#define AMX_PRODUCTS(s)                                   \
  do {                                                    \
    _tile_loadd(6, b + (s) * b_plane + kb * 16 * 64, 128);      \
    _tile_loadd(7, b + (s) * b_plane + kb * 16 * 64 + 32, 128); \
    _tile_dpbf16ps(0, 4, 6);                              \
    _tile_dpbf16ps(1, 4, 7);                              \
    _tile_dpbf16ps(2, 5, 6);                              \
    _tile_dpbf16ps(3, 5, 7);                              \
  } while (0)
#define AMX_A(s)                                                                        \
  do {                                                                                  \
    _tile_loadd(4, job->a_split + (s) * a_plane + m0 * kp + kb * 32, kp * 2);           \
    _tile_loadd(5, job->a_split + (s) * a_plane + (m0 + 16) * kp + kb * 32, kp * 2);    \
  } while (0)

/* Column blocks of 32, each over all row blocks (its split B read from L2) */
AMX_TARGET static void amx_task(void* user, size_t task) {
  const AmxJob* job = user;
  const size_t kp = job->kp, a_plane = job->row_blocks * 32 * kp, b_plane = kp / 2 * 64;
  AmxConfig config = {.palette = 1};
  for (int t = 0; t < 8; t++) {
    config.bytes[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
  float out[32 * 32];
  size_t begin, end;
  seamless_task_range(job->col_blocks, job->tasks, task, &begin, &end);
  /* the next column block's split asked into L2 over this one's products: B is read from beyond L2 once a run */
  const size_t block_lines = amx_block_values(job->K) * sizeof(uint16_t) / 64;
  const size_t steps = job->row_blocks * (kp / 32), ahead = (block_lines + steps - 1) / steps;
  for (size_t cb = begin; cb < end; cb++) {
    const uint16_t* b = job->b_split + cb * amx_block_values(job->K);
    const char* next = cb + 1 < end ? (const char*)(b + amx_block_values(job->K)) : NULL;
    size_t step = 0;
    const size_t n0 = cb * 32, width = job->N - n0 < 32 ? job->N - n0 : 32;
    const __mmask16 mask0 = amx_lanes(width), mask1 = amx_lanes(width > 16 ? width - 16 : 0);
    const __m512 bias0 = job->bias ? _mm512_maskz_loadu_ps(mask0, job->bias + n0) : _mm512_setzero_ps();
    const __m512 bias1 = job->bias ? _mm512_maskz_loadu_ps(mask1, job->bias + n0 + 16) : _mm512_setzero_ps();
    for (size_t m0 = 0; m0 < job->M; m0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (size_t kb = 0; kb < kp / 32; kb++, step++) {
        for (size_t l = step * ahead; next && l < (step + 1) * ahead && l < block_lines; l++)
          _mm_prefetch(next + l * 64, _MM_HINT_T1);
        AMX_A(0);
        AMX_PRODUCTS(0);
        AMX_PRODUCTS(1);
        AMX_PRODUCTS(2);
        AMX_A(1);
        AMX_PRODUCTS(0);
        AMX_PRODUCTS(1);
        AMX_A(2);
        AMX_PRODUCTS(0);
      }
      _tile_stored(0, out, 128);
      _tile_stored(1, out + 16, 128);
      _tile_stored(2, out + 16 * 32, 128);
      _tile_stored(3, out + 16 * 32 + 16, 128);
      const size_t rows = job->M - m0 < 32 ? job->M - m0 : 32;
      for (size_t i = 0; i < rows; i++) {
        float* c = job->C + (m0 + i) * job->ldc + n0;
        const __m512 rb = job->row_bias ? _mm512_set1_ps(job->row_bias[m0 + i]) : _mm512_setzero_ps();
        const __m512 sum0 = _mm512_loadu_ps(out + i * 32), sum1 = _mm512_loadu_ps(out + i * 32 + 16);
        _mm512_mask_storeu_ps(c, mask0, _mm512_add_ps(sum0, _mm512_add_ps(bias0, rb)));
        _mm512_mask_storeu_ps(c + 16, mask1, _mm512_add_ps(sum1, _mm512_add_ps(bias1, rb)));
      }
    }
  }
  _tile_release();
}

/* Scratch kept per calling thread, one buffer per use (each use asks for the same size every time), 64-byte aligned,
 * freed at the thread's exit; NULL when out of memory. Per call it was an allocation whose pages the kernel cleared
 * at every product (7 % of a GEMM benchmark). Uses: A's split for the tiles, a group of rows at a time
 * (AMX_A_BYTES); spatial.c pool_planes_avx512's lanes. */
enum ThreadBuffer { AMX_A_BUFFER, POOL_LANES_BUFFER, THREAD_BUFFERS };
static pthread_key_t thread_buffer_keys[THREAD_BUFFERS];
static pthread_once_t thread_buffer_once = PTHREAD_ONCE_INIT;
static void thread_buffer_keys_create(void) {
  for (int i = 0; i < THREAD_BUFFERS; i++) pthread_key_create(&thread_buffer_keys[i], free);
}

static void* thread_buffer(enum ThreadBuffer use, size_t bytes) {
  pthread_once(&thread_buffer_once, thread_buffer_keys_create);
  void* buffer = pthread_getspecific(thread_buffer_keys[use]);
  if (!buffer && (buffer = aligned_alloc(64, bytes)) && pthread_setspecific(thread_buffer_keys[use], buffer)) {
    free(buffer);
    buffer = NULL;
  }
  return buffer;
}

/* Runs the product on the tiles where they apply (returns 1), else returns 0. Rows go in groups whose split A fits
 * AMX_A_BYTES (within L2: each column block reads all of the group's); a group whose A holds an infinity or NaN runs
 * the float32 tiles. */
static int amx_gemm(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* packed,
                    const uint16_t* split, const float* bias, const float* row_bias, float* C, size_t ldc,
                    void* par_fn, void* par_ctx) {
  /* the tiles compute blocks of 32 x 32 x 32: where padding adds over half, the float32 tiles win (6 products on
   * the tiles take ~0.56 of one FMA's time, measured on Sapphire Rapids) */
  const size_t kp = 32 * amx_blocks(K), row_blocks = amx_blocks(M);
  const size_t padded = 32 * row_blocks * 32 * amx_blocks(N) * kp;
  const size_t group_blocks = AMX_A_BYTES / (3 * sizeof(uint16_t) * 32 * kp);
  if (!split || K < AMX_MIN_DEPTH || 2 * padded > 3 * M * N * K ||
      group_blocks < (row_blocks < 2 ? row_blocks : 2) || (forced_isa != -1 && forced_isa != 3) || !amx_usable())
    return 0;
  uint16_t* scratch = thread_buffer(AMX_A_BUFFER, AMX_A_BYTES);
  if (!scratch) return 0;
  for (size_t r0 = 0; r0 < row_blocks; r0 += group_blocks) {
    const size_t blocks = row_blocks - r0 < group_blocks ? row_blocks - r0 : group_blocks;
    const size_t m0 = r0 * 32, rows = M - m0 < blocks * 32 ? M - m0 : blocks * 32;
    AmxJob job = {.M = rows, .N = N, .K = K, .lda = lda, .ldc = ldc, .kp = kp, .row_blocks = blocks,
                  .col_blocks = amx_blocks(N), .A = A + m0 * lda, .b_split = split, .bias = bias,
                  .row_bias = row_bias ? row_bias + m0 : NULL, .C = C + m0 * ldc, .a_split = scratch};
    job.tasks = seamless_task_count(rows * N * K, 1 << 20);
    if (job.tasks > job.col_blocks) job.tasks = job.col_blocks;
    seamless_run_tasks(par_fn, par_ctx, blocks, amx_split_a, &job);
    int finite = 1;
    for (size_t t = 0; t < blocks; t++) finite &= !job.nonfinite[t];
    if (finite) {
      seamless_run_tasks(par_fn, par_ctx, job.tasks, amx_task, &job);
    } else {
      GemmJob g = {.M = rows, .N = N, .K = K, .lda = lda, .ldc = ldc, .A = job.A, .packed = packed, .bias = bias,
                   .row_bias = job.row_bias, .C = job.C, .batch = 1};
      run_gemm(&g, par_fn, par_ctx);
    }
  }
  return 1;
}

size_t seamless_sgemm_split_size(size_t K, size_t N) {
  return K >= AMX_MIN_DEPTH && amx_usable() ? amx_blocks(N) * amx_block_values(K) : 0;
}

int seamless_sgemm_split_b(const float* packed, size_t K, size_t N, uint16_t* split) {
  return seamless_sgemm_split_size(K, N) ? amx_split_b(packed, K, N, split) : 1;
}
#else
static int amx_gemm(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* packed,
                    const uint16_t* split, const float* bias, const float* row_bias, float* C, size_t ldc,
                    void* par_fn, void* par_ctx) {
  return 0;
}
size_t seamless_sgemm_split_size(size_t K, size_t N) { return 0; }
int seamless_sgemm_split_b(const float* packed, size_t K, size_t N, uint16_t* split) { return 1; }
#endif

/* packed_a: A packed by seamless_sgemm_pack_a, or NULL (read in place, or packed here where pack_a_pays); A itself
 * is read either way. split: packed B split by seamless_sgemm_split_b, or NULL (the AMX tiles never run).
 * bias: N values added to every row, or row_bias: M values added to every column (after the sums: y = A.B + b) */
void seamless_sgemm(size_t M, size_t N, size_t K, const float* A, const float* packed_a, size_t lda,
                    const float* packed, const uint16_t* split, const float* bias, const float* row_bias, float* C,
                    size_t ldc, void* par_fn, void* par_ctx) {
  if (!packed_a && amx_gemm(M, N, K, A, lda, packed, split, bias, row_bias, C, ldc, par_fn, par_ctx)) return;
  GemmJob job = {.M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .A = A, .packed_a = packed_a, .packed = packed,
                 .bias = bias, .row_bias = row_bias, .C = C, .batch = 1};
  run_gemm(&job, par_fn, par_ctx);
}

/* batch products C_i = A_i . B_i, items stride_a / stride_b / stride_c elements apart (a stride
 * of 0 repeats one operand); B_i is K x N with row stride ldb, or N x K with trans_b. Returns
 * 0, or -1 (nothing computed) when the packing scratch cannot be allocated. */
int seamless_sgemm_batched(size_t batch, size_t M, size_t N, size_t K, const float* A, size_t lda, size_t stride_a,
                           const float* B, size_t ldb, size_t stride_b, int trans_b, float* C, size_t ldc,
                           size_t stride_c, void* par_fn, void* par_ctx) {
  GemmJob job = {.M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .A = A, .C = C, .B = B, .ldb = ldb,
                 .batch = batch, .stride_a = stride_a, .stride_b = stride_b, .stride_c = stride_c, .trans_b = trans_b};
  return run_gemm(&job, par_fn, par_ctx);
}

/* C[M, N] = A . B where B[k, j] = x[off[k] + j] (j < N: read only there), A packed by seamless_sgemm_pack_a: a
 * convolution's GEMM without im2col (spatial.c). Tiles of 12 rows x 32 columns by the indirect tiles, the smaller
 * operand's tiles inner (re-read from cache); the last, narrower column tile's B packed first into `tail`
 * (seamless_sgemm_indirect_tail_floats, zeros past N) for the packed tiles. Only where
 * seamless_sgemm_indirect_supported(M). */
typedef struct {
  size_t M, N, K, lda, ldc, m_blocks, ctiles, tasks;
  int rows_outer; /* row blocks outer where A is the larger operand (each block read once, B's lines re-read) */
  const float *A, *packed_a, *x, *row_bias;
  const int64_t* off;
  float *C, *tail;
  GemmJob kernels;
} IndirectJob;

static void indirect_task(void* user, size_t task) {
  const IndirectJob* job = user;
  const GemmJob* kn = &job->kernels;
  size_t begin, end, K = job->K;
  float out[2][MR_MAX * NR];
  seamless_task_range(job->m_blocks * job->ctiles, job->tasks, task, &begin, &end);
  for (size_t t = begin; t < end; t++) {
    size_t ct = job->rows_outer ? t % job->ctiles : t / job->m_blocks;
    size_t m0 = (job->rows_outer ? t / job->ctiles : t % job->m_blocks) * kn->mr, j0 = ct * 2 * NR;
    size_t rows = job->M - m0 < kn->mr ? job->M - m0 : kn->mr, width = job->N - j0 < 2 * NR ? job->N - j0 : 2 * NR;
    float* c = job->C + m0 * job->ldc + j0;
    const float* ap = job->packed_a + m0 * K;
    size_t i = 0;
    if (width == 2 * NR) {
      const float* rb = job->row_bias ? job->row_bias + m0 : NULL;
      if (rows == kn->mr) {
        indirect_avx512(ap, job->x + j0, job->off, K, c, job->ldc, rb);
        continue;
      }
      for (; rows - i >= 4; i += rows - i >= 8 ? 8 : 4)
        (rows - i >= 8 ? indirect8_avx512 : indirect4_avx512)(ap + i * K, job->x + j0, job->off, K, c + i * job->ldc,
                                                              job->ldc, rb ? rb + i : NULL);
      for (; i < rows; i++) indirect1_avx512(job->A + (m0 + i) * job->lda, job->x + j0, job->off, K,
                                             c + i * job->ldc, job->ldc, rb ? rb + i : NULL);
      continue;
    }
    /* the last columns: their panels, packed before, by the packed tiles (one panel where they fit in one) */
    const float *bp0 = job->tail, *bp1 = bp0 + K * NR;
    if (width <= NR) {
      panel_tile(kn, job->A + m0 * job->lda, m0, rows, bp0, out[0]);
    } else {
      i = wide_rows(kn->packed_wide, ap, K, 0, rows, bp0, bp1, K, out[0], out[1], NR, NULL, NULL);
    }
    for (; width > NR && i < rows; i++)
      for (size_t p = 0; p < 2; p++) kn->row(job->A + (m0 + i) * job->lda, job->lda, p ? bp1 : bp0, K, out[p] + i * NR);
    store_tile(out, 0, rows, width, c, job->ldc, NULL, job->row_bias ? job->row_bias + m0 : NULL);
  }
}

int seamless_sgemm_indirect_supported(size_t M) {
  GemmJob kn = {0};
  choose_kernel(&kn);
  return kn.packed_wide[0] != NULL && kn.mr == 12 && M >= kn.mr;
}

size_t seamless_sgemm_indirect_tail_floats(size_t K) { return 2 * K * NR; }

void seamless_sgemm_indirect(size_t M, size_t N, size_t K, const float* A, const float* packed_a, size_t lda,
                             const float* x, const int64_t* off, float* tail, const float* row_bias, float* C,
                             size_t ldc, void* par_fn, void* par_ctx) {
  IndirectJob job = {.M = M, .N = N, .K = K, .lda = lda, .ldc = ldc, .A = A, .packed_a = packed_a, .x = x,
                     .row_bias = row_bias, .off = off, .C = C, .tail = tail};
  choose_kernel(&job.kernels);
  job.kernels.K = K;  /* for panel_tile */
  job.kernels.lda = lda;
  job.kernels.packed_a = packed_a;
  if (!M || !N) return;
  job.m_blocks = (M + job.kernels.mr - 1) / job.kernels.mr;
  job.ctiles = (N + 2 * NR - 1) / (2 * NR);
  job.rows_outer = M > N;
  job.tasks = seamless_task_count(M * N * (K ? K : 1), 1 << 18);
  if (job.tasks > job.m_blocks * job.ctiles) job.tasks = job.m_blocks * job.ctiles;
  const size_t j0 = (job.ctiles - 1) * 2 * NR, width = N - j0;
  if (width < 2 * NR)
    for (size_t k = 0; k < K; k++)
      for (size_t j = 0; j < 2 * NR; j++)
        tail[(j / NR) * K * NR + k * NR + j % NR] = j < width ? x[off[k] + j0 + j] : 0.0f;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, indirect_task, &job);
}
