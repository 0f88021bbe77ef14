"""`lab bench collectives`: bandwidth of each collective across the lab's hosts, like nccl-tests.

Sweeps sizes (1K to 256M by default) for all_reduce, all_gather, reduce_scatter and
broadcast on a real lab job (one torchrun agent per host, gloo here, nccl on GPUs),
checks every result, and measures the ceilings in the same run: memory copy on one
host and one TCP stream between two hosts. Writes collectives.csv and collectives.png
(bus bandwidth against size, the ceilings drawn in) next to collectives.json.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

from lab import job, runtimes
from lab.bench import bandwidth, ceiling
from lab.bench.plots import figure
from lab.bench.result import BenchResult, this_command
from lab.errors import LabError
from lab.options import BACKEND, NODES, NPROC_PER_NODE, add_all
from lab.rundir import RunDir
from lab.runtimes import memory
from lab.runtimes.local import HOSTS
from lab.runtimes.local_node import LocalNode
from lab.topology import Topology

HEADLINE_SIZE = 64 << 20  # the yardstick: all_reduce at 64 MB
TCP_PORT = 29600


def add_arguments(p) -> None:
    add_all(p, (NODES, NPROC_PER_NODE, BACKEND, HOSTS))
    p.add_argument("--min-bytes", type=bandwidth.size_argument, default="1K")
    p.add_argument("--max-bytes", type=bandwidth.size_argument, default="256M")
    p.add_argument("--factor", type=int, default=4, help="size step (default %(default)s)")
    p.add_argument("--ops", default=",".join(bandwidth.OPS))
    p.add_argument(
        "--ceiling-bytes",
        type=bandwidth.size_argument,
        default="256M",
        help="bytes moved to measure the memory-copy and TCP ceilings",
    )
    p.add_argument("--inject-error", choices=bandwidth.OPS, help="self-test: rank 1 damages its result of OP")


def check_memory(world: int, largest: int, ceiling_bytes: int, available: int | None = None) -> None:
    """Refuse, before any job starts, sizes this machine cannot hold: the memory-copy ceiling
    holds two buffers of --ceiling-bytes; each rank holds its input, its output and, for
    all_gather, one buffer per rank of the largest size."""
    available = memory.available_mib() if available is None else available
    if available is None:
        return
    need = {
        "--ceiling-bytes": 2 * ceiling_bytes,
        "--max-bytes": world * (world + 2) * largest,
    }
    for flag, needed in need.items():
        if needed >> 20 > available * 0.8:
            raise LabError(
                f"{flag}: about {needed >> 20} MiB needed, {available} MiB available here: choose a smaller {flag}"
            )


def run(args, out_dir: Path) -> BenchResult:
    ops = args.ops.split(",")
    unknown = sorted(set(ops) - set(bandwidth.OPS))
    if unknown:
        raise LabError(f"unknown collective {unknown[0]!r} (one of {', '.join(bandwidth.OPS)})")
    topology = Topology(
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        backend=args.backend,
        agent_metrics_port=0,
        rank_metrics_port=0,
    )
    try:
        sizes = bandwidth.sweep(args.min_bytes, args.max_bytes, args.factor, topology.world_size)
    except ValueError as e:
        raise LabError(str(e)) from None
    check_memory(topology.world_size, max(sizes), args.ceiling_bytes)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = out_dir / "collectives-rows.jsonl"
    rows_path.unlink(missing_ok=True)
    worker_args = ["--sizes", ",".join(map(str, sizes)), "--ops", ",".join(ops), "--out", str(rows_path)]
    if args.inject_error:
        worker_args += ["--inject-error", args.inject_error]

    with tempfile.TemporaryDirectory(prefix="lab-bench-") as tmp:
        runtime = runtimes.create("local", RunDir(Path(tmp) / "run"), hosts=args.hosts, monitoring="off")
        try:
            topology, nodes = runtime.up(topology, str(Path(__file__).with_name("collectives_worker.py")), worker_args)
            codes = job.wait(nodes, job.LogFollower(nodes))
            if job.job_status(codes) != 0 or not rows_path.exists():
                raise LabError(f"the collectives job failed: node exit codes {codes}")
            print("measuring the ceilings: memory copy, TCP stream between node0 and node1", flush=True)
            memcpy = ceiling.memcpy_bandwidth(args.ceiling_bytes)
            near, far = nodes[0], nodes[1] if len(nodes) > 1 else nodes[0]
            assert isinstance(near, LocalNode) and isinstance(far, LocalNode)  # the local runtime's hosts
            tcp = ceiling.tcp_bandwidth(near.netns, far.netns, near.address, TCP_PORT, args.ceiling_bytes)
            hosts = "netns" if near.netns else "loopback"
        finally:
            runtime.down(grace_s=5)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    return report(rows, memcpy, tcp, hosts, topology, out_dir)


def report(rows: list[dict], memcpy: float, tcp: float, hosts: str, topology: Topology, out_dir: Path) -> BenchResult:
    csv_path, png_path = out_dir / "collectives.csv", out_dir / "collectives.png"
    write_csv(rows, csv_path)
    plot(rows, memcpy, tcp, png_path)
    table = ["| op | size | time | algbw GB/s | busbw GB/s |", "|---|---|---|---|---|"]
    for r in rows:
        if r["error"]:
            table.append(f"| {r['op']} | {bandwidth.human(r['bytes'])} | | **error** | {r['error']} |")
        else:
            table.append(
                f"| {r['op']} | {bandwidth.human(r['bytes'])} | {r['seconds'] * 1e3:.3f} ms | "
                f"{r['algbw'] / 1e9:.3f} | {r['busbw'] / 1e9:.3f} |"
            )
    errors = [r for r in rows if r["error"]]
    headline = next(
        (r for r in rows if r["op"] == "all_reduce" and r["bytes"] == HEADLINE_SIZE and not r["error"]), None
    )
    figures = {
        "memcpy_GBps": memcpy / 1e9,
        "tcp_GBps": tcp / 1e9,
        "errors": len(errors),
        "hosts": hosts,
        "ranks": topology.world_size,
        "backend": topology.backend,
    }
    lines = [
        f"{topology.nodes} hosts ({hosts}) x {topology.nproc_per_node} ranks, {topology.backend}. "
        f"Ceilings measured in the same run: memory copy on one host {memcpy / 1e9:.2f} GB/s, "
        f"one TCP stream between two hosts {tcp / 1e9:.2f} GB/s.",
        "",
        *table,
        "",
    ]
    if headline:
        figures["all_reduce_64M_busbw_GBps"] = headline["busbw"] / 1e9
        figures["all_reduce_64M_fraction_of_tcp"] = headline["busbw"] / tcp
        lines.append(
            f"all_reduce at 64M: bus bandwidth {headline['busbw'] / 1e9:.3f} GB/s = "
            f"{100 * headline['busbw'] / tcp:.0f}% of the TCP stream, "
            f"{100 * headline['busbw'] / memcpy:.0f}% of memory copy."
        )
    if errors:
        lines.append(f"{len(errors)} rows had wrong results: reported as errors, not bandwidths.")
    lines += ["", f"![bus bandwidth against size]({png_path.name})"]
    return BenchResult("collectives", this_command(), lines, figures, [csv_path.name, png_path.name])


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["op", "bytes", "ranks", "reps", "seconds", "algbw_GBps", "busbw_GBps", "error"])
        for r in rows:
            writer.writerow(
                [
                    r["op"],
                    r["bytes"],
                    r["ranks"],
                    r["reps"],
                    f"{r['seconds']:.9g}",
                    gigabytes(r["algbw"]),
                    gigabytes(r["busbw"]),
                    r["error"] or "",
                ]
            )


def plot(rows: list[dict], memcpy: float, tcp: float, path: Path) -> None:
    labels = {"xlabel": "message size (bytes)", "ylabel": "bus bandwidth (GB/s)"}
    with figure(path, title="collective bus bandwidth (nccl-tests definitions)", **labels) as ax:
        for op in dict.fromkeys(r["op"] for r in rows):
            good = [r for r in rows if r["op"] == op and not r["error"]]
            ax.plot([r["bytes"] for r in good], [r["busbw"] / 1e9 for r in good], marker="o", label=op)
        ax.axhline(memcpy / 1e9, color="grey", linestyle="--", label=f"memory copy {memcpy / 1e9:.1f} GB/s")
        ax.axhline(tcp / 1e9, color="black", linestyle=":", label=f"TCP stream {tcp / 1e9:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")


def gigabytes(value: float | None) -> str:
    return "" if value is None else f"{value / 1e9:.9g}"
