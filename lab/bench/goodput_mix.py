"""A chaos campaign's ETTR projected from single-fault figures, beside the one it measured.

`lab bench goodput --chaos-json` projects each fault the campaign struck from what one fault
costs on a quiet machine, by the same first-order model as the table at scale, and sets the
projected ETTR beside the measured one: where they part, the table names the kinds the model
misses, and so what a projection at 100,000 GPUs would miss too. What each kind costs, here:

    kill-worker, kill-after-save   in-process recovery (lab bench recovery's median)
    kill-in-regroup                two of them: the second death opens one more generation
    hang-worker                    the frozen-rank bound (a third of the campaign's process-group
                                   timeout, lab.inprocess.heartbeat), then in-process recovery
    kill-node                      node 0 (it holds the job's store): the job started again
                                   (lab bench startup's netns start) and half a checkpoint period
                                   redone; another node: it comes back after NODE_BACK_AFTER_S,
                                   every rank restarts from the checkpoint (a tuned restart) and
                                   half a checkpoint period is redone
    lose-store                     as kill-node of node 0
    partition-node                 the cut (PARTITION_S: the keepers judge each other lost within it),
                                   then every rank restarts from the checkpoint (a tuned restart)
                                   and half a checkpoint period is redone
    preempt-node                   the job started again (the checkpoint is taken at the stop)

The measured recovery of a fault runs until every rank is two steps past where it struck
(lab.chaos.campaign.watch); both sides count the checkpoints' time alike.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from lab import files
from lab.bench.result import goal_line
from lab.chaos import PG_TIMEOUT_S
from lab.chaos.campaign import CKPT_EVERY, STEP_TIME_S
from lab.chaos.strikes import NODE_BACK_AFTER_S, PARTITION_S
from lab.inprocess.heartbeat import frozen_after

START_ROW = "lab up (netns hosts, no Prometheus)"  # lab bench startup's row for a job started on netns hosts
GOAL_POINTS = 2.0


def single_fault_costs(recovery: dict, start_s: float) -> dict[str, float]:
    """Seconds each kind is projected to cost; kill-node's figure is for a node other than 0."""
    in_process, tuned = recovery["in-process"]["median_s"], recovery["tuned"]["median_s"]
    half_period = CKPT_EVERY * STEP_TIME_S / 2
    return {
        "kill-worker": in_process,
        "kill-after-save": in_process,
        "kill-in-regroup": 2 * in_process,
        "hang-worker": frozen_after(PG_TIMEOUT_S) + in_process,
        "kill-node": NODE_BACK_AFTER_S + tuned + half_period,
        "kill-node of node 0": start_s + half_period,
        "partition-node": PARTITION_S + tuned + half_period,
        "preempt-node": start_s,
    }


def cost_kind(fault: dict, nproc_per_node: int) -> str:
    """The row of single_fault_costs a struck fault is projected by."""
    if fault["kind"] == "lose-store" or (
        fault["kind"] == "kill-node" and any(r < nproc_per_node for r in fault["ranks"])
    ):
        return "kill-node of node 0"
    return fault["kind"]


def project(ledger: dict, recovery: dict, start_s: float) -> dict:
    """The campaign's faults, each projected and measured; the projected and measured ETTR."""
    costs = single_fault_costs(recovery, start_s)
    struck = [f for f in ledger["faults"] if f["time"] is not None]
    nproc = max(1, ledger["world_size"] // 2)  # the campaign's 2 nodes (lab.chaos: drill_job)
    kinds: dict[str, dict] = {}
    for fault in struck:
        row = kinds.setdefault(cost_kind(fault, nproc), {"struck": 0, "measured": []})
        row["struck"] += 1
        row["measured"].append(fault["recovered_s"] if fault["recovered_s"] is not None else fault["bound_s"])
    wall = ledger["wall_s"]
    projected_s = sum(costs[k] * row["struck"] for k, row in kinds.items())
    return {
        "kinds": {
            k: {
                "struck": row["struck"],
                "projected_s": costs[k],
                "measured_median_s": statistics.median(row["measured"]),
                "measured_total_s": sum(row["measured"]),
            }
            for k, row in sorted(kinds.items())
        },
        "projected_ettr": max(0.0, (wall - projected_s - ledger["checkpoint_s"]) / wall),
        "measured_ettr": ledger["ettr"],
    }


def section(chaos_json: str, ledger: dict, recovery: dict, startup_json: Path) -> tuple[list[str], dict | None]:
    """The markdown for the campaign's mix and its figures; a line saying what is missing instead."""
    if not startup_json.is_file():
        return [f"- The campaign's mix is not projected: no {startup_json} (run `lab bench startup` first)."], None
    rows = json.loads(files.read_regular(startup_json, 16 << 20) or b"{}").get("figures", {})
    if START_ROW not in rows:
        return [f"- The campaign's mix is not projected: {startup_json} has no row {START_ROW!r}."], None
    mix = project(ledger, recovery, rows[START_ROW]["median_s"])
    gap = 100 * (mix["projected_ettr"] - mix["measured_ettr"])
    lines = [
        "",
        f"The chaos campaign's own mix ({chaos_json}), each fault projected from single-fault figures on a quiet "
        "machine (lab.bench.goodput_mix says how), beside what the campaign measured on its busy one:",
        "",
        "| fault | struck | projected each | measured median | projected total | measured total |",
        "|---|---|---|---|---|---|",
    ]
    for kind, row in mix["kinds"].items():
        lines.append(
            f"| {kind} | {row['struck']} | {row['projected_s']:.2f} s | {row['measured_median_s']:.2f} s "
            f"| {row['projected_s'] * row['struck']:.1f} s | {row['measured_total_s']:.1f} s |"
        )
    worst = max(mix["kinds"].items(), key=lambda kv: kv[1]["measured_total_s"] - kv[1]["projected_s"] * kv[1]["struck"])
    lines += [
        "",
        f"- ETTR projected {100 * mix['projected_ettr']:.1f}%, measured {100 * mix['measured_ettr']:.1f}%; the "
        f"model misses most on {worst[0]} ({worst[1]['measured_median_s']:.2f} s measured against "
        f"{worst[1]['projected_s']:.2f} s projected, each).",
        goal_line(
            f"measured ETTR within {GOAL_POINTS:g} points of the projection for the same mix",
            abs(gap) <= GOAL_POINTS,
            f"{abs(gap):.1f} points {'above' if gap < 0 else 'below'} it",
        ),
    ]
    return lines, mix
