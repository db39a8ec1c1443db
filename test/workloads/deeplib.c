/*
 * A library meant to be loaded with RTLD_DEEPBIND: its own references to
 * malloc and free bind to libc's, past any preloaded library's. deep_free
 * frees blocks the program allocated; deep_alloc hands out blocks the
 * program frees.
 */
#include <stdlib.h>

void deep_free(void *p) { free(p); }
void *deep_alloc(size_t n) { return malloc(n); }
