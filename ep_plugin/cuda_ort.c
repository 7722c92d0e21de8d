/* onnxruntime-ep-seamless, CUDA variant: what ORT calls. Devices, memory, copies and streams for
 * ORT, on the CUDA driver API loaded at run time (cuda_driver.c).
 * Memory: device (DEFAULT) and pinned host (HOST_ACCESSIBLE) memory infos per GPU; one caching
 * allocator per kind and GPU, so steady-state runs allocate nothing from the driver. The executor's
 * scratch (cuda_exec.c) and a captured graph's memory (cuda_capture.c) come from the same cache. */
#include <pthread.h>

#include "cuda_ep.h"

#define MEM_DEFAULT 0
#define MEM_HOST_ACCESSIBLE 5
#define DEVICE_GPU 1

/* ---- caching allocator ------------------------------------------------------------------ */
typedef struct Block { struct Block* next; void* ptr; size_t size; } Block;
typedef struct {
  OrtAllocator base;
  const OrtMemoryInfo* info;
  int ordinal, pinned;
  pthread_mutex_t lock;
  Block* free_blocks;  /* freed blocks kept for reuse */
  Block* used_blocks;  /* blocks handed out, to know their sizes */
} SeamlessAllocator;

static SeamlessAllocator* g_allocators[SEAMLESS_MAX_GPUS][2];  /* [ordinal][pinned] */

/* Size classes a quarter of a power of two apart (from 256 bytes; at most 2 MiB apart): a tensor
 * that grows a little each run, like a decoder's KV cache, reuses its block for many runs instead
 * of leaving one block of every length it had in the cache. */
static size_t round_size(size_t n) {
  size_t step = 256;
  while (step < (2u << 20) && step * 8 < n) step *= 2;
  return (n + step - 1) & ~(step - 1);
}

static long long g_device_allocations;  /* driver allocations of GPU memory, ever: a steady state adds none */
long long seamless_cuda_device_allocations(void) { return __atomic_load_n(&g_device_allocations, __ATOMIC_RELAXED); }
static long long g_device_bytes_in_use;  /* GPU memory handed out by the caching allocators and not given back */
long long seamless_cuda_device_bytes_in_use(void) { return __atomic_load_n(&g_device_bytes_in_use, __ATOMIC_RELAXED); }

/* The idle blocks of `a` back to the driver, once the GPU has finished the work queued before (an idle block may
 * still be read by it: blocks are freed in stream order), where this thread captures nothing; 1 if any went. For an
 * allocation the driver refused: a long prompt's buffers, cached at sizes a shorter one cannot reuse, would
 * otherwise take GPU memory that is free in fact. */
static int allocator_trim(SeamlessAllocator* a) {
  if (a->pinned || capture_under_way()) return 0;
  pthread_mutex_lock(&a->lock);
  Block* idle = a->free_blocks;
  a->free_blocks = NULL;
  pthread_mutex_unlock(&a->lock);
  if (!idle) return 0;
  cu.ctx_synchronize();
  while (idle) {
    Block* next = idle->next;
    cu.mem_free((CUdeviceptr)(uintptr_t)idle->ptr);
    free(idle);
    idle = next;
  }
  return 1;
}

static void* allocator_alloc(OrtAllocator* self, size_t size) {
  SeamlessAllocator* a = (SeamlessAllocator*)self;
  size = round_size(size);
  pthread_mutex_lock(&a->lock);
  Block **link = &a->free_blocks, *b = NULL;
  for (; *link; link = &(*link)->next)
    if ((*link)->size >= size && (*link)->size <= BLOCK_REUSE * size) { b = *link; *link = b->next; break; }
  pthread_mutex_unlock(&a->lock);
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b) return NULL;
    OrtStatus* st = seamless_cuda_use(a->ordinal);
    if (st) { ORT(ReleaseStatus)(st); free(b); return NULL; }
    CUdeviceptr p = 0;
    CUresult r = a->pinned ? cu.mem_host_alloc(&b->ptr, size, 0) : cu.mem_alloc(&p, size);
    if (r && allocator_trim(a)) r = cu.mem_alloc(&p, size);
    if (r) { free(b); return NULL; }
    if (!a->pinned) {
      b->ptr = (void*)(uintptr_t)p;
      __atomic_add_fetch(&g_device_allocations, 1, __ATOMIC_RELAXED);
    }
    b->size = size;
  }
  pthread_mutex_lock(&a->lock);
  b->next = a->used_blocks;
  a->used_blocks = b;
  pthread_mutex_unlock(&a->lock);
  if (!a->pinned) __atomic_add_fetch(&g_device_bytes_in_use, (long long)b->size, __ATOMIC_RELAXED);
  return b->ptr;
}

