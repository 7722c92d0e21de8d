/* The native CPU kernels' entry points, declared once: the unit's sources include it, cffi reads it as cdef
 * (build_plugin.py drops the guard). */
#pragma once
void seamless_erf_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx);
void seamless_erf_f64(const double* x, double* y, size_t n);
void seamless_gelu_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx);
void seamless_softmax_f32(const float* x, float* y, size_t rows, size_t cols, void* par_fn, void* par_ctx);
/* elementwise.c: one row's softmax (y may be x); masked_zero: a row of -inf (no NaN) gives zeros, not NaN; sink: an
 * attention sink's logit (in the max and the sum, no output) or NULL */
void seamless_softmax_row_f32(const float* x, float* y, size_t cols, int masked_zero, const float* sink);
void seamless_layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* mean,
                            float* inv_std, size_t rows, size_t cols, float eps, void* par_fn, void* par_ctx);
size_t seamless_sgemm_packed_size(size_t K, size_t N);
void seamless_sgemm_pack_b(const float* B, size_t K, size_t N, size_t ldb, int trans_b, float* packed);
void seamless_sgemm_pack_a(size_t M, size_t K, const float* A, size_t lda, float* packed_a);
void seamless_sgemm(size_t M, size_t N, size_t K, const float* A, const float* packed_a, size_t lda,
                    const float* packed, const uint16_t* split, const float* bias, const float* row_bias, float* C,
                    size_t ldc, void* par_fn, void* par_ctx);
/* matmul.c: a constant packed B split for the AMX tiles (float32 accuracy from bf16 pieces): its size in bf16 values
 * (0: no AMX here, or K too small to pay), and the split; returns 0, or 1 where B is not finite (no split) */
size_t seamless_sgemm_split_size(size_t K, size_t N);
int seamless_sgemm_split_b(const float* packed, size_t K, size_t N, uint16_t* split);
/* matmul.c, tests: force the GEMM tiles' instruction set (0 plain C, 1 AVX2, 2 AVX-512, 3 AVX-512 and AMX; -1
 * automatic) */
void seamless_sgemm_set_isa(int level);
/* C = A . B with B[k, j] = x[off[k] + j] read in place (a convolution without im2col), where supported (M rows) */
int seamless_sgemm_indirect_supported(size_t M);
size_t seamless_sgemm_indirect_tail_floats(size_t K);
void seamless_sgemm_indirect(size_t M, size_t N, size_t K, const float* A, const float* packed_a, size_t lda,
                             const float* x, const int64_t* off, float* tail, const float* row_bias, float* C,
                             size_t ldc, void* par_fn, void* par_ctx);
int seamless_sgemm_batched(size_t batch, size_t M, size_t N, size_t K, const float* A, size_t lda, size_t stride_a,
                           const float* B, size_t ldb, size_t stride_b, int trans_b, float* C, size_t ldc,
                           size_t stride_c, void* par_fn, void* par_ctx);
/* quantization.c: MatMulNBits; returns 0, or 1 (unsupported configuration), 2 (out of memory). panels: b, scales and
 * zp_f32 (zero points, or NULL: the default) as seamless_matmul_nbits_pack_panels leaves them */
int seamless_matmul_nbits_f32(const float* a, size_t m, size_t k, const uint8_t* b, const float* scales,
                              const uint8_t* zp_u8, const float* zp_f32, const float* bias, float* y, size_t n,
                              size_t bits, size_t bs, int int8, int panels, void* par_fn, void* par_ctx);
/* Whether this CPU's int8 kernels read weights of this shape as 32-column panels (AVX2 at least; 4 or 8 bits, whole
 * 64-value chunks, n >= 32); the packing: every full 32 rows of b [n, ...], scales [n, nb] and zero points (float
 * [n, nb], or NULL) rearranged, the rest copied; pb, ps and pz their sizes (any n: a block of rows from a multiple
 * of 32 on is packed as in the whole). Returns 0, or 1 where panels do not apply. */
