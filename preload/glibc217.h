/* Every glibc symbol the library takes, at a version glibc 2.17 has
 * (manylinux2014, docs/platforms.md). The Makefile force-includes this
 * header before each source, so it includes no system header itself: the
 * sources' _GNU_SOURCE must come first.
 *
 * Before 2.34 the dl* functions lived in libdl and the pthread_key ones in
 * libpthread (the Makefile names both, which newer glibcs keep as stubs);
 * their 2.2.5 versions are what both kinds define. log got a new version
 * in 2.29 for the same function. fstat (a wrapper until 2.33) and
 * getrandom (2.25) have no old version: compat.c makes the system call. */
#ifndef HEAPLENS_GLIBC217_H
#define HEAPLENS_GLIBC217_H

#if defined(__x86_64__) && !defined(__clang_analyzer__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.2.5");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
#elif defined(__aarch64__) && !defined(__clang_analyzer__)
/* aarch64's first glibc was 2.17: its base versions are GLIBC_2.17. */
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.17");
__asm__(".symver dladdr,dladdr@GLIBC_2.17");
__asm__(".symver pthread_key_create,pthread_key_create@GLIBC_2.17");
__asm__(".symver pthread_setspecific,pthread_setspecific@GLIBC_2.17");
__asm__(".symver log,log@GLIBC_2.17");
#endif

#define getrandom hl_getrandom
#define fstat hl_fstat

#endif