static void allocator_free(OrtAllocator* self, void* p) {
  SeamlessAllocator* a = (SeamlessAllocator*)self;
  if (!p) return;
  pthread_mutex_lock(&a->lock);
  for (Block** link = &a->used_blocks; *link; link = &(*link)->next)
    if ((*link)->ptr == p) {
      Block* b = *link;
      *link = b->next;
      b->next = a->free_blocks;
      a->free_blocks = b;
      if (!a->pinned) __atomic_sub_fetch(&g_device_bytes_in_use, (long long)b->size, __ATOMIC_RELAXED);
      break;
    }
  pthread_mutex_unlock(&a->lock);
}

static const OrtMemoryInfo* allocator_info(const OrtAllocator* self) { return ((const SeamlessAllocator*)self)->info; }

/* The allocator of one GPU and memory kind (created on first use; lives for the process, like the
 * driver's primary contexts: tensors from it may outlive sessions). */
static SeamlessAllocator* seamless_cuda_allocator(int ordinal, int pinned, const OrtMemoryInfo* info) {
  static pthread_mutex_t create = PTHREAD_MUTEX_INITIALIZER;
  if (ordinal < 0 || ordinal >= SEAMLESS_MAX_GPUS) return NULL;
  pthread_mutex_lock(&create);
  SeamlessAllocator* a = g_allocators[ordinal][pinned];
  if (!a && (a = calloc(1, sizeof *a))) {
    a->base.version = SEAMLESS_ORT_API_MAX;
    a->base.Alloc = allocator_alloc;
    a->base.Free = allocator_free;
    a->base.Info = allocator_info;
    a->ordinal = ordinal;
    a->pinned = pinned;
    pthread_mutex_init(&a->lock, NULL);
    g_allocators[ordinal][pinned] = a;
  }
  if (a && info && !a->info) a->info = info;
  pthread_mutex_unlock(&create);
  return a;
}

/* The cache's memory for the executor (cuda_exec.c) and for captured graphs (cuda_capture.c). */
void* cuda_cached_alloc(int ordinal, int pinned, size_t size) {
  SeamlessAllocator* a = seamless_cuda_allocator(ordinal, pinned, NULL);
  return a ? allocator_alloc(&a->base, size) : NULL;
}

void cuda_cached_free(int ordinal, int pinned, void* p) {
  SeamlessAllocator* a = seamless_cuda_allocator(ordinal, pinned, NULL);
  if (a) allocator_free(&a->base, p);
}

/* ---- data transfer ------------------------------------------------------------------------ */
static int is_our_gpu(const OrtMemoryDevice* d) {
  return ORT_EP(MemoryDevice_GetDeviceType)(d) == DEVICE_GPU &&
         ORT_EP(MemoryDevice_GetVendorId)(d) == SEAMLESS_VENDOR_NVIDIA;
}
static int is_host(const OrtMemoryDevice* d) {
  return ORT_EP(MemoryDevice_GetDeviceType)(d) == 0 || ORT_EP(MemoryDevice_GetMemoryType)(d) == MEM_HOST_ACCESSIBLE;
}

static void transfer_release(OrtDataTransferImpl* self) { (void)self; }  /* one static instance: ORT releases it twice */

static bool transfer_can_copy(const OrtDataTransferImpl* self, const OrtMemoryDevice* src, const OrtMemoryDevice* dst) {
  (void)self;
  return (is_our_gpu(src) && (is_our_gpu(dst) || ORT_EP(MemoryDevice_GetDeviceType)(dst) == 0)) ||
         (is_our_gpu(dst) && ORT_EP(MemoryDevice_GetDeviceType)(src) == 0);
}

