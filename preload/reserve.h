#ifndef HEAPLENS_RESERVE_H
#define HEAPLENS_RESERVE_H

#include <stddef.h>

/* The library's own mappings made after start-up, inside a range reserved then (reserve.c). */
void reserve_init(void);
void *reserve_map(size_t len, int prot, int flags, int fd);
void reserve_unmap(void *p, size_t len);

#endif
