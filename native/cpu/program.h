/* A partition's native program for one binding of input shapes: the one contract between
 * exec/program.py (which records it), program.c (which runs it) and the EP module's runner
 * (ep_plugin/cpu_runner.c, which answers ORT's Computes with it). cffi cdef: no preprocessor but
 * integer #defines; Python fills these structs with ffi.new, never by hand. */

#define SEAMLESS_PROGRAM_RANK 8      /* dims an argument block holds (after merging axes) */
#define SEAMLESS_STEP_OPERANDS 10    /* buffer slots a step names */
#define SEAMLESS_PROGRAM_ERROR 512   /* bytes of a failed run's message */
#define SEAMLESS_MOE_CHUNK 16        /* MoE runs up to this many tokens of an expert row by row, more as GEMMs */
#define SEAMLESS_MOE_GEMM_ROWS 256   /* rows of QMoE weights its GEMMs dequantize at a time */
#define SEAMLESS_TOP_K_INSERT 32     /* TopK keeps up to this many by insertion; more: a sort in scratch */

/* A step's op code (SeamlessStep.op); each names the argument block it reads. */
enum SeamlessOp {
  SEAMLESS_OP_COPY = 1,        /* SeamlessCopyArgs: slot 0 -> slot 1 */
  SEAMLESS_OP_BINARY = 2,      /* SeamlessBinaryArgs: a, b -> y */
  SEAMLESS_OP_UNARY = 3,       /* SeamlessUnaryArgs: x -> y */
  SEAMLESS_OP_CAST = 4,        /* SeamlessCastArgs: x -> y */
  SEAMLESS_OP_WHERE = 5,       /* SeamlessBinaryArgs (sc: the condition's strides): cond, a, b -> y */
  SEAMLESS_OP_GATHER = 6,      /* SeamlessGatherArgs: data, indices -> y */
  SEAMLESS_OP_COPY_STRIDED = 7, /* SeamlessStridedArgs: x -> y, both strided (Transpose, Expand, Slice, Concat, Split) */
  SEAMLESS_OP_SOFTMAX = 8,     /* SeamlessRowsArgs: x -> y over rows of cols */
  SEAMLESS_OP_LAYERNORM = 9,   /* SeamlessRowsArgs: x, scale, bias (or -1) -> y */
  SEAMLESS_OP_GEMM = 10,       /* SeamlessGemmArgs: a -> y, B packed (and the bias) constant */
  SEAMLESS_OP_GEMM_BATCHED = 11, /* SeamlessGemmArgs: a, b -> y */
  SEAMLESS_OP_REDUCE = 12,     /* SeamlessReduceArgs: x -> y */
  SEAMLESS_OP_MATMUL_NBITS = 13, /* SeamlessNBitsArgs: a -> y, the quantized weights constant */
  SEAMLESS_OP_RMS_NORM = 14,   /* SeamlessRowsArgs: x, skip (or -1), bias (or -1), gamma -> y, sum (or -1), inv_rms */
  SEAMLESS_OP_GQA = 15,        /* SeamlessGqaArgs: q, k, v (-1: packed in q), past_k, past_v, seqlens_k -> out,
                                  present_k, present_v */
  SEAMLESS_OP_GATHER_BLOCK_QUANTIZED = 16, /* SeamlessGatherQuantizedArgs: int64 indices -> y, the table constant */
  SEAMLESS_OP_PYTHON = 17,     /* SeamlessPythonArgs: the node's inputs (-1: absent), then its outputs: a node without
                                  a native step, run by its Python kernel (native/cpu/python_step.h) */
  SEAMLESS_OP_CONV = 18,       /* SeamlessConvArgs (kernels.h): x -> y, scratch, then z (or -1: none; y's shape,
                                  added before the Relu); the packed weights and bias constant */
  SEAMLESS_OP_LSTM = 19,       /* SeamlessLstmArgs: xw (the input projections), initial h, initial c (-1: zeros) ->
                                  y (or -1), h, c, gates, tmp (scratch) */
  SEAMLESS_OP_PAD = 20,        /* SeamlessPadArgs: x -> y */
  SEAMLESS_OP_CAUSAL_CONV = 21, /* SeamlessCausalConvArgs: x, weight, bias (or -1), past_state (or -1: zeros) -> y,
                                  present_state */
  SEAMLESS_OP_MOE = 22,        /* SeamlessMoeArgs: x, router, fc1, fc1 bias (or -1), fc2, fc2 bias (or -1) -> y,
                                  scratch (experts + 2 tokens k + tokens + SEAMLESS_MOE_CHUNK ((fusion + 1) inter
                                  + max(hidden, inter) + 1) + tokens (2 hidden + (fusion + 1) inter + 1) floats, and
                                  for QMoE SEAMLESS_MOE_GEMM_ROWS max(hidden, inter) more) */
  SEAMLESS_OP_TOP_K = 23,      /* SeamlessTopKArgs: x -> values, indices, scratch (-1: k <= SEAMLESS_TOP_K_INSERT) */
  SEAMLESS_OP_GATHER_ELEMENTS = 24, /* SeamlessElementsArgs: data, indices -> y */
  SEAMLESS_OP_SCATTER_ELEMENTS = 25, /* SeamlessElementsArgs: data, indices, updates -> y */
  SEAMLESS_OP_LINEAR_ATTENTION = 26, /* SeamlessLinearAttentionArgs: q, k, v, past (or -1: zeros), decay (or -1), beta
                                        (or -1) -> y, present, scratch (batch kv_heads d_v floats) */
  SEAMLESS_OP_MROTARY = 27,    /* SeamlessMRotaryArgs: x, position_ids -> y */
  SEAMLESS_OP_GATED_RMS_NORM = 28, /* SeamlessRowNormArgs (mode 1: silu, 0: sigmoid): x, scale, gate -> y */
  SEAMLESS_OP_LP_NORM = 29,    /* SeamlessRowNormArgs (mode: p, 1 or 2; eps: p 2's floor): x -> y over rows of cols */
  SEAMLESS_OP_LINEAR_ATTENTION_GATE = 30, /* SeamlessRowNormArgs (cols: heads): a, dt_bias, decay_scale, b (or -1) ->
                                             decay, beta (or -1) */
  SEAMLESS_OP_POOL = 31,       /* SeamlessPoolArgs (kernels.h): x -> y */
  SEAMLESS_OP_LRN = 32,        /* SeamlessLrnArgs: x -> y */
  SEAMLESS_OP_ONNX_ATTENTION = 33, /* SeamlessOnnxAttentionArgs: q, k, v, past_k (or -1), past_v (or -1), mask (or -1)
                                      -> out, present_k, present_v, qk (or -1) */
  SEAMLESS_OP_GATHER_ND = 34,  /* SeamlessGatherNdArgs: data, int64 indices -> y */
  SEAMLESS_OP_ROTARY = 35,     /* SeamlessRotaryArgs: x, cos, sin, position_ids (or -1) -> y */
  SEAMLESS_OP_CHANNEL_AFFINE = 36 /* SeamlessChannelAffineArgs: x, scale, shift (c floats each) -> y */
};

