package sigstart

var (
	startAS  [2]uint64 // RLIMIT_AS at entry: soft, hard
	raisedAS [2]uint64 // entry's scratch for setrlimit
	asKnown  uint64    // 1 once entry read startAS
)

// AddressSpace returns the address-space limit (RLIMIT_AS: soft, hard;
// ^0 for none) the process was started with, if known. The entry point
// raises a finite one as far as it may (soft to hard, then both to
// none where allowed), since the Go runtime alone reserves more than a
// gigabyte; the command must get the original back.
func AddressSpace() (soft, hard uint64, ok bool) { return startAS[0], startAS[1], asKnown == 1 }

// What entry needs when the address space left is too small for the
// runtime: NUL-terminated, as the system calls take them.
var (
	lowASMessage = "heaplens: the address-space limit (ulimit -v) leaves heaplens too little room to run (it needs 3 GiB): running the command unprofiled\n"
	execFailed   = "heaplens: could not run /bin/sh to run the command unprofiled\n"
	shPath       = "/bin/sh\x00"
	shName       = "sh\x00"
	shDashC      = "-c\x00"
	shScript     = "exec \"$0\" \"$@\"\x00"
)
