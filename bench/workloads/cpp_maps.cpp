// cpp_maps: an allocation-heavy C++ program. Each round builds a
// std::map<std::string, std::string> and a std::unordered_map<std::string,
// std::vector<int>> of N entries, looks every key up, and destroys both;
// one 256 KiB record per round is kept, and never freed.
//
// usage: cpp_maps ROUNDS [N]
//
// Keys (40 characters) and values (72) are longer than libstdc++'s 15-byte
// small-string buffer, so each is one heap block of exactly 41 or 73 bytes:
// the sites below allocate known byte counts, which the accuracy benchmark
// compares with heaplens' estimates:
//
//	make_key     ROUNDS × 2N × 41 bytes (one key per map)
//	make_value   ROUNDS × N × 73 bytes
//	make_record  ROUNDS × 262144 bytes, all live at exit
//
// The last line of output is "checksum=... loop_s=... maxrss_kb=... cpu_s=...": the
// checksum depends only on ROUNDS and N.
//
// Built with g++ -O2 -g: the make_* functions are noinline so that each is
// a frame of its own.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <sys/resource.h>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t kKeyLen = 40;
constexpr std::size_t kValueLen = 72;
constexpr std::size_t kRecord = 256 << 10;

// fill writes a deterministic pseudo-random text of n characters for i.
void fill(char *p, std::size_t n, std::uint64_t i)
{
	std::uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
	for (std::size_t k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[k] = static_cast<char>('a' + x % 26);
	}
}

__attribute__((noinline)) std::string make_key(std::uint64_t i)
{
	std::string s(kKeyLen, ' ');
	fill(&s[0], kKeyLen, i);
	return s;
}

__attribute__((noinline)) std::string make_value(std::uint64_t i)
{
	std::string s(kValueLen, ' ');
	fill(&s[0], kValueLen, i ^ 0x5555);
	return s;
}

__attribute__((noinline)) std::unique_ptr<char[]> make_record(std::uint64_t r)
{
	std::unique_ptr<char[]> p(new char[kRecord]);
	fill(p.get(), kRecord, r);
	return p;
}

long peak_rss_kb()
{
	FILE *f = std::fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	long kb = 0;
	while (std::fgets(line, sizeof line, f))
		if (std::strncmp(line, "VmHWM:", 6) == 0)
			kb = std::strtol(line + 6, nullptr, 10);
	std::fclose(f);
	return kb;
}

// cpu_seconds is this process's own user+system time, so that a profiler's
// agent (another process) can be told apart from its target.
double cpu_seconds()
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::uint64_t one_round(std::uint64_t r, std::uint64_t n)
{
	std::map<std::string, std::string> ordered;
	std::unordered_map<std::string, std::vector<int>> hashed;
	for (std::uint64_t i = 0; i < n; i++) {
		std::uint64_t id = r * n + i;
		ordered.emplace(make_key(id), make_value(id));
		hashed[make_key(id)].push_back(static_cast<int>(i));
	}
	std::uint64_t sum = 0;
	for (const auto &kv : ordered) {
		auto it = hashed.find(kv.first);
		if (it != hashed.end())
			sum += static_cast<std::uint64_t>(it->second[0]) + static_cast<unsigned char>(kv.second[3]);
	}
	return sum + ordered.size() * 7 + hashed.bucket_count() % 13;
}

} // namespace

int main(int argc, char **argv)
{
	std::uint64_t rounds = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 40;
	std::uint64_t n = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20000;
	// Never deleted: the records are live at exit, a known leak.
	auto *kept = new std::vector<std::unique_ptr<char[]>>;
	std::uint64_t checksum = 0;
	auto t0 = std::chrono::steady_clock::now();
	for (std::uint64_t r = 0; r < rounds; r++) {
		checksum = (checksum * 31 + one_round(r, n)) % 1000000007ull;
		kept->push_back(make_record(r));
		checksum = (checksum + static_cast<unsigned char>(kept->back()[r % kRecord])) % 1000000007ull;
	}
	double loop = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	std::printf("checksum=%llu loop_s=%.4f maxrss_kb=%ld cpu_s=%.4f\n", static_cast<unsigned long long>(checksum), loop,
		    peak_rss_kb(), cpu_seconds());
	return 0;
}
