"""A rank's heartbeat to its keeper, and the keeper's ear for it: how a frozen rank is told apart.

In-process recovery starts from a death: the dead rank's connections close and its peers'
collectives fail at once. A frozen rank (SIGSTOP, or stuck in C code holding the GIL) keeps its
connections open, and its peers wait in their all-reduce until the process-group timeout, then
fail with a timeout, which no attempt survives (gloo's abort() does not free a pending collective
either: docs/benchmarks.md). So each rank runs a thread that writes a byte down a pipe to its
keeper every BEAT_S. A thread runs whenever its process may take the GIL: a rank waiting in a
collective (which releases the GIL) still beats, a frozen one does not. A rank silent for
frozen_after(pg_timeout) seconds is frozen: the keeper SIGKILLs it, and what follows is the
recovery from a death, well before its peers' timeout.

Not seen this way: a rank that hangs in Python while its threads run (a deadlock on a lock, an
endless loop). Its peers time out and leave with TIMED_OUT_EXIT, and their keepers fall back to
a restart of the whole group from its checkpoint (lab.node.inprocess.rounds). A rank is judged only
once it has beaten: a process still importing torch is not.
"""

from __future__ import annotations

import os
import struct
import threading
import time

# The exit status of a rank that ended itself because gloo stranded it in a collective
# (lab.inprocess.lookout): EX_TEMPFAIL, the rank did nothing wrong and a spare can take its place.
STRANDED_EXIT = 75
# The exit status of a rank whose collective (or join) timed out: a peer is alive but does not
# take part, as a rank that hangs in Python while its threads still beat does. A spare cannot
# help (the hung rank holds its place), so its keepers restart the whole group
# (lab.node.inprocess.rounds). EX_PROTOCOL.
TIMED_OUT_EXIT = 76
# The exit status of a rank that found, once a regroup was joined, that no rank held the job's
# state: every one was a replacement (a second and third death during the regroup left no
# survivor), so nothing can be handed over in memory. Its keepers restart the whole group from
# the script's checkpoint (lab.node.inprocess.rounds), as for a timeout.
NO_STATE_EXIT = 77
# The exit status of a rank whose join waited the join timeout for ranks that never came: their
# nodes are gone (node 0 started again alone, with a new store). A round cannot bring them: its
# keeper ends the job in one line, as torchrun's rendezvous does after its join timeout.
ABSENT_EXIT = 78
# What each status that asks for a round says, in the keeper's line and its event.
ROUND_FOR = {
    TIMED_OUT_EXIT: "rank {rank}'s collective timed out: a peer hangs, alive but not in it",
    NO_STATE_EXIT: "no rank held the job's state when rank {rank} regrouped (every one was a replacement)",
}
BEAT_S = 0.2
BEAT = struct.Struct("d")  # a beat: when it was sent, time.monotonic()
MIN_FROZEN_S = 3.0


def frozen_after(pg_timeout_s: float) -> float:
    """Seconds of silence that make a rank frozen: a third of the process-group timeout (at
    least MIN_FROZEN_S), so the kill lands while its peers still wait, not after they time out."""
    return max(MIN_FROZEN_S, pg_timeout_s / 3)


def start_beating(fd: int) -> None:
    """In the rank: a daemon thread that writes to fd every BEAT_S until the keeper is gone."""

    def beat() -> None:
        while True:
            try:
                os.write(fd, BEAT.pack(time.monotonic()))  # one clock for every process on the machine
            except OSError:  # the keeper closed its end: this process dies with it anyway
                return
            time.sleep(BEAT_S)

    threading.Thread(target=beat, name="lab-inprocess-heartbeat", daemon=True).start()


class Ear:
    """In the keeper: the read end of each child's heartbeat pipe, and when it last beat."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}  # child pid -> the pipe's read end
        self._last: dict[int, float] = {}  # child pid -> when it last beat (absent: never yet)

    def new_pipe(self) -> tuple[int, int]:
        """(read end, write end) for a child about to start: pass the write end to it, then
        call listen(pid, read end) and close the write end here."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        return read, write

    def listen(self, pid: int, read_fd: int) -> None:
        self._fds[pid] = read_fd

    def forget(self, pid: int) -> None:
        fd = self._fds.pop(pid, None)
        self._last.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def silent_for(self, pid: int, now: float | None = None) -> float:
        """Seconds since pid last beat; 0.0 before its first beat."""
        now = time.monotonic() if now is None else now
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                while data := os.read(fd, 512 * BEAT.size):  # whole beats: each write is atomic
                    self._last[pid] = BEAT.unpack(data[-BEAT.size :])[0]
            except BlockingIOError:
                pass  # nothing more to read: the pipe is drained
        last = self._last.get(pid)
        return 0.0 if last is None else now - last

    def close(self) -> None:
        for pid in list(self._fds):
            self.forget(pid)
