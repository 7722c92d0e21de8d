/* The CUDA kernels' argument structs and codes: the one contract between the kernels (the .cu files take these
 * structs by value, through common.cuh), their Python side (the kernels/cuda modules and runtime/cuda.py fill
 * them with cffi's ffi.new through runtime/cuda_args.py and read the codes from it) and the C glue
 * (ep_plugin/cuda_ort.c and cuda_replay.c write StageCopy tables). cffi cdef: plain C, no preprocessor but
 * integer #defines. Device addresses are uint64_t: Python and the host C write them as integers. */

#define SEAMLESS_MAX_DIMS 8  /* dims of the broadcast, copy, indexing, reduction, Pad and Resize structs */
/* A cached GPU block serves a request of at least 1 / BLOCK_REUSE of its size (ep_plugin/cuda_ort.c's cache, the
 * capture pool of runtime/cuda.py): a small value does not take a large block a later large one needs */
#define BLOCK_REUSE 2

/* Launch geometry the host side must match (cffi: literal values only) */
#define SMALL_ROWS 4          /* products of at most this many rows take the GEMVs (matmul.cu, quantization.cu) */
#define LINEAR_WARPS 8        /* matmul.cu linear: warps a block */
#define LINEAR_TC_CHUNKS 4    /* matmul.cu linear_tc: chunks of 32 k a warp takes at most */
#define LINEAR_ROW_PASSES 5   /* matmul.cu linear_row: passes over k at most (its activations' registers: 8 took 60) */
#define NBITS_COLUMNS 8       /* quantization.cu: warps, and output columns, a block */
#define NBITS_ROWS 8          /* quantization.cu matmul_nbits4_rows: rows of activations a block (a batch's decode step) */
#define NBITS_GEMV_ROWS 16    /* 4-bit products of at most this many rows take the GEMVs, past SMALL_ROWS by NBITS_ROWS */
#define TILE_CHUNK 608        /* quantization.cu nbits4_tiles: bytes of a chunk of one matrix in its layout */
#define TILE_WARPS 4          /* ... warps a block */
#define TILE_SLOT 4864        /* ... bytes of a ring slot: 8 chunks of one matrix, 4 of two */
#define NORM_MAX_K 2048       /* common.cuh norm_rows_to_shared: one 8-value group a thread of a 256-thread block */
#define ATTEND_TILE 64        /* attention.cu attend_tiles: query tokens a block (a warp per 16) */
#define DECODE_THREADS 256    /* attention.cu gqa_decode: threads a block */
#define STREAM_HEADS 4        /* attention.cu gqa_decode_stream: query heads a block (a group of more: blocks a split) */
#define STREAM_STAGES 4       /* ... chunks of rows in shared memory (three in flight while one is scored) */
#define STREAM_PASSES 1       /* ... rows a lane group a chunk: a chunk is STREAM_PASSES * DECODE_THREADS * 8 / H rows */
#define SELECT_THREADS 256    /* reduction.cu TopK / ArgMax / ArgMin: threads a block */
#define MOE_UP_ROWS 2         /* moe.cu up: rows of one expert a warp (their loads in flight together) */
#define MOE_TILE 16           /* moe.cu grouped: (token, slot) pairs of one expert a block (a prompt's experts) */
#define MOE_TILE_ROWS 128     /* ... expert rows a block of 256 threads (2 a thread, 4 threads a row pair) */
#define MOE_MMA_PAIRS 32      /* moe.cu grouped_mma: (token, slot) pairs of one expert a block (float16 prompts) */
#define MOE_MMA_ROWS 128      /* ... expert rows a block of 256 threads (8 warps of 16 rows) */
#define MOE_GROUP_THREADS 1024 /* moe.cu group: the one block's threads */
#define LINEAR_AHEAD_ROWS 3   /* attention.cu linear_attention::run_columns: a token's rows loaded into registers
                                 during the token before (k, exp(decay), one reader's q; more readers' rows after) */
#define LINEAR_CHUNK 64       /* attention.cu linear_attention::chunk_prepare, chunk_scan: a prompt's tokens a chunk */
#define CHUNK_THREADS 128     /* ... chunk_prepare: threads a block (W and U0 columns by forward substitution) */
#define CHUNK_COLUMNS 32      /* ... chunk_scan, chunk_output: state columns a block */
#define CHUNK_SCAN_THREADS 128 /* ... chunk_scan, chunk_output: threads a block, a 4 x 4 tile each */
#define GDN_THREADS 256       /* attention.cu gated_delta_net: threads (state rows) a block at most, its launch bound
                                 (its d_k 128 kernel takes 255 registers a thread) */

/* A bad value in the run's data, which only the GPU sees (common.cuh report_bad): `report` is the stream's
 * pinned host record {tag, value} (ep_plugin/cuda_exec.c), 0 for none; `tag` names the node and the cause
 * (kernels/checks.py GpuCheck). */