/* Element types: ONNX's TensorProto codes. */
enum SeamlessType { SEAMLESS_F32 = 1, SEAMLESS_U8 = 2, SEAMLESS_I8 = 3, SEAMLESS_I32 = 6, SEAMLESS_I64 = 7,
                    SEAMLESS_BOOL = 9, SEAMLESS_F64 = 11 };

enum SeamlessBinaryOp {
  SEAMLESS_ADD = 0, SEAMLESS_SUB = 1, SEAMLESS_MUL = 2, SEAMLESS_DIV = 3, SEAMLESS_MAX = 4, SEAMLESS_MIN = 5,
  SEAMLESS_EQUAL = 6, SEAMLESS_LESS = 7, SEAMLESS_GREATER = 8, SEAMLESS_LESS_EQUAL = 9, SEAMLESS_GREATER_EQUAL = 10,
  SEAMLESS_AND = 11, SEAMLESS_OR = 12, SEAMLESS_POW = 13
};

enum SeamlessUnaryOp {
  SEAMLESS_ERF = 0, SEAMLESS_GELU = 1, SEAMLESS_SIGMOID = 2, SEAMLESS_TANH = 3, SEAMLESS_EXP = 4, SEAMLESS_LOG = 5,
  SEAMLESS_SQRT = 6, SEAMLESS_NEG = 7, SEAMLESS_ABS = 8, SEAMLESS_RELU = 9, SEAMLESS_RECIPROCAL = 10,
  SEAMLESS_SILU = 11, SEAMLESS_QUICK_GELU = 12, SEAMLESS_NOT = 13, SEAMLESS_GELU_TANH = 14, SEAMLESS_CLIP = 15,
  SEAMLESS_COS = 16, SEAMLESS_SIN = 17
};

typedef struct { int64_t nbytes; } SeamlessCopyArgs;

/* y[dims] (contiguous) = a op b, each operand read at its own element strides (0 where it is broadcast) */
typedef struct {
  int32_t op, type, rank;
  int64_t dims[SEAMLESS_PROGRAM_RANK], sa[SEAMLESS_PROGRAM_RANK], sb[SEAMLESS_PROGRAM_RANK],
      sc[SEAMLESS_PROGRAM_RANK];
} SeamlessBinaryArgs;

