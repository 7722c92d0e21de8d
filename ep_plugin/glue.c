/* onnxruntime-ep-seamless: C glue inside the cffi embedding module.
 * - negotiates the ORT API version and keeps the OrtApi / OrtEpApi tables,
 * - owns the C structs handed to ORT (factory, EP, node compute info), each with the ORT
 *   struct first and a Python handle after it; callbacks are thin trampolines to Python,
 * - does every graph walk and the per-run input/output binding in C, batched, so that
 *   Python makes one call per walk or per run instead of one per ORT function.
 * No kernel logic here. This file is the source of the cffi module's own unit; glue.h is what it
 * shares with the module's other units (cuda_ep.h: the CUDA variant's). */
#include <dlfcn.h>

#include "glue.h"
#ifdef SEAMLESS_CUDA
#include "cuda_ep.h"
#endif

/* Every slot in ort_slots.def exists from API 23 on, our floor; newer slots will need a gate.
 * The floor is also MIN_ONNXRUNTIME_VERSION in python/onnxruntime_ep_seamless/__init__.py
 * (tests/abi/test_versions.py keeps the two equal; docs/versioning.md). The ceiling,
 * SEAMLESS_ORT_API_MAX, is in glue.h. */
#define SEAMLESS_ORT_API_MIN 23

void* const* g_api;
void* const* g_ep_api;
static uint32_t g_api_version;

OrtStatus* seamless_status(int code, const char* msg) { return ORT(CreateStatus)(code, msg); }
static void seamless_release_status(OrtStatus* st) { ORT(ReleaseStatus)(st); }
static const char* seamless_status_message(OrtStatus* st) { return ORT(GetErrorMessage)(st); }
static int seamless_status_code(OrtStatus* st) { return (int)ORT(GetErrorCode)(st); }
static uint32_t seamless_api_version(void) { return g_api_version; }

/* ---- version negotiation ---------------------------------------------------------- */
static OrtStatus* negotiate(const OrtApiBase* base) {
  const char* version = base->GetVersionString();
  int major = 0, minor = 0;
  char msg[512];
  if (!version || sscanf(version, "%d.%d", &major, &minor) != 2 || major != 1 || minor < SEAMLESS_ORT_API_MIN) {
    const void* const* api1 = (const void* const*)base->GetApi(1);
    snprintf(msg, sizeof msg,
             "onnxruntime-ep-seamless needs onnxruntime >= 1.%d, but this process runs onnxruntime %s. "
             "Fix: pip install -U onnxruntime (or onnxruntime-gpu).", SEAMLESS_ORT_API_MIN, version ? version : "?");
    return api1 ? ((CreateStatus_fn)api1[SLOT_CreateStatus])(1, msg) : NULL;
  }
  g_api_version = minor < SEAMLESS_ORT_API_MAX ? (uint32_t)minor : SEAMLESS_ORT_API_MAX;
  g_api = (void* const*)base->GetApi(g_api_version);
  if (!g_api) return NULL;  /* cannot happen for minor >= 23; the caller reports it */
  g_ep_api = (void* const*)ORT(GetEpApi)();
  return NULL;
}

/* ---- serialisation of graphs for Python -------------------------------------------- */
typedef struct { char* data; size_t len, cap; int oom; } Buf;

static void buf_put(Buf* b, const void* p, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char* d = realloc(b->data, cap);
    if (!d) { b->oom = 1; return; }
    b->data = d; b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}
static void put_i32(Buf* b, int32_t v) { buf_put(b, &v, 4); }
static void put_i64(Buf* b, int64_t v) { buf_put(b, &v, 8); }
static void put_f64(Buf* b, double v) { buf_put(b, &v, 8); }
static void put_str(Buf* b, const char* s) {
  int32_t n = s ? (int32_t)strlen(s) : 0;
  put_i32(b, n);
  buf_put(b, s, (size_t)n);
}

/* tensor type and shape: elem_type, rank (-1 unknown), then per dim (value or -1, symbol) */
static OrtStatus* put_type_shape(Buf* b, const OrtTensorTypeAndShapeInfo* info) {
  ONNXTensorElementDataType elem = 0;
  size_t rank = 0;
  TRY(ORT(GetTensorElementType)(info, &elem));
  TRY(ORT(GetDimensionsCount)(info, &rank));
  if (g_api_version >= 24 && !ORT(TensorTypeAndShape_HasShape)(info)) {  /* before 1.24 no shape reads as rank 0 */
    put_i32(b, elem);
    put_i32(b, -1);
    return NULL;
  }
  int64_t dims[64];
  const char* syms[64];
  if (rank > 64) rank = 64;
  TRY(ORT(GetDimensions)(info, dims, rank));
  TRY(ORT(GetSymbolicDimensions)(info, syms, rank));
  put_i32(b, elem);
  put_i32(b, (int32_t)rank);
  for (size_t i = 0; i < rank; i++) { put_i64(b, dims[i]); put_str(b, syms[i]); }
  return NULL;
}

/* A string tensor's elements: i64 count, then per element i32 length + UTF-8 bytes. */
static OrtStatus* put_strings(Buf* b, const OrtValue* v) {
  OrtTensorTypeAndShapeInfo* info = NULL;
  size_t count = 0, len = 0;
  TRY(ORT(GetTensorTypeAndShape)(v, &info));
  OrtStatus* st = ORT(GetTensorShapeElementCount)(info, &count);
  ORT(ReleaseTensorTypeAndShapeInfo)(info);
  if (!st) st = ORT(GetStringTensorDataLength)(v, &len);
  if (st) return st;
  char* chars = malloc(len ? len : 1);
  size_t* offsets = malloc((count ? count : 1) * sizeof *offsets);
  st = chars && offsets ? (count ? ORT(GetStringTensorContent)(v, chars, len, offsets, count) : NULL)
                        : seamless_status(1, "out of memory reading a string tensor");
  if (!st) {
    put_i64(b, (int64_t)count);
    for (size_t i = 0; i < count; i++) {
      size_t end = i + 1 < count ? offsets[i + 1] : len;
      put_i32(b, (int32_t)(end - offsets[i]));
      buf_put(b, chars + offsets[i], end - offsets[i]);
    }
  }
  free(chars);
  free(offsets);
  return st;
}

/* What a value holds, as a set of flags: TENSOR_INFO (an element type and shape follow), and SEQUENCE_OF /
 * OPTIONAL_OF around it (a sequence of tensors, an optional tensor or sequence); 0: something else. */
enum { TENSOR_INFO = 1, SEQUENCE_OF = 2, OPTIONAL_OF = 4 };

static OrtStatus* tensor_info_of(const OrtTypeInfo* ti, int* flags, const OrtTensorTypeAndShapeInfo** tsi,
                                 OrtTypeInfo** owned) {
  ONNXType kind = 0;
  TRY(ORT(GetOnnxTypeFromTypeInfo)(ti, &kind));
  if (kind == 1) { *flags |= TENSOR_INFO; return ORT(CastTypeInfoToTensorInfo)(ti, tsi); }
  OrtTypeInfo* inner = NULL;
  if (kind == 2 && !(*flags & SEQUENCE_OF)) {
    const OrtSequenceTypeInfo* seq = NULL;
    TRY(ORT(CastTypeInfoToSequenceTypeInfo)(ti, &seq));
    TRY(ORT(GetSequenceElementType)(seq, &inner));
    *flags |= SEQUENCE_OF;
  } else if (kind == 6 && !*flags) {
    const OrtOptionalTypeInfo* opt = NULL;
    TRY(ORT(CastTypeInfoToOptionalTypeInfo)(ti, &opt));
    TRY(ORT(GetOptionalContainedTypeInfo)(opt, &inner));
    *flags |= OPTIONAL_OF;
  } else {
    *flags = 0;
    return NULL;
  }
  if (*owned) ORT(ReleaseTypeInfo)(*owned);
  *owned = inner;
  OrtStatus* st = tensor_info_of(inner, flags, tsi, owned);
  if (!(*flags & TENSOR_INFO)) *flags = 0;
  return st;
}

