/*
 * The rule of one frame from its module's .eh_frame, for the frames the
 * agent's tables do not cover yet (a module's first few ms, a library
 * loaded since): the same rule the agent would compile
 * (internal/unwind/cfa.go), so the bounded walk goes on where it would
 * otherwise have handed the whole stack to libgcc, whose reads cannot be
 * bounded. libgcc's FDE search finds the entry (lock-free through
 * _dl_find_object, as its own walk does); the CIE's and FDE's programs are
 * run up to the pc, within their lengths. A program this does not follow
 * gives no rule: the caller cuts the stack there or, where safe, asks
 * libgcc.
 */
#define _GNU_SOURCE
#include <string.h>

#include "core.h"
#include "unwind.h"

/* libgcc's own (not in its public header): the FDE holding pc, and the start of its function. */
struct dwarf_eh_bases {
	void *tbase, *dbase, *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

#ifdef __aarch64__
/* x29, sp, x30: the return address saved in one of the 63 slots below the CFA or beside x29 (unwind-format.md). */
enum { REG_BP = 29, REG_SP = 31, REG_RA = 30 };
#define RA_SLOTTED(off) ((off) < 0 && (off) % 8 == 0 && (off) >= -8 * 63)
#define RA_OK(s) (RA_SLOTTED((s).ra_off) || ((s).bp == R_OFFSET && (s).ra_off == (s).bp_off + 8))
#define RA_BITS(off) (RA_SLOTTED(off) ? (uint32_t)(-(off) / 8) << 26 : 0u) /* 0: in the pair above x29's slot */
#else
enum { REG_BP = 6, REG_SP = 7, REG_RA = 16 };
#define RA_OK(s) ((s).ra_off == -8)
#define RA_BITS(off) 0u
#endif
enum { R_SAME, R_UNDEF, R_OFFSET, R_OTHER };

struct cfa_state {
	int32_t cfa_off, bp_off, ra_off;
	uint8_t cfa_reg, cfa_expr, bp, ra;
};

struct cursor {
	const uint8_t *p, *end;
	int bad;
};

static uint8_t u8(struct cursor *c)
{
	if (c->p >= c->end) {
		c->bad = 1;
		return 0;
	}
	return *c->p++;
}

static uint64_t uleb(struct cursor *c)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		uint8_t b = u8(c);
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	c->bad = 1;
	return 0;
}

static int64_t sleb(struct cursor *c)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;
	do {
		b = u8(c);
		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	} while ((b & 0x80) && shift < 64);
	if (shift < 64 && (b & 0x40))
		v |= ~0ull << shift;
	return (int64_t)v;
}

static void skip(struct cursor *c, uint64_t n)
{
	if (n > (uint64_t)(c->end - c->p))
		c->bad = 1;
	else
		c->p += n;
}

static uint64_t fixed(struct cursor *c, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)u8(c) << 8 * i;
	return v;
}

/* Bytes of a pointer in encoding enc (DW_EH_PE_*), 0 for the LEB128 ones and omit. */
static unsigned enc_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case 0x00: case 0x04: case 0x0c: return 8;
	case 0x03: case 0x0b: return 4;
	case 0x02: case 0x0a: return 2;
	default: return 0;
	}
}

static void set_reg(struct cfa_state *s, uint64_t reg, uint8_t how, int64_t off)
{
	if (reg == REG_BP)
		s->bp = how, s->bp_off = (int32_t)off;
	else if (reg == REG_RA)
		s->ra = how, s->ra_off = (int32_t)off;
}

#define CFI_STACK 8

/*
 * Runs instructions until the row holding `look` (loc is where the current
 * row starts; in a CIE, nothing may move it). 0: an instruction this does
 * not follow.
 */
static int run(struct cursor *c, struct cfa_state *s, const struct cfa_state *init, uint64_t loc, uint64_t look,
	       uint64_t code_align, int64_t data_align, int cie)
{
	struct cfa_state stack[CFI_STACK];
	unsigned depth = 0;
	while (c->p < c->end && !c->bad) {
		uint8_t op = u8(c);
		uint64_t reg, adv = 0;
		switch (op >> 6) {
		case 1:
			adv = (op & 0x3f) * code_align;
			break;
		case 2:
			set_reg(s, op & 0x3f, R_OFFSET, (int64_t)uleb(c) * data_align);
			continue;
		case 3:
			reg = op & 0x3f;
			set_reg(s, reg, reg == REG_BP ? init->bp : init->ra, reg == REG_BP ? init->bp_off : init->ra_off);
			continue;
		}
		if (!(op >> 6))
			switch (op) {
			case 0x00: break;
			case 0x02: adv = fixed(c, 1) * code_align; break;
			case 0x03: adv = fixed(c, 2) * code_align; break;
			case 0x04: adv = fixed(c, 4) * code_align; break;
			case 0x05: reg = uleb(c), set_reg(s, reg, R_OFFSET, (int64_t)uleb(c) * data_align); break;
			case 0x06:
				reg = uleb(c);
				set_reg(s, reg, reg == REG_BP ? init->bp : init->ra, reg == REG_BP ? init->bp_off : init->ra_off);
				break;
			case 0x07: set_reg(s, uleb(c), R_UNDEF, 0); break;
			case 0x08: set_reg(s, uleb(c), R_SAME, 0); break;
			case 0x09: set_reg(s, uleb(c), R_OTHER, 0), uleb(c); break;
			case 0x0a:
				if (depth == CFI_STACK)
					return 0;
				stack[depth++] = *s;
				break;
			case 0x0b:
				if (!depth)
					return 0;
				*s = stack[--depth];
				break;
			case 0x0c: s->cfa_reg = (uint8_t)uleb(c), s->cfa_off = (int32_t)uleb(c), s->cfa_expr = 0; break;
			case 0x0d: s->cfa_reg = (uint8_t)uleb(c), s->cfa_expr = 0; break;
			case 0x0e: s->cfa_off = (int32_t)uleb(c); break;
			case 0x0f: skip(c, uleb(c)), s->cfa_expr = 1; break;
			case 0x10: case 0x16: set_reg(s, uleb(c), R_OTHER, 0), skip(c, uleb(c)); break;
			case 0x11: reg = uleb(c), set_reg(s, reg, R_OFFSET, sleb(c) * data_align); break;
			case 0x12: s->cfa_reg = (uint8_t)uleb(c), s->cfa_off = (int32_t)(sleb(c) * data_align), s->cfa_expr = 0; break;
			case 0x13: s->cfa_off = (int32_t)(sleb(c) * data_align); break;
			case 0x14: set_reg(s, uleb(c), R_OTHER, 0), uleb(c); break;
			case 0x15: set_reg(s, uleb(c), R_OTHER, 0), sleb(c); break;
			case 0x2e: uleb(c); break;
			case 0x2f: reg = uleb(c), set_reg(s, reg, R_OFFSET, -(int64_t)uleb(c) * data_align); break;
#ifdef __aarch64__
			case 0x2d: break; /* DW_CFA_AARCH64_negate_ra_state: the walk strips the signature */
#endif
			default: return 0; /* DW_CFA_set_loc and the rest */
			}
		if (adv) {
			if (cie || loc + adv > look)
				return !cie; /* the row holding look is the current one */
			loc += adv;
		}
	}
	return !c->bad;
}

