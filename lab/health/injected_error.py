"""Faults one rank runs into on request, from inside: the drills' and `lab bench diagnosis`'s.

A worker that calls install() answers nine signals from whatever its main thread is running
(Python runs signal handlers between bytecodes, so a rank inside a gloo collective answers as
soon as the collective returns):

- SIGUSR2: raises an ordinary RuntimeError (the rank-exception drill);
- SIGRTMIN+1: allocates memory until something stops it, as a leak does (the bench first
  moves the rank into a memory cgroup, whose limit brings the kernel's OOM killer); it stops
  by itself at HOG_CAP_MIB, so a stray signal cannot take the whole machine;
- SIGRTMIN+2: hangs holding the GIL, in a regular expression that backtracks for ever (C code
  that never returns to Python: no signal handler, no other thread of the rank runs again);
- SIGRTMIN+3: exits at once with status 3 and nothing said, as a script's own
  `os._exit(3)` or a library's `exit()` on a bad input does;
- SIGRTMIN+4: the rank's next loss is NaN, as after a bad batch, in a script that passes its
  loss through poisoned() (the lab's trainer does; an unchanged script cannot be made to
  diverge from outside, so the bench refuses that cell);
- SIGRTMIN+5: every step from then on takes STALL_S longer on this rank, in a script that
  calls stall() in its step (the lab's trainer does): a straggler (`lab bench stragglers`);
- SIGRTMIN+6: the rank's next checkpoint write finds its disk full: the file it names is
  opened on /dev/full, whose every write the kernel refuses with ENOSPC, as a full disk's
  (the trainer's writes ask written_to(); a watched script's torch.save(obj, path) is sent
  there by lab.node.user_script, so the error is torch's own);
- SIGRTMIN+7: waits for ever in Python, as on a queue or a data loader that never answers:
  unlike the GIL hang, its other threads and its signal handlers still run;
- SIGRTMIN+8: the rank's next checkpoint save stops midway for PAUSE_S, as on storage that
  stalls: part of it written, the rest not (the trainer pauses between a file's halves, or a DCP
  step's shards and its commit; a watched script's torch.save between the file's halves, its
  dcp.save before the `.metadata`: lab.node.faulty_saves). The pause is announced first (the
  `save_paused` event), so the kill-in-save drill lands inside it.

The trainer and every script the lab watches (lab.node.user_script) install them; the script's
own code is unchanged, and one that installs its own handler for one of them keeps it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable

SIGNAL = signal.SIGUSR2
HOG_SIGNAL = signal.SIGRTMIN + 1
GIL_SIGNAL = signal.SIGRTMIN + 2
EXIT_SIGNAL, EXIT_STATUS = signal.SIGRTMIN + 3, 3
NAN_SIGNAL = signal.SIGRTMIN + 4
STALL_SIGNAL, STALL_S = signal.SIGRTMIN + 5, 0.25
DISK_FULL_SIGNAL, FULL_DEVICE = signal.SIGRTMIN + 6, "/dev/full"
WAIT_SIGNAL = signal.SIGRTMIN + 7
PAUSE_SIGNAL, PAUSE_S = signal.SIGRTMIN + 8, 8.0


class Once:
    """A fault armed by a signal and spent by the first call that takes it."""

    def __init__(self):
        self.armed = False

    def arm(self, _signum: int, _frame: object) -> None:
        self.armed = True

    def take(self) -> bool:
        taken, self.armed = self.armed, False
        return taken


_poison, _disk_full, _pause = Once(), Once(), Once()
_stall = {"seconds": 0.0}
MARK = "exception injected by the lab's rank-exception drill"
HOG_CHUNK_MIB, HOG_CAP_MIB = 64, 8192


def raise_injected(_signum: int, _frame: object) -> None:
    raise RuntimeError(f"rank {os.environ.get('RANK', '?')}: {MARK}")


def hog_memory(_signum: int, _frame: object) -> None:
    held: list[bytearray] = []
    while len(held) * HOG_CHUNK_MIB < HOG_CAP_MIB:
        held.append(bytearray(HOG_CHUNK_MIB << 20))  # zeroed: every page touched, so charged
    while True:
        time.sleep(60)


def hang_holding_the_gil(_signum: int, _frame: object) -> None:
    re.match(r"(a+)+$", "a" * 64 + "!")  # 2**64 ways to fail to match, none of them in Python


def exit_quietly(_signum: int, _frame: object) -> None:
    os._exit(EXIT_STATUS)


poison_next_loss = _poison.arm


def poisoned(loss):
    """loss, or NaN in its place once after SIGRTMIN+4 (a tensor's type and graph kept)."""
    return loss * float("nan") if _poison.take() else loss


def slow_down(_signum: int, _frame: object) -> None:
    _stall["seconds"] = STALL_S


def stall() -> None:
    """Nothing, or STALL_S of extra work once SIGRTMIN+5 has come."""
    if _stall["seconds"]:
        time.sleep(_stall["seconds"])


def wait_for_ever(_signum: int, _frame: object) -> None:
    threading.Event().wait()  # nobody sets it; a signal's handler runs during the wait, then it waits on


fill_disk = _disk_full.arm


def written_to(path):
    """path, or once after SIGRTMIN+6 the device that answers every write with ENOSPC."""
    return FULL_DEVICE if _disk_full.take() else path


pause_next_save = _pause.arm


def save_pauses() -> bool:
    """Whether the rank's next save will stop midway (SIGRTMIN+8 came, no save has taken it)."""
    return _pause.armed


def midway(announce: Callable[[], None]) -> None:
    """Nothing; or once after SIGRTMIN+8, announce() then PAUSE_S of waiting: the save in hand
    (partly written) stays unfinished that long, and a kill in that time cuts it."""
    if _pause.take():
        announce()
        time.sleep(PAUSE_S)


def install() -> None:
    signal.signal(SIGNAL, raise_injected)
    signal.signal(HOG_SIGNAL, hog_memory)
    signal.signal(GIL_SIGNAL, hang_holding_the_gil)
    signal.signal(EXIT_SIGNAL, exit_quietly)
    signal.signal(NAN_SIGNAL, poison_next_loss)
    signal.signal(STALL_SIGNAL, slow_down)
    signal.signal(DISK_FULL_SIGNAL, fill_disk)
    signal.signal(WAIT_SIGNAL, wait_for_ever)
    signal.signal(PAUSE_SIGNAL, pause_next_save)
