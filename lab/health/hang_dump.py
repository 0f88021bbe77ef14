"""Hang forensics inside a rank: on request, write its Flight Recorder entries and its stacks.

A daemon thread watches `<LAB_EVENTS_DIR>/forensics/request`. When the controller writes
a new request id there, the thread writes `rank<N>.json` beside it:

- the Flight Recorder's entries (torch 2.13 records gloo's collectives too, when
  TORCH_FR_BUFFER_SIZE is set before the process group exists: lab.node.launch sets it):
  each with its collective sequence number, op, sizes and state;
- every thread's Python stack;

and beside it the recorder's raw dump (`fr_rank<N>`), the file torch's own analyzer reads
(lab.bench.flight_recorder).

The thread runs while the main thread waits inside a collective (gloo releases the GIL
there), so a rank blocked in all_reduce answers. A rank that does not answer is
stopped, or stuck holding the GIL: itself the finding. A rank answers only requests made
after it started. It works wherever the events dir is shared with the controller (netns
hosts, containers, a Ray machine's run dir).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
import traceback
from pathlib import Path

POLL_S = 0.2
DIRECTORY = "forensics"
RAW_PREFIX = "fr_rank"  # the raw dumps' names: the analyzer takes the rank from what follows


def flight_recorder(raw: bytes) -> list[dict]:
    """The Flight Recorder entries of a raw dump (raw_flight_recorder), oldest first; [] without one.
    The dump is this process's own, made a moment before: unpickling it runs nothing foreign."""
    if not raw:
        return []
    return [
        {
            "seq": e.get("collective_seq_id"),
            "op": str(e.get("profiling_name", "")).split(":")[-1],
            "sizes": e.get("input_sizes"),
            "state": e.get("state"),
            "pg": (e.get("process_group") or ["?"])[0],
            "created_ns": e.get("time_created_ns"),
        }
        for e in pickle.loads(raw).get("entries", [])
    ]


def stacks() -> dict[str, list[str]]:
    """Every thread's stack, innermost last, as 'file:line in function'."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {
        names.get(ident, str(ident)): [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_stack(frame)]
        for ident, frame in sys._current_frames().items()
    }


def raw_flight_recorder() -> bytes:
    """The recorder's own dump (a pickle, the format torch's analyzer reads); b"" without one."""
    try:
        from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]

        return _dump_fr_trace(includeCollectives=True, includeStackTraces=False)
    except Exception:  # no process group yet, or a build without the recorder
        return b""


def write_dump(directory: Path, rank: int, request: str) -> None:
    """rank<N>.json, and beside it the raw dump as fr_rank<N>, written first: a rank whose json
    answered a request wrote its raw dump for that request too. One read of the recorder serves
    both, so they hold the same entries."""
    raw = raw_flight_recorder()
    if raw:
        _replace(directory, f"{RAW_PREFIX}{rank}", raw)
    record = {"rank": rank, "pid": os.getpid(), "request": request, "time": time.time()}
    record.update(flight_recorder=flight_recorder(raw), stacks=stacks())
    _replace(directory, f"rank{rank}.json", json.dumps(record).encode())


def _replace(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f".{name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, directory / name)


def current_request(directory: Path) -> str:
    try:
        return (directory / "request").read_text().strip()
    except OSError:
        return ""


def install(events_dir: str | os.PathLike | None, rank: int) -> None:
    """Start the watching thread (nothing without an events dir)."""
    if not events_dir:
        return
    directory = Path(events_dir) / DIRECTORY
    try:  # made by a rank, the folder is the ranks' user's: a container's user may not write in one root made
        directory.mkdir(exist_ok=True)
    except OSError:
        pass  # an events dir it cannot write in: it answers nothing, and says nothing

    # A request made before this process started was not made of it: a rank that replaced a
    # frozen one (in-process recovery) would otherwise answer for the rank it replaced. Read
    # here, not in the thread: a request made once install() returned is this rank's, however
    # late the thread first runs (on a loaded machine it once read that request as an old one).
    answered = current_request(directory)

    def watch() -> None:
        nonlocal answered
        while True:
            time.sleep(POLL_S)
            request = current_request(directory)
            if request and request != answered:
                answered = request
                try:
                    write_dump(directory, rank, request)
                except OSError:
                    pass

    threading.Thread(target=watch, name="lab-forensics", daemon=True).start()