typedef struct { uint64_t report; int64_t tag; } GpuCheck;

/* One entry of a staging table (shape.cu seamless_stage, a block row each): `rows` rows of `width` bytes from
 * src (rows src_pitch apart) to dst (rows dst_pitch apart), `lead` bytes into each dst row, the rest of each dst
 * row zeroed. Written by exec/cuda_compute.py, ep_plugin/cuda_ort.c (host inputs) and cuda_replay.c (replays). */
typedef struct { uint64_t src, dst; int64_t rows, width, src_pitch, dst_pitch, lead; } StageCopy;

/* ---- elementwise.cu */
/* output dims and, per operand, its strides in elements (0 on broadcast axes) */
typedef struct {
  int64_t dims[SEAMLESS_MAX_DIMS];
  int64_t a_strides[SEAMLESS_MAX_DIMS];
  int64_t b_strides[SEAMLESS_MAX_DIMS];
  int32_t rank;
} Broadcast;
/* Where: a and b's Broadcast, plus the condition's strides */
typedef struct { Broadcast ab; int64_t c_strides[SEAMLESS_MAX_DIMS]; } Broadcast3;
/* integer data viewed as [rows, k]: column j within [low[j], high[j]] and, where `nonzero`, not 0 */
typedef struct {
  int64_t low[SEAMLESS_MAX_DIMS], high[SEAMLESS_MAX_DIMS];
  int32_t k, nonzero;
  GpuCheck check;
} IntRanges;

enum BinaryOp { ADD = 0, SUB = 1, MUL = 2, DIV = 3, POW = 4, MAX_ = 5, MIN_ = 6, MOD = 7, FMOD = 8, PRELU = 9,
                BIT_AND = 10, BIT_OR = 11, BIT_XOR = 12,  /* the bitwise ones: integers only */
                SHIFT_LEFT = 13, SHIFT_RIGHT = 14 };      /* BitShift: unsigned only */
enum CompareOp { EQUAL = 0, LESS = 1, LESS_EQUAL = 2, GREATER = 3, GREATER_EQUAL = 4 };
enum LogicOp { AND = 0, OR = 1, XOR = 2, NOT = 3 };
enum UnaryOp { RELU = 0, SIGMOID = 1, TANH = 2, EXP = 3, LOG = 4, NEG = 5, ABS = 6, SQRT = 7, ERF = 8,
               RECIPROCAL = 9, SIN = 10, COS = 11, FLOOR = 12, CEIL = 13, ROUND = 14, SOFTPLUS = 15,
               LEAKY_RELU = 16, HARD_SIGMOID = 17, HARD_SWISH = 18, ELU = 19, SELU = 20, CELU = 21, CLIP = 22,
               THRESHOLDED_RELU = 23, SIGN = 24, SOFTSIGN = 25, MISH = 26, TAN = 27, ASIN = 28, ACOS = 29, ATAN = 30,
               SINH = 31, COSH = 32, ASINH = 33, ACOSH = 34, ATANH = 35, DIV_BY = 36, MUL_BY = 37,
               BIT_NOT = 38 };  /* BIT_NOT: int32/int64 only */
enum Activation { FAST_GELU = 0, QUICK_GELU = 1, ERF_GELU = 2 };

/* ---- normalization.cu, and the GEMVs that normalise their activations first (common.cuh norm_rows_to_shared):
 * row r is RMSNorm(x + skip + bias) * gamma; `sum` (x + skip + bias) written where given (0: none) */
typedef struct { uint64_t x, skip, bias, gamma, sum; float eps; } RowNorm;

/* ---- matmul.cu */
typedef struct {
  int32_t m, n, k, split;
  int32_t staged;  /* linear_row: one row, the weights through shared memory (matmul.py's _linear decides) */
} Linear;

/* ---- quantization.cu: MatMulNBits, its tensor-core tiles, GatherBlockQuantized */
typedef struct {
  int32_t m, n, k, block, bits;
  int32_t split;  /* 4-bit path: warps per output column, a power of 2 up to 8 (1 on the generic path) */
} NBits;
typedef struct { int32_t m, n, k, chunks; } NBitsTiles;
typedef struct {
  int64_t rows, width, indices;  /* data rows, unpacked row length, number of indices */
  int32_t block, bits;
} GatherQ;

/* ---- moe.cu: an expert weight: MoE's as stored, QMoE's scale (q - zero) with q `bits` wide, the lowest bits
 * first, a scale per block of `block` cols (block_shift: log2(block) when a power of two, else -1), the zero
 * points packed along the blocks (zp_blockwise) or along the rows, 2^(bits-1) without them. */
