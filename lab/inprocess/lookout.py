"""How a rank learns that its generation is over, and how it gets out of it.

Under in-process recovery a rank's keeper opens the next generation (`genG/open` in the job's
store) within milliseconds of a death. Each attempt keeps a Lookout: a thread with a store
connection of its own, waiting on that key. What it does when the key appears depends on
where the rank is (Attempt.phase):

- joining the group: it shuts down the connections the join waits on (the attempt's store
  client, the group's first sockets), so a join that waits for a rank that will never come
  (it died after the last generation opened) fails at once and the attempt joins the newest
  generation instead of waiting out the process-group timeout;
- in the group: it shuts down the read side of the group's connections, so the collective
  the rank is in (or its next) fails at once, with every survivor's at the same moment.
  Only the read side: measured with two ranks mid all-reduce, shutting both sides down left
  1 in 10 of them stuck (gloo keeps a send that failed on EPIPE in its queue, and signals its
  end to bound buffers only: the collective's send waited out the whole timeout); with the
  read side only, about 1 in 30 (9 of 280, beside two busy loops);
- gone from it: nothing.

A rank that stays in its collective after that (its main thread waits inside torch.distributed,
or in a backward pass whose DDP all-reduce it waits on), running no Python, with every
connection of its group closed (gloo closes a connection once it fails), waits on a send gloo
stranded: nothing frees that wait short of the process-group timeout. So the lookout ends the
rank, in one line and with STRANDED_EXIT, after CLOSED_GRACE_S (STRANDED_AFTER_S where some
connection is still open), and its keeper gives its place to a spare as for any death (the
state it held is still held by its peers). A rank computing runs Python between its kernels,
and one in a long call outside a collective (torch.save of a large checkpoint) is not in
one: both are left alone, and their next collective fails.

A join is ended the same way: one that stays inside init_process_group STRANDED_AFTER_S after
the next generation opened waits on gloo's connect to a peer gone from the generation it joins,
which gloo retries on every refusal until its own timeout, deaf to any connection shut down
(found by `lab chaos`: ranks sat out 100 s there when a second rank died during the regroup).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

from lab.inprocess.heartbeat import ABSENT_EXIT, NO_STATE_EXIT, STRANDED_EXIT, TIMED_OUT_EXIT

# A lookout waits on the store this long at most; one whose attempt ended normally is left
# blocked, a daemon thread (waking it early would mean polling, and torch logs every wait
# that times out).
WATCH_LIMIT = timedelta(days=7)
STRANDED_AFTER_S = 5.0
CLOSED_GRACE_S = 1.0
# Where a thread waiting on a collective stands: torch.distributed's functions, or a backward
# pass (DDP's all-reduce runs inside it), or DDP's forward (its buffer broadcast).
IN_A_COLLECTIVE = tuple(
    os.path.join(os.sep, "torch", *parts, "") for parts in (["distributed"], ["autograd"], ["nn", "parallel"])
)


class Lookout:
    """A daemon thread that calls on_open() once generation + 1 opens (never, if it does not)."""

    def __init__(self, store: dist.TCPStore, generation: int, on_open: Callable[[], None]):
        self.opened = threading.Event()
        self._key = f"gen{generation + 1}/open"
        self._on_open = on_open
        # A connection of its own (a store client is not shared between threads), made here, before
        # the join, so that the group's connections are told apart from it (Attempt._join_newest).
        own = dist.TCPStore(store.host, store.port, is_master=False, timeout=WATCH_LIMIT)
        threading.Thread(target=self._run, args=(own,), name="lab-inprocess-lookout", daemon=True).start()

    def _run(self, own: dist.TCPStore) -> None:
        try:
            own.wait([self._key], WATCH_LIMIT)
        except Exception:  # noqa: BLE001 - the store is gone: gloo still sees a death, later
            return
        self.opened.set()
        self._on_open()


def sockets() -> dict[int, str]:
    """This process's open sockets: fd -> the kernel's inode ("socket:[1234]")."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:"):
            found[int(name)] = target
    return found


def opened_since(before: dict[int, str]) -> dict[int, str]:
    """The sockets opened since `before` was taken (an fd number reused counts as new)."""
    return {fd: inode for fd, inode in sockets().items() if before.get(fd) != inode}


def shut_down(opened: dict[int, str], how: int = socket.SHUT_RDWR) -> None:
    """End this rank's side of the connections in `opened`, now.

    Measured on torch 2.13 with gloo: a DDP whose all-reduce failed mid-backward (or a Python
    comm hook's failed future) keeps the group alive after destroy_process_group, its
    connections open, and a peer waiting on this rank (not on the dead one) then sits out the
    whole process-group timeout. gloo's abort() does not close them either. So the rank shuts
    down the connections it opened while joining (told apart by their inodes: an fd number
    since reused for something else is left alone), not a listening socket (gloo's listener
    thread aborts the process when its accept() fails); the peers' next read fails at once."""
    live = sockets()
    for fd, inode in opened.items():
        if live.get(fd) != inode:
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    sock.shutdown(how)
        except OSError:
            pass  # already closed by the other side, or not a connected stream