/* ---- batched copies between pageable host memory and the GPU ----------------------------------
 * ORT hands over a run's input copies, and its output copies, as one batch each. From pageable
 * memory every cuMemcpyAsync pays the driver's staging, device-to-host a wait too: for a decoder's
 * ~50 KV tensors each way that took longer than its GPU step (docs/benchmarks/gpu.md). A batch is
 * packed into one pinned buffer instead, moved by one copy and scattered (or gathered) on the GPU by
 * the staging kernel (native/cuda/shape.cu), with one wait for a device-to-host batch. */
#define BATCH_TENSOR_LIMIT (4u << 20)  /* bytes: a larger tensor goes by its own copy */
#define BATCH_BYTES (60u << 20)        /* bytes of tensors in a batch (with the table, bounce buffers stay */
#define BATCH_COUNT 65535              /* at 64 MiB) and tensors (the staging kernel's grid rows): more go one by one */
#define BATCH_ALIGN 256
/* A large batch moves in chunks: host threads copy chunk by chunk between the tensors and the pinned buffer while
 * the DMA engine moves the chunks already copied (one core's memcpy is slower than the bus). */
#define CHUNK_BYTES (1u << 20)
#define MAX_CHUNKS 64                  /* a batch's chunks (its tensors' aligned bytes at most BATCH_BYTES) */
_Static_assert((size_t)MAX_CHUNKS * CHUNK_BYTES >= BATCH_BYTES, "a full batch has more chunks than events");
#define COPY_THREADS 4
#define THREAD_BYTES (4u << 20)        /* a copying thread for every this many bytes of the batch, up to COPY_THREADS */

typedef struct Bounce {
  struct Bounce* next;
  uint8_t* host;
  CUdeviceptr dev;
  size_t size;
  CUevent done, chunk[MAX_CHUNKS];  /* chunk[c]: chunk c of a device-to-host batch has reached `host` */
} Bounce;

static CUfunction g_stage[SEAMLESS_MAX_GPUS];  /* the staging kernel, once the kernels are loaded */
static Bounce* g_bounces[SEAMLESS_MAX_GPUS];   /* idle bounce buffers per GPU */
static pthread_mutex_t g_bounce_lock = PTHREAD_MUTEX_INITIALIZER;

/* The staging kernel of GPU `ordinal`, from the kernels the executor loaded (cuda_exec.c). */
void transfer_use_stage(int ordinal, CUfunction stage) { __atomic_store_n(&g_stage[ordinal], stage, __ATOMIC_RELEASE); }

static size_t align_up(size_t n) { return (n + BATCH_ALIGN - 1) & ~(size_t)(BATCH_ALIGN - 1); }

/* An idle bounce buffer of at least `size` bytes on GPU `ordinal` (the current context's), its
 * last batch finished. */
