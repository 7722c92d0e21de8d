/* onnxruntime-ep-seamless: keep the shared objects loadable on glibc 2.28 (the manylinux_2_28 floor)
 * when they are built on a newer glibc. Force-included into every object by build_plugin.py.
 *
 * glibc 2.34 moved dl* and pthread_* into libc.so.6 under a new default version GLIBC_2.34, and
 * glibc 2.29 gave exp/exp2/log/log2/pow new default versions; a build on such a glibc references
 * those versions, which a 2.28 loader does not have. Each line below binds one function to the
 * version that every x86-64 glibc has (GLIBC_2.2.5); the newer glibc still exports it under that
 * version, so the build machine links and runs the same code. A .symver line for a function an
 * object does not call emits nothing. The build links libdl.so.2 and libpthread.so.0 explicitly
 * (see build_plugin.py) so that a glibc < 2.34 finds the dl and pthread functions where it keeps
 * them. wheels/check_wheel.py fails the build if any GLIBC version above 2.28 is still referenced.
 * build_plugin.py includes this file only when it builds with glibc on x86-64 (checked there, because
 * __GLIBC__ is not yet defined when a forced include is read). */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver pthread_mutexattr_init,pthread_mutexattr_init@GLIBC_2.2.5");
__asm__(".symver pthread_mutexattr_settype,pthread_mutexattr_settype@GLIBC_2.2.5");
__asm__(".symver pthread_mutexattr_destroy,pthread_mutexattr_destroy@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_getspecific,pthread_getspecific@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.2.5");
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver exp2,exp2@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
