"""matrix.html: one self-contained page (inline style, timelines as data: URIs), no script, no fetch."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from lab import job_text

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.4em 0.6em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
tr.pass td.verdict { background: #d9f2d9; }
tr.fail td.verdict, tr.error td.verdict { background: #f8d7d7; }
td.timeline img { max-width: 420px; }
ul { margin: 0; padding-left: 1.2em; }
"""


def cell_texts(row: dict[str, Any]) -> list[str]:
    """restarts, work redone, recovery seconds and progress source, as table cells."""
    redone = row["work_redone"]
    return [
        "" if row["restarts"] is None else str(row["restarts"]),
        f"{redone['count']} {redone['unit']}(s)" if redone else "",
        "" if row["recovery_s"] is None else f"{row['recovery_s']:.1f}",
        row["progress_source"] or "",
    ]


def _timeline(path: str | None) -> str:
    if not path or not Path(path).is_file():
        return "no timeline (no step signal)"
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img alt="timeline" src="data:image/png;base64,{data}">'


def _checks(checks: list[dict]) -> str:
    items = "".join(
        f"<li>{'ok' if c['ok'] else 'FAIL'}: {escape(c['name'])}"
        f"{': ' + escape(c['detail']) if c.get('detail') else ''}</li>"
        for c in checks
    )
    return f"<ul>{items}</ul>" if items else ""


def html(record: dict[str, Any]) -> str:
    record = job_text.cleaned(record)  # then escaped, as it is written
    title = f"Fault matrix: {Path(record['script']).name}"
    rows = []
    for row in record["rows"]:
        cells = "".join(f"<td>{escape(text)}</td>" for text in cell_texts(row))
        rows.append(
            f'<tr class="{escape(row["verdict"])}"><td>{escape(row["fault"])}</td>'
            f'<td class="verdict">{escape(row["verdict"])}</td>{cells}'
            f"<td>{escape(row['finding'])}{_checks(row['checks'])}</td>"
            f'<td class="timeline">{_timeline(row["timeline"])}</td></tr>'
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}: <span id="verdict">{escape(record["verdict"].upper())}</span></h1>
<p>{escape(record["script"])} {escape(" ".join(record["script_args"]))} &middot; {record["nodes"]} nodes x
{record["nproc_per_node"]} workers on the {escape(record["runtime"])} runtime</p>
<table id="matrix">
<thead><tr><th>fault</th><th>verdict</th><th>restarts</th><th>work redone</th><th>recovery s</th>
<th>progress from</th><th>finding</th><th>timeline</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""
