/*
 * The loaded modules: what the agent needs to symbolize a pc (path, load
 * bias, segments), recorded once per module and again when dlopen adds one.
 */
#define _GNU_SOURCE
#include <string.h>

#include "allocapi.h"
#include "core.h"
#include "modules.h"
#include "ring.h"

/* ---- modules: what the Go side needs to symbolize a pc ---- */

/* 1 if the record is in the ring; else it is counted, and the module is sent again later (resend_modules). */
int emit_module(struct module *m)
{
	uint64_t plen = m->path_len, len = 32 + 32 * (uint64_t)m->nseg + ((plen + 7) & ~7ull), pos;
	struct hl_ring_header *h = ring_now();
	if (!h)
		return 0;
	if (!ring_reserve(len, &pos)) {
		count_drop(&h->dropped_other);
		m->unsent = 1;
		SET_RELAXED(g.unsent, 1);
		return 0;
	}
	m->unsent = 0;
	uint64_t at = pos + 8;
	ring_put(at, (uint64_t)now_ns(CLOCK_MONOTONIC)), at += 8;
	ring_put(at, m->bias), at += 8;
	ring_put(at, plen), at += 8;
	for (uint32_t i = 0; i < m->nseg; i++)
		for (int j = 0; j < 4; j++)
			ring_put(at, m->seg[i][j]), at += 8;
	ring_put_bytes(at, g.pool + m->path_off, plen);
	ring_commit(pos, hl_rec_header((uint32_t)len, HL_REC_MODULE, 0, m->nseg));
	return 1;
}

static int known_module(uint64_t bias, const char *name)
{
	for (uint32_t i = 0; i < g.nmod; i++)
		if (g.mod[i].bias == bias && strncmp(g.pool + g.mod[i].path_off, name, g.mod[i].path_len) == 0 &&
		    name[g.mod[i].path_len] == 0)
			return 1;
	return 0;
}

/* 1 if [vaddr, vaddr + n) lies in the file-backed part of one of the module's PT_LOAD segments: mapped. */
static int loaded(const struct dl_phdr_info *info, uint64_t vaddr, uint64_t n)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && n <= ph->p_filesz && vaddr - ph->p_vaddr <= ph->p_filesz - n)
			return 1;
	}
	return 0;
}

/* The GNU build ID in m's notes, read where the loader mapped them. */
static void find_build_id(struct module *m, const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t align = ph->p_align == 8 ? 8 : 4;
		if (ph->p_type != PT_NOTE || !loaded(info, ph->p_vaddr, ph->p_memsz))
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (end - p >= 12) {
			uint32_t w[3];
			memcpy(w, p, 12);
			uint64_t name = (w[0] + align - 1) & ~(align - 1), desc = (w[1] + align - 1) & ~(align - 1);
			if (name > (uint64_t)(end - p - 12) || desc > (uint64_t)(end - p - 12) - name)
				break;
			if (w[2] == NT_GNU_BUILD_ID && w[0] == 4 && memcmp(p + 12, "GNU", 4) == 0 && w[1] > 0 &&
			    w[1] <= sizeof m->id) {
				memcpy(m->id, p + 12 + name, w[1]);
				m->id_len = w[1];
				return;
			}
			p += 12 + name + desc;
		}
	}
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	int *first = arg;
	if (*first) { /* nothing loaded since the last scan: stop at once */
		*first = 0;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) && info->dlpi_adds == g.adds)
			return 1;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs))
			g.adds = info->dlpi_adds;
	}
	const char *name = info->dlpi_name;
	if (!name || !*name) { /* the main program */
		if (!g.exe[0]) {
			ssize_t n = readlink("/proc/self/exe", g.exe, sizeof g.exe - 1);
			g.exe[n > 0 ? n : 0] = 0;
		}
		name = g.exe;
	}
	if (known_module(info->dlpi_addr, name) || g.nmod >= MAX_MODULES)
		return 0;
	size_t plen = strlen(name);
	if (g.pool_used + plen > PATH_POOL)
		return 0;
	struct module *m = &g.mod[g.nmod];
	memset(m, 0, sizeof *m);
	if (RELAXED(g.sandboxed)) /* under a seccomp filter: no table to map (seccomp.c) */
		m->tab_state = TAB_NONE;
	m->bias = info->dlpi_addr;
	m->path_off = g.pool_used;
	m->path_len = (uint32_t)plen;
	memcpy(g.pool + g.pool_used, name, plen);
	g.pool_used += (uint32_t)plen;
	for (int i = 0; i < info->dlpi_phnum && m->nseg < HL_MAX_SEGMENTS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uint64_t *s = m->seg[m->nseg++];
		s[0] = ph->p_vaddr, s[1] = ph->p_memsz, s[2] = ph->p_offset, s[3] = ph->p_flags;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, self = (uintptr_t)&scan_cb;
		if ((ph->p_flags & PF_X) && !m->text_len)
			m->text_lo = lo, m->text_len = ph->p_memsz;
		if ((ph->p_flags & PF_X) && self >= lo && self < lo + ph->p_memsz)
			SET_RELAXED(g.self_lo, lo), SET_RELAXED(g.self_hi, lo + ph->p_memsz);
	}
	find_build_id(m, info);
	allocapi_patch(info);
	emit_module(m);
	__atomic_store_n(&g.nmod, g.nmod + 1, __ATOMIC_RELEASE);
	return 0;
}

