/* dbglib: a library whose allocating function is static, so that only a
 * symbol table or debug info can name it; tests strip it and serve its
 * debug file separately. dbglib_run(n) leaks n blocks of 1 MiB. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void *hidden_alloc(size_t n)
{
	void *p = malloc(n); // # SITE: hidden_alloc
	if (p)
		memset(p, 1, 64);
	return p;
}

void *volatile dbglib_sink;

void dbglib_run(int n)
{
	for (int i = 0; i < n; i++)
		dbglib_sink = hidden_alloc(1 << 20);
}
