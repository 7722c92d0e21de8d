# Register our EP before any test imports torch (transformers, through material.minilm_inputs):
# loading the plugin library after torch aborts in cffi's embedding start-up
# (_cffi_carefully_make_gil: Assertion `old_value == locked_value' failed) -- reported to the lead.
import onnxruntime_ep_seamless

onnxruntime_ep_seamless.register()