int seamless_matmul_nbits_panels(size_t n, size_t k, size_t bits, size_t bs);
int seamless_matmul_nbits_pack_panels(const uint8_t* b, const float* scales, const float* zp, size_t n, size_t k,
                                      size_t bits, size_t bs, uint8_t* pb, float* ps, float* pz);
/* Row r of packed b [n, row_bytes], its scales and float zero points (zp NULL: none) back in the row layout */
void seamless_matmul_nbits_panel_row(const uint8_t* b, const float* scales, const float* zp, size_t n, size_t r,
                                     size_t nb, size_t row_bytes, uint8_t* row, float* row_scales, float* row_zp);
void seamless_matmul_nbits_set_isa(int level);
/* attention.c: GroupQueryAttention (rotary, present cache, softmax attention; window_cache: sliding_window_cache=1, a
 * window-sized cache of capacity present_len); returns 0, 2 (out of memory) or 3 (lengths outside the buffers) */
int seamless_gqa_f32(const float* q, const float* k, const float* v, size_t q_row, size_t k_row, size_t v_row,
                     const float* past_k, const float* past_v, size_t past_len, float* present_k, float* present_v,
                     size_t present_len, float* out, const int32_t* seqlens, int first_prompt, size_t b, size_t s,
                     size_t nh, size_t nkv, size_t h, const float* cos_cache, const float* sin_cache, size_t half,
                     int interleaved, const int64_t* pos, float scale, float softcap, int64_t window, int causal,
                     int window_cache, const float* sink, void* par_fn, void* par_ctx);
/* attention.c: MRotaryEmbedding of x [batch, seq, heads, head] (element strides given; y alike) with positions pos
 * [3, batch * seq] into the [max_pos, half] caches; owner[i]: the stream of rotary column i. Returns 0, or 1 + the
 * first position outside [0, max_pos) (nothing written). half <= 1024. */
int64_t seamless_mrotary_f32(const float* x, const int64_t* pos, float* y, size_t batch, size_t seq, size_t heads,
                             size_t head, size_t half, int64_t batch_stride, int64_t seq_stride, int64_t head_stride,
                             const float* cos_cache, const float* sin_cache, int64_t max_pos, const int8_t* owner,
                             float scale, int interleaved, void* par_fn, void* par_ctx);
/* attention.c: ONNX RotaryEmbedding (opset 23) over x's heads at element strides; 0, or 1 + the first position
 * outside [0, max_pos) */
int64_t seamless_rotary_f32(const float* x, const int64_t* pos, const float* cos_cache, const float* sin_cache,
                            float* y, size_t batch, size_t seq, size_t heads, size_t head, size_t half,
                            int64_t batch_stride, int64_t seq_stride, int64_t head_stride, int64_t max_pos,
                            int interleaved, void* par_fn, void* par_ctx);
/* sdpa.c: ONNX Attention (opset 23) in float32; 0, or 2 when out of memory (sdpa.c says the layouts) */
int seamless_onnx_attention_f32(const float* q, const float* k, const float* v, const float* past_k,
                                const float* past_v, const void* mask, int mask_bool, float* out, float* present_k,
                                float* present_v, float* qk, const int64_t* dims, const int64_t* strides, int causal,
                                float scale, float softcap, void* par_fn, void* par_ctx);
/* attention.c: LinearAttention's recurrence (the layouts in attention.c); scratch batch * kv * dv floats */
void seamless_linear_attention_f32(const float* q, const float* k, const float* v, const float* past,
                                   const float* decay, const float* beta, float* y, float* state, float* scratch,
                                   size_t batch, size_t tokens, size_t qh, size_t kv, size_t kh, size_t dk, size_t dv,
                                   int gated, int delta, int decay_per_key, int beta_per_head, float scale,
                                   void* par_fn, void* par_ctx);
