/* The system calls behind glibc wrappers newer than 2.17 (glibc217.h
 * renames the calls to these). They only make the call: errno as glibc's. */
#define _GNU_SOURCE
#include "glibc217.h" /* first: the headers then declare the renamed functions */
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
	return (ssize_t)syscall(SYS_getrandom, buf, len, flags);
}

int fstat(int fd, struct stat *st) {
	return (int)syscall(SYS_fstat, fd, st);
}