/* Emits a MODULE record for every loaded object not yet sent. One scanner at a time; others skip. */
void scan_modules(void)
{
	if (RELAXED(g.no_unwind) || __atomic_exchange_n(&g.scanning, 1, __ATOMIC_ACQUIRE))
		return;
	int first = 1;
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST);
	dl_iterate_phdr(scan_cb, &first);
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&g.scanning, 0, __ATOMIC_RELEASE);
}

/*
 * Sends the MODULE records a full ring refused, before the sample that
 * called: without them the agent could not name the module's frames.
 */
void resend_modules(void)
{
	if (__atomic_exchange_n(&g.scanning, 1, __ATOMIC_ACQUIRE))
		return;
	SET_RELAXED(g.unsent, 0);
	uint32_t n = __atomic_load_n(&g.nmod, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++)
		if (g.mod[i].unsent)
			emit_module(&g.mod[i]);
	__atomic_store_n(&g.scanning, 0, __ATOMIC_RELEASE);
}

/* Neighbouring frames mostly share a module: start from the last hit. */
int covered(uintptr_t pc, uint32_t *hint)
{
	uint32_t n = __atomic_load_n(&g.nmod, __ATOMIC_ACQUIRE), i = *hint < n ? *hint : 0;
	for (uint32_t k = 0; k < n; k++, i = i + 1 < n ? i + 1 : 0) {
		const struct module *m = &g.mod[i];
		for (uint32_t j = 0; j < m->nseg; j++)
			if (pc - m->bias - m->seg[j][0] < m->seg[j][1]) {
				*hint = i;
				return 1;
			}
	}
	return 0;
}

/*
 * pc is in no module we know: is it in a library loaded since the last scan
 * (or in code no library holds, such as a JIT's, that no scan would find)?
 */
int new_module(uintptr_t pc)
{
	struct dl_find_object o;
	return !g.find_object || g.find_object((void *)(pc - 1), &o) == 0;
}

/* The executable segment of the module holding pc. */
int module_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi)
{
	uint32_t i = 0;
	if (!covered(pc, &i))
		return 0;
	const struct module *m = &g.mod[i];
	*lo = m->text_lo, *hi = m->text_lo + m->text_len;
	return m->text_len != 0;
}

int hl_active(void) { return RELAXED(g.active); }
uint64_t hl_rate(void) { return g.rate; }

/* A seccomp filter is in force: the modules not yet given a table get none (libgcc's unwinder instead). */
void modules_drop_tables(void)
{
	for (uint32_t i = 0; i < __atomic_load_n(&g.nmod, __ATOMIC_ACQUIRE); i++) {
		uint32_t st = TAB_NEW;
		__atomic_compare_exchange_n(&g.mod[i].tab_state, &st, TAB_NONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
}
