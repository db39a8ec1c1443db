/* plugin: loaded with dlopen by dlopen_main; leaks PLUGIN_N blocks of PLUGIN_SZ bytes. */
#include <stdlib.h>

#define PLUGIN_N 200
#define PLUGIN_SZ 5000

void *plugin_kept[PLUGIN_N]; /* external: the compiler must keep the stores and the mallocs */

__attribute__((noinline)) void plugin_leak(void)
{
	for (int i = 0; i < PLUGIN_N; i++)
		plugin_kept[i] = malloc(PLUGIN_SZ);
}
