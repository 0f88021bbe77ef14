"""`lab status`: what the lab runs now, read from the run directory (works from any shell)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab import recovery, runtimes
from lab.cli.flags import add_run_dir_option
from lab.errors import LabError
from lab.health import prom_health, prometheus
from lab.options import run_dir_from_args
from lab.runtimes import state as runstate


def register(sub) -> None:
    parser = sub.add_parser("status", help="show the lab's nodes and whether they run (exit 3: no lab)")
    parser.add_argument("--watch", action="store_true", help="a live view, redrawn every second, until Ctrl-C")
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run_dir = run_dir_from_args(args)
    if args.watch:
        from lab.cli.watch import watch

        return watch(run_dir)
    state = runstate.load(run_dir)
    if state is None:
        print("no lab is running")
        return 3
    topo = state.topology
    print(
        f"runtime {state.runtime} ({state.hosts} hosts), {topo.nodes} nodes x "
        f"{topo.nproc_per_node} workers, {topo.backend}, rendezvous "
        f"{topo.rdzv_backend} at {topo.rdzv_host}:{topo.rdzv_port} (recovery: {recovery.style_of(topo)})"
    )
    print(f"script {state.script} {' '.join(state.script_args)}".rstrip())
    try:
        nodes = runtimes.create(state.runtime, run_dir).attach()
    except LabError as e:  # the runtime's control plane is gone (a Ray head, a Docker daemon)
        print(f"  the nodes cannot be asked: {e}")
        print(f"  the ranks, from their events: {ranks_progress(run_dir.path / 'events')}")
        print_health(state.prometheus, run_dir.path)
        return 1
    for node in nodes:
        code = node.exit_code()
        what = "running" if code is None else f"exited {code}"
        print(f"  {node.name:<6} {node.address:<15} pid {node.pid}  {what:<10} log {node.log_path}")
    print_health(state.prometheus, run_dir.path)
    return 0


def ranks_progress(events_dir: Path) -> str:
    """Each rank's last word, read where every node writes (the run dir): how far the job got."""
    from lab.cli.watch import ranks_now  # the live view's reader (it imports rich: only when needed)

    ranks, now = ranks_now(events_dir), time.time()
    if not ranks:
        return "none recorded"
    return "; ".join(
        f"rank {r.rank} ended ({r.ended}, step {r.step})"
        if r.ended
        else f"rank {r.rank} at step {r.step}, {now - r.last_step_time:.0f} s ago"
        for r in ranks
    )


def print_health(url: str | None, run_path: Path) -> None:
    if not url:
        why = prometheus.INSTALL_HINT if prometheus.binary() is None else "started with --prometheus off"
        print(f"no Prometheus for this lab ({why})")
        return
    prom = prometheus.Prometheus(run_path / "prometheus", port=int(url.rsplit(":", 1)[1]))
    try:
        ranks, agents = prom_health.rank_health(prom), prom_health.agent_health(prom)
    except OSError as e:
        print(f"Prometheus at {url} does not answer ({e})")
        return
    print(f"health from Prometheus at {url}:")
    for agent in agents:
        print(
            f"  agent {agent['node']}: {'up' if agent['up'] == 1 else 'DOWN'}, worker group "
            f"{agent['state']}, restarts used {agent['restarts_used']}"
        )
    print(
        prom_health.format_ranks(ranks)
        if ranks
        else "  no rank exporter has registered (the trainer workload has them; ddp_train does not)"
    )