/* normalization.c: per row of cols, y = x / sqrt(mean(x^2) + eps) * scale * act(gate), act silu (z sigmoid(z)) or
 * sigmoid */
void seamless_gated_rmsnorm_f32(const float* x, const float* scale, const float* gate, float* y, size_t rows,
                                size_t cols, float eps, int silu, void* par_fn, void* par_ctx);
/* normalization.c: y = x * scale[ch] + shift[ch] over x [n, c, spatial] (two roundings, as a Mul then an Add), then
 * Relu where relu (plan/fusion.py ChannelAffine: an inference BatchNormalization with the per-channel Mul, Add and
 * Relu after it folded in); a task per range of (image, channel) rows */
void seamless_channel_affine_f32(const float* x, const float* scale, const float* shift, float* y, size_t n, size_t c,
                                 size_t spatial, int relu, void* par_fn, void* par_ctx);
/* normalization.c: LRN over x [n, c, spatial] (program.h SeamlessLrnArgs), a task per range of (image, channel) rows */
void seamless_lrn_f32(const float* x, float* y, size_t n, size_t c, size_t spatial, size_t size, float alpha_over_size,
                      float bias, float beta, void* par_fn, void* par_ctx);
/* normalization.c: LinearAttentionGate per row of heads: decay = decay_scale * softplus(a + dt_bias), beta =
 * sigmoid(b) (b and beta NULL: none) */
void seamless_linear_attention_gate_f32(const float* a, const float* dt_bias, const float* decay_scale,
                                        const float* b, float* decay, float* beta, size_t rows, size_t heads);
/* normalization.c: LpNormalization over rows of cols: x / (sum |x| or sqrt(max(sum x^2, eps))), a zero row stays
 * zero (eps: 0 for LpNormalization, 1e-12 for GatedDeltaNet's query/key norms) */
void seamless_lp_norm_f32(const float* x, float* y, size_t rows, size_t cols, int p, float eps, void* par_fn,
                          void* par_ctx);
/* normalization.c: (x + skip + bias) RMS-normalized times gamma; skip/bias/sum_out/inv_out may be NULL */
void seamless_skip_rmsnorm_f32(const float* x, const float* skip, size_t skip_rows, const float* bias,
                               const float* gamma, float* y, float* sum_out, float* inv_out, size_t rows, size_t cols,
                               float eps, void* par_fn, void* par_ctx);
/* quantization.c: QMoE experts in CUTLASS's SM80 mixed-GEMM layout (ORT CUDA's weights_prepacked) [experts, k, n /
 * pack] to the raw [experts, n, k / pack], raw rows [row0, row1) of experts * n; 0, or 1 (a shape or width it does not
 * take), 2 (out of memory) */
int seamless_raw_experts(const uint8_t* prepacked, uint8_t* raw, size_t n, size_t k, int bits, size_t row0,
                         size_t row1);
/* quantization.c: GatherBlockQuantized's rows of a [rows, cols] table (panels: data and scales as
 * seamless_matmul_nbits_pack_panels leaves them, a tied LM head's); 0, or 2 (out of memory) */
int seamless_gather_block_quantized_f32(const uint8_t* data, size_t rows, size_t cols, const int64_t* idx, size_t n,
                                        const float* scales, const uint8_t* zp, size_t bits, size_t bs, int panels,
                                        float* out);
/* elementwise.c: QuickGelu x * sigmoid(alpha x) */
/* elementwise.c: y (cols rows of ldy elements) = x (rows x cols) transposed, elements of `size` bytes; 0, or 1 (a
 * size it does not take) */
int seamless_transpose_2d(const void* x, void* y, size_t rows, size_t cols, size_t ldy, size_t size, void* par_fn,
                          void* par_ctx);
void seamless_quick_gelu_f32(const float* x, float* y, size_t n, float alpha, void* par_fn, void* par_ctx);
/* detection.c: MaxRoiPool of x [batches, channels, height, width] over rois [num_rois, 5] into y [num_rois,
 * channels, pooled_h, pooled_w]; 0, or 1 + the first ROI whose batch index is out of range */
