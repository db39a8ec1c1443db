// Package inject makes a running process load a shared library: it stops
// one of its threads with ptrace, runs the loader's dlopen on it, and lets
// it go on exactly where it was (heaplens attach; docs/attach.md).
//
// The thread is chosen so that dlopen cannot wait for a lock the thread
// itself holds: one blocked in a system call that no allocator or loader
// code makes (read, poll, accept, sleeps...), else one running the
// program's own code (not libc's, not the loader's), else one waiting on a
// futex. Threads looked at and not chosen are stopped for microseconds;
// the others are never stopped.
//
// x86-64 only (inject_other.go): on arm64 attach is not supported yet,
// since ptrace cannot be tested under qemu-user (docs/platforms.md).

//go:build amd64

package inject

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/procmaps"
	"golang.org/x/sys/unix"
)

// Result says how the library was loaded.
type Result struct {
	TID    int           // the thread that ran dlopen
	Pause  time.Duration // how long that thread was stopped
	Looked int           // threads stopped to choose it
	Handle uint64        // dlopen's
}

// ErrNoThread means no thread was in a state where dlopen could safely run.
var ErrNoThread = errors.New("no thread of the process is in a state where the library can be loaded safely (all are inside the C library or the loader); try again")

// Load makes pid load lib with dlopen(lib, RTLD_NOW | RTLD_LOCAL). slow is
// told when dlopen takes longer than a few seconds (it may wait for a lock
// another thread of the process holds). check, if not nil, runs while the
// chosen thread is stopped, before anything in the process changes: its
// error leaves the process as it was.
func Load(pid int, lib string, slow func(string), check func(tid int) error) (*Result, error) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil, fmt.Errorf("inject: %w", err)
	}
	fn, err := loaderFuncs(pid, maps)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread() // every ptrace request comes from the tracer thread
	defer runtime.UnlockOSThread()
	th, looked, err := pick(pid, maps)
	if err != nil {
		return nil, err
	}
	res := &Result{TID: th.tid, Looked: looked}
	defer func() { res.Pause = time.Since(th.since) }()
	defer th.release()
	if check != nil {
		if err := check(th.tid); err != nil {
			return nil, err
		}
	}
	// dlopen may set the thread's errno, which the program may read after its system call.
	errnoAt, err := th.call(fn.errnoLocation, slow)
	if err != nil {
		return nil, err
	}
	mem, err := procmaps.OpenMem(pid, true)
	if err != nil {
		return nil, fmt.Errorf("inject: %w", err)
	}
	defer mem.Close()
	var saved [4]byte
	if err := mem.ReadAt(saved[:], errnoAt); err != nil {
		return nil, fmt.Errorf("inject: the thread's errno: %w", err)
	}
	defer mem.WriteAt(saved[:], errnoAt)
	path, err := th.push([]byte(lib + "\x00"))
	if err != nil {
		return nil, err
	}
	const rtldNow, rtldLocal = 2, 0
	h, err := th.call(fn.dlopen, slow, path, rtldNow|rtldLocal)
	if err != nil {
		return nil, err
	}
	if h == 0 {
		msg := "no message"
		if p, err := th.call(fn.dlerror, slow); err == nil && p != 0 {
			msg, _ = mem.String(p, 1024)
		}
		return nil, fmt.Errorf("inject: dlopen in process %d failed: %s", pid, msg)
	}
	res.Handle = h
	return res, nil
}

type funcs struct{ dlopen, dlerror, errnoLocation uint64 }

// loaderFuncs finds dlopen and dlerror: in libc since glibc 2.34, in
// libdl before (when the program loaded it).
func loaderFuncs(pid int, maps []procmaps.Mapping) (funcs, error) {
	var libs []string
	found := map[string]uint64{}
	for _, m := range elfmod.Loaded(maps) {
		b := m.Base()
		if !strings.HasPrefix(b, "libc.so") && !strings.HasPrefix(b, "libc-") && !strings.HasPrefix(b, "libdl") {
			continue
		}
		libs = append(libs, b)
		f, err := m.Open(pid)
		if err != nil {
			return funcs{}, fmt.Errorf("inject: %w", err)
		}
		for k, v := range f.Symbols("dlopen", "dlerror", "__errno_location") {
			found[k] = v
		}
		f.Close()
	}
	if found["dlopen"] != 0 && found["dlerror"] != 0 && found["__errno_location"] != 0 {
		return funcs{found["dlopen"], found["dlerror"], found["__errno_location"]}, nil
	}
	if len(libs) == 0 {
		return funcs{}, fmt.Errorf("inject: process %d does not use the GNU C library (no libc.so.6 mapped)", pid)
	}
	return funcs{}, fmt.Errorf("inject: no dlopen in %s of process %d (glibc before 2.34 keeps it in libdl, which this program did not load)", strings.Join(libs, ", "), pid)
}