static OrtStatus* bounce_acquire(int ordinal, size_t size, Bounce** out) {
  pthread_mutex_lock(&g_bounce_lock);
  Bounce* b = g_bounces[ordinal];
  if (b) g_bounces[ordinal] = b->next;
  pthread_mutex_unlock(&g_bounce_lock);
  if (!b && !(b = calloc(1, sizeof *b))) return seamless_status(1, "out of memory");
  *out = b;
  if (b->done) CU_TRY(cu.event_synchronize(b->done), "cuEventSynchronize");
  else CU_TRY(cu.event_create(&b->done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  if (b->size >= size) return NULL;
  if (b->host) cu.mem_free_host(b->host);
  if (b->dev) cu.mem_free(b->dev);
  b->host = NULL, b->dev = 0, b->size = 0;
  size_t want = 1u << 20;
  while (want < size) want *= 2;
  CU_TRY(cu.mem_host_alloc((void**)&b->host, want, 0), "cuMemHostAlloc");
  CU_TRY(cu.mem_alloc(&b->dev, want), "cuMemAlloc");
  __atomic_add_fetch(&g_device_allocations, 1, __ATOMIC_RELAXED);
  b->size = want;
  return NULL;
}

/* Back to the idle list; its next user waits for what `stream` has queued on it so far. */
static void bounce_release(int ordinal, Bounce* b, CUstream stream) {
  if (b->done && cu.event_record(b->done, stream)) cu.event_synchronize(b->done);
  pthread_mutex_lock(&g_bounce_lock);
  b->next = g_bounces[ordinal];
  g_bounces[ordinal] = b;
  pthread_mutex_unlock(&g_bounce_lock);
}

/* A batch's tensors laid out in its bounce buffer from byte `table` on, each at its aligned offset. */
typedef struct {
  Bounce* b;
  void **to, **from;
  const size_t *nbytes, *at;
  const int* to_gpu;
  size_t n, table, total, chunks;
  int ordinal, direction;  /* the copies a pass makes: to the GPU (1) or to the host (0) */
  CUstream stream;
  CUresult error;          /* a pass's first failure */
} Batch;

typedef struct { Batch* batch; size_t first; size_t step; } Share;  /* chunks first, first + step, ... */

/* Chunk c of the batch's tensor bytes [table, total): tensors of this pass's direction copied between their
 * memory and the pinned buffer; to the GPU, the chunk's DMA queued after it (device to host: queued already, waited
 * for here). */
static CUresult chunk_pass(Batch* t, size_t c) {
  size_t lo = t->table + c * CHUNK_BYTES, hi = lo + CHUNK_BYTES < t->total ? lo + CHUNK_BYTES : t->total;
  CUresult r = t->direction ? 0 : cu.event_synchronize(t->b->chunk[c]);
  size_t i = 0, j = t->n;  /* the first tensor ending after lo (offsets ascend) */
  while (i < j) {
    size_t m = i + (j - i) / 2;
    if (t->at[m] + t->nbytes[m] <= lo) i = m + 1; else j = m;
  }
  for (; !r && i < t->n && t->at[i] < hi; i++) {
    size_t a = t->at[i] > lo ? t->at[i] : lo, e = t->at[i] + t->nbytes[i] < hi ? t->at[i] + t->nbytes[i] : hi;
    if (a >= e || t->to_gpu[i] != t->direction) continue;
    if (t->direction) memcpy(t->b->host + a, (uint8_t*)t->from[i] + (a - t->at[i]), e - a);
    else memcpy((uint8_t*)t->to[i] + (a - t->at[i]), t->b->host + a, e - a);
  }
  if (!r && t->direction)
    r = cu.memcpy_async(t->b->dev + lo, (CUdeviceptr)(uintptr_t)(t->b->host + lo), hi - lo, t->stream);
  return r;
}

static void pass_failed(Batch* t, CUresult r) {  /* the first failure stays */
  CUresult none = 0;
  if (r) __atomic_compare_exchange_n(&t->error, &none, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void* share_pass(void* arg) {
  Share* s = arg;
  Batch* t = s->batch;
  OrtStatus* st = seamless_cuda_use(t->ordinal);  /* this thread's DMAs go to the batch's GPU */
  CUresult r = st ? 201 : 0;                      /* CUDA_ERROR_INVALID_CONTEXT */
  if (st) ORT(ReleaseStatus)(st);
  for (size_t c = s->first; !r && c < t->chunks; c += s->step) r = chunk_pass(t, c);
  pass_failed(t, r);
  return NULL;
}

/* Every chunk of a pass, dealt out to up to COPY_THREADS threads (this one among them) by turns, so that each has
 * work as soon as the DMA engine has moved the first chunks. */
static CUresult batch_pass(Batch* t, int direction) {
  t->direction = direction, t->error = 0;
  size_t threads = (t->total - t->table) / THREAD_BYTES;
  threads = threads < 1 ? 1 : threads > COPY_THREADS ? COPY_THREADS : threads;
  Share shares[COPY_THREADS];
  pthread_t ids[COPY_THREADS];
  int started[COPY_THREADS] = {0};
  for (size_t k = 0; k < threads; k++) shares[k] = (Share){t, k, threads};
  for (size_t k = 1; k < threads; k++) started[k] = pthread_create(&ids[k], NULL, share_pass, &shares[k]) == 0;
  for (size_t c = 0; c < t->chunks; c += threads) {  /* this thread's share, and that of a thread not started */
    for (size_t k = 0; k < threads && c + k < t->chunks; k++) {
      if (k && started[k]) continue;
      pass_failed(t, chunk_pass(t, c + k));
    }
  }
  for (size_t k = 1; k < threads; k++)
    if (started[k]) pthread_join(ids[k], NULL);
  return t->error;
}

/* Copy n tensors between pageable host memory and GPU `ordinal` on `stream` through one bounce
 * buffer: to_gpu[i] says the direction of each. Returns once host destinations are written. */
static OrtStatus* batch_copy(int ordinal, CUstream stream, void** to, void** from, const size_t* nbytes,
                             const int* to_gpu, size_t n) {
  size_t table = align_up(n * sizeof(StageCopy)), total = table, largest = 0;
  size_t* at = malloc(n * sizeof *at);
  if (!at) return seamless_status(1, "out of memory");
  for (size_t i = 0; i < n; i++)
    at[i] = total, total += align_up(nbytes[i]), largest = nbytes[i] > largest ? nbytes[i] : largest;
  Bounce* b = NULL;
  OrtStatus* st = bounce_acquire(ordinal, total, &b);
  if (st) {
    if (b) bounce_release(ordinal, b, stream);
    free(at);
    return st;
  }
  StageCopy* entries = (StageCopy*)b->host;
  int any_to_host = 0, any_to_gpu = 0;
  for (size_t i = 0; i < n; i++) {
    CUdeviceptr bounce = b->dev + at[i];
    entries[i] = (StageCopy){to_gpu[i] ? bounce : (uint64_t)(uintptr_t)from[i],
                             to_gpu[i] ? (uint64_t)(uintptr_t)to[i] : bounce, 1, (int64_t)nbytes[i],
                             (int64_t)nbytes[i], (int64_t)nbytes[i], 0};
    any_to_gpu |= to_gpu[i], any_to_host |= !to_gpu[i];
  }
  Batch t = {b, to, from, nbytes, at, to_gpu, n, table, total, (total - table + CHUNK_BYTES - 1) / CHUNK_BYTES,
             ordinal, 1, stream, 0};
  CUdeviceptr dev_table = b->dev;
  void* args[] = {&dev_table};
  unsigned blocks = (unsigned)(largest / (256 * 16 * 8) + 1);
  blocks = blocks < 16 ? 16 : blocks > 1024 ? 1024 : blocks;
  /* the table, then the host data chunk by chunk when some copies go to the GPU */
  CUresult r = cu.memcpy_async(b->dev, (CUdeviceptr)(uintptr_t)b->host, table, stream);
  const char* what = "cuMemcpyAsync";
  if (!r && any_to_gpu) r = batch_pass(&t, 1);
  if (!r) r = cu.launch_kernel(g_stage[ordinal], blocks, (unsigned)n, 1, 256, 1, 1, 0, stream, args, NULL), what = "cuLaunchKernel";
  for (size_t c = 0; !r && any_to_host && c < t.chunks; c++) {  /* back chunk by chunk, each marked when there */
    size_t lo = table + c * CHUNK_BYTES, hi = lo + CHUNK_BYTES < total ? lo + CHUNK_BYTES : total;
    if (!b->chunk[c] && (r = cu.event_create(&b->chunk[c], CU_EVENT_DISABLE_TIMING))) what = "cuEventCreate";
    if (!r) r = cu.memcpy_async((CUdeviceptr)(uintptr_t)(b->host + lo), b->dev + lo, hi - lo, stream), what = "cuMemcpyAsync";
    if (!r) r = cu.event_record(b->chunk[c], stream), what = "cuEventRecord";
  }
  if (!r && any_to_host) r = batch_pass(&t, 0), what = "cuEventSynchronize";
  bounce_release(ordinal, b, stream);
  free(at);
  return r ? cuda_status(r, what) : NULL;
}

/* One copy on its own (unified addressing: the driver infers the direction from the pointers);
 * returns once a host destination is written. */
static CUresult copy_one(void* to, const void* from, size_t nbytes, CUstream stream, int to_host) {
  if (!stream) return cu.memcpy((CUdeviceptr)(uintptr_t)to, (CUdeviceptr)(uintptr_t)from, nbytes);
  CUresult r = cu.memcpy_async((CUdeviceptr)(uintptr_t)to, (CUdeviceptr)(uintptr_t)from, nbytes, stream);
  return !r && to_host ? cu.stream_synchronize(stream) : r;
}

static OrtStatus* transfer_copy(OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst, OrtSyncStream** streams,
                                size_t count) {
  (void)self;
  /* the batch: copies between pageable host memory and one GPU on one stream, outside a capture */
  void **to = calloc(count + 1, sizeof *to), **from = calloc(count + 1, sizeof *from);
  size_t* sizes = calloc(count + 1, sizeof *sizes);
  int* to_gpu = calloc(count + 1, sizeof *to_gpu);
  size_t batched = 0, batch_bytes = 0;
  int batch_ordinal = -1;
  CUstream batch_stream = NULL;
  OrtStatus* st = to && from && sizes && to_gpu ? NULL : seamless_status(1, "out of memory");
  for (size_t i = 0; !st && i < count; i++) {
    size_t nbytes = 0;
    void *from_i = NULL, *to_i = NULL;
    if ((st = ORT(GetTensorSizeInBytes)(src[i], &nbytes)) || !nbytes) continue;
    if ((st = ORT(GetTensorMutableData)((OrtValue*)src[i], &from_i))) break;
    if ((st = ORT(GetTensorMutableData)(dst[i], &to_i))) break;
    const OrtMemoryDevice* sd = ORT_EP(Value_GetMemoryDevice)(src[i]);
    const OrtMemoryDevice* dd = ORT_EP(Value_GetMemoryDevice)(dst[i]);
    const OrtMemoryDevice* gpu = is_our_gpu(sd) ? sd : dd;
    int ordinal = (int)ORT_EP(MemoryDevice_GetDeviceId)(gpu);
    if ((st = seamless_cuda_use(ordinal))) break;
    CUstream stream = streams && streams[i] ? (CUstream)ORT(SyncStream_GetHandle)(streams[i]) : NULL;
    int pageable = ORT_EP(MemoryDevice_GetDeviceType)(is_our_gpu(sd) ? dd : sd) == 0;
    CUfunction stage = __atomic_load_n(&g_stage[ordinal], __ATOMIC_ACQUIRE);
    if (stream && pageable && stage && nbytes <= BATCH_TENSOR_LIMIT && !capture_on_stream(stream) &&
        (batch_ordinal < 0 || (ordinal == batch_ordinal && stream == batch_stream)) && batched < BATCH_COUNT &&
        batch_bytes + align_up(nbytes) <= BATCH_BYTES) {
      batch_ordinal = ordinal, batch_stream = stream, batch_bytes += align_up(nbytes);
      to[batched] = to_i, from[batched] = from_i, sizes[batched] = nbytes, to_gpu[batched++] = is_our_gpu(dd);
      continue;
    }
    int to_host = is_host(dd) && !is_our_gpu(dd);
    CUresult r = copy_one(to_i, from_i, nbytes, stream, to_host);
    if (r) st = cuda_status(r, stream ? "cuMemcpyAsync" : "cuMemcpy");
    else if (to_host && stream) st = gpu_report_take(stream);  /* the outputs of a run that found a bad value */
  }
  if (!st && batched) {
    st = seamless_cuda_use(batch_ordinal);
    if (!st) st = batched > 1 ? batch_copy(batch_ordinal, batch_stream, to, from, sizes, to_gpu, batched) : NULL;
    CUresult r = !st && batched == 1 ? copy_one(to[0], from[0], sizes[0], batch_stream, !to_gpu[0]) : 0;
    if (r) st = cuda_status(r, "cuMemcpyAsync");  /* one tensor: its own copy is as cheap */
    int any_to_host = 0;
    for (size_t i = 0; i < batched; i++) any_to_host |= !to_gpu[i];
    if (!st && any_to_host) st = gpu_report_take(batch_stream);
  }
  free(to), free(from), free(sizes), free(to_gpu);
  return st;
}

static OrtDataTransferImpl g_transfer = {SEAMLESS_ORT_API_MAX, transfer_release, transfer_can_copy, transfer_copy};

/* ---- streams and notifications -------------------------------------------------------------- */
typedef struct { OrtSyncNotificationImpl base; CUevent event; CUstream stream; } SeamlessNotification;
typedef struct { OrtSyncStreamImpl base; CUstream stream; int ordinal; } SeamlessStream;

static void notification_release(OrtSyncNotificationImpl* self) {
  SeamlessNotification* n = (SeamlessNotification*)self;
  if (n->event) cu.event_destroy(n->event);
  free(n);
}
static OrtStatus* notification_activate(OrtSyncNotificationImpl* self) {
  SeamlessNotification* n = (SeamlessNotification*)self;
  CU_TRY(cu.event_record(n->event, n->stream), "cuEventRecord");
  return NULL;
}
static OrtStatus* notification_wait_on_device(OrtSyncNotificationImpl* self, OrtSyncStream* consumer) {
  SeamlessNotification* n = (SeamlessNotification*)self;
  CUstream other = consumer ? (CUstream)ORT(SyncStream_GetHandle)(consumer) : NULL;
  if (other) CU_TRY(cu.stream_wait_event(other, n->event, 0), "cuStreamWaitEvent");
  else CU_TRY(cu.event_synchronize(n->event), "cuEventSynchronize");
  return NULL;
}
static OrtStatus* notification_wait_on_host(OrtSyncNotificationImpl* self) {
  CU_TRY(cu.event_synchronize(((SeamlessNotification*)self)->event), "cuEventSynchronize");
  return NULL;
}

static void stream_release(OrtSyncStreamImpl* self) {
  SeamlessStream* s = (SeamlessStream*)self;
  gpu_report_forget(s->stream);
  if (s->stream) cu.stream_destroy(s->stream);
  free(s);
}
static void* stream_handle(OrtSyncStreamImpl* self) { return ((SeamlessStream*)self)->stream; }
static OrtStatus* stream_create_notification(OrtSyncStreamImpl* self, OrtSyncNotificationImpl** out) {
  SeamlessStream* s = (SeamlessStream*)self;
  SeamlessNotification* n = calloc(1, sizeof *n);
  if (!n) return seamless_status(1, "out of memory");
  TRY(seamless_cuda_use(s->ordinal));
  CUresult r = cu.event_create(&n->event, CU_EVENT_DISABLE_TIMING);
  if (r) { free(n); return cuda_status(r, "cuEventCreate"); }
  n->stream = s->stream;
  n->base.ort_version_supported = SEAMLESS_ORT_API_MAX;
  n->base.Release = notification_release;
  n->base.Activate = notification_activate;
  n->base.WaitOnDevice = notification_wait_on_device;
  n->base.WaitOnHost = notification_wait_on_host;
  *out = &n->base;
  return NULL;
}
static OrtStatus* stream_flush(OrtSyncStreamImpl* self) { (void)self; return NULL; }
/* Finish the run's work before ORT hands results back (outputs may be read on the host); a bad value a kernel
 * found fails the run. */
static OrtStatus* stream_on_run_end(OrtSyncStreamImpl* self) {
  if (capture_on_stream(((SeamlessStream*)self)->stream)) return NULL;  /* still capturing */
  CU_TRY(cu.stream_synchronize(((SeamlessStream*)self)->stream), "cuStreamSynchronize");
  return gpu_report_take(((SeamlessStream*)self)->stream);
}

OrtStatus* factory_create_stream(OrtEpFactory* f, const OrtMemoryDevice* device, const OrtKeyValuePairs* options,
                                 OrtSyncStreamImpl** out) {
  (void)f; (void)options;
  *out = NULL;
  if (!is_our_gpu(device) || ORT_EP(MemoryDevice_GetMemoryType)(device) != MEM_DEFAULT) return NULL;
  SeamlessStream* s = calloc(1, sizeof *s);
  if (!s) return seamless_status(1, "out of memory");
  s->ordinal = (int)ORT_EP(MemoryDevice_GetDeviceId)(device);
  OrtStatus* st = seamless_cuda_use(s->ordinal);
  CUresult r = st ? 0 : cu.stream_create(&s->stream, CU_STREAM_NON_BLOCKING);
  if (st || r) { free(s); return st ? st : cuda_status(r, "cuStreamCreate"); }
  s->base.ort_version_supported = SEAMLESS_ORT_API_MAX;
  s->base.Release = stream_release;
  s->base.GetHandle = stream_handle;
  s->base.CreateNotification = stream_create_notification;
  s->base.Flush = stream_flush;
  s->base.OnSessionRunEnd = stream_on_run_end;
  *out = &s->base;
  return NULL;
}

/* ---- the factory's device-facing members --------------------------------------------------- */
OrtStatus* factory_create_allocator(OrtEpFactory* f, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                    OrtAllocator** out) {
  (void)f; (void)options;
  const OrtMemoryDevice* d = ORT_EP(MemoryInfo_GetMemoryDevice)(info);
  int pinned = ORT_EP(MemoryDevice_GetMemoryType)(d) == MEM_HOST_ACCESSIBLE;
  SeamlessAllocator* a = seamless_cuda_allocator((int)ORT_EP(MemoryDevice_GetDeviceId)(d), pinned, info);
  *out = a ? &a->base : NULL;
  return a ? NULL : seamless_status(1, "SeamlessCUDAExecutionProvider: cannot create an allocator");
}
void factory_release_allocator(OrtEpFactory* f, OrtAllocator* a) { (void)f; (void)a; }  /* process lifetime */
OrtStatus* factory_create_cuda_transfer(OrtEpFactory* f, OrtDataTransferImpl** out) {
  (void)f;
  *out = &g_transfer;
  return NULL;
}
bool factory_cuda_stream_aware(const OrtEpFactory* f) { (void)f; return true; }

/* Memory infos live as long as the process: ORT keeps the pointers given to EpDevice_AddAllocatorInfo. */
static OrtMemoryInfo* g_memory_infos[SEAMLESS_MAX_GPUS][2];

/* One OrtEpDevice per NVIDIA GPU ORT found, matched to CUDA ordinals in order. */
OrtStatus* factory_cuda_devices(OrtEpFactory* f, const OrtHardwareDevice* const* devices, size_t n,
                                OrtEpDevice** ep_devices, size_t max, size_t* num) {
  *num = 0;
  if (*seamless_cuda_problem()) return NULL;  /* no usable GPU: offer no device; register() says why */
  int ordinal = 0;
  for (size_t i = 0; i < n && *num < max && ordinal < cu_device_count; i++) {
    if (ORT(HardwareDevice_Type)(devices[i]) != DEVICE_GPU ||
        ORT(HardwareDevice_VendorId)(devices[i]) != SEAMLESS_VENDOR_NVIDIA)
      continue;
    CUdevice dev;
    int major = 0, minor = 0;
    char name[256] = "", text[64];
    CU_TRY(cu.device_get(&dev, ordinal), "cuDeviceGet");
    cu.device_name(name, sizeof name, dev);
    cu.device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu.device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    for (int pinned = 0; pinned < 2; pinned++)
      if (!g_memory_infos[ordinal][pinned])
        TRY(ORT(CreateMemoryInfo_V2)(pinned ? "SeamlessCUDA_Pinned" : "SeamlessCUDA", DEVICE_GPU, SEAMLESS_VENDOR_NVIDIA,
                                     ordinal, pinned ? MEM_HOST_ACCESSIBLE : MEM_DEFAULT, 0, 0 /* device allocator */,
                                     &g_memory_infos[ordinal][pinned]));
    OrtKeyValuePairs* meta = NULL;
    ORT(CreateKeyValuePairs)(&meta);
    snprintf(text, sizeof text, "%d", ordinal);
    ORT(AddKeyValuePair)(meta, "cuda_device_id", text);
    ORT(AddKeyValuePair)(meta, "cuda_device_name", name);
    snprintf(text, sizeof text, "%d.%d", major, minor);
    ORT(AddKeyValuePair)(meta, "cuda_compute_capability", text);
    ORT(AddKeyValuePair)(meta, SEAMLESS_REGISTRATION_KEY, factory_registration(f));
    OrtEpDevice* d = NULL;
    OrtStatus* st = ORT_EP(CreateEpDevice)(f, devices[i], meta, NULL, &d);
    ORT(ReleaseKeyValuePairs)(meta);
    if (!st) st = ORT_EP(EpDevice_AddAllocatorInfo)(d, g_memory_infos[ordinal][0]);
    if (!st) st = ORT_EP(EpDevice_AddAllocatorInfo)(d, g_memory_infos[ordinal][1]);
    if (st) {
      if (d) ORT_EP(ReleaseEpDevice)(d);
      for (size_t j = 0; j < *num; j++) ORT_EP(ReleaseEpDevice)(ep_devices[j]);
      *num = 0;
      return st;
    }
    ep_devices[(*num)++] = d;
    ordinal++;
  }
  return NULL;
}