/* value info: name, kind (flags above), [type/shape], is_const, [data pointer and size].
 * Constant data is included up to const_limit bytes (0 when larger); a string constant's size is -1 and its
 * elements follow (put_strings). */
static OrtStatus* put_value(Buf* b, const OrtValueInfo* vi, size_t const_limit) {
  const char* name = NULL;
  if (!vi) { put_str(b, ""); return NULL; }  /* absent optional input */
  TRY(ORT(GetValueInfoName)(vi, &name));
  put_str(b, name);
  const OrtTypeInfo* ti = NULL;
  OrtTypeInfo* owned = NULL;
  const OrtTensorTypeAndShapeInfo* tsi = NULL;
  int flags = 0;
  TRY(ORT(GetValueInfoTypeInfo)(vi, &ti));
  OrtStatus* st = ti ? tensor_info_of(ti, &flags, &tsi, &owned) : NULL;
  if (!st) put_i32(b, flags);
  if (!st && flags) st = put_type_shape(b, tsi);
  if (owned) ORT(ReleaseTypeInfo)(owned);
  if (st) return st;
  bool is_const = false;
  TRY(ORT(ValueInfo_IsConstantInitializer)(vi, &is_const));
  put_i32(b, is_const);
  if (!is_const) return NULL;
  const OrtValue* value = NULL;
  const void* data = NULL;
  size_t nbytes = 0;
  TRY(ORT(ValueInfo_GetInitializerValue)(vi, &value));
  if (value) {
    OrtTensorTypeAndShapeInfo* info = NULL;
    ONNXTensorElementDataType elem = 0;
    TRY(ORT(GetTensorTypeAndShape)(value, &info));
    st = ORT(GetTensorElementType)(info, &elem);
    ORT(ReleaseTensorTypeAndShapeInfo)(info);
    if (st) return st;
    if (elem == 8) { put_i64(b, 0); put_i64(b, -1); return put_strings(b, value); }
    TRY(ORT(GetTensorSizeInBytes)(value, &nbytes));
    if (nbytes > const_limit) nbytes = 0;
    else if (nbytes) TRY(ORT(GetTensorMutableData)((OrtValue*)value, (void**)&data));
  }
  put_i64(b, (int64_t)(intptr_t)data);  /* valid during the callback only: Python copies it */
  put_i64(b, (int64_t)nbytes);
  return NULL;
}

static OrtStatus* put_attr(Buf* b, const OrtOpAttr* attr) {
  const char* name = NULL;
  OrtOpAttrType type = 0;
  TRY(ORT(OpAttr_GetName)(attr, &name));
  TRY(ORT(OpAttr_GetType)(attr, &type));
  put_str(b, name);
  put_i32(b, type);
  size_t size = 0;
  switch (type) {
    case 1: { int64_t v = 0; TRY(ORT(ReadOpAttr)(attr, type, &v, sizeof v, &size)); put_i64(b, v); break; }
    case 3: { float v = 0; TRY(ORT(ReadOpAttr)(attr, type, &v, sizeof v, &size)); put_f64(b, v); break; }
    case 2: case 4: case 5: {  /* INTS (int64), FLOATS (float), STRING (chars): ask the size first */
      OrtStatus* st = ORT(ReadOpAttr)(attr, type, NULL, 0, &size);
      if (st) ORT(ReleaseStatus)(st);  /* a size query reports "buffer too small" */
      char* tmp = malloc(size ? size : 1);
      if (!tmp) return seamless_status(1, "out of memory reading an attribute");
      st = size ? ORT(ReadOpAttr)(attr, type, tmp, size, &size) : NULL;
      if (st) { free(tmp); return st; }
      put_i32(b, (int32_t)size);
      buf_put(b, tmp, size);
      free(tmp);
      break;
    }
    case 8: {  /* TENSOR: elem type, dims, bytes (copied: the OrtValue is ours to release) */
      OrtValue* value = NULL;
      OrtTensorTypeAndShapeInfo* tsi = NULL;
      void* data = NULL;
      size_t nbytes = 0;
      TRY(ORT(OpAttr_GetTensorAttributeAsOrtValue)(attr, &value));
      OrtStatus* st = ORT(GetTensorTypeAndShape)(value, &tsi);
      ONNXTensorElementDataType elem = 0;
      if (!st) st = put_type_shape(b, tsi);
      if (!st) st = ORT(GetTensorElementType)(tsi, &elem);
      if (!st && elem == 8) { put_i64(b, -1); st = put_strings(b, value); }  /* no flat bytes: the elements */
      else {
        if (!st) st = ORT(GetTensorSizeInBytes)(value, &nbytes);
        if (!st && nbytes) st = ORT(GetTensorMutableData)(value, &data);
        if (!st) { put_i64(b, (int64_t)nbytes); buf_put(b, data, nbytes); }
      }
      if (tsi) ORT(ReleaseTensorTypeAndShapeInfo)(tsi);
      ORT(ReleaseValue)(value);
      if (st) return st;
      break;
    }
    case 6: {  /* STRINGS: byte count then NUL-terminated strings back to back; -1 if ORT cannot read them */
      OrtStatus* st = ORT(ReadOpAttr)(attr, type, NULL, 0, &size);
      if (st) ORT(ReleaseStatus)(st);  /* a size query reports "buffer too small" */
      char* tmp = malloc(size ? size : 1);
      if (!tmp) return seamless_status(1, "out of memory reading an attribute");
      st = size ? ORT(ReadOpAttr)(attr, type, tmp, size, &size) : NULL;
      if (st) { ORT(ReleaseStatus)(st); put_i32(b, -1); }
      else { put_i32(b, (int32_t)size); buf_put(b, tmp, size); }
      free(tmp);
      break;
    }
    default: break;  /* GRAPH(S), others: name and type only; Python declines such nodes */
  }
  return NULL;
}

/* An attribute ORT cannot describe or read (a SPARSE_TENSOR or TYPE_PROTO: "Unexpected attribute type")
 * goes to Python as type -1, unreadable: its node is declined, never the whole graph. */
static void put_attr_or_unreadable(Buf* b, const OrtOpAttr* attr) {
  size_t start = b->len;
  OrtStatus* st = put_attr(b, attr);
  if (!st) return;
  ORT(ReleaseStatus)(st);
  b->len = start;
  const char* name = NULL;
  st = ORT(OpAttr_GetName)(attr, &name);
  if (st) { ORT(ReleaseStatus)(st); name = ""; }
  put_str(b, name);
  put_i32(b, -1);
}

typedef OrtStatus* (*CountFn)(const OrtNode*, size_t*);
typedef OrtStatus* (*ValuesFn)(const OrtNode*, const OrtValueInfo**, size_t);

static OrtStatus* put_node_values(Buf* b, const OrtNode* node, CountFn count, ValuesFn get, size_t const_limit) {
  size_t n = 0;
  TRY(count(node, &n));
  const OrtValueInfo** vis = calloc(n ? n : 1, sizeof *vis);
  if (!vis) return seamless_status(1, "out of memory");
  OrtStatus* st = n ? get(node, vis, n) : NULL;
  if (!st) put_i32(b, (int32_t)n);
  for (size_t i = 0; !st && i < n; i++) st = put_value(b, vis[i], const_limit);
  free(vis);
  return st;
}

static OrtStatus* put_graph_body(Buf* b, const OrtGraph* g, size_t const_limit);

/* A node's subgraphs (If's branches, Loop's and Scan's bodies): its implicit inputs (the outer values they read),
 * then per subgraph its attribute's name and the graph, nested nodes included. */
