"""The event log: one JSON object per line, one file per rank, appended across restarts.

Exercises and tests read these to reconstruct what happened and when: every record
has the wall-clock time, the rank, the node and the restart attempt it belongs to.

Where the controller cannot read a node's files (a pod's emptyDir), LAB_EVENTS_ECHO=1
also prints each record on stderr as `@lab-event FILE JSON`: the k8s runtime's log
follower (lab.runtimes.k8s_logs) writes them back into files of the run dir.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from lab import files
from lab.nodeenv import NodeEnv


class Event(StrEnum):
    """Every event a rank writes, by the name in its record's "event" field. Writers and readers
    both name them here: a misspelt event is an AttributeError, not an event that never happened."""

    START = "start"  # the process began (world_size; a script's path and working dir)
    RENDEZVOUS_DONE = "rendezvous_done"  # it has a process group (seconds, world_size)
    STEP = "step"  # a step completed (step; loss, seconds; a script's unit and source)
    CHECKPOINT_SAVED = "checkpoint_saved"  # step, path, seconds
    CHECKPOINT_FAILED = "checkpoint_failed"  # step, reason
    CHECKPOINT_LOADED = "checkpoint_loaded"  # step, path: the trainer resumed
    CHECKPOINT_INVALID = "checkpoint_invalid"  # path, reason: a damaged one, skipped
    CHECKPOINT_RECEIVED = "checkpoint_received"  # step, source_rank, path: from a peer
    NO_CHECKPOINT = "no_checkpoint"  # directory: a fresh start
    LOADED = "loaded"  # path, how: a user's script called torch.load or dcp.load
    LOAD_FAILED = "load_failed"  # path, how, error: a user's script's torch.load or dcp.load raised
    SAVED = "saved"  # path, how: a user's script called torch.save or dcp.save
    SAVE_PAUSED = "save_paused"  # path (step: the trainer's): a save stopped midway (kill-in-save's fault)
    STATE_FROM_PEER = "state_from_peer"  # step, source: in-process recovery's handover
    COLLECTIVE_FAILED = "collective_failed"  # step, error: in-process recovery noticed a death
    INJECTED_EXTRA_COLLECTIVE = "injected_extra_collective"  # step: collective-mismatch's fault
    EXIT = "exit"  # reason (ExitReason), step, checksum when completed
    NET_RTT = "net_rtt"  # node, rtt: a node's round trip to the lab's bridge (lab.health.net_probe)


class ExitReason(StrEnum):
    """Why a rank's EXIT record says it ended."""

    COMPLETED = "completed"  # every step done (checksum: the final weights)
    PREEMPTED = "preempted"  # stopped at an agreed step after SIGTERM, checkpointed
    ERROR = "error"  # a failure the workload caught (a collective's)
    EXCEPTION = "exception"  # a user's script raised (error, where)
    EXIT_STATUS = "exit_status"  # a user's script exited non-zero (code)


class AgentEvent(StrEnum):
    """The events the lab adds to torchelastic's own in an agent's record (agent-<node>.jsonl)."""

    FAILURE_DETECTED = "lab.failure_detected"  # the agent saw its group fail (lab.health.agent_exporter)
    STORE_LOST = "lab.store_lost"  # its rendezvous store could not be reached; it went on (lab.node.store_loss)
    RANK_FROZEN = "lab.rank_frozen"  # an in-process keeper SIGKILLed a rank whose heartbeat stopped (rank, silent_s)
    KEEPER_LOST = "lab.keeper_lost"  # an in-process keeper no longer heard another node's (node, silent_s)
    RANK_STRANDED = "lab.rank_stranded"  # a rank left a collective gloo stranded; a spare took its place (rank)
    GROUP_RESTARTED = (
        "lab.group_restarted"  # in-process fell back: keepers restarted every rank (round, generation, why)
    )


READ_LIMIT_BYTES = 32 << 20  # of one events file, read by the host: its newest events
ECHO_PREFIX = "@lab-event "
ECHO = NodeEnv.parse().events_echo


def node_name() -> str:
    """The lab's name for this node where the lab started us (loopback nodes share a hostname)."""
    return os.environ.get("TORCHRUN_LAB_NODE") or socket.gethostname()


