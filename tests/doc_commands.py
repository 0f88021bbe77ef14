"""The commands the docs (DOCS) show a reader, in the order they show them.

A command is a line of a fenced block that starts with a program the reader types (`make`,
`lab`, `pytest`, `.venv/bin/...`, `python3.11`, `torchrun`, `kubectl`, `docker`), its `\\`
continuations joined and its trailing `# comment` kept apart (the comment often quotes
what the command prints), and each lesson of the README's learning path as `lab exercise
run NAME`. Blocks that show output (the result table, a first-failure card) are kept as
quotes, to be matched against what the commands print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

DOCS = ("README.md", "docs/exercises.md", "docs/ci.md", "docs/chaos.md", "docs/doctor.md")
PROGRAM = re.compile(r"(make|lab|pytest|\.venv/bin/\S+|python3(\.\d+)?|torchrun|kubectl|docker)(\s|$)")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
LESSON = re.compile(r"^\d+\. `([a-z0-9-]+)`", re.M)


@dataclass(frozen=True)
class DocCommand:
    doc: str
    line: int
    text: str  # as the reader types it
    comment: str  # what the doc says beside it ("# losses 1.0865 ...")


def commands(doc: str) -> list[DocCommand]:
    text = (REPO / doc).read_text()
    found: list[tuple[int, DocCommand]] = []
    for block in FENCE.finditer(text):
        first_line = text.count("\n", 0, block.start(1)) + 1
        found += [(cmd.line, cmd) for cmd in _block_commands(doc, block.group(1), first_line)]
    if doc == "README.md":
        path = _section(text, "## Learning path")
        offset = text.count("\n", 0, text.index(path))
        for match in LESSON.finditer(path):
            line = offset + path.count("\n", 0, match.start()) + 1
            found.append((line, DocCommand(doc, line, f"lab exercise run {match.group(1)}", "")))
    return [cmd for _, cmd in sorted(found, key=lambda pair: pair[0])]


def quotes(doc: str) -> list[str]:
    """The fenced blocks that hold no command: output the doc shows the reader."""
    text = (REPO / doc).read_text()
    return [b.group(1) for b in FENCE.finditer(text) if not _block_commands(doc, b.group(1), 0)]


def _block_commands(doc: str, block: str, first_line: int) -> list[DocCommand]:
    out: list[DocCommand] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(block.splitlines(), first_line):
        line = raw.strip()
        if not pending:
            if not PROGRAM.match(line):
                continue
            start = number
        pending.append(line.rstrip("\\").strip())
        if line.endswith("\\"):
            continue
        joined = " ".join(pending)
        pending = []
        command, _, comment = joined.partition("  #")
        out.append(DocCommand(doc, start, command.strip(), comment.strip()))
    return out


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def all_commands() -> list[DocCommand]:
    return [cmd for doc in DOCS for cmd in commands(doc)]


def names_of_tests(path: Path) -> set[str]:
    return set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
