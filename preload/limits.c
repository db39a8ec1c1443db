/*
 * The address-space limit (RLIMIT_AS). heaplens raises its own, as the Go
 * runtime reserves more than a gigabyte, and so starts the command with
 * the raised one: HEAPLENS_RLIMIT_AS="soft hard" is the limit heaplens was
 * started with, which the command (the agent's own child, once) takes
 * back before anything of the program runs. A ring counts against the
 * limit of the process it is mapped in: under a finite limit it takes at
 * most 1/256 of it, and none (the process runs unprofiled) when that is
 * below the smallest ring.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/resource.h>

#include "core.h"
#include "limits.h"

static int parse_u64(const char **s, uint64_t *v)
{
	const char *p = *s;
	for (*v = 0; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(*v, 10, v) || __builtin_add_overflow(*v, (uint64_t)(*p - '0'), v))
			return 0;
	if (p == *s)
		return 0;
	*s = p;
	return 1;
}

/*
 * Takes the limit back if this is the agent's child, and drops the
 * variable from the environment either way, so that no later image (an
 * exec after the program set a limit of its own) takes it back again.
 * Before main: one thread, and no lock taken (unsetenv's could be held by
 * the very call that allocated).
 */
void limits_restore(uint64_t agent)
{
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "HEAPLENS_RLIMIT_AS=", 19))
			continue;
		const char *s = *e + 19;
		uint64_t soft, hard;
		if ((uint64_t)getppid() == agent && parse_u64(&s, &soft) && *s++ == ' ' && parse_u64(&s, &hard) && !*s && soft <= hard) {
			struct rlimit r = {soft, hard};
			setrlimit(RLIMIT_AS, &r);
		}
		do
			e[0] = e[1];
		while (*++e);
		return;
	}
}

uint64_t limits_ring(uint64_t want)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_AS, &r) || r.rlim_cur == RLIM_INFINITY)
		return want;
	uint64_t cap = MAX_RING;
	while (cap > r.rlim_cur / 256 && cap >= MIN_RING)
		cap /= 2;
	return cap < MIN_RING ? 0 : want < cap ? want : cap;
}
