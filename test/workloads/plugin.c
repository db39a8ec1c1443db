/* plugin: loaded with dlopen by dlopen_main; leaks PLUGIN_N blocks of PLUGIN_SZ bytes. */
#include <stdlib.h>

#define PLUGIN_N 200
#define PLUGIN_SZ 5000

static void *kept[PLUGIN_N];

__attribute__((noinline)) void plugin_leak(void)
{
	for (int i = 0; i < PLUGIN_N; i++)
		kept[i] = malloc(PLUGIN_SZ);
}
