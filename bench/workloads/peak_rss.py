"""peak_rss: what the Python benchmark workloads report of their own memory."""


def peak_rss_kb():
    """This process's peak RSS (VmHWM). Not ru_maxrss: a process started by
    a Go program (vfork semantics) keeps its parent's peak across exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0
