#include "textflag.h"

// 3 GiB: less address space than the runtime and the rings of a run take.
#define minAS 0xC0000000

// entry is entry_linux_amd64.s's, for arm64: the same system calls (by
// their arm64 numbers), then the runtime's own entry with the stack the
// kernel gave it (argc at RSP). R27 (the assembler's) and R28 (g) are left
// alone.
TEXT ·entry(SB),NOSPLIT|NOFRAME,$0
	MOVD	$1, R9
loop:
	MOVD	$134, R8 // SYS_rt_sigaction
	MOVD	R9, R0
	MOVD	$0, R1
	MOVD	$·oldAction(SB), R2
	MOVD	$8, R3
	SVC
	CBNZ	R0, next
	MOVD	·oldAction(SB), R0
	CMP	$1, R0 // SIG_IGN
	BNE	next
	SUB	$1, R9, R10
	MOVD	$1, R11
	LSL	R10, R11, R11
	MOVD	·startIgnored(SB), R12
	ORR	R11, R12, R12
	MOVD	R12, ·startIgnored(SB)
next:
	ADD	$1, R9, R9
	CMP	$65, R9
	BNE	loop
	MOVD	$135, R8 // SYS_rt_sigprocmask(SIG_BLOCK, NULL, &startMask, 8) reads the mask
	MOVD	$0, R0
	MOVD	$0, R1
	MOVD	$·startMask(SB), R2
	MOVD	$8, R3
	SVC
	MOVD	$1, R0
	MOVD	R0, ·captured(SB)
	// RLIMIT_AS (9), as on amd64.
	MOVD	$163, R8 // SYS_getrlimit
	MOVD	$9, R0
	MOVD	$·startAS(SB), R1
	SVC
	CBNZ	R0, go
	MOVD	$1, R0
	MOVD	R0, ·asKnown(SB)
	MOVD	·startAS(SB), R0
	CMN	$1, R0 // RLIM_INFINITY
	BEQ	go
	MOVD	·startAS+8(SB), R0
	MOVD	R0, ·raisedAS(SB)
	MOVD	R0, ·raisedAS+8(SB)
	MOVD	$164, R8 // SYS_setrlimit
	MOVD	$9, R0
	MOVD	$·raisedAS(SB), R1
	SVC
	MOVD	$-1, R0
	MOVD	R0, ·raisedAS(SB)
	MOVD	R0, ·raisedAS+8(SB)
	MOVD	$164, R8
	MOVD	$9, R0
	MOVD	$·raisedAS(SB), R1
	SVC
	// Still below minAS: heaplens run [FLAGS] -- COMMAND... execs
	// /bin/sh -c 'exec "$0" "$@"' COMMAND..., argv rewritten in place.
	MOVD	$163, R8 // SYS_getrlimit
	MOVD	$9, R0
	MOVD	$·raisedAS(SB), R1
	SVC
	CBNZ	R0, go
	MOVD	·raisedAS(SB), R0
	MOVD	$minAS, R1
	CMP	R1, R0
	BHS	go // unsigned >=: enough, or none
	MOVD	0(RSP), R12 // argc
	ADD	$8, RSP, R13 // argv
	CMP	$4, R12
	BLT	go
	MOVD	8(R13), R1 // argv[1] == "run"?
	MOVBU	0(R1), R2
	CMP	$0x72, R2
	BNE	go
	MOVBU	1(R1), R2
	CMP	$0x75, R2
	BNE	go
	MOVBU	2(R1), R2
	CMP	$0x6e, R2
	BNE	go
	MOVBU	3(R1), R2
	CBNZ	R2, go
	MOVD	$2, R14 // the index of "--"
	MOVD	$0, R15 // -q seen
	SUB	$1, R12, R7
scan:
	CMP	R7, R14
	BGE	go // no "--" with a command after it
	LSL	$3, R14, R1
	ADD	R13, R1, R1
	MOVD	(R1), R1
	MOVBU	0(R1), R2
	CMP	$0x2d, R2
	BNE	argnext
	MOVBU	1(R1), R2
	CMP	$0x71, R2 // "-q"
	BNE	dashdash
	MOVBU	2(R1), R2
	CBNZ	R2, argnext
	MOVD	$1, R15
	B	argnext
dashdash:
	CMP	$0x2d, R2
	BNE	argnext
	MOVBU	2(R1), R2
	CBZ	R2, found
	CMP	$0x71, R2 // "--q"
	BNE	argnext
	MOVBU	3(R1), R2
	CBNZ	R2, argnext
	MOVD	$1, R15
argnext:
	ADD	$1, R14, R14
	B	scan
found:
	MOVD	$164, R8 // SYS_setrlimit: the command gets the limit heaplens was started with
	MOVD	$9, R0
	MOVD	$·startAS(SB), R1
	SVC
	CBNZ	R15, exec
	MOVD	$64, R8 // SYS_write
	MOVD	$2, R0
	MOVD	·lowASMessage(SB), R1
	MOVD	·lowASMessage+8(SB), R2
	SVC
exec:
	SUB	$2, R14, R1
	LSL	$3, R1, R1
	ADD	R13, R1, R1 // argv: sh -c SCRIPT COMMAND...
	MOVD	·shName(SB), R2
	MOVD	R2, 0(R1)
	MOVD	·shDashC(SB), R2
	MOVD	R2, 8(R1)
	MOVD	·shScript(SB), R2
	MOVD	R2, 16(R1)
	LSL	$3, R12, R2
	ADD	R13, R2, R2
	ADD	$8, R2, R2 // envp
	MOVD	·shPath(SB), R0
	MOVD	$221, R8 // SYS_execve
	SVC
	MOVD	$64, R8 // it failed: say so, and let the runtime try
	MOVD	$2, R0
	MOVD	·execFailed(SB), R1
	MOVD	·execFailed+8(SB), R2
	SVC
go:
	B	_rt0_arm64_linux(SB)
