"""Runs a user's training script, unmodified, in a torchrun worker, and watches it for a drill.

    torchrun ... --module lab.node.user_script [--workdir DIR] [--events-dir DIR]
                 [--progress-regex RE] -- SCRIPT [ARGS...]

The script runs as `python SCRIPT ARGS` would run it (`__main__`, its folder first on
sys.path, sys.argv), after these steps, none of which its code can see:

- chdir to --workdir (each drill run has its own: a relative checkpoint path never leaks
  from one run into the next);
- this rank's event log (rankN.jsonl): `start`, then `exit` (completed, an exit status, or
  the exception with the script's file and line);
- progress: `lab.progress.step(n)` if the script calls it; otherwise each line it prints
  (stdout or stderr, through Python) that matches --progress-regex becomes a `step` event
  (the named group `n`, else the first group; the group `unit`, else "step");
- SIGUSR2 raises an ordinary exception in it (lab.health.injected_error: the rank-exception drill),
  and SIGRTMIN+8 pauses its next save midway (kill-in-save: lab.node.faulty_saves);
- `rendezvous_done` when init_process_group returns, and `loaded` (the path) for each
  torch.load or torch.distributed.checkpoint.load: where the run resumed from.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import runpy
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from lab import progress
from lab.health import hang_dump, injected_error
from lab.health.error_text import error_text
from lab.health.events import ECHO_PREFIX, Event, EventLog, ExitReason
from lab.node.faulty_saves import onto_a_full_disk, pause_dcp_before_metadata, paused_torch_save
from lab.node.progress_lines import DEFAULT_REGEX, BarReader, LineWatcher, progress_value
from lab.node_log import PrintedErrors
from lab.nodeenv import NodeEnv

STDERR_KEPT = 5  # the script's last lines of stderr, kept in its exit record (argparse's error, say)


def watch_output(log: EventLog, pattern: re.Pattern[str]) -> tuple[collections.deque[str], PrintedErrors]:
    """Read the script's steps from its output; returns its last lines of stderr, as they come,
    and the exceptions it printed itself (a wrapper's traceback, on either stream)."""
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
    printed = PrintedErrors()
    last: list[tuple[int, str] | None] = [None]  # a bar redrawn at the same count is no new step
    bars = BarReader()

    def on_line(line: str) -> None:
        printed.feed(line)
        if progress.called:
            return  # the script reports its own steps: its output is not read for them
        if line.startswith(ECHO_PREFIX):
            return  # the lab's own event, echoed (in pods): a step read there would echo again, for ever
        found = progress_value(pattern, line)
        if not found and pattern.pattern == DEFAULT_REGEX:  # the default reads tqdm's bars too
            count = bars.read(line)
            found = (count, "step") if count is not None else None
        if found and found != last[0]:
            last[0] = found
            log.write(Event.STEP, step=found[0], unit=found[1], source="output")

    def on_error_line(line: str) -> None:
        if line.strip():
            tail.append(line[:300])
        on_line(line)

    sys.stdout = LineWatcher(sys.stdout, on_line)
    sys.stderr = LineWatcher(sys.stderr, on_error_line)
    return tail, printed


def failed_exit(code: int, message: Any, tail: collections.deque[str], printed: PrintedErrors) -> dict:
    """The exit record of a script that exited with a status: what a wrapper that caught its
    exception printed last (Hydra's "Set the environment variable HYDRA_FULL_ERROR=1 ..." trailer,
    a logged traceback) says nothing; the exception it printed just before does."""
    said = [*tail, *([str(message)] if isinstance(message, str) else [])]  # sys.exit("why"): printed after
    if printed.found and printed.lines_after < STDERR_KEPT:
        error, where = printed.found[-1]
        return {"reason": ExitReason.EXCEPTION, "error": error[:300], "where": where, "code": code, "stderr": said}
    return {"reason": ExitReason.EXIT_STATUS, "code": code, "stderr": said}


_INSIDE = threading.local()  # how deep in the watched calls: dcp.load's own reads are not the script's


def watched(original, record, failed=None):
    """original, which calls record(args, kwargs) after it returns, or failed(args, kwargs, error)
    when it raises, both only for the script's own call (not one the watched calls make inside)."""

    def wrapped(*args, **kwargs):
        depth = getattr(_INSIDE, "depth", 0)
        _INSIDE.depth = depth + 1
        try:
            result = original(*args, **kwargs)
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            if depth == 0 and failed is not None and not isinstance(e, KeyboardInterrupt | SystemExit):
                failed(args, kwargs, e)
            raise
        finally:
            _INSIDE.depth = depth
        if depth == 0:
            record(args, kwargs)
        return result

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapped


def watch_torch(log: EventLog, events_dir: str | None) -> None:
    """Record when the process group is up and what the script loads; behaviour unchanged."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    def touched(event: Event, where: Any, how: str) -> None:
        path = file_path(where)
        if path is not None:  # an in-memory buffer (BytesIO) is no checkpoint file
            log.write(event, path=path, how=how, **file_identity(path))

    def loaded(args, kwargs, key: str, how: str) -> None:
        touched(Event.LOADED, args[0] if args else kwargs.get(key), how)

    def not_loaded(args, kwargs, key: str, how: str, error: Exception) -> None:  # a half-written file, say
        path = file_path(args[0] if args else kwargs.get(key))
        if path is not None:
            log.write(Event.LOAD_FAILED, path=path, how=how, error=error_text(error))

    def saved(args, kwargs, key: str, how: str) -> None:  # torch.save(obj, f), dcp.save(state, checkpoint_id=)
        touched(Event.SAVED, args[1] if len(args) > 1 else kwargs.get(key), how)

    def joined(args, kwargs) -> None:
        timeout_s = pg_timeout_s(args, kwargs, dist.get_backend())
        log.write(Event.RENDEZVOUS_DONE, world_size=dist.get_world_size(), pg_timeout_s=timeout_s)
        hang_dump.install(events_dir, dist.get_rank())

    dist.init_process_group = watched(dist.init_process_group, joined)
    torch.load = watched(
        torch.load, lambda a, k: loaded(a, k, "f", "torch.load"), lambda a, k, e: not_loaded(a, k, "f", "torch.load", e)
    )
    dcp.load = watched(
        dcp.load,
        lambda a, k: loaded(a[1:], k, "checkpoint_id", "dcp.load"),
        lambda a, k, e: not_loaded(a[1:], k, "checkpoint_id", "dcp.load", e),
    )
    torch.save = watched(
        paused_torch_save(onto_a_full_disk(torch.save), log), lambda a, k: saved(a, k, "f", "torch.save")
    )
    dcp.save = watched(dcp.save, lambda a, k: saved(a, k, "checkpoint_id", "dcp.save"))
    pause_dcp_before_metadata(log)  # kill-in-save's pause: lab.node.faulty_saves


def pg_timeout_s(args: tuple, kwargs: dict, backend: str) -> float:
    """The process-group timeout the script gave init_process_group (`timeout=`, or its third
    argument), else torch's default for the backend: what ends a hung collective."""
    from torch.distributed import constants

    given = kwargs.get("timeout", args[2] if len(args) > 2 else None)
    if given is not None:
        return given.total_seconds()
    nccl = getattr(constants, "default_pg_nccl_timeout", None)
    return (nccl if backend == "nccl" and nccl else constants.default_pg_timeout).total_seconds()


def file_path(where: Any) -> str | None:
    """The path torch.load or torch.save was given: a path, or a file object opened on one (an
    open() file's name, fsspec's path: minGPT loads through fsspec); None for a buffer."""
    if isinstance(where, str | os.PathLike):
        return os.fspath(where)
    for attribute in ("name", "path"):
        named = getattr(where, attribute, None)
        if isinstance(named, str) and named:
            return named
    return None


def file_identity(path: str) -> dict:
    """{"file": [device, inode]} of what the path names now: two ranks whose saves name one file
    wrote one file (lab.exercises.script.writers), on one machine or a disk they share."""
    try:
        found = os.stat(path)
    except OSError:
        return {}
    return {"file": [found.st_dev, found.st_ino]}


def script_frame(error: BaseException, script: str) -> str:
    """'file:line' of the deepest frame in the user's script, else of the deepest frame."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(script)]
    found = mine or list(frames)
    return f"{found[-1].filename}:{found[-1].lineno}" if found else "?"


def main(argv: list[str] | None = None) -> None:
    injected_error.install()  # the rank-exception drill's fault, before the seconds torch's import takes
    parser = argparse.ArgumentParser(prog="lab.node.user_script")
    parser.add_argument("--workdir")
    parser.add_argument("--events-dir", default=NodeEnv.parse().events_dir)
    parser.add_argument("--progress-regex", default=DEFAULT_REGEX)
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    script = os.path.abspath(args.script)
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        os.chdir(args.workdir)
    log = EventLog(args.events_dir, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")))
    progress.use(log)
    log.write(Event.START, script=script, workdir=os.getcwd(), world_size=int(os.environ.get("WORLD_SIZE", "1")))
    stderr_tail, printed = watch_output(log, re.compile(args.progress_regex))
    watch_torch(log, args.events_dir)
    sys.argv = [script, *script_args]
    sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` has it
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code == 0:
            log.write(Event.EXIT, reason=ExitReason.COMPLETED, code=0)
        else:  # its own words, which the node's log loses at teardown
            log.write(Event.EXIT, **failed_exit(code, e.code, stderr_tail, printed))
        raise
    except BaseException as e:
        log.write(
            Event.EXIT,
            reason=ExitReason.EXCEPTION,
            error=error_text(e),
            where=script_frame(e, script),
        )
        raise
    log.write(Event.EXIT, reason=ExitReason.COMPLETED, code=0)


if __name__ == "__main__":
    main()