int64_t seamless_max_roi_pool_f32(const float* x, int64_t batches, int64_t channels, int64_t height, int64_t width,
                                  const float* rois, int64_t num_rois, int64_t pooled_h, int64_t pooled_w,
                                  float scale, float* y);
/* detection.c: NonMaxSuppression; returns how many boxes were kept (their indices in selected, counts per
 * batch and class), or -1 (out of memory); selected holds batches * classes * min(max_per_class, n) */
int64_t seamless_nms_f32(const float* boxes, const float* scores, size_t batches, size_t classes, size_t n,
                         size_t max_per_class, float iou_threshold, int has_score_threshold, float score_threshold,
                         int center_point_box, int32_t* selected, int64_t* counts);
void seamless_nms_rows(const int32_t* selected, const int64_t* counts, size_t batches, size_t classes,
                       int64_t* rows);
/* ml.c: TfIdfVectorizer over integer ids (the pool's n-grams as a trie in a hash table) */
void seamless_tfidf_table(const int32_t* parent, const int64_t* item, size_t nodes, int64_t* slots, size_t mask);
void seamless_tfidf_f32(const int64_t* x, size_t rows, size_t cols, const int64_t* slots, size_t mask,
                        const int64_t* column, const uint8_t* has_children,
                        size_t min_gram, size_t max_gram, size_t max_skip, int mode, const float* weight,
                        float* out, size_t out_cols);
/* rnn.c: one direction of an RNN / GRU / LSTM layer over its steps (R^T packed by seamless_sgemm_pack_b) */
void seamless_rnn_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx, const int64_t* order,
                      const int64_t* lens, const float* packed_r, int has_clip, float clip, int32_t act, float* h,
                      float* y, size_t y_step, float* gates);
void seamless_gru_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx, const int64_t* order,
                      const int64_t* lens, const float* packed_zr, const float* packed_h, const float* rb_h,
                      int linear_before_reset, int has_clip, float clip, const int32_t* acts, float* h, float* y,
                      size_t y_step, float* gates, float* rh);
void seamless_lstm_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx, const int64_t* order,
                       const int64_t* lens, const float* packed_r, const float* p, int has_clip, float clip,
                       const int32_t* acts, float* h, float* c, float* y, size_t y_step, float* gates, float* tmp);
/* spatial.c: Conv over float32 N x C x spatial (1-3 dims; fewer are given as leading dims of 1, pad 0): per image
 * and group, each weight tap's row of the inputs it meets (im2col, zeros outside the input; x itself for a 1x1
 * convolution of stride 1 without pads), packed as the GEMM's B, multiplied by the weights (M x k, k = C/group x the
 * kernel's taps) plus the bias, into y directly. scratch: seamless_conv_scratch_floats (l: output positions). Extents
 * are the caller's, checked before. */
typedef struct {
  int64_t n, c, m, group, k, l;
  int64_t in_shape[3], out_shape[3], kernel[3], stride[3], dilation[3], pad[3];
  const float* weights;
  const float* packed_weights;  /* each group's rows by seamless_sgemm_pack_a, at the weights' offsets (NULL where
                                   packed_rows is given) */
  const float* bias;
  int64_t direct;               /* seamless_conv_direct's answer, or 0: im2col */
  int64_t relu;                 /* 1: Relu on the output (plan/fusion.py FusedConv), each block as it is written */
  const float* packed_rows;     /* where seamless_conv_rows says so: each group's weights transposed (k x m/group), by
                                   seamless_sgemm_pack_b, seamless_sgemm_packed_size(k, m/group) floats a group; else
                                   NULL: the output positions as the GEMM's columns */
  int64_t channels;             /* seamless_conv_channels's answer (packed_rows then given), or 0 */
} SeamlessConvArgs;
/* spatial.c: whether seamless_conv_f32 takes the output positions as the GEMM's rows (im2col transposed, times the
 * transposed weights, the result transposed into y) instead of its columns: few positions for the GEMM's 16-wide
 * panels (7 x 7 and 14 x 14 planes). The same outputs either way. */
