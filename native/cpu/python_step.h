/* cffi cdef only (not C): the callback a native program's Python step makes (native/cpu/program.c
 * SEAMLESS_OP_PYTHON; its Python side: kernels/cpu/steps.py python_step). Returns 0, or the ORT status code
 * of the kernel's failure with its message in error. */
extern "Python+C" int seamless_python_step(void* handle, void* const* operands, char* error, size_t error_len);
