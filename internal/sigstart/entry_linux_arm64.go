package sigstart

// entry is the ELF entry point (entry_linux_arm64.s); never called from Go.
func entry()

// oldAction receives the kernel's struct sigaction in entry.
var oldAction [4]uint64
