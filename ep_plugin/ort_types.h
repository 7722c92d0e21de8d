/* onnxruntime-ep-seamless: our own declarations of the ORT plugin-EP types we use.
 * Written from the interface facts (member order, slot indices) in the project's ABI
 * reference; no header text is copied. Layouts are those of API 27, which are a correct
 * prefix for older runtimes (ORT reads only the members its version knows).
 * Pure declarations (no preprocessor) so cffi can parse this file for the layout test. */

typedef struct OrtStatus OrtStatus;
typedef struct OrtApiBase OrtApiBase;
typedef struct OrtLogger OrtLogger;
typedef struct OrtHardwareDevice OrtHardwareDevice;
typedef struct OrtEpDevice OrtEpDevice;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtGraph OrtGraph;
typedef struct OrtNode OrtNode;
typedef struct OrtValueInfo OrtValueInfo;
typedef struct OrtOpAttr OrtOpAttr;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSequenceTypeInfo OrtSequenceTypeInfo;
typedef struct OrtOptionalTypeInfo OrtOptionalTypeInfo;
typedef struct OrtValue OrtValue;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtNodeComputeContext OrtNodeComputeContext;
typedef struct OrtEpGraphSupportInfo OrtEpGraphSupportInfo;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtMemoryDevice OrtMemoryDevice;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtDataTransferImpl OrtDataTransferImpl;
typedef struct OrtSyncStreamImpl OrtSyncStreamImpl;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtKernelRegistry OrtKernelRegistry;
typedef struct OrtEpProfilerImpl OrtEpProfilerImpl;
typedef struct OrtDeviceEpIncompatibilityDetails OrtDeviceEpIncompatibilityDetails;
typedef struct OrtExternalResourceImporterImpl OrtExternalResourceImporterImpl;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtShapeInferContext OrtShapeInferContext;
typedef struct OrtResourceCount OrtResourceCount;

typedef int OrtErrorCode;                    /* OK 0, FAIL 1, INVALID_ARGUMENT 2, RUNTIME_EXCEPTION 6, EP_FAIL 11 */
typedef int OrtLoggingLevel;                 /* VERBOSE 0 .. FATAL 4 */
typedef int OrtHardwareDeviceType;           /* CPU 0, GPU 1, NPU 2 */
typedef int OrtOpAttrType;                   /* INT 1, INTS 2, FLOAT 3, FLOATS 4, STRING 5, STRINGS 6, GRAPH 7, TENSOR 8 */
typedef int ONNXType;                        /* TENSOR 1, SEQUENCE 2, OPTIONAL 6 */
typedef int ONNXTensorElementDataType;       /* ONNX TensorProto.DataType numbering */
typedef int OrtEpDataLayout;
typedef int OrtCompiledModelCompatibility;
typedef int OrtGraphCaptureNodeAssignmentPolicy;
typedef int OrtMemoryInfoDeviceType;
typedef int OrtDeviceMemoryType;
typedef int OrtAllocatorType;
typedef int OrtCustomOpInputOutputCharacteristic;  /* REQUIRED 0, OPTIONAL 1, VARIADIC 2 */
typedef int OrtMemType;                      /* CPUInput -2, CPUOutput -1, Default 0 */

struct OrtApiBase {
  const void* (*GetApi)(uint32_t version);   /* returns const OrtApi* (a table of slots) */
  const char* (*GetVersionString)(void);
};

typedef struct OrtNodeFusionOptions {
  uint32_t ort_version_supported;
  bool drop_constant_initializers;
} OrtNodeFusionOptions;

typedef struct OrtNodeComputeInfo OrtNodeComputeInfo;
struct OrtNodeComputeInfo {
  uint32_t ort_version_supported;
  OrtStatus* (*CreateState)(OrtNodeComputeInfo* this_ptr, OrtNodeComputeContext* ctx, void** state);
  OrtStatus* (*Compute)(OrtNodeComputeInfo* this_ptr, void* state, OrtKernelContext* kctx);
  void (*ReleaseState)(OrtNodeComputeInfo* this_ptr, void* state);
};