def stranded(thread_id: int, still_in: Callable[[], bool], connections: dict[int, str] | None) -> float | None:
    """The seconds the thread ran no Python (its innermost frame and instruction never moved)
    inside a collective while still_in() held: once CLOSED_GRACE_S with every one of
    `connections` closed, or STRANDED_AFTER_S (connections None: only that). None once
    still_in() no longer holds."""
    position, since = _position(thread_id), time.monotonic()
    while still_in():
        time.sleep(0.05)
        now = _position(thread_id)
        if now != position or not _in_a_collective(thread_id):  # it ran Python, or it is not waiting on one
            position, since = now, time.monotonic()
        idle = time.monotonic() - since
        live = sockets()
        closed = connections is not None and all(live.get(fd) != inode for fd, inode in connections.items())
        if idle >= STRANDED_AFTER_S or (closed and idle >= CLOSED_GRACE_S):
            return idle if still_in() else None
    return None


def _in_a_collective(thread_id: int) -> bool:
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in IN_A_COLLECTIVE):
            return True
        frame = frame.f_back
    return False


def _position(thread_id: int) -> tuple[int, int] | None:
    frame = sys._current_frames().get(thread_id)
    return None if frame is None else (id(frame), frame.f_lasti)


def leave_stranded(rank: str, generation: int, idle_s: float, where: str) -> None:
    """End this process: its main thread waits in a call of torch.distributed that nothing will end."""
    _leave(
        f"rank {rank} ran no Python for {idle_s:.1f} s after generation {generation + 1} opened, {where}: "
        "it exits so that its keeper gives its place to a spare",
        STRANDED_EXIT,
    )


# What a rank stranded in each phase waits on, in its line (leave_stranded).
STRANDED_IN = (
    "generation {generation}'s connections closed and its collective still waiting (a send gloo stranded to "
    "a closed peer waits for ever)"
)
STRANDED_JOINING = (
    "still inside its join of generation {generation} (gloo retries a refused connect to a peer gone from "
    "that generation until its own timeout, deaf to the connections shut down)"
)


def leave_abandoned(rank: str, generation: int, cause: str) -> None:
    """End this process: its script left its attempts after one ended on a lost peer, and the
    others will wait for it in the next generation until their timeout. Its keeper gives its
    place to a spare, which joins them. (An exception raised where the loop's generator is
    closed would be printed and ignored.)"""
    _leave(
        f"rank {rank} left its `for attempt in attempts()` loop after generation {generation} ended on a lost "
        f"peer ({cause}); its peers would wait for it in the next one: it exits 1 so that a spare takes its place "
        "(train on inside the loop)",
        1,
    )


def leave_timed_out(rank: str, generation: int, what: str, said: str) -> None:
    """This rank's collective (or join) timed out: some peer lives but takes no part (it hangs
    in Python, its heartbeat still beating). Exit TIMED_OUT_EXIT: the keepers restart the group."""
    _leave(
        f"rank {rank}: {what} in generation {generation} timed out ({said}): a peer is alive but takes no part "
        "(it hangs); no spare can take a living rank's place, so it exits and the keepers restart the whole group "
        "from its checkpoint",
        TIMED_OUT_EXIT,
    )


def leave_without_state(rank: str, generation: int) -> None:
    """This rank regrouped in a generation where no rank holds the job's state: each is a
    replacement. Exit NO_STATE_EXIT: the keepers restart the group, and the ranks load the
    script's checkpoint (a fresh start from step 0 would throw the job's progress away)."""
    _leave(
        f"rank {rank}: no rank of generation {generation} holds the job's state (every one replaced a rank "
        "lost during the regroup), so none can hand it over; it exits and the keepers restart the whole group "
        "from its checkpoint",
        NO_STATE_EXIT,
    )


def leave_absent(rank: str, generation: int, came: int, waited_s: float) -> None:
    """This rank's join waited the join timeout for ranks that never came: their nodes are gone
    (node 0 started again alone, its store new and empty). Exit ABSENT_EXIT: its keeper ends the
    job, which no round of restarts could bring back."""
    world = os.environ.get("WORLD_SIZE", "?")
    _leave(
        f"rank {rank}: only {came} of {world} ranks came to generation {generation} within the join timeout "
        f"({waited_s:.0f} s): the others' nodes are gone, and restarting this node's ranks cannot bring them",
        ABSENT_EXIT,
    )


def say_joins_next(rank: str, left: int, generation: int) -> None:
    print(
        f"[lab.inprocess] rank {rank}: generation {generation} opened while it joined generation {left} (a rank "
        f"died during the regroup): it joins generation {generation}",
        file=sys.stderr,
        flush=True,
    )


def _leave(why: str, status: int) -> None:
    """One line on stderr, then exit at once: the keeper gives this rank's place to a spare."""
    print(f"[lab.inprocess] {why}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(status)
