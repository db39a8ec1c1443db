/*
 * C++'s new and delete at known sites, for allocators that define them
 * (jemalloc, tcmalloc, mimalloc, preloaded): keep_new keeps 200 arrays of
 * 3000 bytes, churn_new makes and deletes 1000 vectors of 5000 bytes (and
 * their 24-byte headers), lib_strings has libstdc++'s own code (a
 * std::string's reserve) allocate 100 blocks of 4001 bytes. Prints a
 * checksum of what it wrote.
 */
#include <cstdio>
#include <string>
#include <vector>

static std::vector<char *> kept;

__attribute__((noinline)) void keep_new()
{
	for (int i = 0; i < 200; i++) {
		char *p = new char[3000];
		p[2999] = (char)i;
		kept.push_back(p);
	}
}

__attribute__((noinline)) unsigned churn_new()
{
	unsigned s = 0;
	for (int i = 0; i < 1000; i++) {
		auto *v = new std::vector<char>(5000, (char)i);
		s += (unsigned char)(*v)[i % 5000];
		delete v;
	}
	return s;
}

__attribute__((noinline)) unsigned lib_strings()
{
	unsigned s = 0;
	for (int i = 0; i < 100; i++) {
		std::string x;
		x.reserve(4000);
		x.append(100, (char)i);
		s += (unsigned char)x[99];
	}
	return s;
}

int main()
{
	kept.reserve(200);
	keep_new();
	unsigned s = churn_new() + lib_strings();
	for (char *p : kept)
		s += (unsigned char)p[2999];
	std::printf("sum %u\n", s);
	return 0;
}