static OrtStatus* put_subgraphs(Buf* b, const OrtNode* node, size_t nsub, size_t const_limit) {
  TRY(put_node_values(b, node, ORT(Node_GetNumImplicitInputs), ORT(Node_GetImplicitInputs), const_limit));
  const OrtGraph** graphs = calloc(nsub, sizeof *graphs);
  const char** names = calloc(nsub, sizeof *names);
  OrtStatus* st = graphs && names ? ORT(Node_GetSubgraphs)(node, graphs, nsub, names)
                                  : seamless_status(1, "out of memory");
  for (size_t i = 0; !st && i < nsub; i++) {
    put_str(b, names[i]);
    st = put_graph_body(b, graphs[i], const_limit);
  }
  free(graphs);
  free(names);
  return st;
}

static OrtStatus* put_node(Buf* b, const OrtNode* node, size_t const_limit) {
  const char *name = NULL, *op = NULL, *domain = NULL;
  int since = 0;
  size_t nattr = 0, nsub = 0;
  TRY(ORT(Node_GetName)(node, &name));
  TRY(ORT(Node_GetOperatorType)(node, &op));
  TRY(ORT(Node_GetDomain)(node, &domain));
  TRY(ORT(Node_GetSinceVersion)(node, &since));
  put_str(b, name);
  put_str(b, op);
  put_str(b, domain);
  put_i32(b, since);
  TRY(put_node_values(b, node, ORT(Node_GetNumInputs), ORT(Node_GetInputs), const_limit));
  TRY(put_node_values(b, node, ORT(Node_GetNumOutputs), ORT(Node_GetOutputs), const_limit));
  TRY(ORT(Node_GetNumAttributes)(node, &nattr));
  const OrtOpAttr** attrs = calloc(nattr ? nattr : 1, sizeof *attrs);
  if (!attrs) return seamless_status(1, "out of memory");
  OrtStatus* st = nattr ? ORT(Node_GetAttributes)(node, attrs, nattr) : NULL;
  if (!st) put_i32(b, (int32_t)nattr);
  for (size_t i = 0; !st && i < nattr; i++) put_attr_or_unreadable(b, attrs[i]);
  free(attrs);
  if (st) return st;
  TRY(ORT(Node_GetNumSubgraphs)(node, &nsub));
  put_i32(b, (int32_t)nsub);
  return nsub ? put_subgraphs(b, node, nsub, const_limit) : NULL;
}

typedef OrtStatus* (*GraphCountFn)(const OrtGraph*, size_t*);
typedef OrtStatus* (*GraphValuesFn)(const OrtGraph*, const OrtValueInfo**, size_t);

static OrtStatus* put_graph_values(Buf* b, const OrtGraph* g, GraphCountFn count, GraphValuesFn get, size_t const_limit) {
  size_t n = 0;
  TRY(count(g, &n));
  const OrtValueInfo** vis = calloc(n ? n : 1, sizeof *vis);
  if (!vis) return seamless_status(1, "out of memory");
  OrtStatus* st = n ? get(g, vis, n) : NULL;
  if (!st) put_i32(b, (int32_t)n);
  for (size_t i = 0; !st && i < n; i++) st = put_value(b, vis[i], const_limit);
  free(vis);
  return st;
}

static OrtStatus* graph_nodes(const OrtGraph* g, const OrtNode*** nodes, size_t* n) {
  TRY(ORT(Graph_GetNumNodes)(g, n));
  *nodes = calloc(*n ? *n : 1, sizeof **nodes);
  if (!*nodes) return seamless_status(1, "out of memory");
  OrtStatus* st = *n ? ORT(Graph_GetNodes)(g, *nodes, *n) : NULL;
  if (st) { free(*nodes); *nodes = NULL; }
  return st;
}

/* A graph's inputs, outputs, initializers (data pointers of constants up to const_limit bytes) and nodes in
 * topological order. */
static OrtStatus* put_graph_body(Buf* b, const OrtGraph* g, size_t const_limit) {
  const OrtNode** nodes = NULL;
  size_t n = 0;
  TRY(put_graph_values(b, g, ORT(Graph_GetNumInputs), ORT(Graph_GetInputs), const_limit));
  TRY(put_graph_values(b, g, ORT(Graph_GetNumOutputs), ORT(Graph_GetOutputs), const_limit));
  TRY(put_graph_values(b, g, ORT(Graph_GetNumInitializers), ORT(Graph_GetInitializers), const_limit));
  TRY(graph_nodes(g, &nodes, &n));
  put_i32(b, (int32_t)n);
  OrtStatus* st = NULL;
  for (size_t i = 0; !st && i < n; i++) st = put_node(b, nodes[i], const_limit);
  free(nodes);
  return st;
}

/* One walk of a graph: optionally a fused node's own inputs/outputs first; the node whose subgraph the graph is
 * (with all its subgraphs), if any; then the graph's body. */
static OrtStatus* seamless_dump_graph(const OrtGraph* g, const OrtNode* fused, size_t const_limit, char** out,
                                      size_t* out_len) {
  Buf b = {0};
  const OrtNode* parent = NULL;
  OrtStatus* st = NULL;
  *out = NULL;
  put_i32(&b, fused != NULL);
  if (fused) {
    st = put_node_values(&b, fused, ORT(Node_GetNumInputs), ORT(Node_GetInputs), 0);
    if (!st) st = put_node_values(&b, fused, ORT(Node_GetNumOutputs), ORT(Node_GetOutputs), 0);
  }
  if (!st) st = ORT(Graph_GetParentNode)(g, &parent);
  if (!st) put_i32(&b, parent != NULL);
  if (!st && parent) st = put_node(&b, parent, const_limit < 1024 ? const_limit : 1024);  /* for its checks only */
  if (!st) st = put_graph_body(&b, g, const_limit);
  if (!st && b.oom) st = seamless_status(1, "out of memory while reading the graph");
  if (st) { free(b.data); return st; }
  *out = b.data;
  *out_len = b.len;
  return NULL;
}

static void seamless_free(void* p) { free(p); }

/* Claim one group of nodes (indices into the graph's topological order) as one fused node. */
static OrtStatus* seamless_fuse_nodes(const OrtGraph* g, OrtEpGraphSupportInfo* gsi, const int32_t* idx, size_t count) {
  const OrtNode** nodes = NULL;
  size_t n = 0;
  TRY(graph_nodes(g, &nodes, &n));
  const OrtNode** chosen = calloc(count ? count : 1, sizeof *chosen);
  OrtStatus* st = chosen ? NULL : seamless_status(1, "out of memory");
  for (size_t i = 0; !st && i < count; i++) {
    if (idx[i] < 0 || (size_t)idx[i] >= n) st = seamless_status(1, "node index out of range");
    else chosen[i] = nodes[idx[i]];
  }
  OrtNodeFusionOptions opts = {SEAMLESS_ORT_API_MAX, true};  /* constants are copied at Compile */
  if (!st) st = ORT_EP(EpGraphSupportInfo_AddNodesToFuse)(gsi, chosen, count, &opts);
  free(chosen);
  free(nodes);
  return st;
}

/* ---- per-run binding (hot path) ---------------------------------------------------- */
/* Which inputs of a Compute lie in host memory (ORT's memory device of each value): the CUDA executor uploads those
 * rather than read them as device memory (ORT hands over an If's outputs where its CPU EP left them). */
void seamless_inputs_on_host(const OrtKernelContext* ctx, size_t n, uint8_t* on_host) {
  for (size_t i = 0; i < n; i++) {
    const OrtValue* v = NULL;
    OrtStatus* st = ORT(KernelContext_GetInput)(ctx, i, &v);
    if (st) { ORT(ReleaseStatus)(st); v = NULL; }
    const OrtMemoryDevice* d = v ? ORT_EP(Value_GetMemoryDevice)(v) : NULL;
    on_host[i] = d && ORT_EP(MemoryDevice_GetDeviceType)(d) == 0;
  }
}

