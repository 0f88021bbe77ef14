"""Watching a running job: follow every node's output and wait for all of them to end."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from lab import files
from lab.node.restart_budget import CRASH_LOOP_EXIT
from lab.runtimes.base import Node

# After a node of a fixed-size job fails, how long the others get to end on their own. A peer
# whose workers were in a collective with the lost node fails at once (gloo sees the closed
# connections); past that the others only wait for a node that will not come back, until the
# process-group timeout or torchrun's 5-minute exit barrier.
FIXED_JOB_GRACE_S = 10.0


CHUNK_BYTES = 1 << 20  # read per node per poll: what the job prints never sets the lab's memory
SKIP_PAST_BYTES = 8 << 20  # further behind than this, the follower jumps to the newest output
LINE_BYTES = 64 << 10  # a longer line (no newline in sight) is printed cut
CPP_FRAME = re.compile(r"frame #\d+: |<omitting python frames>$")  # c10's backtrace, after "Exception raised from"


class LogFollower:
    """Prints each node's new output lines, prefixed with the node's name.

    torchrun ends a failed job with its own traceback and a ChildFailedError summary
    ("exitcode: -9 ... error_file: <N/A>") on every node, which says little and buries the
    rest; that block is left out here (it stays in the node's log), and the lab's
    first-failure card (lab.why.card) is printed instead by the verb.
    """

    def __init__(self, nodes: Sequence[Node], out: TextIO = sys.stdout):
        self.nodes = nodes
        self.out = out
        self.offsets = {node.name: 0 for node in nodes}
        self.partial = {node.name: b"" for node in nodes}
        self.held: dict[str, list[str]] = {}  # an unprefixed traceback, until it is known to be torchrun's
        self.frames: dict[str, int] = {}  # node -> the C++ frames left out since its last other line
        self.left_out: list[str] = []  # the nodes whose ChildFailedError summary was left out

    def _new_lines(self, node: Node, final: bool) -> list[bytes] | None:
        """The node's whole new lines since the last poll, bounded. The log is the node's (a
        container's user can swap it for a link or a FIFO): it is read only as a regular file,
        never through a link, a chunk at a time."""
        read = files.read_from(node.log_path, self.offsets[node.name], CHUNK_BYTES)
        if read is None:
            return None
        chunk, size = read
        skipped = b""
        if size - self.offsets[node.name] > SKIP_PAST_BYTES:
            behind = size - CHUNK_BYTES - self.offsets[node.name]
            skipped = f"(... {behind} bytes of output skipped here; the node's log has them)".encode()
            self.offsets[node.name] = size - CHUNK_BYTES
            self.partial[node.name] = b""
            chunk = (files.read_from(node.log_path, self.offsets[node.name], CHUNK_BYTES) or (b"", 0))[0]
        self.offsets[node.name] += len(chunk)
        *lines, rest = (self.partial[node.name] + chunk).split(b"\n")
        if len(rest) > LINE_BYTES:
            lines, rest = [*lines, rest[:LINE_BYTES] + b" (... line cut)"], b""
        if final and rest:
            lines, rest = [*lines, rest], b""
        self.partial[node.name] = rest
        return [skipped, *lines] if skipped else lines

    def _lines(self, node: Node, line: str) -> list[str]:
        """What to print now for one line of node's output: a C++ stack trace's frames (torch's
        warnings and errors carry them: a store's "sendBytes failed", NCCL's watchdog) as one line."""
        if CPP_FRAME.match(line):
            self.frames[node.name] = self.frames.get(node.name, 0) + 1
            return []
        return self._folded_frames(node) + self._unframed(node, line)

    def _folded_frames(self, node: Node) -> list[str]:
        count = self.frames.pop(node.name, 0)
        return [f"(a C++ stack trace of {count} frames left out: the node's log has it)"] if count else []

    def _unframed(self, node: Node, line: str) -> list[str]:
        held = self.held.get(node.name)
        if held is None:
            if line == "Traceback (most recent call last):":
                self.held[node.name] = [line]
                return []
            return [line]
        held.append(line)
        summary = any("ChildFailedError" in h for h in held)
        if summary and line.startswith("====") and any(h.startswith("Root Cause") for h in held):
            del self.held[node.name]
            self.left_out.append(node.name)
            return ["(torchrun's ChildFailedError summary left out: the first-failure card follows)"]
        ended_elsewhere = not summary and line and not line[0].isspace() and "Error" in line
        if ended_elsewhere or len(held) > 400:
            del self.held[node.name]  # another traceback: print it whole
            return held
        return []

    def poll(self, final: bool = False) -> None:
        for node in self.nodes:
            lines = self._new_lines(node, final)
            if lines is None:
                continue
            shown = [out for line in lines for out in self._lines(node, line.decode(errors="replace"))]
            if final:
                shown += self._folded_frames(node) + self.held.pop(node.name, [])
            for line in shown:
                self.out.write(f"[{node.name}] {line}\n")
        self.out.flush()


def wait(
    nodes: Sequence[Node],
    follower: LogFollower | None = None,
    *,
    poll_s: float = 0.2,
    failure_grace_s: float | None = FIXED_JOB_GRACE_S,
    log=print,
) -> dict[str, int]:
    """Block until every node's agent has exited; return each node's exit status.

    Once a node has failed, the others get failure_grace_s to notice. After that they are
    stopped: a fixed-size job cannot succeed without that node, and its healthy agents
    would otherwise sit in torchrun's exit barrier for 5 minutes. None waits forever
    (elastic jobs, which are meant to carry on with fewer nodes).
    """
    codes: dict[str, int] = {}
    first_failure: float | None = None
    while len(codes) < len(nodes):
        for node in nodes:
            if node.name not in codes and (code := node.exit_code()) is not None:
                codes[node.name] = code
                if code != 0 and first_failure is None:
                    first_failure = time.monotonic()
        if follower:
            follower.poll()
        if len(codes) == len(nodes):
            break
        if (
            failure_grace_s is not None
            and first_failure is not None
            and time.monotonic() - first_failure > failure_grace_s
        ):
            running = [n for n in nodes if n.name not in codes]
            log(f"a node failed {failure_grace_s:g}s ago; stopping {', '.join(n.name for n in running)}")
            for node in running:
                node.stop(grace_s=5.0)
            first_failure = None
        time.sleep(poll_s)
    if follower:
        follower.poll(final=True)
    return codes


def failure_grace_s(topology) -> float | None:
    """How long the other nodes get after one fails: FIXED_JOB_GRACE_S for fixed-size jobs,
    forever for elastic ones."""
    return None if topology.min_nodes else FIXED_JOB_GRACE_S


def job_status(codes: dict[str, int]) -> int:
    """The job's exit status: a crash loop's (lab.node.restart_budget) where an agent stopped
    one, else the first failing node's, or 0."""
    if CRASH_LOOP_EXIT in codes.values():
        return CRASH_LOOP_EXIT
    return next((code for code in codes.values() if code != 0), 0)
