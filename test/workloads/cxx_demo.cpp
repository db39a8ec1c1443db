// cxx_demo: C++ allocation sites with known demangled names, exceptions thrown
// through frames that allocate (each throw allocates its exception object,
// sampled at --rate 1), and a function carrying a Rust legacy-mangled symbol.
// Retained at exit: demo::Holder<int>::keep leaks KEEP_N blocks of KEEP_SZ bytes,
// the Rust-named function leaks RUST_N blocks of RUST_SZ bytes.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

enum { KEEP_N = 1000, KEEP_SZ = 4000, RUST_N = 100, RUST_SZ = 3000, THROWS = 2000 };

// The symbol rustc (legacy mangling) would give mycrate::leaky::run.
extern "C" void rust_like(void) __asm__("_ZN7mycrate5leaky3run17h0123456789abcdefE");
extern "C" __attribute__((noinline)) void rust_like(void)
{
	static void *keep[RUST_N];
	for (int i = 0; i < RUST_N; i++)
		keep[i] = malloc(RUST_SZ);
	__asm__ volatile("" ::"r"(keep) : "memory");
}

namespace demo {
template <typename T> struct Holder {
	std::vector<T *> kept;
	__attribute__((noinline)) void keep(int n)
	{
		for (int i = 0; i < n; i++)
			kept.push_back(new T[KEEP_SZ / sizeof(T)]);
	}
};

__attribute__((noinline)) void thrower(int i)
{
	// Freed by its destructor as the exception unwinds through this frame.
	std::unique_ptr<std::string> s(new std::string(200, 'x'));
	if (i % 2 == 0)
		throw std::runtime_error(std::string(100, 'y')); // allocates as it throws
}

__attribute__((noinline)) int throw_many(void)
{
	int caught = 0;
	for (int i = 0; i < THROWS; i++) {
		try {
			thrower(i);
		} catch (const std::runtime_error &e) {
			caught += e.what()[0] == 'y';
		}
	}
	return caught;
}
} // namespace demo

int main()
{
	static demo::Holder<int> h; // static: its vector and blocks stay reachable but unfreed
	h.keep(KEEP_N);
	int caught = demo::throw_many();
	rust_like();
	std::printf("caught %d\n", caught);
	return caught == THROWS / 2 ? 0 : 1;
}