/* alpha: QuickGelu's; Clip's bounds: max(x, alpha), then min(., beta), NaN kept as numpy keeps it */
typedef struct { int32_t op, type; int64_t n; float alpha, beta; } SeamlessUnaryArgs;

typedef struct { int32_t from, to; int64_t n; } SeamlessCastArgs;

/* GatherND: per batch (the batch_dims' product) and index tuple of k, the data slice (slice_bytes) at the tuple's
 * offset (dims and byte strides of the k indexed axes) within its batch (batch_bytes); every index checked in
 * [-dim, dim) first, axis by axis as stock reports the first bad one */
typedef struct {
  int64_t batches, tuples, k, slice_bytes, batch_bytes;
  int64_t dims[SEAMLESS_PROGRAM_RANK], strides[SEAMLESS_PROGRAM_RANK];
} SeamlessGatherNdArgs;

/* y[outer, count, inner] = data[outer, indices[count], inner]; every index checked in [-size, size), or in [0, size)
 * with from_zero (table lookups: EmbedLayerNormalization's ids) */
typedef struct { int64_t outer, size, inner_bytes, count; int32_t index_type, from_zero; } SeamlessGatherArgs;

/* float32 TopK of x viewed as [outer, n, inner] along n: values and int64 indices [outer, k, inner] in stock's order
 * (larger first when largest, else smaller; NaN above every number; equal values by lower index); the scratch holds
 * n (value, index) pairs of 16 bytes */
typedef struct { int64_t outer, n, inner, k; int32_t largest; } SeamlessTopKArgs;

/* GatherElements / ScatterElements: for each element i of indices (dims, C-ordered, the output's too for gather),
 * the data element at i with its axis coordinate replaced by indices[i] (every index checked in [-size, size)
 * first); data at element strides. Scatter copies data (data_elements) to y, then writes each update there, one after
 * another: reduction -1 replaces, else SEAMLESS_ADD, MUL, MAX or MIN (float types) */
typedef struct {
  int32_t rank, axis, type, index_type, reduction;
  int64_t size, data_elements;
  int64_t dims[SEAMLESS_PROGRAM_RANK], strides[SEAMLESS_PROGRAM_RANK];
} SeamlessElementsArgs;

/* y[dst_offset + i . dst] = x[src_offset + i . src] for every index i < dims (offsets and strides in elements) */
typedef struct {
  int32_t rank, elem_bytes;
  int64_t src_offset, dst_offset;
  int64_t dims[SEAMLESS_PROGRAM_RANK], src[SEAMLESS_PROGRAM_RANK], dst[SEAMLESS_PROGRAM_RANK];
} SeamlessStridedArgs;

typedef struct { int64_t rows, cols, skip_rows; float eps; } SeamlessRowsArgs;

/* y[batch][m, n] = a[batch][m, k] . B[batch][k, n] (+ bias[n]): GEMM reads the constant packed B (and its AMX
 * split, or NULL); the batched one B at ldb / stride_b (0: one B for every item), A at stride_a (0 likewise) */
typedef struct {
  int64_t batch, m, n, k, stride_a, ldb, stride_b;
  const float* packed;
  const uint16_t* split;
  const float* bias;
} SeamlessGemmArgs;

/* One forward LSTM layer without sequence lengths (rnn.c seamless_lstm_f32): R^T packed, peepholes or NULL;
 * acts: the f, g, h activations (kernels/cpu/native.py RNN_ACTIVATIONS) */
typedef struct {
  int64_t steps, batch, n;
  int32_t has_clip, acts[3];
  float clip;
  const float* packed_r;
  const float* peepholes;
} SeamlessLstmArgs;

/* Pad: y[i] = x[source(i)] per axis by mode (0 constant: value outside, 1 reflect, 2 edge, 3 wrap); begin[d] may be
 * negative (a crop). Every source index is within x by the recording's checks. */
typedef struct {
  int32_t rank, mode, elem_bytes;
  int64_t x_dims[SEAMLESS_PROGRAM_RANK], y_dims[SEAMLESS_PROGRAM_RANK], begin[SEAMLESS_PROGRAM_RANK];
  uint8_t value[8];  /* the constant, as the element's bytes */
} SeamlessPadArgs;

/* CausalConvWithState, float32, channels first: y[b, c, t] = bias[c] + sum_j weight[c, j] * v[b, c, t + j * dilation]
 * with v = past_state ++ x along the sequence; present_state = v's last (k - 1) * dilation positions;
 * activation 1: silu */
