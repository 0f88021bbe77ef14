"""A failed job's evidence, kept past teardown: what `lab why`'s card is drawn from.

`lab down` removes the nodes and their logs. When `lab run`'s job fails, the card is saved
(reports/why-TIME.json) and, beside it, the files the card was read from (reports/why-TIME/):
the ranks' and agents' event logs, each node's workers file and the last MiB of its log. The
card can be drawn again from that folder (`lab.why.card(folder)`), and the tests' recorded
failures (tests/fixtures/why/) are such folders.

The nodes can write where these files come from (a container's user, say), so each is read
only as a regular file, opened without following a link, and written anew under the reports.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lab import files

LOG_TAIL_BYTES = 1 << 20
KEPT = ("events/rank*.jsonl", "events/agent-*.jsonl", "nodes/*/workers.json", "nodes/*/node.log")


def read_regular(path: Path, tail: int | None = None) -> str | None:
    """The file's text (its last `tail` bytes), or None when it is not a plain file of its own."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        if tail is not None and info.st_size > tail:
            f.seek(info.st_size - tail)
        return f.read().decode(errors="replace")


def keep(run_dir: Path, into: Path) -> Path:
    """Copy the evidence of the job in run_dir into the folder `into` (made here); returns it."""
    for pattern in KEPT:
        for path in sorted(run_dir.glob(pattern)):
            folders = path.relative_to(run_dir).parents
            if any((run_dir / folder).is_symlink() for folder in folders if folder.parts):
                continue  # a folder a node replaced with a link: never followed
            text = read_regular(path, LOG_TAIL_BYTES if path.name == "node.log" else None)
            if text is not None:
                files.write_text(into / path.relative_to(run_dir), text)
    into.mkdir(parents=True, exist_ok=True)
    return into
