/* onnxruntime-ep-seamless, CPU variant: a compiled node's Computes answered in C.
 * exec/program.py records the node's plan as a native program (native/cpu/program.h) per binding of
 * its input shapes and registers it here; a Compute whose inputs have a registered binding binds ORT's
 * inputs and outputs and runs the program with no Python call. Any other Compute goes to Python. */
#include <pthread.h>
#include <sched.h>

#include "glue.h"
#include "program.h"

#define RUNNER_BINDINGS 16   /* exec/program.py MAX_BINDINGS */
#define RUNNER_RANK 64       /* input and output ranks read (exec/compute.py MAX_RANK) */
#define RUNNER_IO 32         /* inputs, and outputs, a node answered in C may have */

typedef int (*ProgramRunFn)(const SeamlessProgram*, void* const*, char*, void*, void*, char*, size_t);

typedef struct {
  uint8_t* key;
  size_t key_len;
  const SeamlessProgram* program;   /* Python owns it */
  int32_t* out_ranks;
  int64_t* out_dims;                /* RUNNER_RANK per output */
  int busy;                         /* runs under way, counted under the lock */
} Binding;

struct SeamlessRunner {
  pthread_mutex_t lock;             /* the bindings table and busy counts */
  pthread_mutex_t arena_lock;       /* the arena: one run at a time; a concurrent run gets its own */
  int32_t n_in, n_out;
  ProgramRunFn run;
  const char* prefix;               /* error messages start with it (the EP and the fused node) */
  Binding* bindings[RUNNER_BINDINGS];
  char* arena;
  size_t arena_bytes;
};

static long long g_native_runs;  /* Computes answered in C */

long long seamless_native_runs(void) { return __atomic_load_n(&g_native_runs, __ATOMIC_RELAXED); }

static void binding_free(Binding* b) {
  if (!b) return;
  free(b->key); free(b->out_ranks); free(b->out_dims); free(b);
}

SeamlessRunner* seamless_runner_new(int n_in, int n_out, void* run_fn, const char* prefix) {
  SeamlessRunner* r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->lock, NULL);
  pthread_mutex_init(&r->arena_lock, NULL);
  r->n_in = n_in; r->n_out = n_out; r->run = (ProgramRunFn)run_fn;
  r->prefix = strdup(prefix);
  return r;
}

void seamless_runner_free(SeamlessRunner* r) {
  if (!r) return;
  for (int i = 0; i < RUNNER_BINDINGS; i++) binding_free(r->bindings[i]);
  pthread_mutex_destroy(&r->lock);
  pthread_mutex_destroy(&r->arena_lock);
  free((void*)r->prefix); free(r->arena); free(r);
}

size_t seamless_runner_key_capacity(const SeamlessRunner* r) { return (size_t)r->n_in * (2 + RUNNER_RANK) * sizeof(int64_t); }

/* A binding's key (at most seamless_runner_key_capacity bytes): per input its rank (-1: absent), element
 * type and dims; dims at stride max_rank, as seamless_get_inputs leaves them. Returns its length. */
size_t seamless_runner_key(const SeamlessRunner* r, const int64_t* dims, const int32_t* ranks, const int32_t* types,
                           size_t max_rank, uint8_t* key) {
  int64_t* k = (int64_t*)key;
  size_t n = 0;
  for (int i = 0; i < r->n_in; i++) {
    k[n++] = ranks[i];
    k[n++] = types[i];
    for (int d = 0; d < ranks[i]; d++) k[n++] = dims[(size_t)i * max_rank + (size_t)d];
  }
  return n * sizeof *k;
}

/* Register a program for a binding (the outputs' ranks and dims at stride max_rank). The slot, or -1 when
 * the table is full (Python removes the least recently recorded first) or memory is short. */
int seamless_runner_add(SeamlessRunner* r, const uint8_t* key, size_t key_len, const void* program,
                        const int32_t* out_ranks, const int64_t* out_dims, size_t max_rank) {
  Binding* b = calloc(1, sizeof *b);
  size_t n_out = r->n_out ? (size_t)r->n_out : 1;
  if (!b || !(b->key = malloc(key_len ? key_len : 1)) || !(b->out_ranks = calloc(n_out, sizeof *b->out_ranks)) ||
      !(b->out_dims = calloc(n_out * RUNNER_RANK, sizeof *b->out_dims))) {
    binding_free(b);
    return -1;
  }
  memcpy(b->key, key, key_len);
  b->key_len = key_len;
  b->program = program;
  for (int j = 0; j < r->n_out; j++) {
    b->out_ranks[j] = out_ranks[j];
    for (int d = 0; d < out_ranks[j] && d < RUNNER_RANK; d++)
      b->out_dims[(size_t)j * RUNNER_RANK + (size_t)d] = out_dims[(size_t)j * max_rank + (size_t)d];
  }
  int slot = -1;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < RUNNER_BINDINGS && slot < 0; i++)
    if (!r->bindings[i]) slot = i;
  if (slot >= 0) r->bindings[slot] = b;
  pthread_mutex_unlock(&r->lock);
  if (slot < 0) binding_free(b);
  return slot;
}

