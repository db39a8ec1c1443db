/*
 * ring.c: the shared-memory ring this process writes its records into
 * (layout: heaplens_ring.h, docs/ring-format.md).
 */
#ifndef HEAPLENS_RING_WRITE_H
#define HEAPLENS_RING_WRITE_H

#include "core.h"

#pragma GCC visibility push(hidden)

struct hl_ring_header *ring_now(void);
/* A record of len bytes: reserve, put its words, commit its header word. */
int ring_reserve(uint64_t len, uint64_t *pos);
/* Inline: a sample's stack is dozens of words (a call each cost py_churn ~5 instructions a word). */
static inline void ring_put(uint64_t pos, uint64_t w) { *(uint64_t *)(g.data + (pos & g.mask)) = w; }
void ring_put_bytes(uint64_t pos, const void *src, uint64_t n);
void ring_commit(uint64_t pos, uint64_t hdr);
int emit_mark(uint64_t kind, uint64_t value);
void count_drop(uint64_t *field);

char *put_name(char *q, const char *name); /* g.dir + "/" + name */
char *put_num(char *q, uint64_t v); /* v in decimal (snprintf may allocate) */
void leave_unprofiled(const char *dir, uint64_t why, uint64_t size);
void ring_create(uint32_t flags, int64_t parent_pid, uint32_t parent_seq);
void ring_remove(const struct hl_ring_header *h);
void ring_back_all(void); /* the whole ring, now: no madvise once a seccomp filter is in */
void on_exit_mark(int status, void *arg);

#pragma GCC visibility pop

#endif
