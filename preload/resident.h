/* resident.c: resident pages of the largest sampled blocks, and the process's RSS. */
#ifndef HEAPLENS_RESIDENT_H
#define HEAPLENS_RESIDENT_H

#include "core.h"

#pragma GCC visibility push(hidden)

void resident_report(void);
void rss_mark(void);
long read_small_file(const char *path, char *buf, size_t cap);

#pragma GCC visibility pop

#endif