typedef struct { int64_t batch, channels, length, k, dilation; int32_t activation; } SeamlessCausalConvArgs;

/* com.microsoft MoE and QMoE, float32: per token its top k experts and their weights, and y = sum over them, in expert
 * order, of weight * (fc2[e] . act(fc1[e] . x + b1) + b2). MoE's routing (qmoe 0): the router's softmax, the k largest
 * (ties: the lower index), normalized to sum 1 when normalize. QMoE's (qmoe 1): the k largest logits (ties: the higher
 * index) weighted by their softmax, a route run only when its weight is above 1e-8; its fc1 and fc2 slots hold
 * `bits`-bit integers, q[e, row, ceil(cols / (8 / bits))] (the lowest bits first), w = scale (q - zero) with scale and
 * zero [experts, rows, blocks] per block of `block` cols. activation 0 relu, 1 silu, 2 swiglu (gate and linear
 * interleaved; limit when has_limit), 3 identity, 4 gelu (tanh) */
typedef struct {
  int64_t tokens, hidden, experts, inter, k;
  int32_t activation, normalize, has_limit, qmoe, bits;
  float alpha, beta, limit;
  int64_t block1, block2;               /* QMoE: cols a scale covers in fc1's and fc2's rows */
  const float *scale1, *zero1, *scale2, *zero2;
  const uint8_t *packed_zero1, *packed_zero2;  /* QMoE's zero points as given (NULL: none), for MatMulNBits' kernel */
  int32_t panels1, panels2;  /* QMoE: each expert's fc1 (fc2) weights, scale and zero (NULL: the default) tables
                                packed as seamless_matmul_nbits_pack_panels leaves them (packed_zero NULL) */
} SeamlessMoeArgs;

/* ONNX RotaryEmbedding, float32 (seamless_rotary_f32's operands); max_pos: the caches' rows */
typedef struct {
  int64_t batch, seq, heads, head, half, batch_stride, seq_stride, head_stride, max_pos;
  int32_t interleaved;
} SeamlessRotaryArgs;

/* ONNX Attention, float32 (seamless_onnx_attention_f32's dims and strides) */
typedef struct {
  int64_t dims[8], strides[16];
  int32_t mask_bool, causal;
  float scale, softcap;
} SeamlessOnnxAttentionArgs;

/* LRN over x [n, c, spatial]: y = x / (bias + alpha_over_size * the sum of x^2 over channels c - (size - 1) / 2 to
 * c + size / 2 inside [0, c)) ^ beta */
typedef struct { int64_t n, c, spatial, size; float alpha_over_size, bias, beta; } SeamlessLrnArgs;
/* y = x * scale[ch] + shift[ch] over [n, c, spatial], then Relu where relu (kernels.h seamless_channel_affine_f32) */
typedef struct { int64_t n, c, spatial, relu; } SeamlessChannelAffineArgs;

/* A normalization over rows of cols (GatedRMSNorm, LpNormalization, LinearAttentionGate: SeamlessOp says its mode) */
typedef struct { int64_t rows, cols; float eps; int32_t mode; } SeamlessRowNormArgs;

/* com.microsoft LinearAttention, float32 (seamless_linear_attention_f32's layouts): K may have fewer heads than V;
 * decay per KV head or per key dim, beta per KV head or one per token */
typedef struct {
  int64_t batch, tokens, q_heads, kv_heads, k_heads, d_k, d_v;
  int32_t gated, delta, decay_per_key, beta_per_head;
  float scale;
} SeamlessLinearAttentionArgs;

/* com.microsoft MRotaryEmbedding, float32 (seamless_mrotary_f32's operands): constant caches; owner[i] the position
 * stream (0 T, 1 H, 2 W) of rotary column i; positions checked against max_pos first */
typedef struct {
  int64_t batch, seq, heads, head, half, batch_stride, seq_stride, head_stride, max_pos;
  int32_t interleaved;
  float scale;
  const float* cos;
  const float* sin;
  const int8_t* owner;
} SeamlessMRotaryArgs;

/* GroupQueryAttention (seamless_gqa_f32's operands); seqlens_k's values checked against total first */
typedef struct {
  int64_t b, s, num_heads, kv_num_heads, head_size, q_row, k_row, v_row, k_offset, v_offset, past_len, present_len,
      total, half, window;
  int32_t first_prompt, interleaved, causal, window_cache;  /* window_cache: sliding_window_cache=1 */
  float scale, softcap;
  const float* cos;
  const float* sin;
  const float* sink;
} SeamlessGqaArgs;