// A thread stopped by us, with the registers it had.
type thread struct {
	tid   int
	saved unix.PtraceRegs
	since time.Time
	sp    uint64 // scratch stack, below the red zone
}

// Kinds of thread, best first.
const (
	inBlockingCall = iota
	inProgram
	inFutex
	unsafeState
)

// Blocking system calls that no allocator or loader code makes, x86-64 numbers.
var blocking = map[uint64]bool{
	0: true, 17: true, 19: true, 45: true, 47: true, 43: true, 288: true, // read pread64 readv recvfrom recvmsg accept accept4
	7: true, 271: true, 23: true, 270: true, 232: true, 281: true, 441: true, // poll ppoll select pselect6 epoll_wait epoll_pwait epoll_pwait2
	35: true, 230: true, 61: true, 247: true, 34: true, 130: true, 128: true, // nanosleep clock_nanosleep wait4 waitid pause rt_sigsuspend rt_sigtimedwait
	70: true, 220: true, 208: true, 299: true, // msgrcv semtimedop io_getevents recvmmsg
}

const sysFutex = 202

// pick stops threads one at a time until one is fit to run dlopen; it
// stays stopped. Threads move: for the first rounds only one blocked in a
// system call will do, then one in the program's code, at last one waiting
// on a futex.
func pick(pid int, maps []procmaps.Mapping) (*thread, int, error) {
	unsafeCode := unsafeRanges(maps)
	looked := 0
	for round := 0; round < 50; round++ {
		accept := inBlockingCall
		if round >= 10 {
			accept = inProgram
		}
		if round >= 30 {
			accept = inFutex
		}
		tids, err := threads(pid)
		if err != nil {
			return nil, looked, err
		}
		for _, tid := range tids {
			th, err := stop(tid)
			if err != nil {
				if errors.Is(err, unix.EPERM) {
					return nil, looked, fmt.Errorf("inject: ptrace refused for thread %d of process %d: %w", tid, pid, err)
				}
				continue // it exited meanwhile
			}
			looked++
			if th.kind(unsafeCode) <= accept {
				return th, looked, nil
			}
			th.detach()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, looked, ErrNoThread
}

// threads lists the process's threads, the main one first.
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("inject: %w", err)
	}
	out := []int{pid}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			out = append(out, tid)
		}
	}
	return out, nil
}

// unsafeRanges are the code of the C library, the loader and the vDSO:
// a thread stopped there may hold their locks.
func unsafeRanges(maps []procmaps.Mapping) [][2]uint64 {
	var out [][2]uint64
	for _, m := range maps {
		if !m.Exec() {
			continue
		}
		b := m.Path
		if i := strings.LastIndexByte(b, '/'); i >= 0 {
			b = b[i+1:]
		}
		if strings.HasPrefix(b, "libc.so") || strings.HasPrefix(b, "libc-") || strings.HasPrefix(b, "ld-linux") || strings.HasPrefix(b, "ld-2.") ||
			strings.HasPrefix(b, "libpthread") || strings.HasPrefix(b, "libdl") || strings.HasPrefix(b, "libheaplens") ||
			strings.HasPrefix(b, "libgcc_s") || m.Path == "[vdso]" || m.Path == "[vsyscall]" {
			out = append(out, [2]uint64{m.Start, m.End})
		}
	}
	return out
}

// stop seizes and interrupts tid and waits until it stops.
func stop(tid int) (*thread, error) {
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, err
	}
	if err := unix.PtraceInterrupt(tid); err != nil {
		unix.PtraceDetach(tid)
		return nil, err
	}
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
			if err == unix.EINTR {
				continue
			}
			return nil, err
		}
		if ws.Exited() || ws.Signaled() {
			return nil, unix.ESRCH
		}
		if !ws.Stopped() {
			continue
		}
		if ws.StopSignal() != unix.SIGTRAP || ws.TrapCause() != unix.PTRACE_EVENT_STOP {
			// A signal on its way to the thread: let it through and wait for our stop.
			unix.PtraceCont(tid, int(ws.StopSignal()))
			continue
		}
		th := &thread{tid: tid, since: time.Now()}
		if err := unix.PtraceGetRegs(tid, &th.saved); err != nil {
			unix.PtraceDetach(tid)
			return nil, err
		}
		th.sp = (th.saved.Rsp - 512) &^ 15
		return th, nil
	}
}

