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
#define RUNNER_IO 32         /* inputs, and outputs, a Compute reads into stack memory (more: heap) */
#define RUNNER_VALUE_BYTES 64  /* the most bytes of an input keyed by its value (exec/program.py VALUE_BYTES) */
#define KEY_VALUE_WORDS (1 + RUNNER_VALUE_BYTES / 8)

typedef int (*ProgramRunFn)(const SeamlessProgram*, void* const*, char*, void*, void*, char*, size_t);

typedef struct {
  uint8_t* key;
  size_t key_len;
  const SeamlessProgram* program;   /* Python owns it */
  int32_t* out_ranks;
  int64_t* out_dims;                /* RUNNER_RANK per output */
  int busy;                         /* runs under way, counted under the lock */
} Binding;

#define RUNNER_FAMILIES 4   /* exec/program.py MAX_FAMILIES */

typedef struct {
  const SeamlessFamily* family;     /* Python owns it */
  pthread_mutex_t lock;             /* one run at a time: the template is patched for it */
  int busy;                         /* runs under way or waiting, counted under the runner's lock */
  int64_t t;                        /* the t the template is patched for (-1: none yet) */
  int32_t* out_ranks;
  int64_t* out_dims;                /* RUNNER_RANK per output */
  int64_t (*placed)[3];             /* scratch of the arena layout: offset, end, last step */
  char* arena;
  size_t arena_bytes;
} Family;

struct SeamlessRunner {
  pthread_mutex_t lock;             /* the bindings table and busy counts */
  pthread_mutex_t arena_lock;       /* the arena: one run at a time; a concurrent run gets its own */
  int32_t n_in, n_out;
  ProgramRunFn run;
  const char* prefix;               /* error messages start with it (the EP and the fused node) */
  uint8_t* by_value;                /* per input: its value is part of a binding's key (an If's condition) */
  Binding* bindings[RUNNER_BINDINGS];
  Family* families[RUNNER_FAMILIES];
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
  if (!(r->prefix = strdup(prefix)) || !(r->by_value = calloc(n_in ? (size_t)n_in : 1, 1))) {
    seamless_runner_free(r);
    return NULL;
  }
  return r;
}

static void family_free(Family* f) {
  if (!f) return;
  pthread_mutex_destroy(&f->lock);
  free(f->out_ranks); free(f->out_dims); free(f->placed); free(f->arena); free(f);
}

void seamless_runner_free(SeamlessRunner* r) {
  if (!r) return;
  for (int i = 0; i < RUNNER_BINDINGS; i++) binding_free(r->bindings[i]);
  for (int i = 0; i < RUNNER_FAMILIES; i++) family_free(r->families[i]);
  pthread_mutex_destroy(&r->lock);
  pthread_mutex_destroy(&r->arena_lock);
  free((void*)r->prefix); free(r->by_value); free(r->arena); free(r);
}

size_t seamless_runner_key_capacity(const SeamlessRunner* r) {
  return (size_t)r->n_in * (2 + RUNNER_RANK + KEY_VALUE_WORDS) * sizeof(int64_t);
}

void seamless_runner_key_by_value(SeamlessRunner* r, int input) {
  if (input >= 0 && input < r->n_in) r->by_value[input] = 1;
}

/* A binding's key (at most seamless_runner_key_capacity bytes): per input its rank (-1: absent), element
 * type and dims; dims at stride max_rank, as seamless_get_inputs leaves them. Returns its length. */
