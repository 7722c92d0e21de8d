/* Conv (float32): im2col and the packed GEMM (matmul.c). Built in the one unit after program.c, which includes
 * kernels.h (SeamlessConvArgs). */
#include <stdint.h>

/* cols[i, ((c k0 + q0) k1 + q1) k2 + q2] = x[c, o0 s0 - p0 + q0 d0, ...] for output position i = (o0, o1, o2) */
static void im2col(const SeamlessConvArgs* a, const float* x, int64_t channels, float* cols) {
  const int64_t in1 = a->in_shape[1], in2 = a->in_shape[2], plane = a->in_shape[0] * in1 * in2;
  float* row = cols;
  for (int64_t o0 = 0; o0 < a->out_shape[0]; o0++)
    for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++)
      for (int64_t o2 = 0; o2 < a->out_shape[2]; o2++)
        for (int64_t c = 0; c < channels; c++) {
          const float* xc = x + c * plane;
          for (int64_t q0 = 0; q0 < a->kernel[0]; q0++) {
            const int64_t p0 = o0 * a->stride[0] - a->pad[0] + q0 * a->dilation[0];
            for (int64_t q1 = 0; q1 < a->kernel[1]; q1++) {
              const int64_t p1 = o1 * a->stride[1] - a->pad[1] + q1 * a->dilation[1];
              const float* line = p0 >= 0 && p0 < a->in_shape[0] && p1 >= 0 && p1 < in1
                                      ? xc + (p0 * in1 + p1) * in2 : NULL;  /* NULL: a row of padding */
              for (int64_t q2 = 0; q2 < a->kernel[2]; q2++) {
                const int64_t p2 = o2 * a->stride[2] - a->pad[2] + q2 * a->dilation[2];
                *row++ = line && p2 >= 0 && p2 < in2 ? line[p2] : 0.0f;
              }
            }
          }
        }
}

void seamless_conv_f32(const SeamlessConvArgs* a, const float* x, float* y, float* scratch, void* par_fn,
                       void* par_ctx) {
  const int64_t cg = a->c / a->group, mg = a->m / a->group, plane = a->in_shape[0] * a->in_shape[1] * a->in_shape[2];
  float* cols = scratch;
  float* tmp = scratch + a->l * a->k;
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      im2col(a, x + (n * a->c + g * cg) * plane, cg, cols);
      seamless_sgemm((size_t)a->l, (size_t)mg, (size_t)a->k, cols, (size_t)a->k, a->packed + g * a->packed_group,
                     a->bias ? a->bias + g * mg : NULL, tmp, (size_t)mg, par_fn, par_ctx);
      float* yg = y + (n * a->m + g * mg) * a->l;
      for (int64_t j = 0; j < mg; j++)
        for (int64_t i = 0; i < a->l; i++) yg[j * a->l + i] = tmp[i * mg + j];
    }
}
