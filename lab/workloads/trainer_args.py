"""The trainer's flags (lab/workloads/trainer.py), with the defaults the lab's nodes set
through their environment (lab.nodeenv)."""

from __future__ import annotations

import argparse

from lab.nodeenv import NodeEnv
from lab.topology import SAVES
from lab.workloads import sharded


def parse_args(argv=None) -> argparse.Namespace:
    wire = NodeEnv.parse()  # what the lab set on this node (lab.nodeenv)
    p = argparse.ArgumentParser(description="the lab's resumable DDP trainer")
    p.add_argument("--steps", type=int, default=100, help="train until this step")
    p.add_argument("--step-time", type=float, default=0.0, help="pace each step to at least this many seconds")
    p.add_argument("--start-delay", type=float, default=0.0, help="wait this long after joining, before a step")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint interval in steps (0: never)")
    p.add_argument("--ckpt-dir", default=wire.ckpt_dir, help="where checkpoints live (default: none)")
    p.add_argument(
        "--ckpt-shared",
        action="store_true",
        default=wire.ckpt_shared,
        help="every node sees the same --ckpt-dir (one shared volume): only rank 0 writes. Without it "
        "each node keeps its own copy, and a node that lacks the newest receives it from a peer",
    )
    p.add_argument("--events-dir", default=wire.events_dir, help="where rankN.jsonl event logs go")
    p.add_argument(
        "--metrics-port-base",
        type=int,
        default=wire.metrics_port_base or 0,
        help="serve /metrics on this port + rank (0: no exporter)",
    )
    p.add_argument("--targets-dir", default=wire.targets_dir, help="Prometheus file_sd directory")
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--width", type=int, default=64, help="hidden units (a wider model makes longer steps)")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's gradient bucket size (default 25)")
    p.add_argument(
        "--parallel",
        choices=sharded.PARALLEL,
        default=wire.parallel or "ddp",
        help="ddp: the whole model on every rank (default); fsdp2: each layer sharded (fully_shard), saved through DCP",
    )
    p.add_argument(
        "--save",
        choices=SAVES,
        default="sync",
        help="fsdp2's DCP checkpoints: sync (in the step) or async (written from a thread, committed at the next)",
    )
    p.add_argument("--check-loss", action="store_true", help="stop on a NaN or infinite loss, naming rank and step")
    p.add_argument(
        "--ab-monitoring",
        type=int,
        default=0,
        metavar="K",
        help="measure monitoring's cost: switch it off and on every K steps, print both step times",
    )
    args = p.parse_args(argv)
    if args.steps < 1 or min(args.ckpt_every, args.step_time, args.start_delay, args.ab_monitoring) < 0:
        p.error("--steps must be >= 1, --ckpt-every, --step-time, --start-delay and --ab-monitoring >= 0")
    if args.ab_monitoring and args.steps < 6 * args.ab_monitoring:
        p.error("--ab-monitoring K needs --steps of at least 6 K (two blocks of warm-up, then both halves)")
    if why := sharded.refused(args, in_process=False):
        p.error(why)
    return args
