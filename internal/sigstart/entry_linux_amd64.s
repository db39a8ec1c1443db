#include "textflag.h"

// 3 GiB: less address space than the runtime and the rings of a run take.
#define minAS 0xC0000000

// entry is the program's ELF entry point when linked with
// -ldflags=-E=github.com/heaplens/heaplens/internal/sigstart.entry (the
// Makefile does). Before the Go runtime installs its signal handlers it
// records, with raw system calls, which signals the process was started with
// ignored and blocked, then jumps to the runtime's own entry with the stack
// the kernel gave it.
TEXT ·entry(SB),NOSPLIT|NOFRAME,$0
	MOVQ	$1, BX
loop:
	MOVQ	$13, AX // SYS_rt_sigaction
	MOVQ	BX, DI
	MOVQ	$0, SI
	LEAQ	·oldAction(SB), DX
	MOVQ	$8, R10
	SYSCALL
	CMPQ	AX, $0
	JNE	next
	MOVQ	·oldAction(SB), AX
	CMPQ	AX, $1 // SIG_IGN
	JNE	next
	MOVQ	BX, CX
	DECQ	CX
	MOVQ	$1, AX
	SHLQ	CX, AX
	ORQ	AX, ·startIgnored(SB)
next:
	INCQ	BX
	CMPQ	BX, $65
	JNE	loop
	MOVQ	$14, AX // SYS_rt_sigprocmask(SIG_BLOCK, NULL, &startMask, 8) reads the mask
	MOVQ	$0, DI
	MOVQ	$0, SI
	LEAQ	·startMask(SB), DX
	MOVQ	$8, R10
	SYSCALL
	MOVQ	$1, ·captured(SB)
	// RLIMIT_AS (9): the limit the process was started with, in startAS;
	// then, if finite, the soft limit raised to the hard one, and both to
	// infinity where that is allowed (CAP_SYS_RESOURCE). The runtime
	// reserves more than a gigabyte of address space as it starts.
	MOVQ	$97, AX // SYS_getrlimit
	MOVQ	$9, DI
	LEAQ	·startAS(SB), SI
	SYSCALL
	CMPQ	AX, $0
	JNE	go
	MOVQ	$1, ·asKnown(SB)
	MOVQ	·startAS(SB), AX
	CMPQ	AX, $-1
	JEQ	go
	MOVQ	·startAS+8(SB), AX
	MOVQ	AX, ·raisedAS(SB)
	MOVQ	AX, ·raisedAS+8(SB)
	MOVQ	$160, AX // SYS_setrlimit
	MOVQ	$9, DI
	LEAQ	·raisedAS(SB), SI
	SYSCALL
	MOVQ	$-1, ·raisedAS(SB)
	MOVQ	$-1, ·raisedAS+8(SB)
	MOVQ	$160, AX
	MOVQ	$9, DI
	LEAQ	·raisedAS(SB), SI
	SYSCALL
	// Still below minAS: the runtime may not even start. heaplens run
	// [FLAGS] -- COMMAND... then runs COMMAND unprofiled, with the limit
	// it was started with and (unless -q) a line saying why: it execs
	// /bin/sh -c 'exec "$0" "$@"' COMMAND..., argv rewritten in place.
	MOVQ	$97, AX // SYS_getrlimit
	MOVQ	$9, DI
	LEAQ	·raisedAS(SB), SI
	SYSCALL
	CMPQ	AX, $0
	JNE	go
	MOVQ	·raisedAS(SB), AX
	MOVQ	$minAS, BX
	CMPQ	AX, BX
	JCC	go // unsigned >=: enough, or none
	MOVQ	0(SP), R12 // argc
	LEAQ	8(SP), R13 // argv
	CMPQ	R12, $4
	JLT	go
	MOVQ	8(R13), SI // argv[1] == "run"?
	CMPB	0(SI), $0x72
	JNE	go
	CMPB	1(SI), $0x75
	JNE	go
	CMPB	2(SI), $0x6e
	JNE	go
	CMPB	3(SI), $0
	JNE	go
	MOVQ	$2, R14 // the index of "--"
	XORQ	R15, R15 // -q seen
	MOVQ	R12, R8
	DECQ	R8
scan:
	CMPQ	R14, R8
	JGE	go // no "--" with a command after it
	MOVQ	(R13)(R14*8), SI
	CMPB	0(SI), $0x2d
	JNE	argnext
	CMPB	1(SI), $0x71 // "-q"
	JNE	dashdash
	CMPB	2(SI), $0
	JNE	argnext
	MOVQ	$1, R15
	JMP	argnext
dashdash:
	CMPB	1(SI), $0x2d
	JNE	argnext
	CMPB	2(SI), $0
	JEQ	found
	CMPB	2(SI), $0x71 // "--q"
	JNE	argnext
	CMPB	3(SI), $0
	JNE	argnext
	MOVQ	$1, R15
argnext:
	INCQ	R14
	JMP	scan
found:
	MOVQ	$160, AX // SYS_setrlimit: the command gets the limit heaplens was started with
	MOVQ	$9, DI
	LEAQ	·startAS(SB), SI
	SYSCALL
	CMPQ	R15, $0
	JNE	exec
	MOVQ	$1, AX // SYS_write
	MOVQ	$2, DI
	MOVQ	·lowASMessage(SB), SI
	MOVQ	·lowASMessage+8(SB), DX
	SYSCALL
exec:
	MOVQ	R14, AX
	SUBQ	$2, AX
	LEAQ	(R13)(AX*8), SI // argv: sh -c SCRIPT COMMAND...
	MOVQ	·shName(SB), AX
	MOVQ	AX, 0(SI)
	MOVQ	·shDashC(SB), AX
	MOVQ	AX, 8(SI)
	MOVQ	·shScript(SB), AX
	MOVQ	AX, 16(SI)
	LEAQ	8(R13)(R12*8), DX // envp
	MOVQ	·shPath(SB), DI
	MOVQ	$59, AX // SYS_execve
	SYSCALL
	MOVQ	$1, AX // it failed: say so, and let the runtime try
	MOVQ	$2, DI
	MOVQ	·execFailed(SB), SI
	MOVQ	·execFailed+8(SB), DX
	SYSCALL
go:
	XORQ	DX, DX
	JMP	_rt0_amd64_linux(SB)
