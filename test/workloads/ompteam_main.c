/*
 * Runs every variant of ompteam.c twice and prints its team size and result:
 * `ompteam_main LIB` dlopens LIB RTLD_LOCAL (this program does not link an
 * OpenMP runtime, so none is in its scope); built with -DLINKED and linked
 * against the library, `ompteam_main` calls the linked one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void (*tail_fn)(long, long, long, long, long, long, long, long);
typedef int (*call_fn)(void);

int main(int argc, char **argv)
{
	void *h = RTLD_DEFAULT;
#ifndef LINKED
	if (argc < 2 || !(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "usage: %s LIB: %s\n", argv[0], dlerror());
		return 2;
	}
#endif
	(void)argc, (void)argv;
	const char **names = dlsym(h, "omp_variants");
	int *team = dlsym(h, "team");
	long *result = dlsym(h, "result");
	if (!names || !team || !result) {
		fprintf(stderr, "not an ompteam library: %s\n", dlerror());
		return 2;
	}
	for (int rep = 0; rep < 2; rep++)
		for (const char **n = names; *n; n++) {
			void *f = dlsym(h, *n);
			if (!f) {
				fprintf(stderr, "%s: %s\n", *n, dlerror());
				return 2;
			}
			if (strstr(*n, "_tail"))
				((tail_fn)f)(0, 0, 0, 0, 0, 0, 0, 0);
			else
				((call_fn)f)();
			printf("%s team=%d result=%ld\n", *n, *team, *result);
		}
	return 0;
}