/* Whether v holds a tensor (not a sequence, not an empty optional); asked only where reading it as one failed. */
static int holds_a_tensor(const OrtValue* v) {
  int has = 1, tensor = 1;
  OrtStatus* st = ORT(HasValue)(v, &has);
  if (!st && has) st = ORT(IsTensor)(v, &tensor);
  if (st) { ORT(ReleaseStatus)(st); return 1; }  /* unknown: the first error stands */
  return has && tensor;
}

/* All inputs of a fused node in one call: data pointer, size in bytes, element type, rank, dims.
 * The arrays hold the previous run's values on entry (they are per thread); changed[i] says
 * whether input i differs from then, so Python rebuilds only the views that changed. Rank -1: an
 * absent input; -2: not a flat tensor (strings, a sequence, an optional), read by seamless_read_input.
 * Returns the number of changed inputs, or -1 with *status set. */
int seamless_get_inputs(const OrtKernelContext* ctx, size_t n, void** data, size_t* nbytes, int32_t* types,
                        int32_t* ranks, int64_t* dims, size_t max_rank, uint8_t* changed, OrtStatus** status) {
  int count = 0;
  int64_t shape[64];
  *status = NULL;
  if (max_rank > 64) { *status = seamless_status(1, "max_rank above 64"); return -1; }
  for (size_t i = 0; i < n; i++) {
    const OrtValue* v = NULL;
    OrtTensorTypeAndShapeInfo* info = NULL;
    void* p = NULL;
    size_t size = 0, r = 0;
    ONNXTensorElementDataType t = 0;
    OrtStatus* st = ORT(KernelContext_GetInput)(ctx, i, &v);
    if (!st && v) st = ORT(GetTensorTypeAndShape)(v, &info);
    if (st && v && !holds_a_tensor(v)) { ORT(ReleaseStatus)(st); st = NULL; t = -1; }  /* a sequence, none */
    else if (!st && v) st = ORT(GetTensorElementType)(info, &t);
    if (!st && v && (t == -1 || t == 8)) {  /* read whole by seamless_read_input, every run */
      if (info) ORT(ReleaseTensorTypeAndShapeInfo)(info);
      changed[i] = 1;
      count++;
      data[i] = NULL; nbytes[i] = 0; types[i] = t; ranks[i] = -2;
      continue;
    }
    if (!st && v) st = ORT(GetTensorMutableData)((OrtValue*)v, &p);
    if (!st && v) st = ORT(GetTensorSizeInBytes)(v, &size);
    if (!st && v) st = ORT(GetDimensionsCount)(info, &r);
    if (!st && v && r > max_rank) st = seamless_status(1, "input rank above the EP's limit");
    if (!st && v) st = ORT(GetDimensions)(info, shape, r);
    if (info) ORT(ReleaseTensorTypeAndShapeInfo)(info);
    if (st) { *status = st; return -1; }
    int32_t rank = v ? (int32_t)r : -1;
    int64_t* d = dims + i * max_rank;
    int same = data[i] == p && nbytes[i] == size && types[i] == t && ranks[i] == rank &&
               (rank <= 0 || memcmp(d, shape, (size_t)rank * sizeof *d) == 0);
    changed[i] = !same;
    if (same) continue;
    count++;
    data[i] = p; nbytes[i] = size; types[i] = t; ranks[i] = rank;
    if (rank > 0) memcpy(d, shape, (size_t)rank * sizeof *d);
  }
  return count;
}

/* A value as bytes: i32 kind (0 none, 1 tensor, 2 sequence of tensors); a tensor: i32 element type, i32 rank,
 * i64 dims, then its elements (put_strings for strings, else i64 size + bytes); a sequence: i64 count, tensors. */
static OrtStatus* put_runtime_value(Buf* b, const OrtValue* v, int depth) {
  int has = 0, flat = 0;
  ONNXType kind = 0;
  if (v) TRY(ORT(HasValue)(v, &has));
  if (!has) { put_i32(b, 0); return NULL; }
  TRY(ORT(IsTensor)(v, &flat));
  if (!flat) {
    size_t count = 0;
    OrtAllocator* alloc = NULL;
    TRY(ORT(GetValueType)(v, &kind));
    if (kind != 2 || depth) return seamless_status(2, "an input holds a value the EP cannot read (not a tensor or "
                                                      "a sequence of tensors)");
    TRY(ORT(GetValueCount)(v, &count));
    TRY(ORT(GetAllocatorWithDefaultOptions)(&alloc));
    put_i32(b, 2);
    put_i64(b, (int64_t)count);
    for (size_t k = 0; k < count; k++) {
      OrtValue* item = NULL;
      TRY(ORT(GetValue)(v, (int)k, alloc, &item));
      OrtStatus* st = put_runtime_value(b, item, depth + 1);
      ORT(ReleaseValue)(item);
      if (st) return st;
    }
    return NULL;
  }
  OrtTensorTypeAndShapeInfo* info = NULL;
  ONNXTensorElementDataType elem = 0;
  size_t rank = 0, nbytes = 0;
  int64_t dims[64];
  void* data = NULL;
  TRY(ORT(GetTensorTypeAndShape)(v, &info));
  OrtStatus* st = ORT(GetTensorElementType)(info, &elem);
  if (!st) st = ORT(GetDimensionsCount)(info, &rank);
  if (!st && rank > 64) st = seamless_status(2, "input rank above the EP's limit");
  if (!st) st = ORT(GetDimensions)(info, dims, rank);
  ORT(ReleaseTensorTypeAndShapeInfo)(info);
  if (st) return st;
  put_i32(b, 1);
  put_i32(b, elem);
  put_i32(b, (int32_t)rank);
  for (size_t i = 0; i < rank; i++) put_i64(b, dims[i]);
  if (elem == 8) return put_strings(b, v);
  TRY(ORT(GetTensorSizeInBytes)(v, &nbytes));
  if (nbytes) TRY(ORT(GetTensorMutableData)((OrtValue*)v, &data));
  put_i64(b, (int64_t)nbytes);
  buf_put(b, data, nbytes);
  return NULL;
}

/* Input i of a fused node that seamless_get_inputs marked rank -2, as put_runtime_value's bytes in *out (the
 * caller frees it with seamless_free). */
static OrtStatus* seamless_read_input(const OrtKernelContext* ctx, size_t i, char** out, size_t* out_len) {
  Buf b = {0};
  const OrtValue* v = NULL;
  *out = NULL;
  TRY(ORT(KernelContext_GetInput)(ctx, i, &v));
  OrtStatus* st = put_runtime_value(&b, v, 0);
  if (!st && b.oom) st = seamless_status(1, "out of memory reading an input");
  if (st) { free(b.data); return st; }
  *out = b.data;
  *out_len = b.len;
  return NULL;
}

/* Output i as a string tensor of the given dims holding the n strings (NUL-terminated UTF-8). */
static OrtStatus* seamless_write_strings(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t rank,
                                         const char* const* strings, size_t n) {
  OrtValue* v = NULL;
  TRY(ORT(KernelContext_GetOutput)(ctx, i, dims, rank, &v));
  return v && n ? ORT(FillStringTensor)(v, strings, n) : NULL;
}

/* Allocate every output with the given dims and return the data pointers: executors write their
 * results there. */
OrtStatus* seamless_get_outputs(OrtKernelContext* ctx, size_t n, const int32_t* ranks, const int64_t* dims,
                                size_t max_rank, void** data) {
  for (size_t i = 0; i < n; i++) {
    OrtValue* v = NULL;
    data[i] = NULL;
    if (ranks[i] < 0) continue;  /* not asked for this time (ORT keeps an output it made: asking again returns it) */
    TRY(ORT(KernelContext_GetOutput)(ctx, i, dims + i * max_rank, (size_t)ranks[i], &v));
    if (v) TRY(ORT(GetTensorMutableData)(v, &data[i]));
  }
  return NULL;
}

