/* onnxruntime-ep-seamless, CUDA variant: ORT's session graph capture (ORT >= 1.26, option
 * enable_cuda_graph=1). ORT repeats a run until IsGraphCaptured: after SEAMLESS_WARMUP_RUNS
 * warm-ups of a graph id (run option gpu_graph_id), the next run is captured on the stream of its
 * first Compute and launched once (captured work does not run); later runs only ReplayGraph.
 * Replays reuse the capture's addresses, so GPU memory freed while capturing, and the pinned
 * copies of host data uploaded then, belong to the graph until it is released. The executor's
 * segment capture (option capture=auto) is here too: cuda_replay.c replays its segments. */
#include <pthread.h>

#include "cuda_ep.h"

#define SEAMLESS_MAX_GRAPHS 32
#define SEAMLESS_WARMUP_RUNS 2
#define GRAPH_POLICY_ALLOW_CPU_FOR_SHAPES 1

typedef struct Retained { struct Retained* next; void* ptr; int pinned; } Retained;

/* One step of a launch program (a segment recorded, not captured: capture=off with native_program=1). */
enum { OP_LAUNCH, OP_COPY, OP_ZERO, OP_GEMM };
typedef struct {
  int kind;
  CUfunction fn;                /* OP_LAUNCH: seamless_cuda_launch's arguments, the packed bytes copied */
  unsigned gx, gy, block, shared;
  int count, dependent;
  char* packed;
  int32_t* offsets;
  uintptr_t dst, src;           /* OP_COPY (src: device or pinned memory the program keeps), OP_ZERO */
  size_t nbytes;                /* and OP_LAUNCH's packed bytes */
  GemmCall gemm;                /* OP_GEMM */
} ProgramOp;

typedef struct {
  int used, id, runs;
  int listed;                   /* a launch program (ops) instead of a CUDA graph (exec) */
  ProgramOp* ops;
  size_t n_ops, cap_ops;
  CUgraphExec exec;
  CUstream stream;
  Retained* memory;
  CUevent began, ended;  /* replay timing's, made at the first timed replay */
} CapturedGraph;

/* Replay timing (bench decode-gpu): while on, each ReplayGraph records its graph's GPU time, from an event
 * before the launch to one after, so a step's GPU time is known apart from the host's share of the run call.
 * Off by default: the records and the read cost the run call host time. */
#define REPLAY_TIMES 65536
static struct {
  pthread_mutex_t lock;
  int on;
  size_t count;  /* replays timed since timing began; the first REPLAY_TIMES are kept */
  float us[REPLAY_TIMES];
} g_replay_timing = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}};

struct SeamlessCapture {
  int ordinal;
  pthread_mutex_t lock;
  CapturedGraph graphs[SEAMLESS_MAX_GRAPHS];
};

/* The run on this thread: its graph while warming up or capturing; state 1 = capture begins at
 * the first Compute, 2 = capturing on tl_stream. */
static __thread CapturedGraph* tl_graph;
static __thread int tl_state;
static __thread CUstream tl_stream;
static void bodies_abort(void);  /* an If's branch bodies still being captured, ended */

SeamlessCapture* capture_new(int ordinal) {
  SeamlessCapture* c = calloc(1, sizeof *c);
  if (c) {
    c->ordinal = ordinal;
    pthread_mutex_init(&c->lock, NULL);
  }
  return c;
}

static void ops_release(CapturedGraph* g) {
  for (size_t i = 0; i < g->n_ops; i++) {
    free(g->ops[i].packed);
    free(g->ops[i].offsets);
  }
  free(g->ops);
  g->ops = NULL;
  g->n_ops = g->cap_ops = 0;
}

static void graph_release(int ordinal, CapturedGraph* g) {
  if (g->exec) cu.graph_exec_destroy(g->exec);
  ops_release(g);
  if (g->began) cu.event_destroy(g->began);
  if (g->ended) cu.event_destroy(g->ended);
  for (Retained* r = g->memory; r;) {
    Retained* next = r->next;
    cuda_cached_free(ordinal, r->pinned, r->ptr);
    free(r);
    r = next;
  }
  memset(g, 0, sizeof *g);
}

