"""`lab bench scale`: in-process recovery's store protocol at 256 to 16,384 simulated ranks.

    lab bench scale [--ranks 256,1024,4096,16384] [--per-node 8] [--keep-s 5]

Each world size runs lab.bench.scale_sim in a network namespace of its own (so it needs root,
as the netns hosts do): simulated ranks regroup through a real TCPStore, and simulated keepers
(one a node) beat, judge each other and poll for rounds, with the lab's own code. The table
gives the regroup's stages (every rank heard the new generation, counted in, read the group's
id), the store calls per rank, the keepers' calls a second and the longest gap between two of a
keeper's beats (past the keepers' silent_s, 5 s, it would be judged lost: false losses), and
the namespace's TCP segments sent again and retransmission timeouts during the regroup (a
stall there is the kernel's, not the protocol's). The growth law of each is fitted between
the two largest sizes (time ~ N^k).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from lab.bench.result import BenchResult, goal_line, this_command
from lab.errors import LabError

DEFAULT_RANKS = "256,1024,4096,16384"
PROJECTED = (1_024, 16_384, 100_000)
REPO = Path(__file__).resolve().parents[2]


def add_arguments(p) -> None:
    p.add_argument("--ranks", default=DEFAULT_RANKS, help="the world sizes, comma-separated (default %(default)s)")
    p.add_argument("--per-node", type=int, default=8, help="ranks a node, one keeper each (default %(default)s)")
    p.add_argument("--keep-s", type=float, default=5.0, help="how long the keepers run (default %(default)s)")


def world_sizes(text: str, per_node: int) -> list[int]:
    """--ranks as whole numbers, each a multiple of --per-node with at least two nodes; one line if not."""
    if per_node < 1:
        raise LabError(f"--per-node must be at least 1, got {per_node}")
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise LabError(f"--ranks {text!r}: world sizes are whole numbers, like {DEFAULT_RANKS}") from None
    wrong = [n for n in sizes if n < 2 * per_node or n % per_node]
    if not sizes or wrong:
        raise LabError(f"--ranks: each size is a multiple of --per-node {per_node}, two nodes or more; not {wrong}")
    return sorted(set(sizes))


def simulate(ranks: int, per_node: int, keep_s: float) -> dict:
    """One world size, in a network namespace of its own (lab.bench.scale_sim says why)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        raise LabError("lab bench scale runs its store in a network namespace of its own: run it as root")
    sim = shlex.join([sys.executable, "-m", "lab.bench.scale_sim", "--ranks", str(ranks), "--per-node", str(per_node),
                      "--keep-s", str(keep_s)])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", f"ip link set lo up && exec {sim}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabError(f"the simulation of {ranks} ranks failed ({done.returncode}): {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def growth(rows: list[dict], key: str, size: str = "ranks") -> float | None:
    """k in value ~ size^k, between the two largest sizes."""
    if len(rows) < 2 or rows[-2][key] <= 0 or rows[-1][key] <= 0:
        return None
    return math.log(rows[-1][key] / rows[-2][key]) / math.log(rows[-1][size] / rows[-2][size])


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| ranks | nodes | all heard s | all counted in s | regroup s | store calls a rank | keepers' calls/s "
        "| a keeper's calls/s | longest beat gap s | false losses | TCP resends / timeouts in the regroup |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            f"{r['ranks']:,}",
            f"{r['nodes']:,}",
            f"{r['notice_s']:.3f}",
            f"{r['counted_in_s']:.3f}",
            f"{r['regroup_s']:.3f}",
            f"{r['calls_per_rank']:.2f}",
            f"{r['calls_per_s']:,.0f}",
            f"{r['calls_per_s'] / r['nodes']:.1f}",
            f"{r['worst_beat_gap_s']:.2f}",
            str(r["false_losses"]),
            "{RetransSegs} / {TCPTimeouts}".format(
                **{"RetransSegs": "?", "TCPTimeouts": "?", **r["tcp_during_regroup"]}
            ),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def slowest(row: dict) -> str:
    """The stage of a regroup that took longest: hearing of it, counting in, or starting the group."""
    spans = {
        "hearing of the new generation": row["notice_s"],
        "counting in": row["counted_in_s"] - row["notice_s"],
        "starting the group (every rank reads rank 0's id)": row["regroup_s"] - row["counted_in_s"],
    }
    name = max(spans, key=lambda k: spans[k])
    return f"{name}, {spans[name]:.2f} s of {row['regroup_s']:.2f}"


def projection(rows: list[dict], per_node: int) -> list[str]:
    """What the counted calls cost at the store's measured rate, here and past this machine: the
    store serves one call after another, so that is the protocol's own floor, without threads."""
    rate = min(r["store_calls_per_s"] for r in rows)
    calls, per_keeper = rows[-1]["calls_per_rank"], rows[-1]["calls_per_s"] / rows[-1]["nodes"]
    regroups = ", ".join(f"{n:,} ranks {calls * n / rate:.2f} s" for n in PROJECTED)
    keepers = ", ".join(f"{n:,} ranks {100 * per_keeper * n / per_node / rate:.0f}%" for n in PROJECTED)
    saturated = rate / per_keeper * per_node
    return [
        f"- The store served {rate:,.0f} calls a second here (64 clients adding at once). At that rate a "
        f"regroup's calls alone take: {regroups}; the keepers' steady calls take this share of the store: "
        f"{keepers}. The keepers would fill the store by themselves at {saturated:,.0f} ranks ({per_keeper:.0f} "
        "calls a second each: its beat, the log of lost keepers and the two it watches, every half second, and "
        "its poll for rounds, once a second with nothing amiss: ten a second until 2026-12-06).",
    ]


def law(k: float | None) -> str:
    return "n/a" if k is None else f"N^{k:.2f}"


def run(args, out_dir: Path) -> BenchResult:
    sizes = world_sizes(args.ranks, args.per_node)
    if args.keep_s <= 0:
        raise LabError(f"--keep-s must be above 0, got {args.keep_s}")
    rows = []
    for ranks in sizes:
        print(f"simulating {ranks:,} ranks on {ranks // args.per_node:,} nodes...", flush=True)
        rows.append(simulate(ranks, args.per_node, args.keep_s))
        print(
            f"  regroup {rows[-1]['regroup_s']:.3f} s; keepers {rows[-1]['calls_per_s']:,.0f} store calls/s", flush=True
        )
    regroup_k, keepers_k = growth(rows, "regroup_s"), growth(rows, "calls_per_s")
    per_keeper = [r["calls_per_s"] / r["nodes"] for r in rows]
    false_losses = sum(r["false_losses"] for r in rows)
    markdown = [
        f"In-process recovery's store protocol, simulated: {', '.join(f'{n:,}' for n in sizes)} ranks at "
        f"{args.per_node} a node (threads with their own store clients, against one real TCPStore; "
        "lab.bench.scale_sim). Store calls are counted exactly; times are this 2-core machine's, "
        "where the simulated ranks' own threads share the cores with the store.",
        "",
        *table(rows),
        "",
        f"- Growth between the two largest sizes: all heard {law(growth(rows, 'notice_s'))}, all counted in "
        f"{law(growth(rows, 'counted_in_s'))}, regroup {law(regroup_k)}; the keepers' store calls "
        f"{law(keepers_k)}, a keeper's own {min(per_keeper):.1f} to {max(per_keeper):.1f} a second.",
        *projection(rows, args.per_node),
        f"- The store calls are linear in the ranks ({rows[-1]['calls_per_rank']:.0f} a rank at every size, all "
        "served one after another by node 0's store), and the slowest stage is named by the table: "
        f"{slowest(rows[-1])} at {rows[-1]['ranks']:,} ranks. Times that grow faster than the calls are this "
        "machine's: its threads waking on two cores, and where the last column is not 0, TCP sending again. "
        "Counting a node's ranks in through its keeper would make the calls linear in the nodes.",
        goal_line(
            "a keeper's store calls do not grow with the nodes",
            max(per_keeper) <= 2 * min(per_keeper),
            f"{min(per_keeper):.1f} to {max(per_keeper):.1f} a second",
        ),
        goal_line(
            f"no keeper judged lost while all beat (silent_s {rows[0]['silent_s']:g} s)",
            false_losses == 0,
            f"{false_losses} false loss(es); longest beat gap {max(r['worst_beat_gap_s'] for r in rows):.2f} s",
        ),
    ]
    figures = {"per_node": args.per_node, "rows": rows, "regroup_growth": regroup_k, "keeper_calls_growth": keepers_k}
    return BenchResult("scale", this_command(), markdown, figures)
