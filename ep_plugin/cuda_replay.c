/* onnxruntime-ep-seamless, CUDA variant: level A's replays (option capture=auto; with capture=off, launch
 * programs) without Python. exec/cuda_compute.py captures (or records) a compiled node's Compute per binding
 * of its input shapes and registers each segment's staging plan here (SeamlessSegment, arrays Python owns). A
 * Compute whose binding has a segment on its stream is answered in C: the staging table rewritten
 * for this run's addresses and lengths, the graph (or program) launched, ORT's outputs asked for, their staging
 * launched. Any other Compute goes to Python. */
#include <pthread.h>

#include "cuda_ep.h"

#define SEAMLESS_MAX_SEGMENTS 8   /* exec/cuda_compute.py MAX_SEGMENTS */

/* SeamlessSegment, a captured segment's plan: cuda_ep.h (the cffi module reads its fields). */

struct SeamlessReplayer {
  pthread_mutex_t lock;           /* held while a segment's table is rewritten and launched */
  int32_t n_in, max_rank, n_grow, left;
  int64_t min_capacity;
  int64_t* grow_at;               /* indices in a run's dims of the growing lengths */
  /* a first prompt's padding (seamless_replayer_prompts): its lengths, padded to a bucket of at most prompt_max where
   * its own are all equal and the lengths at past_at (the past KV's) are all 0 or all at least the bucket (shared
   * buffers) */
  int32_t n_prompt, n_past;
  int64_t prompt_min, prompt_max;
  int64_t *prompt_at, *past_at;
  size_t key_len;
  SeamlessSegment* segments[SEAMLESS_MAX_SEGMENTS];
  uint64_t tick;
  /* a Compute's inputs, read under the lock */
  void** data;
  size_t* nbytes;
  int32_t *types, *ranks;
  int64_t* dims;
  uint8_t *changed, *key;
};

static long long g_segment_replays;  /* every segment launch, from C or Python */

void seamless_replayer_free(SeamlessReplayer* r) {
  if (!r) return;
  pthread_mutex_destroy(&r->lock);
  free(r->grow_at); free(r->prompt_at); free(r->past_at); free(r->data); free(r->nbytes); free(r->types); free(r->ranks); free(r->dims);
  free(r->changed); free(r->key);
  free(r);
}

/* A compiled node's replayer: n_in inputs of rank up to max_rank; its growing lengths at grow_at
 * (n_grow of them, padded at their start when `left`), capacities powers of two from min_capacity. */
SeamlessReplayer* seamless_replayer_new(int n_in, int max_rank, const int64_t* grow_at, int n_grow, int left,
                                        int64_t min_capacity) {
  SeamlessReplayer* r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->lock, NULL);
  size_t n = (size_t)n_in, dims = n * (size_t)max_rank;
  r->n_in = n_in; r->max_rank = max_rank; r->n_grow = n_grow; r->left = left; r->min_capacity = min_capacity;
  r->key_len = dims * sizeof(int64_t) + 2 * n * sizeof(int32_t);
  r->grow_at = malloc((n_grow ? n_grow : 1) * sizeof *r->grow_at);
  r->data = calloc(n + 1, sizeof *r->data); r->nbytes = calloc(n + 1, sizeof *r->nbytes);
  r->types = calloc(n + 1, sizeof *r->types); r->ranks = calloc(n + 1, sizeof *r->ranks);
  r->dims = calloc(dims + 1, sizeof *r->dims); r->changed = calloc(n + 1, 1); r->key = calloc(r->key_len, 1);
  if (!r->grow_at || !r->data || !r->nbytes || !r->types || !r->ranks || !r->dims || !r->changed || !r->key) {
    seamless_replayer_free(r);
    return NULL;
  }
  if (n_grow) memcpy(r->grow_at, grow_at, (size_t)n_grow * sizeof *grow_at);
  for (size_t i = 0; i < n; i++) r->ranks[i] = -2;  /* never seen: seamless_get_inputs reads every input */
  return r;
}

