"""The kernel's own account of a process it killed: the OOM killer's line in its ring buffer."""

from __future__ import annotations

import os
import re


def kernel_log() -> str:
    """The kernel's ring buffer as /dev/kmsg gives it (root, or kernel.dmesg_restrict=0); '' if unreadable."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    records = []
    try:
        while True:
            try:
                records.append(os.read(fd, 8192).decode(errors="replace"))
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while we read; go on with the next
                continue
    finally:
        os.close(fd)
    return "".join(records)


def oom_kill(pid: int | None, log: str) -> str:
    """The kernel's line saying it OOM-killed pid, or ''. Pids match for nodes that share the
    host's pid namespace (netns and loopback nodes); a container's are its own."""
    if pid is None:
        return ""
    found = re.search(
        rf"^[^;]*;((?:Memory cgroup out of memory|Out of memory)[^\n]*Killed process {pid} \([^\n]*)",
        log,
        re.M,
    )
    return found[1][:200] if found else ""