int64_t seamless_conv_rows(const SeamlessConvArgs* a);
/* spatial.c: whether seamless_conv_f32 can take the output channels as its vectors' lanes (AVX-512, 2 spatial dims,
 * stride 1 or 2 along the row, 16 output channels a group and 16 taps or more): tiles of 32 channels x up to 14
 * positions of an output row, the taps read in place from the (padded) planes, weights as packed_rows. The same
 * outputs as the other paths. */
int64_t seamless_conv_channels(const SeamlessConvArgs* a);
/* spatial.c: whether seamless_conv_f32 can read a's taps in place (seamless_sgemm_indirect) instead of im2col: 1-2
 * spatial dims, stride 1 (1x1 without pads too: x read in place rather than packed), 12 output channels a group or
 * more, AVX-512, and a padded row at most 1/4 longer than the output's (the columns past it are computed
 * and dropped: 3x3 on 14 x 14 planes 4 % faster than im2col, 5x5 on 28 x 28 8 %; 5x5 on 14 x 14, 2/7 longer, 4 %
 * slower). The same outputs either way. */
int64_t seamless_conv_direct(const SeamlessConvArgs* a);
/* z: NULL, or a value of y's shape added to the output before the Relu (FusedConv's residual) */
void seamless_conv_f32(const SeamlessConvArgs* a, const float* x, const float* z, float* y, float* scratch,
                       void* par_fn, void* par_ctx);
/* spatial.c: the floats seamless_conv_f32's scratch holds for a (the GEMM's packed B and im2col's row; none where it
 * runs depthwise) */
int64_t seamless_conv_scratch_floats(const SeamlessConvArgs* a);
/* spatial.c: MaxPool / AveragePool over float32 planes (N x C of them) of 1-3 spatial dims (fewer given as leading
 * dims of 1, pad 0), each output the window's taps inside the input: MaxPool by one of stock's paths (mode, as
 * kernels/cpu/spatial.py stock_max_pool_path picks it: they treat NaN and -inf each their own way; GLOBAL: one
 * output a plane, GlobalMaxPool's and a MaxPool window as large as the input), AveragePool
 * divided by the taps inside the input or (with pads) inside the input and its explicit pads. Extents are the
 * caller's (the window's geometry, checked before). */
enum SeamlessPoolMode { SEAMLESS_POOL_MAX_SCALAR = 0, SEAMLESS_POOL_MAX_LOOP = 1, SEAMLESS_POOL_MAX_VECTOR_2D = 2,
                        SEAMLESS_POOL_MAX_VECTOR_3D = 3, SEAMLESS_POOL_AVERAGE = 4,
                        SEAMLESS_POOL_AVERAGE_WITH_PADS = 5, SEAMLESS_POOL_MAX_GLOBAL = 6 };
typedef struct {
  int64_t planes;
  int32_t mode;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
} SeamlessPoolArgs;
void seamless_pool_f32(const SeamlessPoolArgs* a, const float* x, float* y, void* par_fn, void* par_ctx);
/* Tests: the pools' and depthwise convolutions' AVX-512 loops off (0) or automatic (-1, where the CPU has it) */
void seamless_spatial_set_isa(int level);
/* numpy_memory.c: a numpy data-memory handler (numpy's PyDataMem_Handler, version 1; its layout is checked against
 * numpy's headers by tests/abi/test_numpy_memory.py), for the capsule runtime/numpy_memory.py hands numpy */
typedef struct {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr, size_t size);
} SeamlessNumpyAllocator;
typedef struct {
  char name[127];
  uint8_t version;
  SeamlessNumpyAllocator allocator;
} SeamlessNumpyHandler;
SeamlessNumpyHandler* seamless_numpy_handler(void);