void capture_release(SeamlessCapture* c) {
  if (!c) return;
  for (int i = 0; i < SEAMLESS_MAX_GRAPHS; i++)
    if (c->graphs[i].used) graph_release(c->ordinal, &c->graphs[i]);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* The graph of annotation id `id` (made when `add`), or NULL. */
static CapturedGraph* graph_of(SeamlessCapture* c, int id, int add) {
  CapturedGraph* found = NULL;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < SEAMLESS_MAX_GRAPHS && !found; i++)
    if (c->graphs[i].used && c->graphs[i].id == id) found = &c->graphs[i];
  for (int i = 0; i < SEAMLESS_MAX_GRAPHS && !found && add; i++)
    if (!c->graphs[i].used) {
      found = &c->graphs[i];
      found->used = 1;
      found->id = id;
    }
  pthread_mutex_unlock(&c->lock);
  return found;
}

OrtStatus* capture_on_run_start(OrtEp* ep, const OrtRunOptions* options) {
  const char* text = ORT(GetRunConfigEntry)(options, "gpu_graph_id");
  int id = text ? atoi(text) : 0;
  tl_graph = NULL;
  tl_state = 0;
  if (id == -1) return NULL;  /* this run is neither captured nor replayed */
  CapturedGraph* g = graph_of(capture_of(ep), id, 1);
  if (!g) return seamless_status(1, "SeamlessCUDAExecutionProvider: more than 32 CUDA graphs (gpu_graph_id values) "
                                    "in one session; release some with InferenceSession.release_captured_graph");
  tl_graph = g;
  if (++g->runs > SEAMLESS_WARMUP_RUNS) tl_state = 1;
  return NULL;
}