enum SeamlessReduceOp { SEAMLESS_REDUCE_SUM = 0, SEAMLESS_REDUCE_MEAN = 1, SEAMLESS_REDUCE_SUM_SQUARE = 2,
                        SEAMLESS_REDUCE_L1 = 3, SEAMLESS_REDUCE_L2 = 4, SEAMLESS_REDUCE_MAX = 5,
                        SEAMLESS_REDUCE_MIN = 6 };

/* y[kept] = op over the reduced axes of x (element strides of x for each; y contiguous): float32, or int64
 * (SUM only: summed in double and saturated, as stock does). MAX and MIN combine in stock's order (a NaN or the
 * sign of a zero depends on it): eigen_rows, each output's elements one contiguous row combined as Eigen's SSE2
 * maxCoeff does (kernels/cpu/reduction.py stock_path "rows"); else from the first element in order ("loop"). */
typedef struct {
  int32_t op, type, rank, reduced_rank, eigen_rows;
  int64_t dims[SEAMLESS_PROGRAM_RANK], strides[SEAMLESS_PROGRAM_RANK];
  int64_t reduced_dims[SEAMLESS_PROGRAM_RANK], reduced_strides[SEAMLESS_PROGRAM_RANK];
} SeamlessReduceArgs;

/* MatMulNBits: y[m, n] = a[m, k] . dequantized B (+ bias); seamless_matmul_nbits_f32's operands */
typedef struct {
  int64_t m, k, n, bits, block_size;
  int32_t int8, panels;
  const uint8_t* b;
  const float* scales;
  const uint8_t* zp_u8;
  const float* zp_f32;
  const float* bias;
} SeamlessNBitsArgs;

/* GatherBlockQuantized of rows of a constant [rows, cols] table quantized along its rows (an index out of range
 * gives a row of zeros, as the Python kernel does; panels: the table is a tied LM head's, packed as its panels) */
typedef struct {
  int64_t rows, cols, count, bits, block_size;
  int32_t panels;
  const uint8_t* data;
  const float* scales;
  const uint8_t* zero_points;
} SeamlessGatherQuantizedArgs;

typedef struct { void* handle; int32_t n_operands; } SeamlessPythonArgs;

typedef struct {
  int32_t op;
  int32_t slot[SEAMLESS_STEP_OPERANDS];  /* buffer slots; -1: an absent optional operand */
  const void* args;
  const char* label;                     /* the node it runs, for errors */
} SeamlessStep;

/* Slots: ORT's inputs first (n_in), then its outputs (n_out), then constants (fixed addresses) and
 * values in the run's arena (at offset). */
typedef struct {
  int32_t n_steps, n_slots, n_in, n_out;
  const SeamlessStep* steps;
  void* const* fixed;      /* per slot: a constant's address, else NULL */
  const int64_t* offset;   /* per slot: its byte offset in the arena, else -1 */
  int64_t arena_bytes;
} SeamlessProgram;

/* A family of programs: one recorded program whose argument fields, integer constants, arena values and output
 * dims are affine in one dim t of its inputs (a decoder's KV length), so that C instantiates it for a binding
 * never recorded (exec/program.py fits it to two recordings and checks it on two more). */
typedef struct { void* field; int32_t width; int64_t a, b; } SeamlessPatch;        /* *field = a + b t */
typedef struct { int32_t slot, first, last; int64_t a, b; } SeamlessArenaValue;    /* a + b t bytes, live over
                                                                                       steps [first, last] */
typedef struct {
  SeamlessProgram* program;       /* the template, patched for each t (its argument blocks and offsets) */
  int32_t key_words, t_word;      /* a binding's key (int64 words) fits when word w = base[w] + slope[w] (t - t0), */
  const int64_t* key_base;        /* with t its word t_word, t_min <= t <= t_max (t_max: where a comparison */
  const int64_t* key_slope;       /* folded over the dims would answer otherwise) */
  int64_t t0, t_min, t_max;
  int32_t n_patches, n_arena;
  const SeamlessPatch* patches;
  const SeamlessArenaValue* arena; /* in the order they are placed */
  const int32_t* out_ranks;
  const int64_t* out_a;           /* the outputs' dims, a + b t, at stride max_rank */
  const int64_t* out_b;
  int32_t max_rank;
} SeamlessFamily;

/* Runs the program: io holds ORT's inputs then outputs. 0, or the ORT status code of the failure with
 * its message (naming the step's node) in error. */
int seamless_program_run(const SeamlessProgram* p, void* const* io, char* arena, void* par_fn, void* par_ctx,
                         char* error, size_t error_len);

/* Whether BINARY steps implement (type, op): exec/program.py asks before it records one. */
int seamless_binary_supported(int32_t type, int32_t op);
