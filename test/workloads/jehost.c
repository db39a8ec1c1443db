/* Loads the plugin named by its argument (jeplug.c) and runs it. */
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	unsigned (*work)(void) = (unsigned (*)(void))dlsym(h, "plugin_work");
	printf("sum %u\n", work());
	return 0;
}
