"""`lab why [--run-dir DIR] [--json]`: the first-failure card of the lab's job (lab.why.card).

From the run dir's events and node logs while the lab's hosts are up (`lab up` keeps them);
after `lab run` or `lab down`, from the card `lab run` saved in the run dir's reports when
its job failed.
"""

from __future__ import annotations

import argparse
import errno
import json
import time
from pathlib import Path

from lab import files
from lab.cli.flags import add_run_dir_option
from lab.errors import LabError
from lab.options import run_dir_from_args
from lab.rundir import RunDir
from lab.why import card as why
from lab.why import evidence
from lab.why.failure_card import Card


def register(sub) -> None:
    parser = sub.add_parser("why", help="which rank failed first, how and where, and what the others did next")
    parser.add_argument("--as-json", action="store_true", dest="json", help="print the card as JSON")
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


def save(run_dir: RunDir, card: Card) -> str:
    """Keep the card where `lab down` leaves it (the reports), and beside it the evidence it
    was drawn from (lab.why.evidence); returns the card's path."""
    path = run_dir.reports_dir() / f"why-{time.strftime('%Y%m%d-%H%M%S')}.json"
    files.write_text(path, json.dumps({**card.to_json(), "text": card.text()}, indent=2) + "\n")
    evidence.keep(run_dir.path, path.with_suffix(""))
    return str(path)


def save_or_say(run_dir: RunDir, card: Card) -> str:
    """Where the card was saved, or why it could not be (a full disk, say): never an error that
    hides the card itself, which the caller has printed already."""
    try:
        return f"saved as {save(run_dir, card)}; `lab why` prints it again"
    except OSError as e:
        full = " (the disk is full: free some space, then `lab why` draws it again before `lab down`)"
        return f"not saved: {e.strerror or e}{full if e.errno == errno.ENOSPC else ''}"


def handle(args: argparse.Namespace) -> int:
    run_dir = run_dir_from_args(args)
    if (run_dir.path / "events").is_dir() or (run_dir.path / "nodes").is_dir():
        card = why.card(run_dir.path)
        running = still_running(run_dir)
        if running:
            card.notes.insert(0, f"the job is still running ({', '.join(running)}): this is what it recorded so far")
        print(json.dumps(card.to_json(), indent=2) if args.json else card.text(), end="" if not args.json else "\n")
        return 0
    saved = sorted(run_dir.reports.glob("why-*.json")) if run_dir.is_marked() else []
    if not saved:
        raise LabError(
            f"nothing to explain in {run_dir.path}: no job's events or logs, and no saved card "
            "(`lab run` saves one when its job fails)"
        )
    record = saved_card(saved[-1])
    print(json.dumps(record, indent=2) if args.json else f"(saved {saved[-1].name})\n{record['text']}", end="")
    return 0


def saved_card(path: Path) -> dict:
    raw = files.read_regular(path, 10 * 2**20)
    try:
        record = json.loads(raw.decode(errors="replace")) if raw is not None else None
    except ValueError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise LabError(f"the saved card {path} is not one the lab wrote (not a plain file of JSON with a card's text)")
    return record


def still_running(run_dir: RunDir) -> list[str]:
    """The lab's nodes still running (their names), as far as its runtime can tell now."""
    from lab import runtimes

    try:
        return [node.name for node in runtimes.for_run_dir(run_dir).attach() if node.exit_code() is None]
    except LabError:
        return []
