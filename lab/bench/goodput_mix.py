"""A chaos campaign's ETTR projected from single-fault figures, beside the one it measured.

`lab bench goodput --chaos-json` projects each fault the campaign struck from what one fault
costs, by the same first-order model as the table at scale, and sets the projected ETTR beside
the measured one: where they part, the table names the kinds the model misses, and so what a
projection at 100,000 GPUs would miss too. The single-fault figures come twice: from a quiet
machine (what the table at scale uses) and from one as busy as the campaign's (the benches'
--load); the goal is judged like for like. A fault that starts processes costs 2-3x its quiet
figure beside 2 busy loops on 2 cores, while one survived in-process costs about the same. What
each kind costs, here:

    kill-worker, kill-after-save   in-process recovery (lab bench recovery's median)
    kill-in-regroup                two of them: the second death opens one more generation
    hang-worker                    the frozen-rank bound (a third of the campaign's process-group
                                   timeout, lab.inprocess.heartbeat), then in-process recovery
    kill-node                      node 0 (it holds the job's store): the job's end, the job
                                   started again (lab bench startup's netns start) and half a
                                   checkpoint period redone; another node: it comes back after
                                   NODE_BACK_AFTER_S, its agent starts (lab bench startup's agent
                                   stage) and asks for a round, every rank restarts from the
                                   checkpoint (a tuned restart) and half a checkpoint period is
                                   redone
    lose-store                     as kill-node of node 0
    partition-node                 the cut (PARTITION_S: the keepers judge each other lost within it),
                                   then every rank restarts from the checkpoint (a tuned restart)
                                   and half a checkpoint period is redone
    preempt-node                   the job's end, then the job started again (the checkpoint is
                                   taken at the stop)

The job's end is lab bench startup's `end` stage: a node preempted until every node has exited
(the others' ranks stop at the agreed step, every agent exits). A job started again waits for
it; projected from the start alone, a campaign's restarts came out 2-3 s short each. A lost
store's end is taken to be as long (its survivors see the loss at their next collective).

The measured recovery of a fault runs until every rank is two steps past where it struck
(lab.chaos.campaign.watch); both sides count the checkpoints' time alike.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from lab import files
from lab.bench import loaded
from lab.bench.result import goal_line
from lab.bench.startup_stages import END
from lab.chaos import PG_TIMEOUT_S
from lab.chaos.campaign import CKPT_EVERY, STEP_TIME_S
from lab.chaos.strikes import NODE_BACK_AFTER_S, PARTITION_S
from lab.inprocess.heartbeat import frozen_after

START_ROW = "lab up (netns hosts, no Prometheus)"  # lab bench startup's row for a job started on netns hosts
GOAL_POINTS = 2.0


def single_fault_costs(recovery: dict, start_s: float, agent_s: float, end_s: float) -> dict[str, float]:
    """Seconds each kind is projected to cost; kill-node's figure is for a node other than 0."""
    in_process, tuned = recovery["in-process"]["median_s"], recovery["tuned"]["median_s"]
    half_period = CKPT_EVERY * STEP_TIME_S / 2
    return {
        "kill-worker": in_process,
        "kill-after-save": in_process,
        "kill-in-regroup": 2 * in_process,
        "hang-worker": frozen_after(PG_TIMEOUT_S) + in_process,
        "kill-node": NODE_BACK_AFTER_S + agent_s + tuned + half_period,
        "kill-node of node 0": end_s + start_s + half_period,
        "partition-node": PARTITION_S + tuned + half_period,
        "preempt-node": end_s + start_s,
    }


def cost_kind(fault: dict, nproc_per_node: int) -> str:
    """The row of single_fault_costs a struck fault is projected by."""
    if fault["kind"] == "lose-store" or (
        fault["kind"] == "kill-node" and any(r < nproc_per_node for r in fault["ranks"])
    ):
        return "kill-node of node 0"
    return fault["kind"]


def project(ledger: dict, costs: dict[str, float]) -> dict:
    """The campaign's faults, each projected by its kind's cost and measured; the projected and measured ETTR."""
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


