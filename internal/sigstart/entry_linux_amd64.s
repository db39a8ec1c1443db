#include "textflag.h"

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
	XORQ	DX, DX
	JMP	_rt0_amd64_linux(SB)
