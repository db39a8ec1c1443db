/*
 * limits.c: the address-space limit. HL_UNPROFILED_ASLIMIT in a marker:
 * the limit (its bytes field) leaves no room for the smallest ring.
 */
#ifndef HEAPLENS_LIMITS_H
#define HEAPLENS_LIMITS_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

#define HL_UNPROFILED_ASLIMIT 4200
void limits_restore(uint64_t agent); /* HEAPLENS_RLIMIT_AS, in the agent's child */
uint64_t limits_ring(uint64_t want); /* the ring size the limit allows, 0 for none */

#pragma GCC visibility pop

#endif
