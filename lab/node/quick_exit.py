"""A node's processes end without the interpreter's teardown.

Once torch is imported (and torch._dynamo: an optimizer's constructor imports it), the
interpreter's teardown alone takes about half a second of CPU at exit, torch's op-library
finalizers mostly: measured 0.5 s after the last atexit handler for a process that imported
torch.distributed and did nothing else, 1.5 s for a keeper beside 2 busy loops on 2 cores. An
agent or a keeper exits after its job's ranks are gone, and whatever comes next waits for it:
the scheduler (or a drill) that starts the job again after a preemption or a lost store, the
node that is judged ended. A chaos campaign measured the job's end, from the ranks' exit to every
node's, at 1.1-1.8 s; most of it was this teardown.

So the agent (lab.node.launch), the keeper (lab.node.inprocess.keeper) and the ranks
(lab.node.inprocess.rank) end here: output and logging are flushed first, an uncaught
exception is printed as the interpreter prints it, and the exit status is the one the
interpreter would give. Nothing else is lost: children are stopped before (each entry point
does that itself), and the fork server and the resource tracker see their pipes close and exit
as before.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush what was written, then leave with code at once."""
    import logging

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be said on it
            pass
    logging.shutdown()
    os._exit(code)


def status_of(main: Callable[[], int | None]) -> int:
    """What the interpreter would exit with once main() ends: its return (0 for None), a
    SystemExit's code (a message printed, and 1), 1 for an uncaught exception (its traceback
    printed, as the interpreter prints it), 128 + SIGINT for Ctrl-C."""
    try:
        return main() or 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the same status
        sys.excepthook(*sys.exc_info())
        return 1


def run_and_exit_now(main: Callable[[], int | None]) -> NoReturn:
    """main(), then exit_now with the status the interpreter would have given."""
    exit_now(status_of(main))
