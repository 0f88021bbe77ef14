"""What torchrun's node logs say of a failed group: each rank's exception and the deepest frame
of its own code (torch prefixes a rank's traceback with `[rankN]:`), the pids the agent
stopped with a signal, and a native abort's last words. lab.why.card reads them.

A C++ exception nobody catches (gloo's EnforceNotMet, say) aborts the worker: the C++ runtime
prints "terminate called after throwing an instance of 'T'" and "what(): ...", and Python's
fault handler each thread's stack, straight to the worker's stderr, with no `[rankN]:`.
"""

from __future__ import annotations

import re

TRACE_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$")
FRAME = re.compile(r'File "([^"]+)", line (\d+)')
EXCEPTION = re.compile(r"^\s*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$")
# torchrun's agent stopping a group: its subprocess workers, its function workers, and
# torch.multiprocessing's own join stopping the rest once one of them failed.
SIGTERM_SENT = re.compile(
    r"(?:Sending process|Closing process|Terminating process) (\d+) (?:closing signal|via signal) (SIG\w+)"
)
NOT_OWN = re.compile(r"site-packages|<frozen|/lab/node/|/lab/health/")  # frames of torch, the lab's wrappers
NATIVE = re.compile(r"^terminate called after throwing an instance of '([^']+)'\n\s*what\(\):\s*(.*)$", re.M)
ENFORCE_AT = re.compile(r"\[enforce fail at /[^\]]+\] ")  # gloo's source path says nothing to a user
STDLIB = re.compile(r"/lib/python3\.\d+/")
# What torch.distributed says when communication timed out: gloo's send or recv, NCCL's
# watchdog, the store's wait. A rank's own timeout ("DataLoader timed out after 60 seconds", a
# socket read of its data) is not one: that is the rank's own failure, not a peer's doing.
COMMUNICATION_TIMEOUT = re.compile(
    r"Timed out waiting|Timed out after \d+ seconds waiting|before timing out|wait timeout|Socket Timeout|"
    r"Connect timeout|Timed out in connectFullMesh"
)
DUMP_LINES = 80  # the fault handler's stacks after a native abort, read for the script's own frame


def tracebacks(log: str) -> dict[int, tuple[str, str]]:
    """rank -> (its exception line, the deepest frame of its own code) from `[rankN]:` lines."""
    found: dict[int, tuple[str, str]] = {}
    where: dict[int, str] = {}
    for line in log.splitlines():
        match = TRACE_LINE.match(line)
        if not match:
            continue
        rank, text = int(match[1]), match[2]
        frame = FRAME.search(text)
        if frame and not NOT_OWN.search(frame[1]) and not STDLIB.search(frame[1]):  # importlib is not the script
            where[rank] = f"{frame[1]}:{frame[2]}"
        exception = EXCEPTION.match(text)
        if exception:  # gloo's "[/path/to/pair.cc:553] " says nothing to a user
            found[rank] = (re.sub(r"\[/[^\]]+\] ", "", text.strip()), where.get(rank, ""))
    return found


class PrintedErrors:
    """Exceptions a script's process printed itself, with no `[rankN]:` (torch prefixes only what
    its own error handler prints), fed a line at a time: a SyntaxError or an ImportError from
    before the script ran, a traceback a wrapper printed before it exited (Hydra's, a
    `logging.exception`, `traceback.print_exc()`). Only one whose own frame (outside torch, the
    lab and the standard library) comes a few printed lines before it, however many frames of
    other code lie between: torchrun's own ChildFailedError traceback is not the script's."""

    NEAR = 6  # unindented lines from the own frame to the exception line (other processes' lines between)

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []  # (error, where), in the order printed
        self.lines_after = 0  # unindented lines printed since the last one found
        self._frame, self._since = "", self.NEAR + 1

    def feed(self, line: str) -> None:
        match = FRAME.search(line)
        if match and not TRACE_LINE.match(line) and not NOT_OWN.search(match[1]) and not STDLIB.search(match[1]):
            self._frame, self._since = f"{match[1]}:{match[2]}", 0
            return
        if not line.strip() or line[:1].isspace():
            return  # a traceback's frames of other code and its source lines
        self._since += 1
        self.lines_after += 1
        exception = EXCEPTION.match(line)
        if (
            exception
            and line[:1].isalpha()
            and self._frame
            and self._since <= self.NEAR
            and "ChildFailedError" not in line
        ):
            self.found.append((line.strip(), self._frame))
            self._frame, self.lines_after = "", 0


def bare_errors(log: str) -> list[tuple[str, str]]:
    """(error, where) of each exception a process in the log printed itself (PrintedErrors)."""
    printed = PrintedErrors()
    for line in log.splitlines():
        printed.feed(line)
    return printed.found


def own_frame(traceback: str) -> str:
    """file:line of a traceback's deepest frame outside torch and the lab's wrappers, or ''."""
    frames = [f"{path}:{line}" for path, line in FRAME.findall(traceback) if not NOT_OWN.search(path)]
    return frames[-1] if frames else ""


def native_aborts(log: str) -> list[tuple[str, str]]:
    """(error, where) for each native abort in a node's log: "T: what" with gloo's source path left
    out, and the first frame of the script's own code in the stacks Python's fault handler printed
    (most recent first)."""
    found = []
    for match in NATIVE.finditer(log):
        after = log[match.end() :].splitlines()[:DUMP_LINES]
        frames = [f"{path}:{line}" for path, line in FRAME.findall("\n".join(after))]
        own = [f for f in frames if not NOT_OWN.search(f) and not STDLIB.search(f)]
        what = ENFORCE_AT.sub("", match[2].strip())
        found.append((f"{match[1]}: {what}", own[0] if own else ""))
    return found
