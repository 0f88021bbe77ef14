"""torch's own Flight Recorder analyzer beside `lab why`, on the same hang, graded the same way.

While a diagnosis cell's job hangs, the bench asks every rank for its dumps (lab.exercises.
forensics; each rank writes its recorder's raw dump beside its answer, lab.health.hang_dump) and
copies the raw ones of the ranks that answered. After the cell, `analyze` runs torch's analyzer
on them (lab.bench.fr_trace_gloo: the shipped one raises on every gloo dump) and reads what it
printed: the first collective not every rank joined and its missing ranks (a rank named), or that
it cannot decide because a rank left no dump, or nothing wrong at all. `graded` turns that into a
lab.bench.grading.Grade: the analyzer has no classes, so a rank it names is named as hung, the
class a rank that never joined its peers' collective has.

The copies are made without following a link, and the pickles a job wrote are only ever
unpickled by the analyzer's own process, run as uid 65534 when the bench is root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from lab import files
from lab.bench.grading import Fault, Grade
from lab.health.hang_dump import DIRECTORY, RAW_PREFIX

NOBODY = 65534
DUMP_LIMIT = 64 << 20
ANALYZE_S = 120.0
MISSING = re.compile(r"missing ranks: \{([\d, ]+)\}")
NO_DUMPS = re.compile(r"missed FR dumps from ranks \(\{([\d, ]+)\}\)")
HANGS = ("hung", "partition")  # the classes of the cells the analyzer is run on


@dataclass(frozen=True)
class Verdict:
    """What the analyzer said: ranks it names (certain: as missing from a collective; not: as
    having left no dump, so it could not decide), its own words, and whether it ran at all."""

    ranks: tuple[int, ...] = ()
    certain: bool = False
    said: str = ""
    failed: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def copy_dumps(events_dir: Path, answered: list[int], into: Path) -> int:
    """The raw dumps of the ranks that answered the last request, copied into `into`; how many."""
    into.mkdir(parents=True, exist_ok=True)
    copied = 0
    for rank in answered:
        raw = files.read_regular(events_dir / DIRECTORY / f"{RAW_PREFIX}{rank}", DUMP_LIMIT)
        if raw:
            (into / f"{RAW_PREFIX}{rank}").write_bytes(raw)
            copied += 1
    return copied


def read_verdict(output: str, returncode: int) -> Verdict:
    """The analyzer's first finding, from what it printed."""
    if returncode != 0:
        last = [line for line in output.splitlines() if line.strip()][-1:] or [f"exit {returncode}"]
        return Verdict(said=last[0].strip()[:300], failed=True)
    findings = [(m.start(), certain, m) for pattern, certain in ((MISSING, True), (NO_DUMPS, False))
                for m in pattern.finditer(output)]  # fmt: skip
    if not findings:
        return Verdict(said="no collective left unjoined")
    _, certain, found = min(findings, key=lambda f: f[0])
    ranks = tuple(sorted(int(r) for r in found[1].split(",")))
    line = next(x for x in output.splitlines() if found[0] in x)
    return Verdict(ranks, certain, line.strip()[:300])


def analyze(dumps: Path, timeout_s: float = ANALYZE_S) -> Verdict:
    """torch's analyzer on a folder of copied dumps, in a process of its own (unprivileged)."""
    if not any(dumps.glob(f"{RAW_PREFIX}*")):
        return Verdict(said="no rank left a dump", failed=True)
    with tempfile.TemporaryDirectory(prefix="tlab-fr-") as tmp:
        work = Path(tmp) / "dumps"
        shutil.copytree(dumps, work)
        drop: list[str] = []
        if os.geteuid() == 0:
            drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            for path in (Path(tmp), work, *work.iterdir()):
                os.chown(path, NOBODY, NOBODY)
        try:
            done = subprocess.run(
                [*drop, sys.executable, "-m", "lab.bench.fr_trace_gloo", str(work)],
                capture_output=True, text=True, timeout=timeout_s, cwd=tmp,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return Verdict(said=f"no answer in {timeout_s:.0f} s", failed=True)
    return read_verdict(done.stdout + done.stderr, done.returncode)


def graded(target: str, fault: Fault, rank: int, step: int, verdict: Verdict) -> Grade:
    """The analyzer's verdict graded as a card's is: the rank named with confidence (several: as
    a node's), the class (hung, where it names one), no step (it knows none)."""
    one = verdict.ranks[0] if verdict.certain and len(verdict.ranks) == 1 else None
    several = verdict.ranks if verdict.certain and len(verdict.ranks) > 1 else ()
    kind = "hung" if verdict.certain and verdict.ranks else "unknown"
    return Grade(target, fault.name, rank, step, one, kind, None, fault.expect, fault.settled, several)
