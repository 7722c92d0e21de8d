/* onnxruntime-ep-seamless: the library ORT loads (the path get_library_path() returns).
 * Exports exactly CreateEpFactories and ReleaseEpFactory, links no libpython, and forwards
 * to the cffi embedding module next to it. Never export GetProvider: ORT would take the
 * library for a legacy provider-bridge EP.
 *
 * In a process without Python (a C/C++ host) it first finds the Python this package is
 * installed in, from its own path (docs/user-guide.md "Non-Python hosts"):
 *   - libpython: $SEAMLESS_LIBPYTHON, else <base prefix>/lib/<soname> (a venv's base prefix is
 *     read from its pyvenv.cfg), else <soname> through the loader's search path;
 *     loaded RTLD_GLOBAL so that numpy and _cffi_backend (not linked to libpython) resolve;
 *   - the interpreter to start as: $SEAMLESS_PYTHON, else the venv's (or prefix's) python, so
 *     that Python's getpath finds the stdlib and the venv's site-packages.
 * The module then starts the interpreter (seamless_entry_boot_python). Every failure becomes
 * an OrtStatus, never an abort. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdbool.h>
#include <stdint.h>
#include "ort_types.h"

#ifndef SEAMLESS_MODULE_FILE
#error "SEAMLESS_MODULE_FILE (the cffi module's file name) must be defined by the build"
#endif
#ifndef SEAMLESS_LIBPYTHON
#define SEAMLESS_LIBPYTHON ""      /* soname of the shared libpython, e.g. libpython3.11.so.1.0 */
#endif
#ifndef SEAMLESS_PY_VERSION
#error "SEAMLESS_PY_VERSION (the CPython major.minor the module is built for) must be defined by the build"
#endif

typedef OrtStatus* (*CreateFn)(const char*, const OrtApiBase*, const OrtLogger*, OrtEpFactory**, size_t, size_t*);
typedef OrtStatus* (*ReleaseFn)(OrtEpFactory*);
typedef OrtStatus* (*CreateStatusFn)(int, const char*);
typedef const char* (*BootFn)(const char* program, char* err, size_t errlen);
typedef const char* (*VersionFn)(void);

static CreateFn g_create;
static ReleaseFn g_release;
static char g_error[4096];          /* a failed start-up is final: later calls report the same */

static OrtStatus* fail(const OrtApiBase* base, const char* msg) {
  const void* const* api1 = base ? (const void* const*)base->GetApi(1) : NULL;
  if (api1) return ((CreateStatusFn)api1[0])(1, msg);  /* slot 0: CreateStatus */
  fprintf(stderr, "%s\n", msg);
  return NULL;
}

static bool is_file(const char* path) { return access(path, F_OK) == 0; }

/* out := a + b (+ c); false (and "") when it does not fit */
static bool join(char* out, size_t n, const char* a, const char* b, const char* c) {
  int len = snprintf(out, n, "%s%s%s", a, b, c ? c : "");
  if (len < 0 || (size_t)len >= n) { out[0] = '\0'; return false; }
  return true;
}

/* dir := parent of dir (in place); false at the root */
static bool up(char* dir) {
  char* slash = strrchr(dir, '/');
  if (!slash || slash == dir) return false;
  *slash = '\0';
  return true;
}

/* The value of "home = ..." in a pyvenv.cfg (the base interpreter's bin directory). */
static bool venv_home(const char* cfg, char* out, size_t n) {
  FILE* f = fopen(cfg, "r");
  char line[4096];
  bool found = false;
  if (!f) return false;
  while (!found && fgets(line, sizeof line, f)) {
    char* p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "home", 4) != 0) continue;
    p += 4;
    while (*p == ' ' || *p == '\t') p++;
    if (*p++ != '=') continue;
    while (*p == ' ' || *p == '\t') p++;
    size_t len = strcspn(p, "\r\n");
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    if (len && len < n) { memcpy(out, p, len); out[len] = '\0'; found = true; }
  }
  fclose(f);
  return found;
}

/* First existing <dir>/bin/<name> of python3.X, python3, python. */
static bool find_exe(const char* dir, char* out, size_t n) {
  static const char* names[] = {"python" SEAMLESS_PY_VERSION, "python3", "python"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (join(out, n, dir, "/bin/", names[i]) && is_file(out)) return true;
  }
  out[0] = '\0';
  return false;
}

/* The Python installation holding `path`: walk up to a venv (pyvenv.cfg) or to a prefix with
 * bin/python3.X. Fills the executable and, when it exists there, the shared libpython. */
static void locate_python(const char* start, char* exe, size_t nexe, char* libpy, size_t nlib) {
  char dir[4096], path[4096], home[4096];
  exe[0] = libpy[0] = '\0';
  snprintf(dir, sizeof dir, "%s", start);
  while (up(dir)) {
    if (join(path, sizeof path, dir, "/pyvenv.cfg", NULL) && is_file(path)) {
      find_exe(dir, exe, nexe);
      if (*SEAMLESS_LIBPYTHON && venv_home(path, home, sizeof home) && up(home)) {
        /* home = <base prefix>/bin */
        if (!join(libpy, nlib, home, "/lib/", SEAMLESS_LIBPYTHON) || !is_file(libpy)) libpy[0] = '\0';
      }
      return;
    }
    if (join(path, sizeof path, dir, "/bin/python", SEAMLESS_PY_VERSION) && is_file(path)) {
      snprintf(exe, nexe, "%s", path);
      if (*SEAMLESS_LIBPYTHON) {
        if (!join(libpy, nlib, dir, "/lib/", SEAMLESS_LIBPYTHON) || !is_file(libpy)) libpy[0] = '\0';
      }
      return;
    }
  }
}