/*
 * The rule (docs/unwind-format.md) of the frame whose code holds look: 1;
 * 0 if its FDE has none this follows; NO_FDE if no FDE holds look (libgcc
 * ends a stack there).
 */
int fde_rule(uintptr_t look, uint32_t *rule)
{
	struct dwarf_eh_bases b;
	__atomic_fetch_add(&g.unwinding, 1, __ATOMIC_SEQ_CST); /* libgcc's object_mutex, if frames were registered: see fork */
	const uint8_t *fde = _Unwind_Find_FDE((void *)look, &b);
	__atomic_fetch_sub(&g.unwinding, 1, __ATOMIC_RELEASE);
	if (!fde)
		return NO_FDE;
	uint32_t len, id;
	memcpy(&len, fde, 4), memcpy(&id, fde + 4, 4);
	if (len == 0xffffffffu || len < 8)
		return 0;
	const uint8_t *cie = fde + 4 - id;
	uint32_t clen;
	memcpy(&clen, cie, 4);
	if (clen == 0xffffffffu || clen < 8)
		return 0;
	struct cursor c = {cie + 9, cie + 4 + clen, 0};
	const char *aug = (const char *)c.p;
	size_t alen = strnlen(aug, (size_t)(c.end - c.p));
	c.p += alen + 1;
	uint8_t version = cie[8];
	uint64_t code_align = uleb(&c);
	int64_t data_align = sleb(&c);
	uint64_t ra = version == 1 ? u8(&c) : uleb(&c);
	uint8_t fde_enc = 0;
	if (ra != REG_RA || aug[0] != 'z' || c.bad)
		return 0;
	struct cursor a = {c.p, c.end, 0};
	uint64_t n = uleb(&a);
	if (a.bad || n > (uint64_t)(c.end - a.p))
		return 0;
	a.end = a.p + n, c.p = a.end;
	for (size_t i = 1; i < alen; i++) {
		if (aug[i] == 'R')
			fde_enc = u8(&a);
		else if (aug[i] == 'L')
			u8(&a);
		else if (aug[i] == 'P') {
			unsigned sz = enc_size(u8(&a));
			if (!sz)
				return 0;
			a.p += sz;
		} else
			return 0; /* 'S', a signal frame: the walk has its own way through those */
	}
	unsigned psz = enc_size(fde_enc);
	if (a.bad || a.p > a.end || !psz)
		return 0;
	struct cfa_state s = {0, 0, 0, 0, 0, R_SAME, R_SAME}, init;
	if (!run(&c, &s, &s, 0, 0, code_align, data_align, 1))
		return 0;
	init = s;
	struct cursor f = {fde + 8 + 2 * psz, fde + 4 + len, 0};
	skip(&f, uleb(&f));
	if (f.bad || !run(&f, &s, &init, (uintptr_t)b.func, look, code_align, data_align, 0))
		return 0;
	if (s.ra == R_UNDEF) {
		*rule = 3u << 24; /* the outermost frame */
		return 1;
	}
	if (s.ra != R_OFFSET || !RA_OK(s) || s.cfa_expr || s.cfa_off < 0 || s.cfa_off > 0xffff ||
	    (s.cfa_reg != REG_SP && s.cfa_reg != REG_BP))
		return 0;
	uint32_t k = 0;
	if (s.bp == R_OFFSET) {
		if (s.bp_off >= 0 || s.bp_off % 8 || s.bp_off < -8 * 255)
			return 0;
		k = (uint32_t)(-s.bp_off / 8);
	} else if (s.bp != R_SAME)
		return 0;
	*rule = RA_BITS(s.ra_off) | (s.cfa_reg == REG_BP ? 1u : 0u) << 24 | k << 16 | (uint32_t)s.cfa_off;
	return 1;
}
