/*
 * OpenMP region shapes for the team-size tests: each variant runs one kind
 * of region and leaves its team size (the largest omp_get_num_threads()
 * seen inside) in `team` and what the team computed in `result`, which must
 * be the same with heaplens as without. A NAME_tail variant ends in its
 * region, so GCC tail-calls the runtime (`jmp GOMP_parallel@plt`; the eight
 * unused parameters give the loop entry points' stack arguments a place):
 * the return address the runtime sees is then the caller's, not this
 * library's. A NAME_call variant calls it and uses the team afterwards.
 * Called by ompteam_main.c (dlopen or linked) and ompteam.py (ctypes);
 * omp_variants lists them.
 */
#include <omp.h>

int team;
long result;

/* The pre-4.9 entry points, which GCC no longer emits: called by hand. */
void GOMP_parallel_start(void (*fn)(void *), void *data, unsigned n);
void GOMP_parallel_end(void);

static void saw_team(void)
{
	int n = omp_get_num_threads(), t = __atomic_load_n(&team, __ATOMIC_RELAXED);
	while (t < n && !__atomic_compare_exchange_n(&team, &t, n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void add(long v) { __atomic_fetch_add(&result, v, __ATOMIC_RELAXED); }

#define ARGS long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8
#define UNUSED (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8
#define VARIANTS(name, ...)           \
	void name##_tail(ARGS)        \
	{                             \
		UNUSED;               \
		team = 0, result = 0; \
		__VA_ARGS__           \
	}                             \
	int name##_call(void)         \
	{                             \
		team = 0, result = 0; \
		__VA_ARGS__           \
		return team;          \
	}

/* GOMP_parallel */
VARIANTS(parallel, _Pragma("omp parallel") { saw_team(), add(1); })

/* GOMP_parallel_loop_* (GCC 12 makes the default schedules nonmonotonic); static is GOMP_parallel */
#define LOOP(pragma) _Pragma(pragma) for (int i = 0; i < 1000; i++) { saw_team(), add(i); }
VARIANTS(dynamic, LOOP("omp parallel for schedule(dynamic, 7)"))
VARIANTS(guided, LOOP("omp parallel for schedule(guided)"))
VARIANTS(runtime, LOOP("omp parallel for schedule(runtime)"))
VARIANTS(mono_dynamic, LOOP("omp parallel for schedule(monotonic: dynamic, 7)"))
VARIANTS(mono_guided, LOOP("omp parallel for schedule(monotonic: guided)"))
VARIANTS(mono_runtime, LOOP("omp parallel for schedule(monotonic: runtime)"))
VARIANTS(static, LOOP("omp parallel for schedule(static, 3)"))

/* GOMP_parallel_sections */
#define SECTION(bit) _Pragma("omp section") { saw_team(), add(bit); }
VARIANTS(sections, _Pragma("omp parallel sections") { SECTION(1) SECTION(2) SECTION(4) })

/* GOMP_parallel_reductions: a task reduction (a cleanup call follows it: no tail call) */
VARIANTS(reductions, {
	long sum = 0;
	_Pragma("omp parallel reduction(task, + : sum)")
	{
		saw_team();
		_Pragma("omp single") for (int i = 0; i < 64; i++)
		{
			_Pragma("omp task in_reduction(+ : sum)") sum += i;
		}
	}
	result = sum;
})

/* GOMP_teams_reg: host teams; its team is the number of teams */
static void saw_teams(void)
{
	int n = omp_get_num_teams(), t = __atomic_load_n(&team, __ATOMIC_RELAXED);
	while (t < n && !__atomic_compare_exchange_n(&team, &t, n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}
VARIANTS(teams, _Pragma("omp teams num_teams(4)") { saw_teams(), add(1); })

/* GOMP_parallel_start / GOMP_parallel_end, by hand: in the tail variant the end is the tail call */
static void legacy_body(void *data)
{
	(void)data;
	saw_team(), add(1);
}
VARIANTS(legacy, GOMP_parallel_start(legacy_body, 0, 0); legacy_body(0); GOMP_parallel_end();)

#define V(name) #name "_tail", #name "_call"
const char *omp_variants[] = {V(parallel),     V(dynamic), V(guided),   V(runtime),    V(mono_dynamic), V(mono_guided),
			      V(mono_runtime), V(static),  V(sections), V(reductions), V(teams),        V(legacy), 0};
