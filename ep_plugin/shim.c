/* onnxruntime-ep-seamless: the library ORT loads (the path get_library_path() returns).
 * Exports exactly CreateEpFactories and ReleaseEpFactory, links no libpython, and forwards
 * to the cffi embedding module next to it. In a host without Python it first loads
 * libpython globally (SEAMLESS_LIBPYTHON names it, else the soname the module was built for).
 * Never export GetProvider: ORT would take the library for a legacy provider-bridge EP. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>
#include <stdint.h>
#include "ort_types.h"

#ifndef SEAMLESS_MODULE_FILE
#error "SEAMLESS_MODULE_FILE (the cffi module's file name) must be defined by the build"
#endif
#ifndef SEAMLESS_LIBPYTHON
#define SEAMLESS_LIBPYTHON ""
#endif

typedef OrtStatus* (*CreateFn)(const char*, const OrtApiBase*, const OrtLogger*, OrtEpFactory**, size_t, size_t*);
typedef OrtStatus* (*ReleaseFn)(OrtEpFactory*);
typedef OrtStatus* (*CreateStatusFn)(int, const char*);

static CreateFn g_create;
static ReleaseFn g_release;

static OrtStatus* fail(const OrtApiBase* base, const char* msg) {
  const void* const* api1 = base ? (const void* const*)base->GetApi(1) : NULL;
  if (api1) return ((CreateStatusFn)api1[0])(1, msg);  /* slot 0: CreateStatus */
  fprintf(stderr, "%s\n", msg);
  return NULL;
}

static const char* load_module(char* err, size_t errlen) {
  if (g_create) return NULL;
  if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized")) {
    const char* lib = getenv("SEAMLESS_LIBPYTHON");
    if (!lib || !*lib) lib = SEAMLESS_LIBPYTHON;
    if (!*lib || !dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
      snprintf(err, errlen, "onnxruntime-ep-seamless: this process has no Python interpreter and loading libpython "
               "('%s') failed: %s. Fix: install the shared libpython this package was built for, or set "
               "SEAMLESS_LIBPYTHON to its path.", lib, dlerror());
      return err;
    }
  }
  Dl_info self;
  if (!dladdr((void*)load_module, &self) || !self.dli_fname) return "onnxruntime-ep-seamless: cannot locate itself";
  char path[4096];
  snprintf(path, sizeof path, "%s", self.dli_fname);
  char* slash = strrchr(path, '/');
  size_t dir = slash ? (size_t)(slash - path + 1) : 0;
  snprintf(path + dir, sizeof path - dir, "%s", SEAMLESS_MODULE_FILE);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    snprintf(err, errlen, "onnxruntime-ep-seamless: cannot load %s: %s. It is built for one CPython version; "
             "reinstall the package with the Python that hosts onnxruntime.", path, dlerror());
    return err;
  }
  g_create = (CreateFn)dlsym(h, "seamless_entry_create_ep_factories");
  g_release = (ReleaseFn)dlsym(h, "seamless_entry_release_ep_factory");
  if (!g_create || !g_release) return "onnxruntime-ep-seamless: the Python module lacks its entry points (broken build)";
  return NULL;
}

__attribute__((visibility("default")))
OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* base, const OrtLogger* logger,
                             OrtEpFactory** factories, size_t max_factories, size_t* num_factories) {
  char err[2048];
  *num_factories = 0;
  const char* problem = load_module(err, sizeof err);
  if (problem) return fail(base, problem);
  return g_create(registered_name, base, logger, factories, max_factories, num_factories);
}

__attribute__((visibility("default")))
OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  return g_release ? g_release(factory) : NULL;
}