typedef struct OrtEp OrtEp;
struct OrtEp {
  uint32_t ort_version_supported;
  const char* (*GetName)(const OrtEp* this_ptr);
  OrtStatus* (*GetCapability)(OrtEp* this_ptr, const OrtGraph* graph, OrtEpGraphSupportInfo* info);
  OrtStatus* (*Compile)(OrtEp* this_ptr, const OrtGraph** graphs, const OrtNode** fused_nodes, size_t count,
                        OrtNodeComputeInfo** node_compute_infos, OrtNode** ep_context_nodes);
  void (*ReleaseNodeComputeInfos)(OrtEp* this_ptr, OrtNodeComputeInfo** infos, size_t count);
  OrtStatus* (*GetPreferredDataLayout)(OrtEp* this_ptr, OrtEpDataLayout* layout);
  OrtStatus* (*ShouldConvertDataLayoutForOp)(OrtEp* this_ptr, const char* domain, const char* op_type,
                                             OrtEpDataLayout target, int* should_convert);
  OrtStatus* (*SetDynamicOptions)(OrtEp* this_ptr, const char* const* keys, const char* const* values, size_t n);
  OrtStatus* (*OnRunStart)(OrtEp* this_ptr, const OrtRunOptions* run_options);
  OrtStatus* (*OnRunEnd)(OrtEp* this_ptr, const OrtRunOptions* run_options, bool sync_stream);
  OrtStatus* (*CreateAllocator)(OrtEp* this_ptr, const OrtMemoryInfo* info, OrtAllocator** out);
  OrtStatus* (*CreateSyncStreamForDevice)(OrtEp* this_ptr, const OrtMemoryDevice* device, OrtSyncStreamImpl** out);
  const char* (*GetCompiledModelCompatibilityInfo)(OrtEp* this_ptr, const OrtGraph* graph);
  OrtStatus* (*GetKernelRegistry)(OrtEp* this_ptr, const OrtKernelRegistry** out);
  OrtStatus* (*IsConcurrentRunSupported)(OrtEp* this_ptr, bool* out);
  OrtStatus* (*Sync)(OrtEp* this_ptr);
  OrtStatus* (*CreateProfiler)(OrtEp* this_ptr, OrtEpProfilerImpl** out);
  bool (*IsGraphCaptureEnabled)(const OrtEp* this_ptr);
  bool (*IsGraphCaptured)(const OrtEp* this_ptr, int graph_annotation_id);
  OrtStatus* (*ReplayGraph)(OrtEp* this_ptr, int graph_annotation_id);
  OrtGraphCaptureNodeAssignmentPolicy (*GetGraphCaptureNodeAssignmentPolicy)(const OrtEp* this_ptr);
  OrtStatus* (*GetAvailableResource)(const OrtEp* this_ptr, OrtResourceCount* out);
  OrtStatus* (*OnSessionInitializationEnd)(OrtEp* this_ptr);
  OrtStatus* (*GetDefaultMemoryDevice)(const OrtEp* this_ptr, const OrtMemoryDevice** out);
  OrtStatus* (*ReleaseCapturedGraph)(OrtEp* this_ptr, int graph_annotation_id);
};

typedef struct OrtEpFactory OrtEpFactory;
struct OrtEpFactory {
  uint32_t ort_version_supported;
  const char* (*GetName)(const OrtEpFactory* this_ptr);
  const char* (*GetVendor)(const OrtEpFactory* this_ptr);
  OrtStatus* (*GetSupportedDevices)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices, size_t num_devices,
                                    OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* num_ep_devices);
  OrtStatus* (*CreateEp)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices,
                         const OrtKeyValuePairs* const* ep_metadata_pairs, size_t num_devices,
                         const OrtSessionOptions* session_options, const OrtLogger* logger, OrtEp** ep);
  void (*ReleaseEp)(OrtEpFactory* this_ptr, OrtEp* ep);
  uint32_t (*GetVendorId)(const OrtEpFactory* this_ptr);
  const char* (*GetVersion)(const OrtEpFactory* this_ptr);
  OrtStatus* (*ValidateCompiledModelCompatibilityInfo)(OrtEpFactory* this_ptr, const OrtHardwareDevice* const* devices,
                                                       size_t num_devices, const char* compatibility_info,
                                                       OrtCompiledModelCompatibility* out);
  OrtStatus* (*CreateAllocator)(OrtEpFactory* this_ptr, const OrtMemoryInfo* info,
                                const OrtKeyValuePairs* allocator_options, OrtAllocator** out);
  void (*ReleaseAllocator)(OrtEpFactory* this_ptr, OrtAllocator* allocator);
  OrtStatus* (*CreateDataTransfer)(OrtEpFactory* this_ptr, OrtDataTransferImpl** out);
  bool (*IsStreamAware)(const OrtEpFactory* this_ptr);
  OrtStatus* (*CreateSyncStreamForDevice)(OrtEpFactory* this_ptr, const OrtMemoryDevice* device,
                                          const OrtKeyValuePairs* stream_options, OrtSyncStreamImpl** out);
  OrtStatus* (*GetHardwareDeviceIncompatibilityDetails)(OrtEpFactory* this_ptr, const OrtHardwareDevice* device,
                                                        OrtDeviceEpIncompatibilityDetails* details);
  OrtStatus* (*CreateExternalResourceImporterForDevice)(OrtEpFactory* this_ptr, const OrtEpDevice* ep_device,
                                                        OrtExternalResourceImporterImpl** out);
  OrtStatus* (*GetNumCustomOpDomains)(OrtEpFactory* this_ptr, size_t* num_domains);
  OrtStatus* (*GetCustomOpDomains)(OrtEpFactory* this_ptr, OrtCustomOpDomain** domains, size_t num_domains);
  OrtStatus* (*InitGraphicsInterop)(OrtEpFactory* this_ptr, const OrtEpDevice* ep_device, const void* config);
  OrtStatus* (*DeinitGraphicsInterop)(OrtEpFactory* this_ptr, const OrtEpDevice* ep_device);
};

