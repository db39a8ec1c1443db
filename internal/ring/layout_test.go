package ring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

// The ring's layout is written twice, in preload/heaplens_ring.h (C) and in
// format.go (Go). This test compiles the C header and compares every
// offset and value with the Go side, so that neither can drift alone (the
// other tests of this package build their rings from the Go constants and
// could not tell).
func TestLayoutMatchesC(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to compile preload/heaplens_ring.h (scripts/deps.sh installs it): %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	preload := filepath.Join(filepath.Dir(file), "..", "..", "preload")
	offsets := map[string]uint64{
		"magic": offMagic, "version": offVersion, "data_size": offDataSize, "pid": offPID, "ppid": offPPID,
		"start_mono_ns": offStartMono, "start_real_ns": offStartReal, "rate": offRate, "flags": offFlags,
		"seq": offSeq, "parent_pid": offParentPID, "parent_seq": offParentSeq, "cmdline_len": offCmdlineLen,
		"exe_len": offExeLen, "backing_errno": offBackingErrno, "backed": offBacked, "detached_mono_ns": offDetached, "head": offHead,
		"tail": offTail, "dropped_alloc": offDroppedAlloc, "dropped_free": offDroppedFree,
		"dropped_other": offDroppedOther, "truncated_stacks": offTruncated, "py_version": offPyVersion,
		"py_status": offPyStatus, "py_eval": offPyEval, "py_hooked": offPyHooked, "omp_guessed": offOMPGuessed,
		"unwind_tables": offUnwindTables, "unwind_libgcc": offUnwindLibgcc, "unwind_differed": offUnwindDiffer,
		"allocator_maps": offAllocMaps, "allocator_map_bytes": offAllocMapB, "allocator_flags": offAllocFlags,
		"allocator_len": offAllocLen, "allocator": offAllocator, "walks_cut": offWalksCut,
		"resident_count": offResidentN, "resident_blocks": offResident,
		"cmdline": offCmdline, "exe": offExe,
	}
	values := map[string]uint64{
		"HL_RING_MAGIC": Magic, "HL_RING_VERSION": Version, "HL_RING_HEADER_SIZE": HeaderSize, "HL_DEFAULT_RATE": DefaultRate,
		"sizeof(((struct hl_ring_header *)0)->cmdline)": maxCmdline, "sizeof(((struct hl_ring_header *)0)->exe)": maxExe,
		"HL_FLAG_INIT_DONE": FlagInitDone, "HL_FLAG_FORKED": FlagForked,
		"HL_FLAG_BACKING_STOPPED": FlagBackingStopped, "HL_FLAG_NO_UNWIND": FlagNoUnwind,
		"HL_REC_ALLOC": RecAlloc, "HL_REC_FREE": RecFree, "HL_REC_MODULE": RecModule, "HL_REC_CODE": RecCode,
		"HL_REC_MARK": RecMark, "HL_REC_ORIGIN": RecOrigin, "HL_REC_MALLINFO": RecMallinfo, "HL_REC_STACK": RecStack, "HL_REC_RESIDENT": RecResident, "HL_RESIDENT_BLOCKS": ResidentBlocks,
		"HL_MARK_PY_FINALIZING": MarkPyFinalizing, "HL_MARK_EXIT": MarkExit, "HL_MARK_USER": MarkUser, "HL_MARK_HIGH_WATER": MarkHighWater, "HL_MARK_RSS": MarkRSS,
		"HL_ALLOC_TRUNCATED": AllocTruncated, "HL_ALLOC_PYMEM": AllocPyMem, "HL_ALLOC_ORIGIN": AllocOrigin,
		"HL_ALLOC_METHOD_SHIFT": AllocMethodShift, "HL_ALLOC_STACKREF": AllocStackRef, "HL_STACK_REFS": StackRefs, "HL_STACK_DELTA": StackDelta,
		"HL_ORIGIN_SELF": OriginSelf, "HL_ORIGIN_API": OriginAPI, "HL_ORIGIN_OPENMP": OriginOpenMP,
		"HL_ORIGIN_RESERVED": 3, "HL_ORIGIN_FALLBACK": OriginFallback, "HL_MAX_FRAMES": MaxFrames, "HL_MAX_PYFRAMES": MaxPyFrames,
		"HL_ORIGIN_UNATTRIBUTED": OriginUnattributed, "HL_ORIGIN_CREATOR": OriginCreator, "HL_PY_ACTIVATION_END": PyActivationEnd,
		"HL_PY_NONE": PyNone, "HL_PY_ACTIVE": PyActive, "HL_PY_UNSUPPORTED": PyUnsupported, "HL_PY_OFF": PyOff,
		"HL_PY_FREE_THREADED": PyFreeThreaded, "HL_PY_BAD_OFFSETS": PyBadOffsets,
		"HL_PYMEM_NONE": PyMemNone, "HL_PYMEM_HOOKED": PyMemHooked, "HL_PYMEM_MALLOC": PyMemMalloc,
		"HL_PYMEM_FOREIGN": PyMemForeign, "HL_PYMEM_LOST": PyMemLost,
		// The capture names the hooked functions by the ring's numbers, and the
		// capture's origin methods are the ring's.
		"HL_FUNC_MALLOC": uint64(capture.FuncMalloc), "HL_FUNC_CALLOC": uint64(capture.FuncCalloc),
		"HL_FUNC_REALLOC": uint64(capture.FuncRealloc), "HL_FUNC_REALLOCARRAY": uint64(capture.FuncReallocarray),
		"HL_FUNC_POSIX_MEMALIGN": uint64(capture.FuncPosixMemalign), "HL_FUNC_ALIGNED_ALLOC": uint64(capture.FuncAlignedAlloc),
		"HL_FUNC_MEMALIGN": uint64(capture.FuncMemalign), "HL_FUNC_VALLOC": uint64(capture.FuncValloc),
		"HL_FUNC_PVALLOC": uint64(capture.FuncPvalloc), "HL_FUNC_PYMEM_MALLOC": uint64(capture.FuncPyMemMalloc),
		"HL_FUNC_PYMEM_CALLOC": uint64(capture.FuncPyMemCalloc), "HL_FUNC_PYMEM_REALLOC": uint64(capture.FuncPyMemRealloc),
		"HL_FUNC_MMAP": uint64(capture.FuncMmap), "HL_FUNC_MREMAP": uint64(capture.FuncMremap), "HL_FUNC_SBRK": uint64(capture.FuncSbrk),
		"HL_FUNC_MUNMAP": FuncMunmap, "HL_FUNC_FREE_ANY": FuncFreeAny, "HL_FUNC_FREE_PYMEM": FuncFreePyMem,
		"HL_REC_VOID": RecVoid, "HL_REC_SKIP": RecSkip, "HL_FLAG_EXACT_FREES": FlagExactFrees,
		"HL_ORIGIN_OPENMP + 0": uint64(capture.MethodOpenMP), "HL_ORIGIN_UNATTRIBUTED + 0": uint64(capture.MethodUnattributed),
		"HL_ORIGIN_API + 0": uint64(capture.MethodAPI), "HL_ORIGIN_FALLBACK + 0": uint64(capture.MethodFallback),
		"HL_ORIGIN_SELF + 0":            uint64(capture.MethodSelf),
		"sizeof(struct hl_ring_header)": HeaderSize,
		"HL_FLAG_ATTACHED":              FlagAttached, "HL_FLAG_DETACHED": FlagDetached,
		"HL_ALLOCATOR_GLIBC":                              AllocatorGlibc,
		"sizeof(((struct hl_ring_header *)0)->allocator)": maxAllocator,
		"HL_CONTROL_MAGIC":                                ControlMagic, "HL_CONTROL_VERSION": ControlVersion,
		"HL_CONTROL_HOOKS": ControlHooks, "HL_CONTROL_NAME": ControlNameSize, "HL_CONTROL_DIR": ControlDirSize,
		"HL_CTL_NO_PYTHON": CtlNoPython, "HL_CTL_NO_FOLLOW": CtlNoFollow, "HL_CTL_HEARTBEAT": CtlHeartbeat, "HL_CTL_SANDBOXED": CtlSandboxed,
		"sizeof(struct hl_control)":          ControlSize,
		"offsetof(struct hl_control, magic)": CtlMagic, "offsetof(struct hl_control, version)": CtlVersion,
		"offsetof(struct hl_control, nhooks)": CtlNHooks, "offsetof(struct hl_control, start)": CtlStart,
		"offsetof(struct hl_control, stop)": CtlStop, "offsetof(struct hl_control, session)": CtlSession,
		"offsetof(struct hl_control, ended)": CtlEnded, "offsetof(struct hl_control, agent_pid)": CtlAgentPID,
		"offsetof(struct hl_control, rate)": CtlRate, "offsetof(struct hl_control, seed)": CtlSeed,
		"offsetof(struct hl_control, ring_size)": CtlRingSize, "offsetof(struct hl_control, flags)": CtlFlags,
		"offsetof(struct hl_control, epoch)": CtlEpoch, "offsetof(struct hl_control, alive_ns)": CtlAlive,
		"offsetof(struct hl_control, dir)": CtlDir, "offsetof(struct hl_control, hook)": CtlHook,
		"offsetof(struct hl_control, real)": CtlReal, "offsetof(struct hl_control, name)": CtlName,
	}
	var src strings.Builder
	src.WriteString("#include <stddef.h>\n#include <stdio.h>\n#include \"heaplens_ring.h\"\nint main(void) {\n")
	for name := range offsets {
		fmt.Fprintf(&src, "\tprintf(\"off %s %%llu\\n\", (unsigned long long)offsetof(struct hl_ring_header, %s));\n", name, name)
	}
	for name := range values {
		fmt.Fprintf(&src, "\tprintf(\"val %s|%%llu\\n\", (unsigned long long)(%s));\n", name, name)
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	c, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(c, []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-I", preload, "-o", bin, c).CombinedOutput(); err != nil {
		t.Fatalf("compiling the header: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		var name, val string
		var want uint64
		if kind == "off" {
			name, val, _ = strings.Cut(rest, " ")
			want = offsets[name]
		} else {
			name, val, _ = strings.Cut(rest, "|")
			want = values[name]
		}
		got, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		seen++
		if got != want {
			t.Errorf("%s: C says %d, Go says %d", name, got, want)
		}
	}
	if seen != len(offsets)+len(values) {
		t.Errorf("compared %d of %d facts", seen, len(offsets)+len(values))
	}
}
