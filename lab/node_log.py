"""What torchrun's node logs say of a failed group: each rank's exception and the deepest frame
of its own code (torch prefixes a rank's traceback with `[rankN]:`), and the pids the agent
stopped with a signal. lab.why reads them.
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
        if frame and not NOT_OWN.search(frame[1]):
            where[rank] = f"{frame[1]}:{frame[2]}"
        exception = EXCEPTION.match(text)
        if exception:  # gloo's "[/path/to/pair.cc:553] " says nothing to a user
            found[rank] = (re.sub(r"\[/[^\]]+\] ", "", text.strip()), where.get(rank, ""))
    return found


def own_frame(traceback: str) -> str:
    """file:line of a traceback's deepest frame outside torch and the lab's wrappers, or ''."""
    frames = [f"{path}:{line}" for path, line in FRAME.findall(traceback) if not NOT_OWN.search(path)]
    return frames[-1] if frames else ""
