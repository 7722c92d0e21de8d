/* Splitting a kernel into tasks for the caller's thread pool (ORT's intra-op pool when the
 * kernel runs inside the EP; serial when par_fn or par_ctx is NULL). */
#pragma once
#include <stddef.h>

typedef void (*seamless_task_fn)(void* user, size_t task);
typedef void (*seamless_parallel_fn)(void* ctx, seamless_task_fn fn, size_t n, void* user);

static inline void seamless_run_tasks(void* par_fn, void* par_ctx, size_t n, seamless_task_fn fn, void* user) {
  if (par_fn && par_ctx && n > 1)
    ((seamless_parallel_fn)par_fn)(par_ctx, fn, n, user);
  else
    for (size_t i = 0; i < n; i++) fn(user, i);
}

/* How many tasks for `work` units when a task should have at least `grain` of them (<= 64). */
static inline size_t seamless_task_count(size_t work, size_t grain) {
  size_t n = work / (grain ? grain : 1);
  return n < 1 ? 1 : (n > 64 ? 64 : n);
}

/* The [begin, end) share of `total` items for task i of n. */
static inline void seamless_task_range(size_t total, size_t n, size_t i, size_t* begin, size_t* end) {
  *begin = total * i / n;
  *end = total * (i + 1) / n;
}