/* Unregister a slot's binding: once this returns, no Compute runs its program. */
void seamless_runner_remove(SeamlessRunner* r, int slot) {
  if (slot < 0 || slot >= RUNNER_BINDINGS) return;
  pthread_mutex_lock(&r->lock);
  Binding* b = r->bindings[slot];
  r->bindings[slot] = NULL;
  while (b && b->busy) {  /* a run of it is under way: wait for it */
    pthread_mutex_unlock(&r->lock);
    sched_yield();
    pthread_mutex_lock(&r->lock);
  }
  pthread_mutex_unlock(&r->lock);
  binding_free(b);
}

/* A Compute answered in C when its inputs' binding has a program (*done = 1); else Python runs it. */
OrtStatus* runner_compute(SeamlessRunner* r, OrtKernelContext* ctx, int* done) {
  *done = 0;
  size_t n_in = (size_t)r->n_in, n_out = (size_t)r->n_out;
  if (n_in > RUNNER_IO || n_out > RUNNER_IO) return NULL;  /* wide nodes: Python */
  void* io[2 * RUNNER_IO];
  size_t nbytes[RUNNER_IO];
  int32_t types[RUNNER_IO], ranks[RUNNER_IO];
  uint8_t changed[RUNNER_IO];
  int64_t dims[RUNNER_IO * RUNNER_RANK];
  int64_t key[RUNNER_IO * (2 + SEAMLESS_PROGRAM_RANK)];
  for (size_t i = 0; i < n_in; i++) ranks[i] = -2;
  OrtStatus* st = NULL;
  if (seamless_get_inputs(ctx, n_in, io, nbytes, types, ranks, dims, RUNNER_RANK, changed, &st) < 0) return st;
  for (size_t i = 0; i < n_in; i++)
    if (ranks[i] > SEAMLESS_PROGRAM_RANK) return NULL;  /* programs hold no such rank */
  size_t key_len = seamless_runner_key(r, dims, ranks, types, RUNNER_RANK, (uint8_t*)key);
  Binding* b = NULL;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < RUNNER_BINDINGS && !b; i++) {
    Binding* c = r->bindings[i];
    if (c && c->key_len == key_len && !memcmp(c->key, key, key_len)) b = c;
  }
  if (b) b->busy++;
  pthread_mutex_unlock(&r->lock);
  if (!b) return NULL;
  *done = 1;
  st = seamless_get_outputs(ctx, n_out, b->out_ranks, b->out_dims, RUNNER_RANK, io + n_in);
  if (!st) {
    const SeamlessProgram* p = b->program;
    size_t need = ((size_t)p->arena_bytes + 63) & ~(size_t)63;
    /* the runner's arena, or (another run holds it) one of this run's own */
    int shared = pthread_mutex_trylock(&r->arena_lock) == 0;
    if (shared && r->arena_bytes < need) {
      free(r->arena);
      r->arena = aligned_alloc(64, need);
      r->arena_bytes = r->arena ? need : 0;
    }
    char* arena = shared ? r->arena : (need ? aligned_alloc(64, need) : NULL);
    if (need && !arena) {
      st = seamless_status(1, "out of memory for the program's arena");
    } else {
      char message[SEAMLESS_PROGRAM_ERROR] = "";
      int code = r->run(p, io, arena, (void*)seamless_parallel_for, ctx, message, sizeof message);
      if (code) {
        char error[SEAMLESS_PROGRAM_ERROR + 256];
        snprintf(error, sizeof error, "%s%s", r->prefix, message);
        st = seamless_status(code, error);
      }
    }
    if (shared) pthread_mutex_unlock(&r->arena_lock);
    else free(arena);
  }
  pthread_mutex_lock(&r->lock);
  b->busy--;
  pthread_mutex_unlock(&r->lock);
  __atomic_add_fetch(&g_native_runs, 1, __ATOMIC_RELAXED);
  return st;
}