/* ---- threads --------------------------------------------------------------------------- */
/* Runs fn(user, i) for i in [0, n) on the session's intra-op thread pool (native kernels get
 * this function and the kernel context as a pair, so they stay independent of ORT). */
void seamless_parallel_for(void* ctx, void (*fn)(void*, size_t), size_t n, void* user) {
  OrtStatus* st = ctx ? ORT(KernelContext_ParallelFor)((const OrtKernelContext*)ctx, fn, n, 0, user) : NULL;
  if (!ctx || st) {
    if (st) ORT(ReleaseStatus)(st);
    for (size_t i = 0; i < n; i++) fn(user, i);
  }
}

/* ---- logging ------------------------------------------------------------------------ */
static void seamless_log(const OrtLogger* logger, int level, const char* msg) {
  if (!logger || !g_api) { fprintf(stderr, "%s\n", msg); return; }
  OrtStatus* st = ORT(Logger_LogMessage)(logger, level, msg, "onnxruntime_ep_seamless", 0, "seamless");
  if (st) ORT(ReleaseStatus)(st);
}

/* ---- the structs handed to ORT ------------------------------------------------------ */
typedef struct SeamlessOpDomains SeamlessOpDomains;
typedef struct {
  OrtEpFactory base;            /* first: ORT's pointer is ours */
  void* handle;                 /* the Python factory object; NULL once ORT released the factory */
  char *name, *vendor, *version;
  char* registration;           /* the name ORT registered the library under (tags its devices) */
  int hw_type;                  /* OrtHardwareDeviceType this factory serves */
  SeamlessOpDomains* op_domains;  /* the newest set of the user's custom-op domains handed to ORT */
} SeamlessFactory;

typedef struct {
  OrtEp base;
  void* handle;                 /* the Python EP object */
  SeamlessFactory* factory;
  void* capture;                /* CUDA: graph-capture state when enable_cuda_graph=1, else NULL */
  int ordinal;                  /* CUDA: the EP's GPU, else -1 */
} SeamlessEp;

#ifdef SEAMLESS_CUDA
SeamlessCapture* capture_of(const OrtEp* ep) { return (SeamlessCapture*)((const SeamlessEp*)ep)->capture; }

static long long g_ep_syncs;  /* Sync calls answered, for seamless_ep_syncs() */

/* OrtEp::Sync (API 25): IOBinding's synchronize_inputs/outputs wait here until the GPU has done all it was
 * asked (copies on any stream included). */
static OrtStatus* ep_sync(OrtEp* ep) {
  __atomic_add_fetch(&g_ep_syncs, 1, __ATOMIC_RELAXED);
  return seamless_cuda_device_sync(((SeamlessEp*)ep)->ordinal);
}

long long seamless_ep_syncs(void) { return __atomic_load_n(&g_ep_syncs, __ATOMIC_RELAXED); }
#endif

typedef struct {
  OrtNodeComputeInfo base;
  void* handle;                 /* the Python compiled kernel */
  void* native;                 /* what answers Computes in C: CPU, its SeamlessRunner (cpu_runner.c); CUDA,
                                   capture=auto, its SeamlessReplayer (cuda_replay.c); else NULL */
} SeamlessComputeInfo;

/* Python callbacks (extern "Python" in the cdef). */
static int py_ready(void);
static OrtStatus* py_create_factories(const char* registered_name, const OrtLogger* logger, OrtEpFactory** factories,
                                      size_t max_factories, size_t* num_factories);
static void py_release_handle(void* handle);
static OrtStatus* py_create_ep(void* factory_handle, const char* const* keys, const char* const* values, size_t n,
                               int device_ordinal, const OrtLogger* logger, void** ep_handle, int* graph_capture);
static OrtStatus* py_get_capability(void* ep_handle, const OrtGraph* graph, OrtEpGraphSupportInfo* info);
static OrtStatus* py_compile(void* ep_handle, const OrtGraph* graph, const OrtNode* fused_node, void** kernel_handle,
                             void** native);
static OrtStatus* py_compute(void* kernel_handle, OrtKernelContext* ctx);
static OrtStatus* py_custom_ops(void* factory_handle, OrtEpFactory* factory);
static int py_infer_shapes(void* factory_handle, int32_t op, size_t n, const int32_t* types, const int32_t* ranks,
                           const int64_t* dims, size_t max_rank, size_t n_out, int32_t* out_types, int32_t* out_ranks,
                           int64_t* out_dims);

static const char* factory_name(const OrtEpFactory* f) { return ((const SeamlessFactory*)f)->name; }
static const char* factory_vendor(const OrtEpFactory* f) { return ((const SeamlessFactory*)f)->vendor; }
static const char* factory_version(const OrtEpFactory* f) { return ((const SeamlessFactory*)f)->version; }
const char* factory_registration(const OrtEpFactory* f) { return ((const SeamlessFactory*)f)->registration; }
#ifdef SEAMLESS_CUDA
static uint32_t factory_vendor_id(const OrtEpFactory* f) { (void)f; return SEAMLESS_VENDOR_NVIDIA; }
#else
static uint32_t factory_vendor_id(const OrtEpFactory* f) { (void)f; return 0; }
#endif
static bool factory_is_stream_aware(const OrtEpFactory* f) { (void)f; return false; }
static OrtStatus* factory_create_data_transfer(OrtEpFactory* f, OrtDataTransferImpl** out) { (void)f; *out = NULL; return NULL; }

static OrtStatus* factory_get_supported_devices(OrtEpFactory* f, const OrtHardwareDevice* const* devices, size_t n,
                                                OrtEpDevice** ep_devices, size_t max, size_t* num) {
  SeamlessFactory* self = (SeamlessFactory*)f;
  *num = 0;
  for (size_t i = 0; i < n && *num < max; i++) {
    if (ORT(HardwareDevice_Type)(devices[i]) != self->hw_type) continue;
    OrtKeyValuePairs* meta = NULL;
    ORT(CreateKeyValuePairs)(&meta);
    ORT(AddKeyValuePair)(meta, SEAMLESS_REGISTRATION_KEY, self->registration);
    OrtStatus* st = ORT_EP(CreateEpDevice)(f, devices[i], meta, NULL, &ep_devices[*num]);
    ORT(ReleaseKeyValuePairs)(meta);
    if (st) return st;
    (*num)++;
  }
  return NULL;
}

static const char* ep_name(const OrtEp* ep) { return ((const SeamlessEp*)ep)->factory->name; }

static OrtStatus* ep_get_capability(OrtEp* ep, const OrtGraph* graph, OrtEpGraphSupportInfo* info) {
  return py_get_capability(((SeamlessEp*)ep)->handle, graph, info);
}

static OrtStatus* info_create_state(OrtNodeComputeInfo* info, OrtNodeComputeContext* ctx, void** state) {
  (void)ctx;
  *state = ((SeamlessComputeInfo*)info)->handle;
  return NULL;
}
static OrtStatus* info_compute(OrtNodeComputeInfo* info, void* state, OrtKernelContext* ctx) {
  (void)state;
  SeamlessComputeInfo* self = (SeamlessComputeInfo*)info;
#ifdef SEAMLESS_CUDA
  int done = 0;
  OrtStatus* st = self->native ? replay_compute(self->native, ctx, &done) : NULL;
  if (!st && !done) st = py_compute(self->handle, ctx);
  if (st) capture_abort();
  return st;
#else
  int done = 0;
  OrtStatus* st = self->native ? runner_compute(self->native, ctx, &done) : NULL;
  return st || done ? st : py_compute(self->handle, ctx);
#endif
}
static void info_release_state(OrtNodeComputeInfo* info, void* state) { (void)info; (void)state; }

static void release_compute_info(OrtNodeComputeInfo* info) {
  if (!info) return;
  py_release_handle(((SeamlessComputeInfo*)info)->handle);
  free(info);
}