/* The replayer's first-prompt padding: the lengths at prompt_at padded to buckets, powers of two from min_capacity
 * up to max_capacity (a longer prompt runs at its own length), in runs whose lengths at past_at are all 0 or all at
 * least the bucket. 0, or -1 out of memory. */
int seamless_replayer_prompts(SeamlessReplayer* r, const int64_t* prompt_at, int n_prompt, const int64_t* past_at,
                              int n_past, int64_t min_capacity, int64_t max_capacity) {
  free(r->prompt_at); free(r->past_at);
  r->prompt_at = malloc((n_prompt ? n_prompt : 1) * sizeof *prompt_at);
  r->past_at = malloc((n_past ? n_past : 1) * sizeof *past_at);
  r->n_prompt = r->n_past = 0;
  if (!r->prompt_at || !r->past_at) return -1;
  if (n_prompt) memcpy(r->prompt_at, prompt_at, (size_t)n_prompt * sizeof *prompt_at);
  if (n_past) memcpy(r->past_at, past_at, (size_t)n_past * sizeof *past_at);
  r->n_prompt = n_prompt; r->n_past = n_past; r->prompt_min = min_capacity; r->prompt_max = max_capacity;
  return 0;
}

size_t seamless_replay_key_size(const SeamlessReplayer* r) { return r->key_len; }

/* The power of two from `least` that holds `need` (at most 2^62: a longer length, which only a tensor with a
 * zero-sized dim can have, is then longer than its capacity, which the replay refuses). */
static int64_t bucket_of(int64_t need, int64_t least) {
  int64_t capacity = 1;
  while (capacity < need && capacity < ((int64_t)1 << 62)) capacity <<= 1;
  return capacity < least ? least : capacity;
}

/* A run's first-prompt bucket (its key's dims), or 0 where the prompt padding does not serve it: every prompt length
 * the same, its bucket at most prompt_max (past it the padding could cost more GPU time than the launches it saves),
 * every past empty or every past a buffer the bucket fits in (KV buffers of the maximum length that past and present
 * share, onnxruntime-genai's with CUDA graphs: the prompt's rows are written from the start). */
static int64_t prompt_bucket(const SeamlessReplayer* r, const int64_t* d) {
  if (!r->n_prompt) return 0;
  for (int g = 1; g < r->n_prompt; g++)
    if (d[r->prompt_at[g]] != d[r->prompt_at[0]]) return 0;
  int64_t bucket = bucket_of(d[r->prompt_at[0]], r->prompt_min);
  if (bucket > r->prompt_max) return 0;
  int empty = 1, shared = 1;
  for (int z = 0; z < r->n_past; z++) {
    empty &= d[r->past_at[z]] == 0;
    shared &= d[r->past_at[z]] >= bucket;
  }
  return empty || shared ? bucket : 0;
}

/* A run's segment key into `key` (seamless_replay_key_size bytes): the inputs' dims (zero past each
 * rank), growing lengths replaced by the capacity (padded at the start: each plus the same lead) or, in a first
 * prompt (*prompt = 1 where prompt is not NULL), the prompt's lengths by its bucket, then ranks and types; and the
 * capacity (0 when nothing grows). */
int64_t seamless_replay_key(const SeamlessReplayer* r, const int64_t* dims, const int32_t* ranks,
                            const int32_t* types, uint8_t* key, int32_t* prompt) {
  int64_t* d = (int64_t*)key;
  size_t n = (size_t)r->n_in, rank = (size_t)r->max_rank;
  memset(key, 0, r->key_len);
  for (size_t i = 0; i < n; i++)
    if (ranks[i] > 0) memcpy(d + i * rank, dims + i * rank, (size_t)ranks[i] * sizeof *d);
  int64_t capacity = prompt_bucket(r, d);
  if (prompt) *prompt = capacity > 0;
  if (capacity) {
    for (int g = 0; g < r->n_prompt; g++) d[r->prompt_at[g]] = capacity;
  } else if (r->n_grow) {
    int64_t need = 0;
    for (int g = 0; g < r->n_grow; g++) need = d[r->grow_at[g]] > need ? d[r->grow_at[g]] : need;
    capacity = bucket_of(need, r->min_capacity);
    for (int g = 0; g < r->n_grow; g++) d[r->grow_at[g]] = r->left ? d[r->grow_at[g]] + capacity - need : capacity;
  }
  memcpy(key + n * rank * sizeof *d, ranks, n * sizeof *ranks);
  memcpy(key + n * rank * sizeof *d + n * sizeof *ranks, types, n * sizeof *types);
  return capacity;
}

