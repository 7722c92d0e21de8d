/* Hot loops are compiled for several x86-64 levels; the loader picks the best (GNU ifunc). */
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
#define SEAMLESS_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SEAMLESS_SIMD
#endif