size_t seamless_runner_key(const SeamlessRunner* r, const int64_t* dims, const int32_t* ranks, const int32_t* types,
                           size_t max_rank, void* const* data, const size_t* nbytes, uint8_t* key) {
  int64_t* k = (int64_t*)key;
  size_t n = 0;
  for (int i = 0; i < r->n_in; i++) {
    k[n++] = ranks[i];
    k[n++] = types[i];
    for (int d = 0; d < ranks[i]; d++) k[n++] = dims[(size_t)i * max_rank + (size_t)d];
    if (!r->by_value[i]) continue;
    if (ranks[i] < 0 || nbytes[i] > RUNNER_VALUE_BYTES) return (size_t)-1;  /* no key: Python runs it */
    k[n++] = (int64_t)nbytes[i];
    memset(k + n, 0, KEY_VALUE_WORDS * 8 - 8);
    if (nbytes[i]) memcpy(k + n, data[i], nbytes[i]);
    n += (nbytes[i] + 7) / 8;
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

/* With r->lock held: wait until no run uses what `busy` counts (runs under way finish; new ones no longer find it). */
static void wait_unused(SeamlessRunner* r, const int* busy) {
  while (*busy) {
    pthread_mutex_unlock(&r->lock);
    sched_yield();
    pthread_mutex_lock(&r->lock);
  }
}

/* Unregister a slot's binding: once this returns, no Compute runs its program. */
void seamless_runner_remove(SeamlessRunner* r, int slot) {
  if (slot < 0 || slot >= RUNNER_BINDINGS) return;
  pthread_mutex_lock(&r->lock);
  Binding* b = r->bindings[slot];
  r->bindings[slot] = NULL;
  if (b) wait_unused(r, &b->busy);
  pthread_mutex_unlock(&r->lock);
  binding_free(b);
}

/* Register a family (exec/program.py); its slot, or -1 when the table is full or memory is short. */
int seamless_runner_add_family(SeamlessRunner* r, const void* family) {
  const SeamlessFamily* sf = family;
  Family* f = calloc(1, sizeof *f);
  size_t n_out = r->n_out ? (size_t)r->n_out : 1, n_arena = sf->n_arena ? (size_t)sf->n_arena : 1;
  if (!f || !(f->out_ranks = calloc(n_out, sizeof *f->out_ranks)) ||
      !(f->out_dims = calloc(n_out * RUNNER_RANK, sizeof *f->out_dims)) ||
      !(f->placed = calloc(n_arena, sizeof *f->placed))) {
    if (f) { free(f->out_ranks); free(f->out_dims); free(f); }
    return -1;
  }
  pthread_mutex_init(&f->lock, NULL);
  f->family = sf;
  f->t = -1;
  int slot = -1;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < RUNNER_FAMILIES && slot < 0; i++)
    if (!r->families[i]) slot = i;
  if (slot >= 0) r->families[slot] = f;
  pthread_mutex_unlock(&r->lock);
  if (slot < 0) family_free(f);
  return slot;
}

void seamless_runner_remove_family(SeamlessRunner* r, int slot) {
  if (slot < 0 || slot >= RUNNER_FAMILIES) return;
  pthread_mutex_lock(&r->lock);
  Family* f = r->families[slot];
  r->families[slot] = NULL;
  if (f) wait_unused(r, &f->busy);
  pthread_mutex_unlock(&r->lock);
  family_free(f);
}

/* t when the key belongs to the family, else -1. */
static int64_t family_t(const SeamlessFamily* f, const int64_t* key, size_t key_len) {
  if (key_len != (size_t)f->key_words * sizeof *key) return -1;
  int64_t t = key[f->t_word];
  if (t < f->t_min || t > f->t_max) return -1;
  for (int w = 0; w < f->key_words; w++)
    if (key[w] != f->key_base[w] + f->key_slope[w] * (t - f->t0)) return -1;
  return t;
}

/* The template patched for t: argument fields, constants, output dims and the arena's layout (each value at the
 * lowest offset clear of the values live with it, in exec/program.py's order). 0, or 1 when a size is negative. */
static int family_instantiate(Family* fe, int64_t t, int n_out) {
  const SeamlessFamily* f = fe->family;
  for (int i = 0; i < f->n_patches; i++) {
    const SeamlessPatch* p = &f->patches[i];
    int64_t v = p->a + p->b * t;
    if (p->width == 4) *(int32_t*)p->field = (int32_t)v;
    else *(int64_t*)p->field = v;
  }
  for (int j = 0; j < n_out; j++) {
    fe->out_ranks[j] = f->out_ranks[j];
    for (int d = 0; d < f->out_ranks[j]; d++) {
      size_t at = (size_t)j * (size_t)f->max_rank + (size_t)d;
      int64_t v = f->out_a[at] + f->out_b[at] * t;
      if (v < 0) return 1;
      fe->out_dims[(size_t)j * RUNNER_RANK + (size_t)d] = v;
    }
  }
  int64_t* offset = (int64_t*)f->program->offset;
  int64_t top = 0, n_placed = 0;
  for (int k = 0; k < f->n_arena; k++) {
    const SeamlessArenaValue* v = &f->arena[k];
    int64_t bytes = v->a + v->b * t;
    if (bytes < 0) return 1;
    bytes = (bytes + 63) & ~(int64_t)63;
    int64_t at = 0;
    for (int64_t i = 0; i < n_placed; i++) {  /* placed is sorted by offset */
      if (fe->placed[i][2] < v->first) continue;  /* dead before this value is written */
      if (at + bytes <= fe->placed[i][0]) break;
      if (fe->placed[i][1] > at) at = fe->placed[i][1];
    }
    offset[v->slot] = at;
    int64_t i = n_placed++;
    while (i > 0 && fe->placed[i - 1][0] > at) {
      memcpy(fe->placed[i], fe->placed[i - 1], sizeof fe->placed[i]);
      i--;
    }
    fe->placed[i][0] = at; fe->placed[i][1] = at + bytes; fe->placed[i][2] = v->last;
    if (at + bytes > top) top = at + bytes;
  }
  f->program->arena_bytes = top;
  fe->t = t;
  return 0;
}

static long long g_family_runs;  /* Computes answered by a family's instantiation */

long long seamless_family_runs(void) { return __atomic_load_n(&g_family_runs, __ATOMIC_RELAXED); }

/* An arena of at least `need` bytes on cache lines: *arena, grown (its old bytes dropped) when short; NULL when
 * memory is short. */
static char* grown(char** arena, size_t* bytes, size_t need) {
  if (*bytes < need) {
    free(*arena);
    *arena = aligned_alloc(64, need);
    *bytes = *arena ? need : 0;
  }
  return *arena;
}

static OrtStatus* run_program(SeamlessRunner* r, const SeamlessProgram* p, char* arena, void** io,
                              OrtKernelContext* ctx) {
  char message[SEAMLESS_PROGRAM_ERROR] = "";
  int code = r->run(p, io, arena, (void*)seamless_parallel_for, ctx, message, sizeof message);
  if (!code) return NULL;
  char error[SEAMLESS_PROGRAM_ERROR + 256];
  snprintf(error, sizeof error, "%s%s", r->prefix, message);
  return seamless_status(code, error);
}

/* A family's run: its template patched for t (unless it is already), ORT's outputs, the program. */
static OrtStatus* family_compute(SeamlessRunner* r, Family* fe, int64_t t, OrtKernelContext* ctx, void** io,
                                 int* done) {
  OrtStatus* st = NULL;
  pthread_mutex_lock(&fe->lock);
  const SeamlessProgram* p = fe->family->program;
  if (fe->t != t && family_instantiate(fe, t, r->n_out)) {
    fe->t = -1;  /* a negative size: not this family's binding after all; Python runs it */
  } else {
    *done = 1;
    st = seamless_get_outputs(ctx, (size_t)r->n_out, fe->out_ranks, fe->out_dims, RUNNER_RANK, io + r->n_in);
    size_t need = ((size_t)p->arena_bytes + 63) & ~(size_t)63;
    if (!st && need && !grown(&fe->arena, &fe->arena_bytes, need))
      st = seamless_status(1, "out of memory for the program's arena");
    if (!st) st = run_program(r, p, fe->arena, io, ctx);
    __atomic_add_fetch(&g_family_runs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_native_runs, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&fe->lock);
  pthread_mutex_lock(&r->lock);
  fe->busy--;
  pthread_mutex_unlock(&r->lock);
  return st;
}

/* A Compute's inputs and outputs as the glue reads them: on the stack for up to RUNNER_IO of each, else on the heap. */
typedef struct {
  void** io;
  size_t* nbytes;
  int32_t *types, *ranks;
  uint8_t* changed;
  int64_t *dims, *key;
} Io;

#define IO_FIELDS(n_in, n_out)                                                                                   \
  (n_in + n_out) * sizeof(void*) + (n_in) * (sizeof(size_t) + 2 * sizeof(int32_t) + 1) +                       \
      (n_in) * (RUNNER_RANK + 2 + SEAMLESS_PROGRAM_RANK + KEY_VALUE_WORDS) * sizeof(int64_t)

static void io_layout(Io* io, char* p, size_t n_in, size_t n_out) {
  io->dims = (int64_t*)p; p += n_in * RUNNER_RANK * sizeof(int64_t);
  io->key = (int64_t*)p; p += n_in * (2 + SEAMLESS_PROGRAM_RANK + KEY_VALUE_WORDS) * sizeof(int64_t);
  io->io = (void**)p; p += (n_in + n_out) * sizeof(void*);
  io->nbytes = (size_t*)p; p += n_in * sizeof(size_t);
  io->types = (int32_t*)p; p += n_in * sizeof(int32_t);
  io->ranks = (int32_t*)p; p += n_in * sizeof(int32_t);
  io->changed = (uint8_t*)p;
}

static OrtStatus* runner_compute_io(SeamlessRunner* r, OrtKernelContext* ctx, int* done, Io* b);

/* A Compute answered in C when its inputs' binding has a program (*done = 1); else Python runs it. */
OrtStatus* runner_compute(SeamlessRunner* r, OrtKernelContext* ctx, int* done) {
  size_t n_in = (size_t)r->n_in, n_out = (size_t)r->n_out;
  _Alignas(16) char stack[IO_FIELDS(RUNNER_IO, RUNNER_IO)];
  char* heap = n_in > RUNNER_IO || n_out > RUNNER_IO ? malloc(IO_FIELDS(n_in, n_out)) : NULL;
  *done = 0;
  if (!heap && (n_in > RUNNER_IO || n_out > RUNNER_IO)) return NULL;  /* out of memory: Python runs it */
  Io b;
  io_layout(&b, heap ? heap : stack, n_in, n_out);
  OrtStatus* st = runner_compute_io(r, ctx, done, &b);
  free(heap);
  return st;
}

static OrtStatus* runner_compute_io(SeamlessRunner* r, OrtKernelContext* ctx, int* done, Io* b_io) {
  size_t n_in = (size_t)r->n_in, n_out = (size_t)r->n_out;
  void** io = b_io->io;
  size_t* nbytes = b_io->nbytes;
  int32_t *types = b_io->types, *ranks = b_io->ranks;
  uint8_t* changed = b_io->changed;
  int64_t *dims = b_io->dims, *key = b_io->key;
  for (size_t i = 0; i < n_in; i++) ranks[i] = -2;
  OrtStatus* st = NULL;
  if (seamless_get_inputs(ctx, n_in, io, nbytes, types, ranks, dims, RUNNER_RANK, changed, &st) < 0) return st;
  for (size_t i = 0; i < n_in; i++)
    if (ranks[i] > SEAMLESS_PROGRAM_RANK) return NULL;  /* programs hold no such rank */
  size_t key_len = seamless_runner_key(r, dims, ranks, types, RUNNER_RANK, io, nbytes, (uint8_t*)key);
  if (key_len == (size_t)-1) return NULL;
  Binding* b = NULL;
  pthread_mutex_lock(&r->lock);
  for (int i = 0; i < RUNNER_BINDINGS && !b; i++) {
    Binding* c = r->bindings[i];
    if (c && c->key_len == key_len && !memcmp(c->key, key, key_len)) b = c;
  }
  if (b) b->busy++;
  Family* fam = NULL;
  int64_t t = -1;
  for (int i = 0; i < RUNNER_FAMILIES && !b && !fam; i++)
    if (r->families[i] && (t = family_t(r->families[i]->family, key, key_len)) >= 0) fam = r->families[i];
  if (fam) fam->busy++;
  pthread_mutex_unlock(&r->lock);
  if (fam) return family_compute(r, fam, t, ctx, io, done);
  if (!b) return NULL;
  *done = 1;
  st = seamless_get_outputs(ctx, n_out, b->out_ranks, b->out_dims, RUNNER_RANK, io + n_in);
  if (!st) {
    const SeamlessProgram* p = b->program;
    size_t need = ((size_t)p->arena_bytes + 63) & ~(size_t)63;
    /* the runner's arena, or (another run holds it) one of this run's own */
    int shared = pthread_mutex_trylock(&r->arena_lock) == 0;
    char* arena = !need ? NULL : shared ? grown(&r->arena, &r->arena_bytes, need) : aligned_alloc(64, need);
    st = need && !arena ? seamless_status(1, "out of memory for the program's arena") : run_program(r, p, arena, io, ctx);
    if (shared) pthread_mutex_unlock(&r->arena_lock);
    else free(arena);
  }
  pthread_mutex_lock(&r->lock);
  b->busy--;
  pthread_mutex_unlock(&r->lock);
  __atomic_add_fetch(&g_native_runs, 1, __ATOMIC_RELAXED);
  return st;
}
