"""torch's Flight Recorder analyzer, run on a gloo job's raw dumps (one folder, fr_rank<N> each).

    python -m lab.bench.fr_trace_gloo DIR

torch 2.13's gloo dumps name the default process group '' in their pg_config and '0' in their
entries; the analyzer as shipped looks the entries' name up in the config and raises
KeyError ('0', 0) on every one of them. Each dump is rewritten with its config named as its
entries name it (nothing else changes), then the analyzer runs as `fr_trace DIR --prefix fr_rank
--allow-incomplete-ranks` would: a rank that left no dump (stopped, or holding the GIL) is
reported as missing, not refused.

The dumps are pickles a job wrote: lab.bench.flight_recorder runs this module in a process of
its own, as uid 65534 when it is root, on copies.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from lab.health.hang_dump import RAW_PREFIX as PREFIX  # the analyzer reads each rank from what follows


def repair(dump: dict) -> dict:
    """Name each unnamed group of the config as the entries name the group they ran in."""
    named = {entry["process_group"][0]: entry["process_group"][1] for entry in dump.get("entries", [])}
    config = dump.get("pg_config", {})
    if "" in config and len(named) == 1:
        (name, desc), ranks = next(iter(named.items())), config.pop("")["ranks"]
        config[name] = {"name": name, "desc": desc, "ranks": ranks}
    return dump


def main(folder: str) -> None:
    for path in sorted(Path(folder).glob(f"{PREFIX}*")):
        path.write_bytes(pickle.dumps(repair(pickle.loads(path.read_bytes()))))
    from torch.distributed.flight_recorder.fr_trace import main as fr_trace

    fr_trace([folder, "--prefix", PREFIX, "--allow-incomplete-ranks"])


if __name__ == "__main__":
    main(sys.argv[1])
