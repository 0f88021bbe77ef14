"""`lab bench natural`: the failure card on failures as ordinary scripts have them.

    lab bench natural [--corpus tests/fixtures/natural] [--only NAME,...]

Each case of the corpus is a script that fails through its own code or torch's (not through
the lab's injection hooks) and a truth written down by hand: the rank that failed first (none
where no one rank did) and the class. The bench runs each script as `lab run` runs a user's,
1 node x 2 ranks on loopback hosts, draws the card from what the failed job kept, and grades it
strictly (lab.bench.grading.named: only what the card states). The tuning half is what the card
was changed against; the held-out half was graded before any change, and its score is the
honest one: the two halves get their own tables.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import files, procs
from lab.bench.result import BenchResult, goal_line, this_command
from lab.errors import LabError
from lab.options import Option, add_all

OPTIONS = (
    Option("--corpus", "the cases: folders holding truth.json (default %(default)s)", "tests/fixtures/natural"),
    Option("--only", "these cases only, comma-separated (default: every case)"),
)
HALVES = ("tuning", "held-out")


def add_arguments(parser) -> None:
    add_all(parser, OPTIONS)


def cases(corpus: Path, only: str | None) -> dict[str, dict]:
    """name -> truth, or one line saying what is wrong with the choice."""
    found = {}
    for truth in sorted(corpus.glob("*/truth.json")):
        raw = files.read_regular(truth, 1 << 16)
        found[truth.parent.name] = json.loads(raw or b"{}")
    if not found:
        raise LabError(f"--corpus {corpus}: no case there (a case is a folder with a truth.json)")
    wanted = [n for n in (only or "").split(",") if n] or list(found)
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise LabError(f"--only: no case {unknown[0]!r} in {corpus}; the cases: {', '.join(found)}")
    return {n: found[n] for n in wanted}


def run(args, out_dir: Path) -> BenchResult:
    chosen = cases(Path(args.corpus), args.only)
    graded = []
    for number, (name, truth) in enumerate(chosen.items(), 1):
        print(f"[{number}/{len(chosen)}] {name}", flush=True)
        graded.append(grade(name, truth, *card_of(Path(truth["script"]))))
    history = [*earlier_runs(out_dir / "natural.json"), summary(graded)]
    return BenchResult("natural", this_command(), section(graded) + history_lines(history),
                       figures={"cases": graded, "history": history})  # fmt: skip


def summary(graded: list[dict], date: str | None = None) -> dict:
    """One run's scores per half and its misses, as the bench's history keeps them."""
    halves = {h: [g for g in graded if g["half"] == h] for h in HALVES}
    return {
        "date": date or time.strftime("%Y-%m-%d"),
        "scores": {h: [sum(g["right"] for g in mine), len(mine)] for h, mine in halves.items() if mine},
        "misses": [f"{g['case']} ({_cell(*g['said']) if g['said'] else 'no card'})" for g in graded if not g["right"]],
    }


def earlier_runs(path: Path) -> list[dict]:
    """The runs before this one, from the result it replaces (its own summary, if it kept no history):
    a miss stays on the page after a later run gets the case right."""
    raw = files.read_regular(path, 16 << 20) if path.is_file() else None
    if raw is None:
        return []
    result = json.loads(raw)
    figures = result.get("figures", {})
    if figures.get("history"):
        return figures["history"]
    measured = re.match(r"Measured (\d{4}-\d\d-\d\d)", (result.get("markdown") or [""])[0])
    return [summary(figures["cases"], measured[1] if measured else "an earlier run")] if figures.get("cases") else []


def history_lines(history: list[dict]) -> list[str]:
    lines = ["", "Every run of the bench so far (the misses stay here after a later run gets them right):", ""]
    lines += ["| run | " + " | ".join(HALVES) + " | missed |", "|---|---|---|---|"]
    for number, run in enumerate(history, 1):
        scores = [f"{run['scores'][h][0]} of {run['scores'][h][1]}" if h in run["scores"] else "-" for h in HALVES]
        lines.append(f"| {number} ({run['date']}) | " + " | ".join(scores) + f" | {', '.join(run['misses']) or '-'} |")
    return lines


def card_of(script: Path) -> tuple[object | None, str]:
    """The card `lab run` would draw for the script's failed job (None if it did not fail), and why not."""
    from lab.why import card as why

    with tempfile.TemporaryDirectory(prefix="lab-bench-natural-") as tmp:
        run_dir = Path(tmp) / "run"
        argv = [sys.executable, "-m", "lab", "run", "--run-dir", str(run_dir), "--hosts", "loopback"]
        argv += ["--nodes", "1", "--nproc-per-node", "2", str(script)]
        done = procs.run_child_lab(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # stopped: it tears down
        kept = sorted((run_dir / "reports").glob("why-*/"))
        if not kept:
            return None, f"the job kept no evidence (lab run exited {done.returncode})"
        return why.card(kept[0], kernel=lambda: ""), ""


def grade(name: str, truth: dict, card, why_not: str) -> dict:
    from lab.bench.grading import named

    said = named(card) if card is not None else None
    return {
        "case": name,
        "half": truth["half"],
        "truth": [truth["rank"], truth["kind"]],
        "said": [said.rank, said.kind] if said else None,
        "right": bool(said and said.rank == truth["rank"] and said.kind == truth["kind"]),
        "first_line": card.text().splitlines()[0] if card is not None else why_not,
    }


def section(graded: list[dict]) -> list[str]:
    lines = []
    for half in HALVES:
        mine = [g for g in graded if g["half"] == half]
        if not mine:
            continue
        right = sum(g["right"] for g in mine)
        lines += [f"**{half}**: {right} of {len(mine)} right", "", "| case | truth | the card named | right |"]
        lines.append("|---|---|---|---|")
        for g in mine:
            said = "-" if g["said"] is None else _cell(*g["said"])
            lines.append(f"| {g['case']} | {_cell(*g['truth'])} | {said} | {'yes' if g['right'] else '**no**'} |")
        lines.append("")
    held = [g for g in graded if g["half"] == "held-out"]
    if held:
        score = sum(g["right"] for g in held) / len(held)
        lines.append(goal_line(">= 90% right on the held-out half", score >= 0.9, f"{100 * score:.0f}%"))
    wrong_rank = [g for g in graded if g["said"] and g["said"][0] is not None and g["said"][0] != g["truth"][0]]
    lines.append(goal_line("no wrong rank named with confidence", not wrong_rank, f"{len(wrong_rank)} cases"))
    return lines


def _cell(rank, kind) -> str:
    return f"{'no one rank' if rank is None else f'rank {rank}'}, {kind}"