func (t *thread) kind(unsafeCode [][2]uint64) int {
	if nr := t.saved.Orig_rax; int64(nr) >= 0 {
		switch {
		case blocking[nr]:
			return inBlockingCall
		case nr == sysFutex:
			return inFutex
		}
		return unsafeState
	}
	for _, r := range unsafeCode {
		if t.saved.Rip >= r[0] && t.saved.Rip < r[1] {
			return unsafeState
		}
	}
	return inProgram
}

func (t *thread) detach() { unix.PtraceDetach(t.tid) }

// Stopped runs fn while thread tid is stopped by ptrace, from the thread
// that stopped it (as ptrace requests must come), then lets it go.
func Stopped(tid int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := stop(tid)
	if err != nil {
		return fmt.Errorf("inject: stopping thread %d: %w", tid, err)
	}
	defer th.detach()
	return fn()
}

// release puts the registers back (an interrupted system call restarts
// from them) and lets the thread go.
func (t *thread) release() {
	unix.PtraceSetRegs(t.tid, &t.saved)
	unix.PtraceDetach(t.tid)
}

// push copies b onto the thread's stack, below what it uses, and returns its address.
func (t *thread) push(b []byte) (uint64, error) {
	t.sp = (t.sp - uint64(len(b))) &^ 15
	if _, err := unix.PtracePokeData(t.tid, uintptr(t.sp), b); err != nil {
		return 0, fmt.Errorf("inject: writing to thread %d's stack: %w", t.tid, err)
	}
	return t.sp, nil
}

// call runs fn(args...) on the thread and returns its result. It returns
// to address 0: the fault stops the thread for us, and is never delivered.
func (t *thread) call(fn uint64, slow func(string), args ...uint64) (uint64, error) {
	r := t.saved
	sp := (t.sp-64)&^15 - 8 // a call's entry: rsp+8 16-byte aligned
	if _, err := unix.PtracePokeData(t.tid, uintptr(sp), make([]byte, 8)); err != nil {
		return 0, fmt.Errorf("inject: writing to thread %d's stack: %w", t.tid, err)
	}
	r.Rsp, r.Rip, r.Rax = sp, fn, 0
	r.Orig_rax = ^uint64(0) // not in a system call: nothing to restart
	r.Eflags &^= 1 << 10    // the ABI's clear direction flag
	regs := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.Rcx, &r.R8, &r.R9}
	for i, a := range args {
		*regs[i] = a
	}
	if err := unix.PtraceSetRegs(t.tid, &r); err != nil {
		return 0, fmt.Errorf("inject: %w", err)
	}
	if err := unix.PtraceCont(t.tid, 0); err != nil {
		return 0, fmt.Errorf("inject: %w", err)
	}
	warned := time.Now().Add(5 * time.Second)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(t.tid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err != nil && err != unix.EINTR {
			return 0, fmt.Errorf("inject: waiting for thread %d: %w", t.tid, err)
		}
		if got != t.tid { // no change yet
			time.Sleep(50 * time.Microsecond)
			if slow != nil && time.Now().After(warned) {
				slow(fmt.Sprintf("still waiting for dlopen in thread %d of the process (it may wait for a lock another thread holds)", t.tid))
				warned = time.Now().Add(time.Hour)
			}
			continue
		}
		switch {
		case ws.Exited() || ws.Signaled():
			return 0, fmt.Errorf("inject: the process ended while loading the library")
		case ws.Stopped() && ws.StopSignal() == unix.SIGSEGV:
			var out unix.PtraceRegs
			if err := unix.PtraceGetRegs(t.tid, &out); err != nil {
				return 0, fmt.Errorf("inject: %w", err)
			}
			if out.Rip == 0 {
				return out.Rax, nil
			}
			// A fault of its own inside the call: the process would have died of it anyway.
			unix.PtraceCont(t.tid, int(unix.SIGSEGV))
			return 0, fmt.Errorf("inject: the process faulted at %#x while loading the library", out.Rip)
		case ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == unix.PTRACE_EVENT_STOP:
			unix.PtraceCont(t.tid, 0)
		case ws.Stopped():
			unix.PtraceCont(t.tid, int(ws.StopSignal())) // the program's own signal: delivered as it would be
		}
	}
}
