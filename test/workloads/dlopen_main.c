/* dlopen_main PLUGIN.so: loads a library after start-up and calls plugin_leak. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	void (*leak)(void) = (void (*)(void))dlsym(h, "plugin_leak");
	if (!leak)
		return 1;
	leak();
	puts("plugin done");
	return 0;
}