typedef struct { int64_t rows, cols, block, bits, zp_blockwise, block_shift; } MoeWeights;
/* moe.cu: the activation an up product's kernel applies as it stores its rows (kind: kernels/cpu/steps.py
 * MOE_ACTIVATIONS, -1: none, the product stored as it is), or the activate kernel (FC3's gated experts). */
typedef struct { int64_t kind, has_limit; float alpha, beta, limit; } MoeActivation;

/* ---- reduction.cu */
typedef struct {
  int64_t kept_dims[SEAMLESS_MAX_DIMS], kept_strides[SEAMLESS_MAX_DIMS];  /* output dims, the input stride of each */
  int64_t reduced_dims[SEAMLESS_MAX_DIMS], reduced_strides[SEAMLESS_MAX_DIMS];
  int64_t count;                /* elements reduced into each output */
  int32_t kept_rank, reduced_rank;
  int64_t nan_dims[3];          /* stock's merged [d0, d1, d2] (NAN_KRK, NAN_RKR) */
  int32_t nan_layout, lanes;    /* NanLayout; lanes of stock's SSE2 packets (4 float32) */
} Reduce;
/* stock's path for the merged shape: one loop from the first element; rows (kept, then reduced) each reduced by
 * Eigen's vectorised max; [kept, reduced, kept] by Eigen's partial max; [reduced, kept, reduced] by Eigen rows
 * folded in a loop */
enum NanLayout { NAN_LOOP = 0, NAN_ROWS = 1, NAN_KRK = 2, NAN_RKR = 3 };
enum ReduceOp { R_SUM = 0, R_MEAN = 1, R_MAX = 2, R_MIN = 3, R_PROD = 4, R_SUM_SQUARE = 5, R_L1 = 6, R_L2 = 7,
                R_LOG_SUM = 8, R_LOG_SUM_EXP = 9 };
enum SoftmaxFlag { SOFTMAX_LOG = 1, SOFTMAX_ZERO_MASKED_ROWS = 2 };  /* LogSoftmax; every key masked: zeros */
enum SelectOrder { SELECT_LARGEST = 1, SELECT_ARG = 2 };  /* TopK by largest; ArgMax/ArgMin's NaN rule */

/* ---- shape.cu */
/* y[dst_offset + sum c_d * dst_strides[d]] = x[src_offset + sum c_d * src_strides[d]] over the box dims[0..rank) */
typedef struct {
  int64_t dims[SEAMLESS_MAX_DIMS];
  int64_t src_strides[SEAMLESS_MAX_DIMS];
  int64_t dst_strides[SEAMLESS_MAX_DIMS];
  int64_t src_offset, dst_offset;
  int32_t rank;
} Strided;
/* Tile beyond what a strided copy can view: y[c] = x[c % in_dims], per axis */
typedef struct { int64_t out_dims[SEAMLESS_MAX_DIMS], in_dims[SEAMLESS_MAX_DIMS]; int32_t rank; } TileShape;
/* GatherElements / ScatterElements */
typedef struct {
  int64_t dims[SEAMLESS_MAX_DIMS];          /* the index tensor's (= the output's for Gather, the updates' for Scatter) */
  int64_t data_strides[SEAMLESS_MAX_DIMS];  /* the data's, in elements */
  int64_t axis_dim;                         /* data.shape[axis]: negative indices count from its end */
  int32_t rank, axis;
  GpuCheck check;
} AxisIndex;
/* GatherND / ScatterND: each index tuple (k values) addresses a slice of `slice` contiguous elements */
typedef struct {
  int64_t dims[SEAMLESS_MAX_DIMS];     /* the data dims the k index values address */
  int64_t strides[SEAMLESS_MAX_DIMS];  /* their strides in data, in elements */
  int64_t slice;                       /* elements per addressed slice */
  int64_t per_batch;                   /* index tuples per batch */
  int64_t batch_stride;                /* data elements per batch (0 without batch dims) */
  int32_t k;
  GpuCheck check;
} NdIndex;
enum Reduction { REDUCE_ADD = 1, REDUCE_MUL = 2, REDUCE_MAX = 3, REDUCE_MIN = 4 };  /* the scatter ops' */
/* Pad: negative pads crop first (as ORT): along axis d the cropped input is x[lo[d], lo[d] + len[d]), and output
 * coordinate o maps to r = o - shift[d] in it (shift = the positive begin pad); r outside [0, len) is padding */
typedef struct {
  int64_t out_dims[SEAMLESS_MAX_DIMS];
  int64_t in_strides[SEAMLESS_MAX_DIMS];
  int64_t shift[SEAMLESS_MAX_DIMS];
  int64_t lo[SEAMLESS_MAX_DIMS];
  int64_t len[SEAMLESS_MAX_DIMS];
  int32_t rank;
  int32_t mode;  /* PadMode */
} PadGeometry;
enum PadMode { PAD_CONSTANT = 0, PAD_REFLECT = 1, PAD_EDGE = 2, PAD_WRAP = 3 };

