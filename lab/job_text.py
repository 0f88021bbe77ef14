"""Text a job wrote (an exception, a finding quoting it), made fit for XML, HTML and markdown.

A script's exception may be coloured (ANSI escapes) or carry any control character; XML 1.0
forbids most of them (one made a JUnit report unparseable), and in a terminal or a page they
can rewrite what a reader sees. Every record the reports render passes through `cleaned`
first; HTML is escaped on top of that, and a markdown table cell is kept to one line."""

from __future__ import annotations

import re
from typing import Any

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# C0 controls but tab and newline, DEL, C1 controls, lone surrogates, and the two non-characters
# XML 1.0 excludes.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def plain(text: str) -> str:
    """text without ANSI escapes or control characters (tab and newline kept; \\r dropped)."""
    return CONTROL.sub("", ANSI.sub("", text))


def cleaned(value: Any) -> Any:
    """A copy of a JSON-like record with every string in it made plain."""
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, dict):
        return {cleaned(k): cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cleaned(v) for v in value]
    return value


def markdown_cell(text: str) -> str:
    """One table cell: one line, no column break, no HTML a renderer would act on."""
    one = " ".join(plain(text).split())
    return one.replace("|", "/").replace("<", "&lt;").replace(">", "&gt;")
