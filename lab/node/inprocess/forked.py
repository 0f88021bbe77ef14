"""Ranks and spares forked from the node's fork server, torch already imported (preloaded).

A keeper that starts `python -m lab.node.inprocess.rank` pays torch's import in every rank and
every spare, and torch._dynamo's too (an optimizer's constructor imports it): about 2.3 s of
CPU each here, six processes at a 2 x 2 job's start, so seconds of a 2-core machine before the
first step, and again for every spare that replaces one. With `--preload` the keeper forks the
node's fork server once torch is loaded (lab.node.fork_server, as torchrun's agent does for
preloaded workers, lab.node.preload), before it starts any thread; the server imports the
rest of what a rank needs, and every rank and spare is forked from it with all of it loaded.

A ForkedRank has the shape of the subprocess.Popen the keeper holds otherwise (pid, poll,
wait, kill, terminate), so the keeper's bookkeeping is the same for both. The rank's parent is
the server, which exits when the keeper does (its end of the server's pipe closes): each rank
asks the kernel for SIGKILL when the server goes (PR_SET_PDEATHSIG), as a spawned rank does
when its keeper goes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
from multiprocessing import forkserver
from multiprocessing.connection import Connection

from lab.node.fork_server import forget_start_method, fork_server_here
from lab.node.preload import PRELOAD_MODULES
from lab.node.quick_exit import exit_now
from lab.nodeenv import NodeEnv
from lab.procs import die_with_parent


def start_server() -> int:
    """Fork the node's fork server from the keeper (torch loaded, no thread started yet); its pid."""
    return fork_server_here([*PRELOAD_MODULES, "lab.node.inprocess.rank"])


class ForkedRank:
    """`python -m lab.node.inprocess.rank ARGV` with env, forked from the server; beat_fd (the write end
    of its heartbeat pipe) goes to it and is closed here once it has."""

    def __init__(self, argv: list[str], env: dict[str, str], beat_fd: int):
        server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        beat = Connection(beat_fd, readable=False)  # pickled for the child as a passed descriptor
        context = multiprocessing.get_context("forkserver")
        self._process = context.Process(target=_run_rank, args=(argv, env, beat, server), name="lab-rank")
        try:
            self._process.start()
        finally:
            beat.close()
        self.pid: int = self._process.pid or 0
        self.args = ["lab.node.inprocess.rank", *argv]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode  # negative: the signal that ended it, as Popen's
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid the server has reaped, and maybe given away since
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _run_rank(argv: list[str], env: dict[str, str], beat: Connection, server: int) -> None:
    """In the forked child: die with the server, the default SIGTERM and SIGINT, the rank's own
    environment and heartbeat pipe; then the rank, whose exit status is this process's."""
    die_with_parent()
    if os.getppid() != server:  # the server went before the request above was in place
        os._exit(1)
    beat_fd = os.dup(beat.fileno())
    beat.close()
    forget_start_method()
    os.environ.clear()
    os.environ.update({**env, **NodeEnv(inprocess_beat_fd=beat_fd).render()})
    from lab.node.inprocess import rank

    exit_now(rank.main(argv))  # as lab.node.inprocess.rank's own main: no interpreter teardown