/* ---- spatial.cu */
/* sliding-window geometry over up to 3 spatial dims; fewer dims are padded in front with unit dims */
typedef struct { int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3]; } Window;
/* CausalConvWithState's x: channels first [B, C, n] (token_major 0, pieces 1), or token major: a token's row holds
 * `pieces` blocks of C channels, [B, n, pieces * C] (plan/fusion.py token_major_causal_conv). The convolution reads
 * block `value` times block `in_gate` (-1: none) and writes its output times block `out_gate` (-1: none): LFM2's
 * in-projection split in three, its two Muls folded in. */
typedef struct { int32_t token_major, pieces, value, in_gate, out_gate; } ConvPieces;
/* MaxPool by stock's CPU paths (kernels/cpu/spatial.py stock_max_pool_path), the averages, LpPool's sum */
enum PoolMode { POOL_MAX_SCALAR = 0, POOL_AVERAGE = 1, POOL_AVERAGE_WITH_PADS = 2, POOL_SUM = 3,
                POOL_MAX_LOOP = 4, POOL_MAX_VECTOR_2D = 5, POOL_MAX_VECTOR_3D = 6 };
/* Resize: for output coordinate j of axis d, table entry table_offset[d] + j */
typedef struct {
  int64_t in_strides[SEAMLESS_MAX_DIMS];
  int64_t out_dims[SEAMLESS_MAX_DIMS];
  int64_t table_offset[SEAMLESS_MAX_DIMS];
  int32_t rank;
  int32_t blended;  /* bit d: axis d blends lo and hi (linear mode with some nonzero weight) */
} ResizeAxes;
typedef struct {
  int64_t n, c, points;          /* batch, channels, output points per image */
  int32_t nd, dims[3];           /* spatial axes and their lengths */
  int32_t mode, padding, align;  /* mode 0 nearest, 1 linear, 2 cubic; padding 0 zeros, 1 border, 2 reflection */
} GridSampleShape;
typedef struct {
  int64_t n, c, height, width, oh, ow;
  int32_t kh, kw, stride_h, stride_w, dilation_h, dilation_w, top, left, offset_groups;
} DeformShape;

/* ---- attention.cu */
typedef struct {
  int32_t batch, seq, heads, kv_heads, head_size, present_len, rot_half, do_rotary, interleaved, packed;
  int32_t first_prompt, cos_rows, past_buf;
  int32_t seq_bound;         /* seqlens_k values lie in [0, seq_bound): max(total_sequence_length, present length) */
  int32_t window, capacity;  /* a window-sized cache: local_window_size W and the past's capacity C (else 0, 0);
                                present_len is then the work buffer's C + S rows */
  GpuCheck check;            /* a seqlens_k value out of range, or shorter than the new tokens */
} GqaShape;
typedef struct {
  float scale, softcap;
  int32_t local_window, causal, smooth;
  int32_t early;        /* gqa_decode: no kernel of this run writes the past (the host knows): read it before waiting */
  int32_t late_launch;  /* gqa_decode: the next kernel launches once a block has its inputs, not at its start */
  int32_t in_place;     /* gqa_decode: the present buffers are the past's: only the new token's row is written */
} AttendParams;
typedef struct {
  int32_t batch, seq, heads, head_size, rot_half, cache_half, interleaved, bnsh, first_only, cache_rows;
  GpuCheck check;  /* a position outside the caches */
} RotaryShape;
typedef struct {
  int32_t batch, tokens, q_heads, kv_heads, k_heads, d_k, d_v;
  int32_t gated, delta, decay_per_key, beta_per_head;  /* decay [B, T, H_kv (* d_k)], beta [B, T, H_kv or 1] */
  int32_t qk_l2_norm;  /* NormedLinearAttention: q and k rows over their L2 norms as they are loaded */
  float scale, q_scale; /* q_scale: the normalised q times it (0: no such Mul) */
} LinearAttentionShape;
typedef struct {
  int32_t batch, seq, q_heads, v_heads, d_v;  /* uniform requests: seq tokens each */
  int32_t gated, delta, decay_per_key;         /* decay [T, H_v (* d_k)], beta [T, H_v], float32 */
  int32_t bias_per_key;                        /* dt_bias [H_v (* d_k)] */
  int32_t gate;                                /* 0 decay as given, 1 -exp(a_log) softplus(decay + dt_bias), 2 sigmoid's */
  int32_t beta_sigmoid, l2_norm;
  float scale, lower_bound;                    /* lower_bound: the sigmoid gate's */
} GatedDeltaNetShape;
typedef struct {
  int32_t batch, seq, heads, head_size, rot_half, bnsh, cache_rows, layout, section_t, section_h, section_w;
  int32_t interleaved;
  float scale;
  GpuCheck check;  /* a position outside the caches */
} MRotaryShape;
