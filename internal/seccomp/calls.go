package seccomp

import "golang.org/x/sys/unix"

// Call is one system call heaplens makes in the process, as the filter
// sees it: each of Args is one way it is made (the arguments heaplens, or
// the loader on its behalf, passes).
type Call struct {
	Name string
	Nr   int32
	Why  string
	Args [][6]uint64
}

// The calls' x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl): the
// filters are evaluated for x86-64, whatever heaplens is built for.
const (
	sysRead           = 0
	sysClose          = 3
	sysFstat          = 5
	sysMmap           = 9
	sysMprotect       = 10
	sysMunmap         = 11
	sysMincore        = 27
	sysMadvise        = 28
	sysGetpid         = 39
	sysKill           = 62
	sysFtruncate      = 77
	sysRmdir          = 84
	sysLink           = 86
	sysUnlink         = 87
	sysReadlink       = 89
	sysGetrlimit      = 97
	sysGetppid        = 110
	sysSigaltstack    = 131
	sysGettid         = 186
	sysFutex          = 202
	sysRestartSyscall = 219
	sysClockGettime   = 228
	sysOpenat         = 257
	sysNewfstatat     = 262
	sysFallocate      = 285
	sysPrlimit64      = 302
)

// Representative values where the real one is known only in the process
// (an address, a descriptor, a length): filters that test arguments test
// flags, modes and requests, which are the real ones here.
const (
	anyAddr = 0x7f0000400000 // an address in the process
	anyLen  = 1 << 16
	anyFD   = 3
	atCWD   = uint64(1<<64 - 100) // AT_FDCWD
	noFD    = uint64(1<<64 - 1)   // -1

	futexWaitPrivate, futexWakePrivate = 128, 129 // FUTEX_WAIT, FUTEX_WAKE | FUTEX_PRIVATE_FLAG
	// IP is instruction_pointer: where the call is made from (the C
	// library's code), not known in advance; filters rarely test it.
	IP = 0x7f0000001000
)