/* A custom op's schema and kernel ([1] .. [18]): what a custom-op domain holds (GetCustomOpDomains, [1.24]).
 * The EP's are placeholders: ORT builds the op's schema from them, and the EP claims the nodes into its fused
 * nodes, so their kernel callbacks are never called. OrtApi is passed as an opaque table. */
typedef struct OrtCustomOp OrtCustomOp;
struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const OrtCustomOp* op, const void* api, const OrtKernelInfo* info);
  const char* (*GetName)(const OrtCustomOp* op);
  const char* (*GetExecutionProviderType)(const OrtCustomOp* op);
  ONNXTensorElementDataType (*GetInputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const OrtCustomOp* op);
  ONNXTensorElementDataType (*GetOutputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const OrtCustomOp* op);
  void (*KernelCompute)(void* op_kernel, OrtKernelContext* context);
  void (*KernelDestroy)(void* op_kernel);
  OrtCustomOpInputOutputCharacteristic (*GetInputCharacteristic)(const OrtCustomOp* op, size_t index);
  OrtCustomOpInputOutputCharacteristic (*GetOutputCharacteristic)(const OrtCustomOp* op, size_t index);
  OrtMemType (*GetInputMemoryType)(const OrtCustomOp* op, size_t index);
  int (*GetVariadicInputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicInputHomogeneity)(const OrtCustomOp* op);
  int (*GetVariadicOutputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicOutputHomogeneity)(const OrtCustomOp* op);
  OrtStatus* (*CreateKernelV2)(const OrtCustomOp* op, const void* api, const OrtKernelInfo* info, void** kernel);
  OrtStatus* (*KernelComputeV2)(void* op_kernel, OrtKernelContext* context);
  OrtStatus* (*InferOutputShapeFn)(const OrtCustomOp* op, OrtShapeInferContext* ctx);
  int (*GetStartVersion)(const OrtCustomOp* op);
  int (*GetEndVersion)(const OrtCustomOp* op);
  size_t (*GetMayInplace)(int** input_index, int** output_index);
  void (*ReleaseMayInplace)(int* input_index, int* output_index);
  size_t (*GetAliasMap)(int** input_index, int** output_index);
  void (*ReleaseAliasMap)(int* input_index, int* output_index);
};

/* Structs a device EP implements for memory, copies and streams ([1.23] unless noted). */
typedef struct OrtSyncStream OrtSyncStream;

typedef struct OrtAllocator OrtAllocator;
struct OrtAllocator {
  uint32_t version;
  void* (*Alloc)(OrtAllocator* this_ptr, size_t size);
  void (*Free)(OrtAllocator* this_ptr, void* p);
  const OrtMemoryInfo* (*Info)(const OrtAllocator* this_ptr);
  void* (*Reserve)(OrtAllocator* this_ptr, size_t size);
  OrtStatus* (*GetStats)(const OrtAllocator* this_ptr, OrtKeyValuePairs** out);
  void* (*AllocOnStream)(OrtAllocator* this_ptr, size_t size, OrtSyncStream* stream);
  OrtStatus* (*Shrink)(OrtAllocator* this_ptr);
};

struct OrtDataTransferImpl {
  uint32_t ort_version_supported;
  void (*Release)(OrtDataTransferImpl* this_ptr);
  bool (*CanCopy)(const OrtDataTransferImpl* this_ptr, const OrtMemoryDevice* src, const OrtMemoryDevice* dst);
  OrtStatus* (*CopyTensors)(OrtDataTransferImpl* this_ptr, const OrtValue** src, OrtValue** dst,
                            OrtSyncStream** streams, size_t count);
};

typedef struct OrtSyncNotificationImpl OrtSyncNotificationImpl;
struct OrtSyncNotificationImpl {
  uint32_t ort_version_supported;
  void (*Release)(OrtSyncNotificationImpl* this_ptr);
  OrtStatus* (*Activate)(OrtSyncNotificationImpl* this_ptr);
  OrtStatus* (*WaitOnDevice)(OrtSyncNotificationImpl* this_ptr, OrtSyncStream* consumer);
  OrtStatus* (*WaitOnHost)(OrtSyncNotificationImpl* this_ptr);
};

struct OrtSyncStreamImpl {
  uint32_t ort_version_supported;
  void (*Release)(OrtSyncStreamImpl* this_ptr);
  void* (*GetHandle)(OrtSyncStreamImpl* this_ptr);
  OrtStatus* (*CreateNotification)(OrtSyncStreamImpl* this_ptr, OrtSyncNotificationImpl** out);
  OrtStatus* (*Flush)(OrtSyncStreamImpl* this_ptr);
  OrtStatus* (*OnSessionRunEnd)(OrtSyncStreamImpl* this_ptr);
};
