"""Starting, finding and stopping the lab's processes.

torchrun starts every worker in a session of its own, so killing a node's process
group misses the workers. The lab therefore marks every process it starts with
MARKER in the environment (inherited by agents and workers alike) and sweeps by
that mark: it works after a crash and from another shell.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

from lab.rundir import MARKER, NODE_MARKER


def spawn(argv: list[str], *, log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start argv detached (own session, so Ctrl-C in the shell does not hit it), output to log_path."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def run_child_lab(argv: list[str], teardown_s: float = 300.0, **popen: Any) -> subprocess.CompletedProcess:
    """Run a lab command as a child (a bench runs `lab chaos`, `lab run`) to its end. When this
    process is stopped meanwhile (Ctrl-C, SIGTERM: lab.cli turns both into an exception), the
    child is asked to stop as Ctrl-C would ask it, and waited for while it tears its lab down:
    subprocess.run would SIGKILL it, and its nodes, namespaces and busy loops outlived it."""
    proc = subprocess.Popen(argv, **popen)
    try:
        out, err = proc.communicate()
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(teardown_s)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def alive(pid: int) -> bool:
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def command(pid: int) -> str:
    """The name pid's program runs as (/proc/PID/comm), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_by_command(run_dir: str, name: str) -> list[int]:
    """SIGKILL the run dir's marked processes whose program is `name` (a lab's etcd, its
    Prometheus: a fault); returns their pids, [] when none runs."""
    pids = [pid for pid in marked_pids(run_dir) if command(pid) == name]
    signal_all(pids, signal.SIGKILL, run_dir)
    return pids


def environ(pid: int) -> dict[str, str]:
    """The environment pid started with ({} if it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(v.decode(errors="replace").split("=", 1) for v in raw.split(b"\0") if b"=" in v)


def marked_pids(run_dir: str | None = None, node: str | None = None) -> list[int]:
    """Live pids carrying the lab's mark: of run_dir (or any run dir), of one node (or all)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        env = environ(int(entry.name))
        mark = env.get(MARKER)
        if mark is None or (run_dir is not None and mark != str(run_dir)):
            continue
        if node is not None and env.get(NODE_MARKER) != node:
            continue
        if alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def send(pid: int, sig: int, run_dir: str | None = None) -> bool:
    """Signal pid only if it carries the lab's mark (of run_dir, or of any lab). Through a pidfd:
    the check and the signal reach the same process even if pid is reused in between.
    Returns whether it was signalled."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        mark = environ(pid).get(MARKER)
        if mark is None or (run_dir is not None and mark != str(run_dir)):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def signal_all(pids: list[int], sig: int, run_dir: str | None = None) -> None:
    """Signal the pids that still carry the lab's mark (see send)."""
    for pid in pids:
        send(pid, sig, run_dir)


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until every pid has exited; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    remaining = [p for p in pids if alive(p)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.05)
        remaining = [p for p in remaining if alive(p)]
    return remaining


def terminate(pids: list[int], grace_s: float, run_dir: str | None = None) -> list[int]:
    """SIGTERM, then SIGKILL whatever outlives the grace period; marked processes only.
    Returns the pids signalled."""
    pids = [p for p in pids if alive(p)]
    signal_all(pids, signal.SIGTERM, run_dir)
    survivors = wait_gone(pids, grace_s)
    signal_all(survivors, signal.SIGKILL, run_dir)
    wait_gone(survivors, 5)
    return pids


class Child(Protocol):
    """A child process as the lab holds one: a subprocess.Popen, or a rank forked from a node's
    fork server (lab.node.inprocess.forked.ForkedRank), which has the same shape."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...
    def terminate(self) -> None: ...


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child (before exec, or first thing after a fork): SIGKILL when its parent goes, however
    it goes; and the default SIGTERM and SIGINT, whatever the parent's handler made of them."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def stop_children(procs: list[Child], grace_s: float) -> None:
    """SIGTERM each child, SIGKILL what is left after grace_s. No wait is unbounded: a child
    still there after that is left to the kernel (a keeper's die with it: PR_SET_PDEATHSIG)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass


def listener_pids(port: int) -> set[int]:
    """The processes with a TCP socket listening on port (those /proc lets this user see)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")) if inodes else ():
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                found.add(int(pid))
        except OSError:
            continue
    return found


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGHUP, ...): it unwinds like Ctrl-C, so every `finally` tears
    down what it started, outside the signal handler."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on(*signals: int) -> dict:
    """Make each of signals raise Stopped in the main thread; return the handlers it replaced.

    The handler only unwinds. One that did the stopping itself could run while the main thread
    is inside Popen.poll(), holding that Popen's wait lock, and then wait on the same lock
    forever. And once is enough: after the first signal the others are only answered in words,
    so a second Ctrl-C or SIGTERM cannot cut the teardown short.
    """

    def unwind(signum, _frame):
        for sig in signals:
            signal.signal(sig, patient)
        raise Stopped(signum)

    def patient(signum, _frame):  # a second Ctrl-C: said, not obeyed (a handler, not SIG_IGN, which exec keeps)
        os.write(
            2, f"lab: still stopping what it started ({signal.Signals(signum).name} again changes nothing)\n".encode()
        )

    return {sig: signal.signal(sig, unwind) for sig in signals}