static OrtStatus* ep_compile(OrtEp* ep, const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                             OrtNodeComputeInfo** infos, OrtNode** ep_context_nodes) {
  (void)ep_context_nodes;
  for (size_t i = 0; i < count; i++) infos[i] = NULL;
  for (size_t i = 0; i < count; i++) {
    SeamlessComputeInfo* info = calloc(1, sizeof *info);
    if (!info) return seamless_status(1, "out of memory");
    OrtStatus* st = py_compile(((SeamlessEp*)ep)->handle, graphs[i], fused_nodes[i], &info->handle, &info->native);
    if (st) {
      free(info);
      for (size_t j = 0; j < i; j++) { release_compute_info(infos[j]); infos[j] = NULL; }
      return st;
    }
    info->base.ort_version_supported = SEAMLESS_ORT_API_MAX;
    info->base.CreateState = info_create_state;
    info->base.Compute = info_compute;
    info->base.ReleaseState = info_release_state;
    infos[i] = &info->base;
  }
  return NULL;
}

static void ep_release_node_compute_infos(OrtEp* ep, OrtNodeComputeInfo** infos, size_t count) {
  (void)ep;
  for (size_t i = 0; i < count; i++) release_compute_info(infos[i]);
}

static OrtStatus* factory_create_ep(OrtEpFactory* f, const OrtHardwareDevice* const* devices,
                                    const OrtKeyValuePairs* const* metadata, size_t num_devices,
                                    const OrtSessionOptions* options, const OrtLogger* logger, OrtEp** out) {
  (void)devices;
  SeamlessFactory* self = (SeamlessFactory*)f;
  *out = NULL;
  /* SessionOptions made before the library was unregistered still point at this factory (and at
   * devices ORT freed: read nothing of them) */
  if (!self->handle)
    return seamless_status(1, "onnxruntime-ep-seamless: this SessionOptions names a device of a registration of the "
                              "library that was unregistered since; register it again and make new SessionOptions");
  int ordinal = -1;  /* the CUDA device of a GPU EP, from the metadata its OrtEpDevice carries */
  const char* id = num_devices == 1 && metadata && metadata[0] ? ORT(GetKeyValue)(metadata[0], "cuda_device_id") : NULL;
  if (id) ordinal = atoi(id);
  OrtKeyValuePairs* entries = NULL;
  const char* const* keys = NULL;
  const char* const* values = NULL;
  size_t n = 0;
  TRY(ORT(GetSessionOptionsConfigEntries)(options, &entries));
  ORT(GetKeyValuePairs)(entries, &keys, &values, &n);
  SeamlessEp* ep = calloc(1, sizeof *ep);
  int graph_capture = 0;
  OrtStatus* st = ep ? py_create_ep(self->handle, keys, values, n, ordinal, logger, &ep->handle, &graph_capture)
                     : seamless_status(1, "out of memory");
  ORT(ReleaseKeyValuePairs)(entries);
  if (st) { free(ep); return st; }
#ifdef SEAMLESS_CUDA
  if (graph_capture) {  /* ORT's session capture hooks: slots of API 26 (ReleaseCapturedGraph: 27) */
    if (g_api_version < 26 || !(ep->capture = capture_new(ordinal))) {
      py_release_handle(ep->handle);
      free(ep);
      return seamless_status(1, g_api_version < 26 ? "SeamlessCUDAExecutionProvider: enable_cuda_graph=1 needs "
                                                     "onnxruntime >= 1.26 (session graph capture); upgrade onnxruntime"
                                                   : "out of memory");
    }
    ep->base.OnRunStart = capture_on_run_start;
    ep->base.OnRunEnd = capture_on_run_end;
    ep->base.IsGraphCaptureEnabled = capture_enabled;
    ep->base.IsGraphCaptured = capture_is_captured;
    ep->base.ReplayGraph = capture_replay;
    ep->base.GetGraphCaptureNodeAssignmentPolicy = capture_policy;
    if (g_api_version >= 27) ep->base.ReleaseCapturedGraph = capture_release_graph;
  }
  if (ordinal >= 0 && g_api_version >= 25) ep->base.Sync = ep_sync;
#endif
  ep->ordinal = ordinal;
  ep->factory = self;
  ep->base.ort_version_supported = SEAMLESS_ORT_API_MAX;
  ep->base.GetName = ep_name;
  ep->base.GetCapability = ep_get_capability;
  ep->base.Compile = ep_compile;
  ep->base.ReleaseNodeComputeInfos = ep_release_node_compute_infos;
  /* IsConcurrentRunSupported stays NULL: concurrent runs are allowed (false deadlocks Python callers). */
  *out = &ep->base;
  return NULL;
}

static void factory_release_ep(OrtEpFactory* f, OrtEp* ep) {
  (void)f;
  if (!ep) return;
  py_release_handle(((SeamlessEp*)ep)->handle);
#ifdef SEAMLESS_CUDA
  capture_release(capture_of(ep));
#endif
  free(ep);
}

/* ---- custom-op domains: the schemas of the user's kernels of new domains (kernels/user.py) ----
 * ORT (>= 1.24) asks the factory for them before it loads a model and builds each op's schema from an
 * OrtCustomOp. Ours are placeholders: the EP claims those nodes into its fused nodes, so ORT never makes
 * their kernels (their kernel callbacks only fail). A set is built each time the Python registry changed, and
 * never freed: sessions keep pointers to it, as they keep the factory struct (below). */
typedef struct {
  OrtCustomOp base;   /* first: ORT's pointer is ours */
  char *name, *ep_name;
  const SeamlessFactory* owner;  /* its Python factory answers shape inference (py_infer_shapes) while alive */
  int32_t id;         /* the op among those the Python factory handed over */
  int since, until;
  size_t n_in, required_in, n_out;  /* inputs from required_in on are optional */
  int32_t types[];    /* the inputs' element types, then the outputs' (0: any type) */
} SeamlessCustomOp;

struct SeamlessOpDomains {
  size_t n;
  OrtCustomOpDomain* domains[];
};

static const SeamlessCustomOp* custom_op(const OrtCustomOp* op) { return (const SeamlessCustomOp*)op; }
static const char* custom_op_name(const OrtCustomOp* op) { return custom_op(op)->name; }
static const char* custom_op_ep(const OrtCustomOp* op) { return custom_op(op)->ep_name; }
static ONNXTensorElementDataType custom_op_input_type(const OrtCustomOp* op, size_t i) {
  return i < custom_op(op)->n_in ? custom_op(op)->types[i] : 0;
}
static size_t custom_op_inputs(const OrtCustomOp* op) { return custom_op(op)->n_in; }
static ONNXTensorElementDataType custom_op_output_type(const OrtCustomOp* op, size_t i) {
  return i < custom_op(op)->n_out ? custom_op(op)->types[custom_op(op)->n_in + i] : 0;
}
static size_t custom_op_outputs(const OrtCustomOp* op) { return custom_op(op)->n_out; }
static OrtCustomOpInputOutputCharacteristic custom_op_input_kind(const OrtCustomOp* op, size_t i) {
  return i < custom_op(op)->required_in ? 0 : 1;  /* REQUIRED, OPTIONAL */
}
static OrtCustomOpInputOutputCharacteristic custom_op_output_kind(const OrtCustomOp* op, size_t i) {
  (void)op, (void)i;
  return 0;
}
static OrtMemType custom_op_memory(const OrtCustomOp* op, size_t i) { (void)op, (void)i; return 0; }
static int custom_op_one(const OrtCustomOp* op) { (void)op; return 1; }
static int custom_op_since(const OrtCustomOp* op) { return custom_op(op)->since; }
static int custom_op_until(const OrtCustomOp* op) { return custom_op(op)->until; }
static void* custom_op_kernel(const OrtCustomOp* op, const void* api, const OrtKernelInfo* info) {
  (void)op, (void)api, (void)info;
  return NULL;
}
static OrtStatus* custom_op_kernel_v2(const OrtCustomOp* op, const void* api, const OrtKernelInfo* info,
                                      void** kernel) {
  (void)api, (void)info;
  *kernel = NULL;
  char msg[512];
  snprintf(msg, sizeof msg, "%s: a node of the custom op '%s' was not claimed by the EP, and only the EP runs it "
           "(its Python kernel declined the node: log_partition=1 says why)", custom_op(op)->ep_name,
           custom_op(op)->name);
  return seamless_status(1, msg);
}
static void custom_op_compute(void* kernel, OrtKernelContext* ctx) { (void)kernel, (void)ctx; }
static OrtStatus* custom_op_compute_v2(void* kernel, OrtKernelContext* ctx) {
  (void)kernel, (void)ctx;
  return seamless_status(1, "onnxruntime-ep-seamless: a placeholder custom-op kernel was run");
}
static void custom_op_destroy(void* kernel) { (void)kernel; }

