/*
 * A stand-in for an interpreter whose eval loop GCC split in two: the
 * branch that calls a cold function goes to _PyEval_EvalFrameDefault.cold
 * (at -O2), a part with an FDE of its own and, once stripped, no name.
 * Like the real loop it calls out, so its frame holds saved registers where
 * it jumps there.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((cold, noinline)) void rare(long i)
{
	fprintf(stderr, "rare %ld\n", i);
	abort();
}

__attribute__((noinline)) long step(long i)
{
	__asm__ volatile("" ::: "memory"); /* not folded into its caller */
	return i * 7;
}

/* Called in tail position: a jump to another function, which is no part. */
__attribute__((noinline)) long finish(long s)
{
	__asm__ volatile("" ::: "memory");
	return s ^ 5;
}

__attribute__((noinline)) long _PyEval_EvalFrameDefault(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++) {
		if (i == 123456789)
			rare(s);
		s += step(i);
	}
	return finish(s);
}

int main(int argc, char **argv)
{
	(void)argv;
	return (int)(_PyEval_EvalFrameDefault(argc) & 1);
}