/* At each Compute: begin the pending capture on the Compute's stream. */
OrtStatus* seamless_capture_begin(void* stream) {
  if (tl_state == 1) {
    CU_TRY(cu.stream_begin_capture((CUstream)stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
    tl_state = 2;
    tl_stream = (CUstream)stream;
  } else if (tl_state == 2 && (CUstream)stream != tl_stream) {
    return seamless_status(1, "SeamlessCUDAExecutionProvider: CUDA graph capture needs every partition of the "
                              "session on one stream");
  }
  return NULL;
}

int seamless_capturing(void) { return tl_state == 2; }

int capture_under_way(void) { return tl_state != 0; }

int capture_on_stream(CUstream stream) { return tl_state == 2 && tl_stream == stream; }

OrtStatus* capture_on_run_end(OrtEp* ep, const OrtRunOptions* options, bool sync_stream) {
  (void)ep; (void)options; (void)sync_stream;
  CapturedGraph* g = tl_graph;
  int state = tl_state;
  tl_graph = NULL;
  tl_state = 0;
  if (state == 1)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: enable_cuda_graph=1 but no node of the session ran "
                              "on this EP, so there is nothing to capture");
  if (state != 2) return NULL;
  bodies_abort();
  CUgraph graph = NULL;
  CU_TRY(cu.stream_end_capture(tl_stream, &graph), "cuStreamEndCapture (a node of the session cannot be captured)");
  CUresult r = cu.graph_instantiate(&g->exec, graph, 0);
  cu.graph_destroy(graph);
  if (r) { g->exec = NULL; return cuda_status(r, "cuGraphInstantiate"); }
  g->stream = tl_stream;
  CU_TRY(cu.graph_launch(g->exec, g->stream), "cuGraphLaunch");  /* the capture run's own results */
  CU_TRY(cu.stream_synchronize(g->stream), "cuStreamSynchronize");
  return NULL;
}

/* A Compute failed while capturing: end the capture (the stream must not stay capturing) and
 * forget what was captured, so a later run may warm up and try again. */
void capture_abort(void) {
  if (tl_state != 2) return;
  bodies_abort();
  CUgraph graph = NULL;
  if (!cu.stream_end_capture(tl_stream, &graph) && graph) cu.graph_destroy(graph);
  tl_state = 0;
}

bool capture_enabled(const OrtEp* ep) { (void)ep; return true; }

bool capture_is_captured(const OrtEp* ep, int id) {
  CapturedGraph* g = graph_of(capture_of(ep), id, 0);
  return g && g->exec;
}

OrtStatus* capture_replay(OrtEp* ep, int id) {
  SeamlessCapture* c = capture_of(ep);
  CapturedGraph* g = graph_of(c, id, 0);
  if (!g || !g->exec) return seamless_status(1, "SeamlessCUDAExecutionProvider: no captured CUDA graph for this id");
  TRY(seamless_cuda_use(c->ordinal));
  int timed = __atomic_load_n(&g_replay_timing.on, __ATOMIC_RELAXED);
  if (timed && !g->ended) {
    CU_TRY(g->began ? 0 : cu.event_create(&g->began, 0), "cuEventCreate");
    CU_TRY(cu.event_create(&g->ended, 0), "cuEventCreate");
  }
  if (timed) CU_TRY(cu.event_record(g->began, g->stream), "cuEventRecord");
  CU_TRY(cu.graph_launch(g->exec, g->stream), "cuGraphLaunch");
  if (timed) CU_TRY(cu.event_record(g->ended, g->stream), "cuEventRecord");
  CU_TRY(cu.stream_synchronize(g->stream), "cuStreamSynchronize");  /* the run's outputs are ready when it returns */
  if (timed) {
    float ms = 0;
    CU_TRY(cu.event_elapsed(&ms, g->began, g->ended), "cuEventElapsedTime");
    pthread_mutex_lock(&g_replay_timing.lock);
    if (g_replay_timing.count < REPLAY_TIMES) g_replay_timing.us[g_replay_timing.count] = ms * 1e3f;
    g_replay_timing.count++;
    pthread_mutex_unlock(&g_replay_timing.lock);
  }
  return NULL;
}

/* Replay timing on (from no replays timed) or off; returns how many replays were timed. */
size_t seamless_replay_timing(int on) {
  pthread_mutex_lock(&g_replay_timing.lock);
  if (on) g_replay_timing.count = 0;
  __atomic_store_n(&g_replay_timing.on, on, __ATOMIC_RELAXED);
  size_t count = g_replay_timing.count;
  pthread_mutex_unlock(&g_replay_timing.lock);
  return count;
}

/* The GPU times (microseconds) of the first `max` replays timed, in order; returns how many were written. */
size_t seamless_replay_times(float* out, size_t max) {
  pthread_mutex_lock(&g_replay_timing.lock);
  size_t n = g_replay_timing.count < REPLAY_TIMES ? g_replay_timing.count : REPLAY_TIMES;
  n = n < max ? n : max;
  memcpy(out, g_replay_timing.us, n * sizeof *out);
  pthread_mutex_unlock(&g_replay_timing.lock);
  return n;
}

OrtGraphCaptureNodeAssignmentPolicy capture_policy(const OrtEp* ep) {
  (void)ep;
  return (OrtGraphCaptureNodeAssignmentPolicy)GRAPH_POLICY_ALLOW_CPU_FOR_SHAPES;
}

OrtStatus* capture_release_graph(OrtEp* ep, int id) {
  SeamlessCapture* c = capture_of(ep);
  CapturedGraph* g = graph_of(c, id, 0);
  if (g) {
    pthread_mutex_lock(&c->lock);
    graph_release(c->ordinal, g);
    pthread_mutex_unlock(&c->lock);
  }
  return NULL;
}

/* ---- control flow inside a capture: conditional graph nodes --------------------------------------
 * A branch chosen by a bool on the GPU stays inside the captured graph: a kernel sets two conditional handles from
 * the bool (native/cuda/control.cu seamless_if_branches: then = cond, else = !cond), and two IF nodes after it hold
 * the branches. A Loop is one WHILE node: a kernel before it sets its handle for the first iteration, one at the end
 * of its body for the next (seamless_loop_start / _next). Each body is captured from a stream of its own
 * (cuStreamBeginCaptureToGraph) while the segment's capture waits; the segment's later work depends on the nodes.
 * A body may hold control flow of its own: bodies nest. */
#define MAX_BODY_DEPTH 8
static __thread CUstream tl_bodies[MAX_BODY_DEPTH];
static __thread int tl_depth;

/* The graph `stream` is capturing into, and its frontier (what a node added now depends on). */
static OrtStatus* capture_frontier(CUstream stream, CUgraph* graph, const CUgraphNode** deps,
                                   const CUgraphEdgeData** edges, size_t* n) {
  if (!cu.conditional_handle_create || !cu.stream_capture_info || !cu.graph_add_node ||
      !cu.stream_update_capture_dependencies || !cu.stream_begin_capture_to_graph)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: an If or Loop decided on the GPU inside a captured graph "
                              "needs conditional graph nodes, which this NVIDIA driver lacks (it needs CUDA 12.4 or "
                              "newer)");
  CUstreamCaptureStatus status = 0;
  CU_TRY(cu.stream_capture_info(stream, &status, NULL, graph, deps, edges, n), "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: conditional graph nodes outside a capture");
  return NULL;
}

