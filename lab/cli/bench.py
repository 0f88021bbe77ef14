"""`lab bench NAME`: the lab's benchmarks, each measured side by side with its reference.

    lab bench collectives | recovery | goodput | detection | diagnosis | stragglers | coordinators | startup
              | overhead | chaos | natural | scale | doctor
              [--out DIR]
    lab bench docs [--out DIR] [--output docs/benchmarks.md]

Each benchmark prints its progress and table, and saves NAME.json (its command, figures
and a Markdown section) in --out; `lab bench docs` writes the page from those files.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab import output_paths
from lab.bench import (
    chaos_campaign,
    collectives,
    coordinators,
    detection,
    diagnosis,
    doctor,
    goodput,
    natural,
    overhead,
    recovery,
    scale,
    startup,
    stragglers,
)
from lab.bench.docs import machine, write_page
from lab.options import Option

BENCHES = {
    "collectives": collectives,
    "recovery": recovery,
    "goodput": goodput,
    "detection": detection,
    "diagnosis": diagnosis,
    "natural": natural,
    "stragglers": stragglers,
    "coordinators": coordinators,
    "startup": startup,
    "overhead": overhead,
    "chaos": chaos_campaign,
    "scale": scale,
    "doctor": doctor,
}
OUT = Option("--out", "where results go (default %(default)s)", "bench-results")


def _sections(bench: str, module) -> list[str]:
    """A bench that publishes more than one section names them (lab bench chaos: per runtime and target)."""
    return module.sections() if hasattr(module, "sections") else [bench]


def register(sub) -> None:
    parser = sub.add_parser(
        "bench", help="measure collectives, recovery (and its goodput at scale), start-up and exporter overhead"
    )
    benches = parser.add_subparsers(dest="bench", required=True, parser_class=type(parser))
    for name, module in BENCHES.items():
        p = benches.add_parser(name, help=(module.__doc__ or "").splitlines()[0].split(": ", 1)[-1])
        module.add_arguments(p)
        OUT.add_to(p)
        p.set_defaults(handler=handle, module=module)
    docs = benches.add_parser("docs", help="write the benchmarks page from the saved results")
    OUT.but(help="where the results are (default %(default)s)").add_to(docs)
    docs.add_argument("--output", default="docs/benchmarks.md")
    docs.set_defaults(handler=handle_docs)


def handle(args: argparse.Namespace) -> int:
    out_dir = output_paths.output_dir(args.out, "--out") or Path("bench-results")  # "" or a link: one line
    result = args.module.run(args, out_dir)
    # Where and when: a page assembled from results of several days says so per section.
    where = machine()[0].removeprefix("- ")
    result.markdown = [f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {where}.", "", *result.markdown]
    path = result.save(out_dir)
    print("\n" + "\n".join(result.markdown))
    print(f"\nsaved {path}" + "".join(f", {out_dir / f}" for f in result.files))
    return 0


def handle_docs(args: argparse.Namespace) -> int:
    output = output_paths.output_file(args.output, "--output", make_folder=True)  # a device, a link or "": one line
    page = write_page(
        Path(args.out),
        output or Path("docs/benchmarks.md"),
        order=[name for bench, module in BENCHES.items() for name in _sections(bench, module)],
    )
    print(f"wrote {page}")
    return 0
