// Package gotpatch routes a running process's calls to a set of functions
// (the malloc family) through heaplens attach's hooks, and back: it
// rewrites the GOT entries that name them in every loaded module, through
// /proc/PID/mem, without stopping the process. An 8-byte aligned store is
// atomic: a thread calls either the old function or the hook, both of
// which handle every block (docs/attach.md).
package gotpatch

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/procmaps"
)

// Hook is one function routed: GOT entries holding Real (or, for a PLT
// entry, the address of their own stub, not yet bound) are pointed at Hook.
type Hook struct {
	Name       string
	Hook, Real uint64
}

// Patcher keeps what it rewrote in one process, to put it back.
type Patcher struct {
	pid   int
	mem   *procmaps.Mem
	hooks map[string]Hook
	names map[string]bool
	skip  func(elfmod.Module) bool
	seen  map[key]bool
	slots []slot
	// Kept counts the entries left alone because they held another
	// definition (a module bound to an allocator of its own).
	Kept int
}

type key struct{ dev, ino, first uint64 }

type slot struct {
	mod       key
	addr, old uint64
}

// New returns a patcher for pid. Modules for which skip returns true (the
// loader, heaplens's own library) are never touched.
func New(pid int, hooks []Hook, skip func(elfmod.Module) bool) (*Patcher, error) {
	mem, err := procmaps.OpenMem(pid, true)
	if err != nil {
		return nil, fmt.Errorf("gotpatch: %w", err)
	}
	p := &Patcher{pid: pid, mem: mem, hooks: map[string]Hook{}, names: map[string]bool{}, skip: skip, seen: map[key]bool{}}
	for _, h := range hooks {
		if h.Hook != 0 && h.Real != 0 {
			p.hooks[h.Name], p.names[h.Name] = h, true
		}
	}
	return p, nil
}

// Close releases the process's memory file.
func (p *Patcher) Close() error { return p.mem.Close() }

// Patch routes the entries of every module not seen before. It returns
// how many entries now lead to a hook (including ones that already did).
func (p *Patcher) Patch() (int, error) {
	maps, err := procmaps.Read(p.pid)
	if err != nil {
		return 0, fmt.Errorf("gotpatch: %w", err)
	}
	n := 0
	for _, m := range elfmod.Loaded(maps) {
		k := key{m.Dev, m.Inode, m.First}
		if p.seen[k] || p.skip(m) {
			continue
		}
		p.seen[k] = true
		c, err := p.patchModule(m, k)
		if err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

func (p *Patcher) patchModule(m elfmod.Module, k key) (int, error) {
	n := 0
	for _, s := range p.slotsOf(m) {
		h := p.hooks[s.Name]
		cur, err := p.mem.Word(s.Addr)
		if err != nil {
			return n, fmt.Errorf("gotpatch: %s: %w", m.Path, err)
		}
		switch {
		case cur == h.Hook:
			p.slots = append(p.slots, slot{k, s.Addr, h.Real})
		case cur == h.Real || (s.Lazy && cur >= m.Lo && cur < m.Hi):
			if err := p.mem.SetWord(s.Addr, h.Hook); err != nil {
				return n, fmt.Errorf("gotpatch: %s: %w", m.Path, err)
			}
			p.slots = append(p.slots, slot{k, s.Addr, cur})
		default:
			p.Kept++
			continue
		}
		n++
	}
	return n, nil
}

// slotsOf returns the module's GOT entries for the routed names that lie
// in its mappings; none for a file that is not an ELF file we can read (a
// data file mapped) or that does not describe this mapping.
func (p *Patcher) slotsOf(m elfmod.Module) []elfmod.Slot {
	f, err := m.Open(p.pid)
	if err != nil {
		return nil
	}
	defer f.Close()
	slots, err := f.Slots(p.names)
	if err != nil {
		return nil
	}
	out := slots[:0]
	for _, s := range slots {
		if s.Addr >= m.Lo && s.Addr+8 <= m.Hi {
			out = append(out, s)
		}
	}
	return out
}

// Restore puts back every entry that leads to a hook, in every module
// loaded now: what it held before Patch changed it, or the function itself
// (for entries a patcher of an earlier heaplens changed). It returns how
// many it put back.
func (p *Patcher) Restore() (int, error) {
	maps, err := procmaps.Read(p.pid)
	if err != nil {
		return 0, fmt.Errorf("gotpatch: %w", err)
	}
	old := map[uint64]slot{}
	for _, s := range p.slots {
		old[s.addr] = s
	}
	n := 0
	var errs []string
	for _, m := range elfmod.Loaded(maps) {
		if p.skip(m) {
			continue
		}
		k := key{m.Dev, m.Inode, m.First}
		for _, s := range p.slotsOf(m) {
			h := p.hooks[s.Name]
			if cur, err := p.mem.Word(s.Addr); err != nil || cur != h.Hook {
				continue
			}
			to := h.Real
			if o, ok := old[s.Addr]; ok && o.mod == k {
				to = o.old
			}
			if err := p.mem.SetWord(s.Addr, to); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			n++
		}
	}
	p.slots, p.seen = nil, map[key]bool{}
	if len(errs) > 0 {
		return n, fmt.Errorf("gotpatch: %s", strings.Join(errs, "; "))
	}
	return n, nil
}