/* ORT's type and shape inference of a custom op's node, from the user's shape rule: the inputs' element types and
 * dims (rank -1: absent or not a tensor; a dim ORT does not know: -1) to Python, the outputs' back. Nothing is set
 * where the rule cannot answer; ORT ignores the returned status. */
#define SHAPE_RANK 16
static OrtStatus* custom_op_infer(const OrtCustomOp* op, OrtShapeInferContext* ctx) {
  const SeamlessCustomOp* c = custom_op(op);
  size_t n = 0;
  OrtStatus* st = ORT(ShapeInferContext_GetInputCount)(ctx, &n);
  if (st) return st;
  int32_t* ints = calloc(2 * (n + c->n_out) + 1, sizeof *ints);  /* types and ranks, of the inputs then outputs */
  int64_t* dims = calloc((n + c->n_out) * SHAPE_RANK + 1, sizeof *dims);
  if (!ints || !dims) {
    free(ints), free(dims);
    return seamless_status(1, "onnxruntime-ep-seamless: out of memory in shape inference");
  }
  for (size_t i = 0; i < n; i++) {
    OrtTensorTypeAndShapeInfo* info = NULL;
    size_t rank = 0;
    ints[n + i] = -1;
    OrtStatus* e = ORT(ShapeInferContext_GetInputTypeShape)(ctx, i, &info);
    if (!e && info && !(e = ORT(GetTensorElementType)(info, &ints[i])) &&
        !(e = ORT(GetDimensionsCount)(info, &rank)) && rank <= SHAPE_RANK &&
        !(e = ORT(GetDimensions)(info, dims + i * SHAPE_RANK, rank)))
      ints[n + i] = (int32_t)rank;
    if (e) ORT(ReleaseStatus)(e);  /* info stays the context's */
  }
  int32_t *out_types = ints + 2 * n, *out_ranks = out_types + c->n_out;
  int64_t* out_dims = dims + n * SHAPE_RANK;
  void* handle = c->owner->handle;  /* NULL once ORT released the factory */
  if (handle && py_infer_shapes(handle, c->id, n, ints, ints + n, dims, SHAPE_RANK, c->n_out, out_types, out_ranks,
                                out_dims))
    for (size_t j = 0; j < c->n_out && !st; j++) {
      OrtTensorTypeAndShapeInfo* info = NULL;
      if (out_ranks[j] < 0 || out_ranks[j] > SHAPE_RANK) continue;
      st = ORT(CreateTensorTypeAndShapeInfo)(&info);
      if (!st) st = ORT(SetTensorElementType)(info, out_types[j]);
      if (!st) st = ORT(SetDimensions)(info, out_dims + j * SHAPE_RANK, (size_t)out_ranks[j]);
      if (!st) st = ORT(ShapeInferContext_SetOutputTypeShape)(ctx, j, info);
      if (info) ORT(ReleaseTensorTypeAndShapeInfo)(info);
    }
  free(ints), free(dims);
  return st;
}
static size_t custom_op_no_aliases(int** in, int** out) { *in = *out = NULL; return 0; }
static void custom_op_release_aliases(int* in, int* out) { (void)in, (void)out; }

/* version 18: the members through GetAliasMap (ORT >= 1.24 reads them all) */
static const OrtCustomOp CUSTOM_OP = {
    .version = 18, .CreateKernel = custom_op_kernel, .GetName = custom_op_name,
    .GetExecutionProviderType = custom_op_ep, .GetInputType = custom_op_input_type,
    .GetInputTypeCount = custom_op_inputs, .GetOutputType = custom_op_output_type,
    .GetOutputTypeCount = custom_op_outputs, .KernelCompute = custom_op_compute, .KernelDestroy = custom_op_destroy,
    .GetInputCharacteristic = custom_op_input_kind, .GetOutputCharacteristic = custom_op_output_kind,
    .GetInputMemoryType = custom_op_memory, .GetVariadicInputMinArity = custom_op_one,
    .GetVariadicInputHomogeneity = custom_op_one, .GetVariadicOutputMinArity = custom_op_one,
    .GetVariadicOutputHomogeneity = custom_op_one, .CreateKernelV2 = custom_op_kernel_v2,
    .KernelComputeV2 = custom_op_compute_v2, .GetStartVersion = custom_op_since, .GetEndVersion = custom_op_until,
    .GetMayInplace = custom_op_no_aliases, .ReleaseMayInplace = custom_op_release_aliases,
    .GetAliasMap = custom_op_no_aliases, .ReleaseAliasMap = custom_op_release_aliases};

/* Python's registry as it now is (py_custom_ops calls this when it changed): n ops, op i named names[i] of
 * domains[i] for opsets [since[i], until[i]] with n_in[i] inputs (the first required_in[i] required, the rest
 * optional) and n_out[i] outputs whose element types follow one another in `types`; ids[i] names it to the Python
 * factory, which infers its outputs' shapes where infers[i]. The domains are made at once; the factory hands the
 * newest set to ORT. */
OrtStatus* seamless_set_custom_ops(OrtEpFactory* factory, size_t n, const char* const* domains,
                                   const char* const* names, const int32_t* since, const int32_t* until,
                                   const int32_t* n_in, const int32_t* required_in, const int32_t* n_out,
                                   const int32_t* types, const int32_t* ids, const int32_t* infers) {
  SeamlessFactory* f = (SeamlessFactory*)factory;
  SeamlessOpDomains* set = calloc(1, sizeof *set + n * sizeof set->domains[0]);
  if (!set) return seamless_status(1, "onnxruntime-ep-seamless: out of memory for custom-op domains");
  size_t* made_by = calloc(n ? n : 1, sizeof *made_by);  /* the op whose domain name made each domain */
  if (!made_by) return seamless_status(1, "onnxruntime-ep-seamless: out of memory for custom-op domains");
  OrtStatus* st = NULL;
  for (size_t i = 0, t = 0; i < n && !st; t += (size_t)n_in[i] + (size_t)n_out[i], i++) {
    size_t count = (size_t)n_in[i] + (size_t)n_out[i];
    SeamlessCustomOp* op = calloc(1, sizeof *op + count * sizeof op->types[0]);
    if (!op || !(op->name = strdup(names[i]))) {
      st = seamless_status(1, "onnxruntime-ep-seamless: out of memory for a custom op");
      break;
    }
    op->ep_name = f->name;
    op->since = since[i], op->until = until[i];
    op->n_in = (size_t)n_in[i], op->required_in = (size_t)required_in[i], op->n_out = (size_t)n_out[i];
    memcpy(op->types, types + t, count * sizeof op->types[0]);
    op->base = CUSTOM_OP;
    op->base.InferOutputShapeFn = infers[i] ? custom_op_infer : NULL;
    op->owner = f, op->id = ids[i];
    size_t d = 0;  /* this op's domain among the set's: one per distinct name */
    while (d < set->n && strcmp(domains[made_by[d]], domains[i]) != 0) d++;
    if (d == set->n) {
      made_by[d] = i;
      st = ORT(CreateCustomOpDomain)(domains[i], &set->domains[d]);
      set->n += !st;
    }
    if (!st) st = ORT(CustomOpDomain_Add)(set->domains[d], &op->base);
  }
  free(made_by);
  if (st) return st;  /* what was made stays allocated: ORT may not release a domain it saw */
  f->op_domains = set;  /* the older sets stay allocated, for the sessions made with them */
  return NULL;
}

