package ring

// The attach control block (struct hl_control in preload/heaplens_ring.h,
// docs/attach.md): the library's exported heaplens_control, which the
// agent reads and writes in the attached process's memory. Offsets into it.
const (
	ControlMagic   = 0x31304c5443484c45 // "EHLCTL01"
	ControlVersion = 1

	CtlMagic    = 0
	CtlVersion  = 8 // u32
	CtlNHooks   = 12
	CtlStart    = 16 // agent: the session to start, written last
	CtlStop     = 24 // agent: the session to end
	CtlSession  = 32 // library: the session running, 0 if none
	CtlEnded    = 40 // library: the last session it ended
	CtlAgentPID = 48
	CtlRate     = 56
	CtlSeed     = 64
	CtlRingSize = 72
	CtlFlags    = 80
	CtlEpoch    = 88 // agent: raised after start or stop, so that every hook's next call looks
	CtlAlive    = 96 // agent, with CtlHeartbeat: its CLOCK_MONOTONIC time, rewritten while it drains
	CtlDir      = 136
	CtlHook     = CtlDir + ControlDirSize
	CtlReal     = CtlHook + 8*ControlHooks
	CtlName     = CtlReal + 8*ControlHooks
	ControlSize = CtlName + ControlHooks*ControlNameSize

	ControlDirSize  = 3072
	ControlHooks    = 48
	ControlNameSize = 64

	CtlNoPython = 1 // no Python frames or PyMem hooks in the session
	CtlNoFollow = 2 // fork children are not profiled
	// CtlHeartbeat: the agent is not in the process's PID namespace, so
	// kill(agent_pid, 0) cannot tell whether it lives; CtlAlive does.
	CtlHeartbeat = 4
	// CtlSandboxed: the process runs under a seccomp filter, which the agent
	// checked allows the calls of internal/seccomp.Needed (docs/attach.md).
	CtlSandboxed = 8
)