/* Register a captured segment (a free slot: Python drops the least recently used first); -1 when full. */
int seamless_replay_add(SeamlessReplayer* r, SeamlessSegment* s) {
  int slot = -1;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < SEAMLESS_MAX_SEGMENTS && slot < 0; i++)
    if (!r->segments[i]) slot = i;
  if (slot >= 0) {
    r->segments[slot] = s;
    s->used = ++r->tick;
  }
  pthread_mutex_unlock(&r->lock);
  return slot;
}

/* Unregister a segment: once this returns, no Compute launches it. */
void seamless_replay_remove(SeamlessReplayer* r, SeamlessSegment* s) {
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < SEAMLESS_MAX_SEGMENTS; i++)
    if (r->segments[i] == s) r->segments[i] = NULL;
  pthread_mutex_unlock(&r->lock);
}

static int64_t dim_at(const SeamlessSegment* s, const int64_t* dims, int64_t i) { return i == s->n_dims ? 1 : dims[i]; }

/* The table's input entries for a run (dims, data: its inputs') and its outputs' lengths and dims.
 * 0, or 1 when a growing input is longer than the capacity. */
int seamless_segment_inputs(SeamlessSegment* s, const int64_t* dims, void* const* data) {
  StageCopy* host = s->host;
  for (int i = 0; i < s->n_in; i++) {
    host[i].src = (uint64_t)(uintptr_t)data[s->in_pos[i]];
    host[i].width = host[i].src_pitch = s->in_unit[i] * dim_at(s, dims, s->in_length[i]);
  }
  if (s->in_lead) {  /* padded at the start: every growing input by `lead`, the outputs from there on */
    int64_t longest = 0;
    for (int g = 0; g < s->n_grow; g++) longest = dims[s->grow_at[g]] > longest ? dims[s->grow_at[g]] : longest;
    int64_t lead = s->capacity - longest;
    if (lead < 0) return 1;
    for (int i = 0; i < s->n_in; i++) host[i].lead = s->in_lead[i] * lead;
    for (int j = 0; j < s->n_out; j++) {
      int padded = s->out_full[j] > 0;
      s->lengths[j] = padded ? s->out_full[j] - lead : 1;
      if (s->lengths[j] < 0) return 1;
      host[s->n_in + j].src = (uint64_t)(s->out_src[j] + s->out_unit[j] * lead * padded);
    }
  } else {
    for (int j = 0; j < s->n_out; j++) {
      int64_t length = 0;
      for (int t = 0; t < s->k; t++) {
        int64_t v = dim_at(s, dims, s->out_length[(size_t)j * s->k + t]);
        length = v > length ? v : length;
      }
      if (s->out_full[j] && length > s->out_full[j]) return 1;  /* past the captured buffer */
      s->lengths[j] = length;
    }
  }
  for (int a = 0; a < s->n_axis; a++) s->out_dims[s->out_axis[a]] = s->lengths[s->out_padded[a]];
  return 0;
}

/* The table's output entries for ORT's outputs of this run (in s->out_data). */
void seamless_segment_outputs(SeamlessSegment* s) {
  for (int j = 0; j < s->n_out; j++) {
    StageCopy* e = (StageCopy*)s->host + s->n_in + j;
    e->dst = (uint64_t)(uintptr_t)s->out_data[j];
    e->width = e->dst_pitch = s->out_unit[j] * s->lengths[j];
  }
}