static OrtStatus* factory_num_custom_op_domains(OrtEpFactory* factory, size_t* n) {
  SeamlessFactory* f = (SeamlessFactory*)factory;
  *n = 0;
  OrtStatus* st = f->handle ? py_custom_ops(f->handle, factory) : NULL;
  if (!st && f->op_domains) *n = f->op_domains->n;
  return st;
}

static OrtStatus* factory_custom_op_domains(OrtEpFactory* factory, OrtCustomOpDomain** domains, size_t n) {
  SeamlessOpDomains* set = ((SeamlessFactory*)factory)->op_domains;
  for (size_t i = 0; set && i < n && i < set->n; i++) domains[i] = set->domains[i];
  return NULL;
}

/* Called from Python's create-factories: a C factory struct around a Python handle. */
static const char* g_registering;  /* the registration name, during seamless_entry_create_ep_factories */
static OrtEpFactory* seamless_new_factory(void* handle, const char* name, const char* vendor, const char* version,
                                          int hw_type) {
  SeamlessFactory* f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->handle = handle;
  f->name = strdup(name);
  f->vendor = strdup(vendor);
  f->version = strdup(version);
  f->registration = strdup(g_registering ? g_registering : "");
  f->hw_type = hw_type;
  f->base.ort_version_supported = SEAMLESS_ORT_API_MAX;
  f->base.GetName = factory_name;
  f->base.GetVendor = factory_vendor;
  f->base.CreateEp = factory_create_ep;
  f->base.ReleaseEp = factory_release_ep;
  f->base.GetVendorId = factory_vendor_id;
  f->base.GetVersion = factory_version;          /* required in practice: NULL crashes ORT */
  f->base.GetNumCustomOpDomains = factory_num_custom_op_domains;
  f->base.GetCustomOpDomains = factory_custom_op_domains;
#ifdef SEAMLESS_CUDA
  f->base.GetSupportedDevices = factory_cuda_devices;  /* one device per NVIDIA GPU */
  f->base.CreateAllocator = factory_create_allocator;
  f->base.ReleaseAllocator = factory_release_allocator;
  f->base.CreateDataTransfer = factory_create_cuda_transfer;
  f->base.IsStreamAware = factory_cuda_stream_aware;
  f->base.CreateSyncStreamForDevice = factory_create_stream;
#else
  f->base.GetSupportedDevices = factory_get_supported_devices;
  f->base.CreateDataTransfer = factory_create_data_transfer;  /* likewise */
  f->base.IsStreamAware = factory_is_stream_aware;
#endif
  return &f->base;
}

/* ---- entry points (forwarded by the shim) -------------------------------------------- */
/* In a host without a running interpreter (a C/C++ program), start one before cffi would:
 * cffi's own start-up (Py_InitializeEx) derives the prefix from `python3` on $PATH and aborts
 * the process when that fails. Here `program` (the venv's python, found by the shim) points
 * getpath at the right stdlib and site-packages, the host keeps its signal handlers, and a
 * failure is returned as a message. The GIL is released afterwards: ORT calls the EP on any
 * thread, and cffi's callbacks take it with PyGILState_Ensure. Py_Finalize is never called. */
__attribute__((visibility("default")))
const char* seamless_entry_boot_python(const char* program, char* err, size_t errlen) {
  if (Py_IsInitialized()) return NULL;
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  PyStatus st = PyStatus_Ok();
  if (program && *program) st = PyConfig_SetBytesString(&config, &config.program_name, program);
  if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(st)) {
    snprintf(err, errlen, "onnxruntime-ep-seamless: starting the embedded Python %d.%d as '%s' failed: %s%s%s. "
             "Fix: set SEAMLESS_PYTHON to the python executable of the environment this package is installed in "
             "(and check PYTHONHOME/PYTHONPATH).", PY_MAJOR_VERSION, PY_MINOR_VERSION,
             program && *program ? program : "python3 (default)", st.func ? st.func : "", st.func ? ": " : "",
             st.err_msg ? st.err_msg : (st.exitcode ? "the interpreter asked to exit" : "unknown error"));
    return err;
  }
  PyEval_SaveThread();
  return NULL;
}

/* cffi's start-up aborts the process when its own backend is missing: check first. */
static int cffi_backend_missing(void) {
  if (!Py_IsInitialized()) return 0;  /* a C host: cffi starts the interpreter itself */
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* module = PyImport_ImportModule("_cffi_backend");
  if (module) Py_DECREF(module); else PyErr_Clear();
  PyGILState_Release(gil);
  return module == NULL;
}

/* cffi's embedding start-up on Python 3.8-3.11 uses PyCapsule_Type.tp_version_tag as a spin lock
 * that must read 0, and aborts the process otherwise; any earlier attribute lookup on a capsule
 * object (torch makes some) assigns that tag. Resetting it the official way (PyType_Modified; the
 * next lookup assigns a new one) while this thread holds the GIL, so no other thread can set it
 * again before cffi locks, lets the Python layer start. Returns py_ready(). */
static int start_python_layer(void) {
  if (!Py_IsInitialized()) return py_ready();  /* a C host: cffi starts a fresh interpreter */
  PyGILState_STATE gil = PyGILState_Ensure();
#if PY_VERSION_HEX >= 0x03080000 && PY_VERSION_HEX < 0x030C0000
  if (PyCapsule_Type.tp_version_tag) PyType_Modified(&PyCapsule_Type);
#endif
  int ready = py_ready();
  PyGILState_Release(gil);
  return ready;
}

__attribute__((visibility("default")))
OrtStatus* seamless_entry_create_ep_factories(const char* registered_name, const OrtApiBase* base, const OrtLogger* logger,
                                              OrtEpFactory** factories, size_t max_factories, size_t* num_factories) {
  *num_factories = 0;
  OrtStatus* st = negotiate(base);
  if (st || !g_api) return st;
  if (cffi_backend_missing())
    return seamless_status(1, "onnxruntime-ep-seamless: the Python package 'cffi' is not installed in this "
                              "interpreter. Fix: pip install cffi");
  /* cffi reports a failed Python start-up by returning 0 from every extern "Python" call */
  if (!start_python_layer())
    return seamless_status(1, "onnxruntime-ep-seamless: the embedded Python layer failed to initialize "
                              "(the traceback is on stderr). Fix: reinstall the package with its dependencies "
                              "(pip install --force-reinstall onnxruntime-ep-seamless).");
  g_registering = registered_name;  /* ORT registers one library at a time */
  st = py_create_factories(registered_name, logger, factories, max_factories, num_factories);
  g_registering = NULL;
  return st;
}

__attribute__((visibility("default")))
OrtStatus* seamless_entry_release_ep_factory(OrtEpFactory* factory) {
  SeamlessFactory* f = (SeamlessFactory*)factory;
  if (!f) return NULL;
  if (py_ready()) py_release_handle(f->handle);
  /* The struct is never freed: sessions alive after an unregister still call ReleaseEp and GetName
   * through it (their EP objects hold the Python factory), and SessionOptions made before call
   * CreateEp, which now refuses. A few bytes per unregister. */
  f->handle = NULL;
  return NULL;
}

/* The module's own path, so the Python side can find its package in a non-Python host. */
static const char* seamless_module_path(void) {
  static Dl_info info;
  return dladdr((void*)seamless_module_path, &info) ? info.dli_fname : "";
}