def measured_costs(recovery: dict | None, startup_json: Path, load: int = 0) -> dict[str, float] | str:
    """Each kind's cost from a recovery bench's styles and a startup bench's result at a load, or
    the line saying which is missing (and the bench that makes it)."""
    if recovery is None:
        return f"no {startup_json.with_name(loaded('recovery', load) + '.json')} (run `lab bench recovery`)"
    if not startup_json.is_file():
        return f"no {startup_json} (run `lab bench startup` first)"
    rows = json.loads(files.read_regular(startup_json, 16 << 20) or b"{}").get("figures", {})
    if START_ROW not in rows:
        return f"{startup_json} has no row {START_ROW!r}"
    agents = [run["agent"] for run in rows.get("stages", []) if run.get("agent") is not None]
    ends = [run[END] for run in rows.get("stages", []) if run.get(END) is not None]
    if not agents or not ends:
        stage = "agent start" if not agents else "job end"
        return f"{startup_json} has no {stage} among its stages (run `lab bench startup` again)"
    start_s = rows[START_ROW]["median_s"]
    return single_fault_costs(recovery, start_s, statistics.median(agents), statistics.median(ends))


def loaded_recovery(out_dir: Path, load: int) -> dict | None:
    """`lab bench recovery --load N`'s styles beside the quiet ones, or None where it was not run."""
    path = out_dir / f"{loaded('recovery', load)}.json"
    if not path.is_file():
        return None
    return json.loads(files.read_regular(path, 16 << 20) or b"{}").get("figures", {}).get("styles")


def section(chaos_json: str, ledger: dict, recovery: dict, startup_json: Path) -> tuple[list[str], dict | None]:
    """The markdown for the campaign's mix and its figures; a line saying what is missing instead.
    The goal is judged like for like: against the figures measured beside as many busy processes
    as the campaign had (`lab bench recovery --load N`, `lab bench startup --load N`) where they
    exist, else against the quiet ones, saying so."""
    quiet = measured_costs(recovery, startup_json)
    if isinstance(quiet, str):
        return [f"- The campaign's mix is not projected: {quiet}."], None
    load = int(ledger.get("load") or 0)
    mix = project(ledger, quiet)
    busy: dict[str, float] | str = "the campaign ran on a quiet machine"
    if load:
        startup_busy = startup_json.with_name(f"{loaded('startup', load)}.json")
        busy = measured_costs(loaded_recovery(startup_json.parent, load), startup_busy, load)
        if not isinstance(busy, str):
            mix["at_load"] = project(ledger, busy)
    judged = mix.get("at_load") or mix
    lines = [
        "",
        f"The chaos campaign's own mix ({chaos_json}), each fault projected from single-fault figures "
        f"(lab.bench.goodput_mix says how): on a quiet machine, and beside {load} busy process(es) as the "
        "campaign had them; beside what the campaign measured:",
        "",
        "| fault | struck | projected each, quiet | projected each, busy | measured median | projected total "
        "| measured total |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, row in mix["kinds"].items():
        at_load = mix["at_load"]["kinds"][kind]["projected_s"] if "at_load" in mix else None
        lines.append(
            f"| {kind} | {row['struck']} | {row['projected_s']:.2f} s | "
            f"{'-' if at_load is None else f'{at_load:.2f} s'} | {row['measured_median_s']:.2f} s "
            f"| {judged['kinds'][kind]['projected_s'] * row['struck']:.1f} s | {row['measured_total_s']:.1f} s |"
        )
    return lines + _verdict(mix, judged, load, busy), mix


def _verdict(mix: dict, judged: dict, load: int, busy: dict | str) -> list[str]:
    """The ETTRs side by side, where the model misses most, and the goal against the like-for-like projection."""
    gap = 100 * (judged["projected_ettr"] - judged["measured_ettr"])
    kind, row = max(
        judged["kinds"].items(), key=lambda kv: kv[1]["measured_total_s"] - kv[1]["projected_s"] * kv[1]["struck"]
    )
    at_load = (
        f", {100 * mix['at_load']['projected_ettr']:.1f}% from figures beside {load} busy" if "at_load" in mix else ""
    )
    lines = [
        "",
        f"- ETTR projected {100 * mix['projected_ettr']:.1f}% from quiet figures{at_load}, measured "
        f"{100 * mix['measured_ettr']:.1f}%; the model misses most on {kind} ({row['measured_median_s']:.2f} s "
        f"measured against {row['projected_s']:.2f} s projected, each).",
    ]
    if isinstance(busy, str) and load:
        lines.append(
            f"- Not projected beside {load} busy process(es): {busy}; `lab bench recovery --load {load}` and "
            f"`lab bench startup --load {load}` measure them. The goal is judged against the quiet figures."
        )
    against = f"figures beside {load} busy" if "at_load" in mix else "quiet figures"
    lines.append(
        goal_line(
            f"measured ETTR within {GOAL_POINTS:g} points of the projection for the same mix ({against})",
            abs(gap) <= GOAL_POINTS,
            f"{abs(gap):.1f} points {'above' if gap < 0 else 'below'} it",
        )
    )
    return lines