/* Launch segment s for a run (with r->lock held): the inputs' entries uploaded and the graph (program) launched
 * first, so that the GPU starts while ORT allocates the outputs; then their entries and staging. */
static OrtStatus* replay_locked(SeamlessReplayer* r, SeamlessSegment* s, OrtKernelContext* ctx, void* stream,
                                const int64_t* dims, void* const* data) {
  if (seamless_segment_inputs(s, dims, data)) {
    char msg[160];
    snprintf(msg, sizeof msg, "growing inputs longer than the captured capacity %lld", (long long)s->capacity);
    return seamless_status(1, msg);
  }
  size_t row = sizeof(StageCopy), in_bytes = (size_t)s->n_in * row;
  /* pageable: the driver takes the bytes before it returns */
  if (in_bytes)
    CU_TRY(cu.memcpy_async((CUdeviceptr)s->table, (CUdeviceptr)(uintptr_t)s->host, in_bytes, (CUstream)stream),
           "cuMemcpyAsync");
  TRY(capture_launch(s->graph, (CUstream)stream));
  __atomic_add_fetch(&g_segment_replays, 1, __ATOMIC_RELAXED);
  s->used = ++r->tick;
  if (!s->n_out) return NULL;
  TRY(seamless_get_outputs(ctx, (size_t)s->n_out, s->out_ranks, s->out_dims, (size_t)s->max_rank, s->out_data));
  seamless_segment_outputs(s);
  CU_TRY(cu.memcpy_async((CUdeviceptr)(s->table + in_bytes), (CUdeviceptr)(uintptr_t)((StageCopy*)s->host + s->n_in),
                         (size_t)s->n_out * row, (CUstream)stream), "cuMemcpyAsync");
  return seamless_cuda_launch(s->fn, s->gx, s->gy, s->block, s->shared, stream, s->packed, s->packed_size, s->offsets,
                              s->count, s->dependent);
}

/* Python's launch of a segment it just captured (or of one it found): the same as a C replay. */
OrtStatus* seamless_segment_replay(SeamlessReplayer* r, SeamlessSegment* s, OrtKernelContext* ctx,
                                   void* stream, const int64_t* dims, void* const* data) {
  pthread_mutex_lock(&r->lock);
  OrtStatus* st = replay_locked(r, s, ctx, stream, dims, data);
  pthread_mutex_unlock(&r->lock);
  return st;
}

long long seamless_segment_replays(void) { return __atomic_load_n(&g_segment_replays, __ATOMIC_RELAXED); }

/* A Compute answered in C when its binding has a segment on its stream (*done = 1); else Python runs it.
 * Not while a session graph is warmed up or captured on this thread (enable_cuda_graph=1). */
OrtStatus* replay_compute(SeamlessReplayer* r, OrtKernelContext* ctx, int* done) {
  *done = 0;
  if (capture_under_way()) return NULL;
  void* stream = NULL;
  TRY(ORT(KernelContext_GetGPUComputeStream)(ctx, &stream));
  OrtStatus* st = NULL;
  pthread_mutex_lock(&r->lock);
  SeamlessSegment* found = NULL;
  for (int i = 0; i < SEAMLESS_MAX_SEGMENTS && !found; i++) found = r->segments[i];
  if (found && seamless_get_inputs(ctx, (size_t)r->n_in, r->data, r->nbytes, r->types, r->ranks, r->dims,
                                   (size_t)r->max_rank, r->changed, &st) >= 0) {
    int64_t capacity = seamless_replay_key(r, r->dims, r->ranks, r->types, r->key, NULL);
    found = NULL;
    for (int i = 0; i < SEAMLESS_MAX_SEGMENTS && !found; i++) {
      SeamlessSegment* s = r->segments[i];
      if (s && s->stream == stream && s->capacity == capacity && !memcmp(s->key, r->key, r->key_len)) found = s;
    }
    if (found) {
      st = replay_locked(r, found, ctx, stream, r->dims, r->data);
      *done = 1;
    }
  }
  pthread_mutex_unlock(&r->lock);
  return st;
}
