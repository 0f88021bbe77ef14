"""A failed job's evidence, kept past teardown: what `lab why`'s card is drawn from.

`lab down` removes the nodes and their logs. When `lab run`'s job fails, the card is saved
(reports/why-TIME.json) and, beside it, the files the card was read from (reports/why-TIME/):
the ranks' and agents' event logs, the nodes' network probes, each node's workers file,
exit status and the last MiB of its log. The card can be drawn again from that folder
(`lab.why.card(folder)`), and the tests' recorded failures (tests/fixtures/why/) are such
folders.

The nodes can write where these files come from (a container's user, say), so each is read
only as a regular file, opened without following a link, and written anew under the reports.
"""

from __future__ import annotations

from pathlib import Path

from lab import files

LOG_TAIL_BYTES = 1 << 20
KEPT = (
    *("events/rank*.jsonl", "events/agent-*.jsonl", "events/net-*.jsonl"),
    *("nodes/*/workers.json", "nodes/*/node.log", "nodes/*/exit"),
)


def keep(run_dir: Path, into: Path) -> Path:
    """Copy the evidence of the job in run_dir into the folder `into` (made here); returns it."""
    for pattern in KEPT:
        for path in sorted(run_dir.glob(pattern)):
            kept = files.read_regular(path, LOG_TAIL_BYTES if path.name == "node.log" else None, tail=True)
            if kept is not None:
                files.write_text(into / path.relative_to(run_dir), kept.decode(errors="replace"))
    into.mkdir(parents=True, exist_ok=True)
    return into