def append_agent_record(path: Path, node: str, event: dict) -> None:
    """One agent record (agent-<node>.jsonl, read by read_agent_events): torchelastic's event as
    its agent's handler passes it, or one the lab adds (an AgentEvent, from an agent or a keeper)."""
    line = json.dumps({"time": time.time(), "node": node, "torchelastic": event}) + "\n"
    with open(path, "a") as f:
        f.write(line)
    echo(path.stem, line)


def earliest(records: Iterable[dict], event: str) -> dict | None:
    """The earliest record of the event, of any rank (None: there is none)."""
    return min((e for e in records if e["event"] == event), key=lambda e: e["time"], default=None)


def restarted_at(events: list[dict], fault_time: float) -> float | None:
    """When the first worker started after the fault (None: none did). What a group did up to
    then belongs to the run the fault hit: a survivor can finish a step or save a checkpoint
    after the fault is injected and before its agent stops it, and a resume may rightly load
    that checkpoint."""
    return min((e["time"] for e in events if e["event"] == Event.START and e["time"] > fault_time), default=None)


def faulted_run_end(events: list[dict], fault_time: float) -> float:
    """Where the run the fault hit ends: its restart, or the fault itself when none followed."""
    return restarted_at(events, fault_time) or fault_time


def echo(stem: str, line: str) -> None:
    """One record, also on stderr, for a controller that reads the node's log, not its files."""
    if ECHO:
        sys.stderr.write(f"{ECHO_PREFIX}{stem} {line}")
        sys.stderr.flush()


def split_echo(line: str) -> tuple[str, str] | None:
    """(file stem, JSON line) from an echoed record; None for any other line."""
    if not line.startswith(ECHO_PREFIX):
        return None
    stem, _, record = line[len(ECHO_PREFIX) :].partition(" ")
    valid = stem.replace("-", "").replace("_", "").isalnum() and record.startswith("{")
    return (stem, record if record.endswith("\n") else record + "\n") if valid else None


class EventLog:
    def __init__(self, directory: str | os.PathLike | None, rank: int, local_rank: int):
        self.path = Path(directory) / f"rank{rank}.jsonl" if directory else None
        self.common: dict[str, Any] = {
            "rank": rank,
            "local_rank": local_rank,
            "node": node_name(),
            "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "pid": os.getpid(),
        }
        self._common_json = json.dumps(self.common)[1:-1]  # the fields between the braces
        self._file = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._end_torn_line()
            # Line-buffered append: each record reaches the file in one write() as it ends.
            self._file = open(self.path, "a", buffering=1)

    def _end_torn_line(self) -> None:
        """A process killed mid-write leaves a partial last line; start ours on a fresh one."""
        assert self.path is not None
        try:
            with open(self.path, "rb+") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
        except (FileNotFoundError, OSError):
            pass

    def restart(self, number: int) -> None:
        """From now on, records belong to restart (or in-process generation) number."""
        self.common["restart"] = number
        self._common_json = json.dumps(self.common)[1:-1]

    def write(self, event: Event, **fields) -> None:
        if self._file is None:
            return
        record = {"time": time.time(), "event": event, **self.common, **fields}
        line = json.dumps(record) + "\n"
        self._file.write(line)
        echo(self.path.stem if self.path else "", line)

    def step(
        self, step: int, loss: float, seconds: float, busy: float | None = None, data: tuple[int, list] | None = None
    ) -> None:
        """The record every training step writes: `write(Event.STEP, ...)`'s line, formatted directly
        (24 us a step through a dict and json.dumps, 16 so: `lab bench overhead`). repr() of a finite
        float is its JSON form; NaN and infinities go through json.dumps, as Python's json reads them.
        busy: the step's seconds outside the all-reduce (lab.workloads.step_clock). data: (epoch, the
        sample indices the step trained on), for the exactly-once ledger (lab.exercises.samples)."""
        if self._file is None:
            return
        loss_text = repr(loss) if math.isfinite(loss) else json.dumps(loss)
        extra = f', "busy": {busy!r}' if busy is not None else ""
        if data is not None:
            extra += f', "epoch": {int(data[0])}, "samples": [{", ".join(str(int(i)) for i in data[1])}]'
        line = (
            f'{{"time": {time.time()!r}, "event": "step", {self._common_json}, "step": {step}, '
            f'"loss": {loss_text}, "seconds": {seconds!r}{extra}}}\n'
        )
        self._file.write(line)
        echo(self.path.stem if self.path else "", line)