/* n conditional handles of the graph `stream` captures into, 0 at each launch until a kernel sets them. */
OrtStatus* seamless_conditional_handles(void* stream, uint64_t* handles, int n) {
  CUgraph graph;
  const CUgraphNode* deps;
  const CUgraphEdgeData* edges;
  size_t n_deps;
  CUcontext ctx;
  TRY(capture_frontier((CUstream)stream, &graph, &deps, &edges, &n_deps));
  CU_TRY(cu.ctx_get_current(&ctx), "cuCtxGetCurrent");
  for (int k = 0; k < n; k++)
    CU_TRY(cu.conditional_handle_create(&handles[k], graph, ctx, 0, 0), "cuGraphConditionalHandleCreate");
  return NULL;
}

/* After the kernel that sets `handles`: a conditional node per handle, each after it (IF nodes, or with `loop` a WHILE
 * node); bodies[k] is node k's body graph, to be captured with seamless_body_begin. The stream's later work waits for
 * every node. */
OrtStatus* seamless_conditional_nodes(void* stream, const uint64_t* handles, int n, int loop, void** bodies) {
  CUgraph graph;
  const CUgraphNode* deps;
  const CUgraphEdgeData* edges;
  size_t n_deps;
  CUcontext ctx;
  CUgraphNode nodes[2];
  if (n < 1 || n > 2 || (loop && n != 1))
    return seamless_status(2, "SeamlessCUDAExecutionProvider: two IF nodes or one WHILE node");
  TRY(capture_frontier((CUstream)stream, &graph, &deps, &edges, &n_deps));
  CU_TRY(cu.ctx_get_current(&ctx), "cuCtxGetCurrent");
  for (int k = 0; k < n; k++) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = handles[k];
    p.conditional.type = loop ? CU_GRAPH_COND_TYPE_WHILE : CU_GRAPH_COND_TYPE_IF;
    p.conditional.size = 1;
    p.conditional.ctx = ctx;
    CU_TRY(cu.graph_add_node(&nodes[k], graph, deps, edges, n_deps, &p), "cuGraphAddNode (a conditional node)");
    bodies[k] = p.conditional.phGraph_out[0];
  }
  CU_TRY(cu.stream_update_capture_dependencies((CUstream)stream, nodes, NULL, (size_t)n,
                                               CU_STREAM_SET_CAPTURE_DEPENDENCIES), "cuStreamUpdateCaptureDependencies");
  return NULL;
}

/* Capture a branch into `body` (a conditional node's graph) from a new stream, returned in *stream: the executor
 * runs the branch on it, then seamless_body_end. */
