"""What `lab doctor` found on hosts like a job's, run after that job failed to connect (lab up and
lab run do: lab.doctor.after_failure), kept in the run dir for the card (`lab why`) to quote."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lab import files

DOCTOR_FILE = "doctor.json"
# What a job says when its nodes cannot meet: gloo's full mesh, the rendezvous, the store, names.
CANNOT_CONNECT = re.compile(
    r"connectFullMesh|Connection refused|timed out connecting|Connect timeout|Rendezvous\w*Error|DistNetworkError"
    r"|DistStoreError|name resolution|Name or service not known|No such device"
)


def note(lines: list[str]) -> str:
    if not lines:
        return "lab doctor, run on hosts like the job's after it failed to connect, found nothing wrong with them"
    return "lab doctor, run on hosts like the job's after it failed to connect: " + " | ".join(lines)


def notes(run_dir: Path) -> list[str]:
    """The card's note from the run dir's doctor file, if the lab wrote one (never a link's target)."""
    text = files.read_text(run_dir / DOCTOR_FILE, 1 << 20)
    if not text:
        return []
    try:
        found = json.loads(text).get("found")
    except (ValueError, AttributeError):
        return []
    return [note([str(line) for line in found])] if isinstance(found, list) else []