// Needed lists every system call the injection and the attached library
// can make in a process under a filter, with the arguments they pass. It
// is the "Seccomp filters" list of docs/attach.md, which ties each to the
// rows "attached: …" of docs/preload-safety.md; a call added to the
// attached library's code must be added here and there. agent is
// heaplens's pid, which the library checks with kill(agent, 0).
//
// Left out: what the attached library does not do under a filter
// (preload/core.h, NO_NEW_CALLS: getrusage at exit, the unwind tables'
// mapping), and brk, which only the program's own allocator makes (the
// loader's allocations go to it).
func Needed(agent int) []Call {
	const ro, rw, rx = unix.PROT_READ, unix.PROT_READ | unix.PROT_WRITE, unix.PROT_READ | unix.PROT_EXEC
	const priv, anon, fixed, deny = unix.MAP_PRIVATE, unix.MAP_ANONYMOUS, unix.MAP_FIXED, unix.MAP_DENYWRITE
	const rdonly = unix.O_RDONLY | unix.O_CLOEXEC
	const create = unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC
	a := func(v ...uint64) [6]uint64 { var r [6]uint64; copy(r[:], v); return r }
	return []Call{
		{"openat", sysOpenat, "the loader opening the library, the library its ring and /proc/self files", [][6]uint64{
			a(atCWD, anyAddr, rdonly, 0), a(atCWD, anyAddr, create, 0o600)}},
		{"read", sysRead, "the loader reading the library's ELF header, the library /proc/self files", [][6]uint64{a(anyFD, anyAddr, 832)}},
		{"fstat", sysFstat, "the loader (glibc before 2.33)", [][6]uint64{a(anyFD, anyAddr)}},
		{"newfstatat", sysNewfstatat, "the loader (glibc 2.33 and later)", [][6]uint64{a(anyFD, anyAddr, anyAddr, unix.AT_EMPTY_PATH)}},
		{"close", sysClose, "closing every descriptor opened", [][6]uint64{a(anyFD)}},
		{"mmap", sysMmap, "the loader mapping the library, the library its tables, scratch and ring", [][6]uint64{
			a(0, anyLen, ro, priv|deny, anyFD, 0),
			a(anyAddr, anyLen, rx, priv|fixed|deny, anyFD, anyLen),
			a(anyAddr, anyLen, rw, priv|fixed|deny, anyFD, anyLen),
			a(anyAddr, anyLen, rw, priv|fixed|anon, noFD, 0),
			a(0, anyLen, ro, priv, anyFD, 0),
			a(0, anyLen, rw, priv|anon|unix.MAP_NORESERVE, noFD, 0),
			a(0, anyLen, rw, unix.MAP_SHARED, anyFD, 0),
			a(anyAddr, anyLen, rw, priv|anon|fixed|unix.MAP_NORESERVE, noFD, 0)}},
		{"mprotect", sysMprotect, "the loader's read-only relocations, routing a GOT entry", [][6]uint64{
			a(anyAddr, 4096, ro), a(anyAddr, 4096, rw), a(anyAddr, anyLen, unix.PROT_NONE)}},
		{"munmap", sysMunmap, "the loader, a thread's scratch at its end", [][6]uint64{a(anyAddr, anyLen)}},
		{"madvise", sysMadvise, "backing the ring", [][6]uint64{a(anyAddr, anyLen, unix.MADV_POPULATE_WRITE)}},
		{"mincore", sysMincore, "a stack's pages, resident bytes", [][6]uint64{a(anyAddr, anyLen, anyAddr)}},
		{"ftruncate", sysFtruncate, "sizing the ring", [][6]uint64{a(anyFD, anyLen)}},
		{"fallocate", sysFallocate, "backing the ring's file", [][6]uint64{a(anyFD, 0, 0, anyLen)}},
		{"link", sysLink, "putting the ring in place", [][6]uint64{a(anyAddr, anyAddr)}},
		{"unlink", sysUnlink, "removing the ring's temporary name", [][6]uint64{a(anyAddr)}},
		{"rmdir", sysRmdir, "removing the session directory when heaplens is gone", [][6]uint64{a(anyAddr)}},
		{"readlink", sysReadlink, "reading /proc/self/exe", [][6]uint64{a(anyAddr, anyAddr, 4096)}},
		{"getpid", sysGetpid, "naming the ring", [][6]uint64{a()}},
		{"getppid", sysGetppid, "the ring's header", [][6]uint64{a()}},
		{"gettid", sysGettid, "a thread's first sample", [][6]uint64{a()}},
		{"prlimit64", sysPrlimit64, "getrlimit (glibc 2.33 and later): the main thread's stack, the ring under a limit", [][6]uint64{
			a(0, unix.RLIMIT_STACK, 0, anyAddr), a(0, unix.RLIMIT_AS, 0, anyAddr)}},
		{"getrlimit", sysGetrlimit, "getrlimit (glibc before 2.33)", [][6]uint64{a(unix.RLIMIT_STACK, anyAddr), a(unix.RLIMIT_AS, anyAddr)}},
		{"sigaltstack", sysSigaltstack, "a sample on a stack not the thread's own", [][6]uint64{a(0, anyAddr)}},
		{"clock_gettime", sysClockGettime, "timestamps (the vDSO's fallback)", [][6]uint64{
			a(unix.CLOCK_MONOTONIC, anyAddr), a(unix.CLOCK_REALTIME, anyAddr)}},
		{"futex", sysFutex, "the loader's and libgcc's locks, contended", [][6]uint64{
			a(anyAddr, futexWaitPrivate, 2, 0), a(anyAddr, futexWakePrivate, 1)}},
		{"kill", sysKill, "checking that heaplens lives (kill(pid, 0))", [][6]uint64{a(uint64(agent), 0)}},
		{"restart_syscall", sysRestartSyscall, "the thread that loaded the library going back to its interrupted sleep", [][6]uint64{a()}},
	}
}