OrtStatus* seamless_body_begin(void* body, void** stream) {
  *stream = NULL;
  if (tl_state != 2) return seamless_status(1, "SeamlessCUDAExecutionProvider: a branch body outside a capture");
  if (tl_depth == MAX_BODY_DEPTH)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: Ifs nested more than 8 deep inside a captured graph");
  CUstream s;
  CU_TRY(cu.stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUresult r = cu.stream_begin_capture_to_graph(s, (CUgraph)body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r) {
    cu.stream_destroy(s);
    return cuda_status(r, "cuStreamBeginCaptureToGraph");
  }
  tl_bodies[tl_depth++] = s;
  *stream = s;
  return NULL;
}

/* End the innermost body's capture (the graph is its node's) and release its stream. */
OrtStatus* seamless_body_end(void* stream) {
  if (!tl_depth || tl_bodies[tl_depth - 1] != (CUstream)stream)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: branch bodies must end in the order they began");
  CUgraph body = NULL;
  tl_depth--;
  CUresult r = cu.stream_end_capture((CUstream)stream, &body);
  cu.stream_destroy((CUstream)stream);
  CU_TRY(r, "cuStreamEndCapture (a branch body)");
  return NULL;
}

static void bodies_abort(void) {  /* a capture ends with bodies still open (a failed Compute) */
  while (tl_depth) {
    OrtStatus* st = seamless_body_end(tl_bodies[tl_depth - 1]);
    if (st) ORT(ReleaseStatus)(st);
  }
}

CUstream capture_parent(CUstream stream) {
  for (int i = 0; i < tl_depth; i++)
    if (tl_bodies[i] == stream) return tl_stream;
  return stream;
}

/* While capturing, memory the run frees stays with the graph (replays use it again). */
int capture_retain(void* ptr, int pinned) {
  if (tl_state != 2 || !tl_graph || !ptr) return 0;
  Retained* r = calloc(1, sizeof *r);
  if (!r) return 0;
  r->ptr = ptr;
  r->pinned = pinned;
  r->next = tl_graph->memory;
  tl_graph->memory = r;
  return 1;
}

/* Host data to the GPU on a stream. While capturing (or recording a launch program), through a pinned
 * copy the graph keeps: a replay copies the same bytes again (host data of a run depends only on the
 * shapes, which a graph fixes). */
OrtStatus* seamless_cuda_upload(int ordinal, uintptr_t dst, const void* src, size_t nbytes, void* stream) {
  if (!nbytes) return NULL;
  if (tl_state != 2) {
    CU_TRY(cu.memcpy_async((CUdeviceptr)dst, (CUdeviceptr)(uintptr_t)src, nbytes, (CUstream)stream),
           "cuMemcpyAsync");
    return NULL;
  }
  void* staging = cuda_cached_alloc(ordinal, 1, nbytes);
  if (!staging) return seamless_status(1, "SeamlessCUDAExecutionProvider: out of pinned host memory");
  memcpy(staging, src, nbytes);
  if (!capture_retain(staging, 1)) {
    cuda_cached_free(ordinal, 1, staging);
    return seamless_status(1, "out of memory");
  }
  if (capture_listing((CUstream)stream)) return list_copy(dst, (uintptr_t)staging, nbytes, 0);
  CU_TRY(cu.memcpy_async((CUdeviceptr)dst, (CUdeviceptr)(uintptr_t)staging, nbytes, (CUstream)stream),
         "cuMemcpyAsync");
  return NULL;
}

/* ---- segments inside a compiled node (option capture=auto: CUDA graphs; capture=off: launch programs) ----
 * The executor captures one Compute's launches when it has seen the same input shapes a few times
 * and replays them for those shapes; the graph object is the executor's (an opaque handle). A launch
 * program records the same work as a list of launches, copies and GEMMs instead of a stream capture,
 * which cuda_replay.c issues one by one from C: no CUDA graph, and no Python per node. */
OrtStatus* seamless_segment_begin(void* stream, int listed, void** out) {
  *out = NULL;
  if (tl_state) return seamless_status(1, "SeamlessCUDAExecutionProvider: a capture is already under way");
  CapturedGraph* g = calloc(1, sizeof *g);
  if (!g) return seamless_status(1, "out of memory");
  CUresult r = listed ? 0 : cu.stream_begin_capture((CUstream)stream, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r) { free(g); return cuda_status(r, "cuStreamBeginCapture"); }
  g->used = 1;
  g->listed = listed;
  tl_graph = g;
  tl_state = 2;
  tl_stream = (CUstream)stream;
  *out = g;
  return NULL;
}

/* End the capture begun by seamless_segment_begin; with `keep`, instantiate it, else drop it (a
 * failed Compute). Memory retained while capturing stays with the handle either way. */
OrtStatus* seamless_segment_end(void* graph, int keep) {
  CapturedGraph* g = graph;
  CUgraph captured = NULL;
  bodies_abort();
  tl_state = 0;
  tl_graph = NULL;
  g->stream = tl_stream;
  if (g->listed) {
    if (!keep) ops_release(g);
    return NULL;
  }
  CUresult r = cu.stream_end_capture(tl_stream, &captured);
  if (!r && keep) r = cu.graph_instantiate(&g->exec, captured, 0);
  if (captured) cu.graph_destroy(captured);
  if (r && keep) { g->exec = NULL; return cuda_status(r, "cuStreamEndCapture / cuGraphInstantiate"); }
  return NULL;
}

void seamless_segment_release(int ordinal, void* graph) {
  if (!graph) return;
  OrtStatus* st = seamless_cuda_use(ordinal);  /* the graph's context, on whichever thread releases it */
  if (st) ORT(ReleaseStatus)(st);
  graph_release(ordinal, graph);
  free(graph);
}

/* The steps of a launch program (0 for a CUDA graph): what log_capture reports. */
size_t seamless_segment_steps(const void* graph) { return graph ? ((const CapturedGraph*)graph)->n_ops : 0; }

/* ---- recording a launch program ---------------------------------------------------------------- */
int capture_listing(CUstream stream) { return tl_state == 2 && tl_graph && tl_graph->listed && stream == tl_stream; }

static ProgramOp* op_add(int kind) {  /* NULL: out of host memory */
  CapturedGraph* g = tl_graph;
  if (g->n_ops == g->cap_ops) {
    size_t cap = g->cap_ops ? 2 * g->cap_ops : 64;
    ProgramOp* grown = realloc(g->ops, cap * sizeof *grown);
    if (!grown) return NULL;
    g->ops = grown;
    g->cap_ops = cap;
  }
  ProgramOp* op = &g->ops[g->n_ops++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  return op;
}

#define NO_MEMORY seamless_status(1, "SeamlessCUDAExecutionProvider: out of host memory for a launch program")

/* While this thread records a program on `stream`, the executor's GPU work on it is appended to the program
 * instead of running (cuda_exec.c): launches (the argument bytes copied), copies, zeroing, GEMMs. */
OrtStatus* list_launch(void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, const char* packed,
                       size_t nbytes, const int32_t* offsets, int count, int dependent) {
  ProgramOp* op = op_add(OP_LAUNCH);
  if (!op) return NO_MEMORY;
  *op = (ProgramOp){.kind = OP_LAUNCH, .fn = (CUfunction)fn, .gx = gx, .gy = gy, .block = block, .shared = shared,
                    .count = count, .dependent = dependent, .nbytes = nbytes, .packed = malloc(nbytes ? nbytes : 1),
                    .offsets = malloc((count > 0 ? (size_t)count : 1) * sizeof(int32_t))};
  if (!op->packed || !op->offsets) return NO_MEMORY;  /* released with the program */
  memcpy(op->packed, packed, nbytes);
  if (count > 0) memcpy(op->offsets, offsets, (size_t)count * sizeof(int32_t));
  return NULL;
}

OrtStatus* list_copy(uintptr_t dst, uintptr_t src, size_t nbytes, int zero) {
  ProgramOp* op = op_add(zero ? OP_ZERO : OP_COPY);
  if (!op) return NO_MEMORY;
  op->dst = dst;
  op->src = src;
  op->nbytes = nbytes;
  return NULL;
}

OrtStatus* list_gemm(const GemmCall* gemm) {
  ProgramOp* op = op_add(OP_GEMM);
  if (!op) return NO_MEMORY;
  op->gemm = *gemm;
  return NULL;
}

/* Launch a kept segment on `stream`: its CUDA graph, or its program's steps in order. A program's first
 * launch is a plain one: it waits for all work before it on the stream, as a graph's first node does. */
OrtStatus* capture_launch(void* graph, CUstream stream) {
  CapturedGraph* g = graph;
  if (!g->listed) {
    CU_TRY(cu.graph_launch(g->exec, stream), "cuGraphLaunch");
    return NULL;
  }
  int first = 1;
  for (size_t i = 0; i < g->n_ops; i++) {
    const ProgramOp* op = &g->ops[i];
    switch (op->kind) {
      case OP_LAUNCH:
        TRY(seamless_cuda_launch(op->fn, op->gx, op->gy, op->block, op->shared, stream, op->packed, op->nbytes,
                                 op->offsets, op->count, op->dependent && !first));
        first = 0;
        break;
      case OP_COPY:
        CU_TRY(cu.memcpy_async((CUdeviceptr)op->dst, (CUdeviceptr)op->src, op->nbytes, stream), "cuMemcpyAsync");
        break;
      case OP_ZERO:
        CU_TRY(cu.memset_async((CUdeviceptr)op->dst, 0, op->nbytes, stream), "cuMemsetD8Async");
        break;
      case OP_GEMM:
        TRY(gemm_run(&op->gemm, stream));
        break;
    }
  }
  return NULL;
}