/* Load libpython globally; `exe` gets the interpreter to start as ("" = Python's default). */
static const char* load_libpython(const char* pkg_dir, char* exe, size_t nexe) {
  char found[4096];
  const char* env_lib = getenv("SEAMLESS_LIBPYTHON");
  const char* env_exe = getenv("SEAMLESS_PYTHON");
  /* the installation holding SEAMLESS_PYTHON if set (its libpython), else the one holding this package */
  locate_python(env_exe && *env_exe ? env_exe : pkg_dir, exe, nexe, found, sizeof found);
  if (env_exe && *env_exe) snprintf(exe, nexe, "%s", env_exe);
  const char* tried[3];
  size_t ntried = 0;
  if (env_lib && *env_lib) tried[ntried++] = env_lib;
  else {
    if (*found) tried[ntried++] = found;
    if (*SEAMLESS_LIBPYTHON) tried[ntried++] = SEAMLESS_LIBPYTHON;
  }
  char errors[2048] = "";
  for (size_t i = 0; i < ntried; i++) {
    if (dlopen(tried[i], RTLD_NOW | RTLD_GLOBAL)) return NULL;
    size_t len = strlen(errors);
    snprintf(errors + len, sizeof errors - len, "%s'%s': %s", len ? "; " : "", tried[i], dlerror());
  }
  snprintf(g_error, sizeof g_error,
           "onnxruntime-ep-seamless: this process has no Python interpreter and the shared libpython %s "
           "could not be loaded (%s). Fix: install the Python %s this package was installed with as a shared "
           "library, or set SEAMLESS_LIBPYTHON to the path of libpython%s.so.",
           SEAMLESS_PY_VERSION, ntried ? errors : "this Python has no shared libpython", SEAMLESS_PY_VERSION,
           SEAMLESS_PY_VERSION);
  return g_error;
}

static const char* load_module(void) {
  if (g_create) return NULL;
  if (g_error[0]) return g_error;
  Dl_info self;
  if (!dladdr((void*)load_module, &self) || !self.dli_fname) return "onnxruntime-ep-seamless: cannot locate itself";
  char dir[4096], path[4096], exe[4096] = "";
  snprintf(dir, sizeof dir, "%s", self.dli_fname);
  char* slash = strrchr(dir, '/');
  if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
  bool had_python = dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL;
  if (!had_python && load_libpython(dir, exe, sizeof exe)) return g_error;
  /* the module is built for one CPython minor: refuse another one before loading it */
  VersionFn py_version = (VersionFn)dlsym(RTLD_DEFAULT, "Py_GetVersion");
  const char* running = py_version ? py_version() : "";
  size_t vlen = strlen(SEAMLESS_PY_VERSION);
  if (strncmp(running, SEAMLESS_PY_VERSION, vlen) != 0 || (running[vlen] != '.' && running[vlen] != '+')) {
    snprintf(g_error, sizeof g_error,
             "onnxruntime-ep-seamless: this package is built for Python %s, but the process runs Python %.20s. "
             "Fix: install onnxruntime-ep-seamless with the Python that hosts onnxruntime.",
             SEAMLESS_PY_VERSION, *running ? running : "(unknown)");
    return g_error;
  }
  if (!join(path, sizeof path, dir, "/", SEAMLESS_MODULE_FILE)) return "onnxruntime-ep-seamless: installation path too long";
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    snprintf(g_error, sizeof g_error, "onnxruntime-ep-seamless: cannot load %.1500s: %.1500s. Fix: reinstall the package "
             "with the Python that hosts onnxruntime.", path, dlerror());
    return g_error;
  }
  BootFn boot = (BootFn)dlsym(h, "seamless_entry_boot_python");
  CreateFn create = (CreateFn)dlsym(h, "seamless_entry_create_ep_factories");
  ReleaseFn release = (ReleaseFn)dlsym(h, "seamless_entry_release_ep_factory");
  if (!boot || !create || !release) return "onnxruntime-ep-seamless: the Python module lacks its entry points (broken build)";
  /* no-op when an interpreter is running; otherwise starts one as `exe` and releases the GIL */
  if (boot(exe, g_error, sizeof g_error)) return g_error;
  g_release = release;
  g_create = create;
  return NULL;
}

__attribute__((visibility("default")))
OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* base, const OrtLogger* logger,
                             OrtEpFactory** factories, size_t max_factories, size_t* num_factories) {
  *num_factories = 0;
  const char* problem = load_module();
  if (problem) return fail(base, problem);
  return g_create(registered_name, base, logger, factories, max_factories, num_factories);
}

__attribute__((visibility("default")))
OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  return g_release ? g_release(factory) : NULL;
}