# The fields every reader of a rank's record relies on, and their types.
RANK_FIELDS: dict[str, type | tuple[type, ...]] = {"time": (int, float), "event": str, "rank": int}
# And what some events carry that their readers use (a step number, say).
EVENT_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    Event.STEP: {"step": int},
    Event.START: {"restart": int},
    Event.CHECKPOINT_SAVED: {"step": int},
    Event.CHECKPOINT_LOADED: {"step": int},
}


def well_formed(record: object, fields: dict[str, type | tuple[type, ...]]) -> bool:
    return isinstance(record, dict) and all(
        isinstance(record.get(name), kind) and not isinstance(record.get(name), bool) for name, kind in fields.items()
    )


def _lines(path: Path) -> list[str]:
    """A node writes the events folder: read as a regular file through no link, its last
    READ_LIMIT_BYTES at most (a torn first line is left out like any other bad line)."""
    return (files.read_text(path, READ_LIMIT_BYTES, tail=True) or "").splitlines()


def _records(directory, pattern: str, accept: Callable[[object], bool], skipped: list[str] | None) -> list[dict]:
    """The records of the files matching pattern that accept() takes. A line that is not such a
    record (a torn last line, another program's output, an older lab's shape) is left out, and
    named in `skipped` when the caller asks ("rank1.jsonl: 2 lines")."""
    records = []
    for path in sorted(Path(directory).glob(pattern)) if Path(directory).is_dir() else []:
        bad = 0
        for line in _lines(path):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if accept(record):
                records.append(record)
            else:
                bad += 1
        if bad and skipped is not None:
            skipped.append(f"{path.name}: {bad} line{'s' if bad > 1 else ''}")
    return records


def rank_record(record: object) -> bool:
    extra = EVENT_FIELDS.get(str(record.get("event")), {}) if isinstance(record, dict) else {}
    return well_formed(record, RANK_FIELDS) and well_formed(record, extra)


def read_events(directory: str | os.PathLike, skipped: list[str] | None = None) -> Iterator[dict]:
    """Every record from every rank's file, in time order (_records: what is left out)."""
    return iter(sorted(_records(directory, "rank*.jsonl", rank_record, skipped), key=lambda r: r["time"]))


AGENT_FIELDS: dict[str, type | tuple[type, ...]] = {"time": (int, float), "node": str, "torchelastic": dict}


def read_agent_events(events_dir: Path, skipped: list[str] | None = None) -> list[dict]:
    """torchelastic's agent and rendezvous events as lab.node.launch recorded them, in time
    order; unreadable lines are left out and named in `skipped`, as read_events does."""
    records = [
        {
            "time": record["time"],
            "node": record["node"],
            "name": record["torchelastic"].get("name", ""),
            "message": record["torchelastic"].get("message", ""),
            "event": record["torchelastic"],
        }
        for record in _records(events_dir, "agent-*.jsonl", lambda r: well_formed(r, AGENT_FIELDS), skipped)
    ]
    return sorted(records, key=lambda r: r["time"])


PROBE_FIELDS: dict[str, type | tuple[type, ...]] = {"time": (int, float), "node": str}
PROBE_PREFIX = "net-"  # lab.health.net_probe writes net-<node>.jsonl


def read_probes(events_dir: str | os.PathLike, skipped: list[str] | None = None) -> list[dict]:
    """Every node's round trips (lab.health.net_probe, net-<node>.jsonl), in time order; unreadable
    lines are left out and named in `skipped`, as read_events does."""
    found = _records(events_dir, f"{PROBE_PREFIX}*.jsonl", lambda r: well_formed(r, PROBE_FIELDS), skipped)
    return sorted(found, key=lambda p: p["time"])


def agent_failures(event: dict) -> list[tuple[int, dict]]:
    """(rank, {exitcode, pid, local_rank[, error, traceback]}) for each failed rank an agent's
    record names; what does not have that shape (an older lab's record, say) is passed over."""
    codes = event.get("exit_codes")
    codes = codes if isinstance(codes, dict) else {}
    details = event.get("failures") or {r: {"exitcode": c} for r, c in codes.items()}
    found = []
    for rank_text, info in details.items() if isinstance(details, dict) else ():
        try:
            rank = int(rank_text)
        except (TypeError, ValueError):
            continue
        if isinstance(info, dict):
            known: dict = {k: _whole(info.get(k)) for k in ("exitcode", "pid", "local_rank")}
            known.update({k: info[k] for k in ("error", "traceback") if isinstance(info.get(k), str)})
            found.append((rank, known))
    return found


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
