"""`lab bench goodput`: the lab's measured recovery, projected to 1k, 16k and 100k GPUs.

    lab bench goodput [--out DIR] [--recovery-json FILE] [--checkpoint-s S] [--gpu-mttf-hours H]

Reads what `lab bench recovery` measured (its recovery.json: kill-to-first-step per style
and the trainer's checkpoint save time) and computes the effective training time ratio
(ETTR, the share of wall time that ends up as kept training) of a job of N GPUs:

    ETTR(T) = T / (T + C) * (1 - L / M)

T: the checkpoint interval (training between saves), C: the time a save blocks training,
M: the job's mean time to failure, L: what one failure costs, the recovery time R plus
the work since the last checkpoint, (T + C) / 2 on average. This is the first-order model
of Young (1974) and Daly (2006); the optimal T is near sqrt(2 C M), and the bench finds it
numerically. In-process recovery keeps the survivors' state, so a failure costs R plus
the step in flight, not half an interval.

M comes from a published failure count, assumed to scale as 1/N (independent failures,
as in Kokolis et al.'s projections for Meta's research clusters): the Llama 3 405B
pre-training run had 419 unexpected interruptions in 54 days on 16,384 H100 GPUs (The
Llama 3 Herd of Models, Meta, 2024, section 3.3.4), one per 3.1 hours, which is a GPU
mean time to failure of 16,384 x 54 x 24 / 419 = 50,677 GPU-hours.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lab import files
from lab.bench import goodput_mix
from lab.bench.plots import figure
from lab.bench.result import BenchResult, this_command
from lab.errors import LabError

LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_UNEXPECTED_INTERRUPTIONS = 16_384, 54, 419
GPU_MTTF_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24 / LLAMA3_UNEXPECTED_INTERRUPTIONS
SCALES = (1_024, 16_384, 100_000)
# Assumed where no campaign measured it: Llama 3's interruptions were mostly hardware (GPUs, host
# memory, network), and a node whose GPU is gone has no spare GPU for its rank: half of them, at
# least, take a node down, which only a restart (onto a replacement node) recovers.
DEFAULT_FALLBACK_SHARE = 0.5
STYLES = ("bare torchrun", "tuned", "in-process")
SOURCES = [
    "Grattafiori et al. (Meta), *The Llama 3 Herd of Models*, 2024, section 3.3.4: 466 job interruptions in "
    "a 54-day snapshot of 405B pre-training on 16,384 H100 GPUs, 419 of them unexpected.",
    "Kokolis et al. (Meta), *Revisiting Reliability in Large-Scale Machine Learning Research Clusters*, "
    "arXiv:2410.21680, 2024 (HPCA 2025): ETTR as the measure, and the job MTTF that falls as 1/N with size.",
    "J. W. Young, *A first order approximation to the optimum checkpoint interval*, CACM 17(9), 1974; "
    "J. T. Daly, *A higher order estimate of the optimum checkpoint interval for restart dumps*, FGCS 22(3), 2006.",
]


def ettr(
    interval_s: float,
    checkpoint_s: float,
    recovery_s: float,
    mttf_s: float,
    lost_s: float | None = None,
    fallback: tuple[float, float] | None = None,
) -> float:
    """The share of wall time kept as training; lost_s: work lost per failure (default half a
    period). fallback (share, recovery_s): that share of failures is not survived in-process and
    costs a restart instead (its recovery, and half a period of work since the last checkpoint)."""
    period = interval_s + checkpoint_s
    lost = recovery_s + (period / 2 if lost_s is None else lost_s)
    if fallback is not None:
        share, restart_s = fallback
        lost = (1 - share) * lost + share * (restart_s + period / 2)
    return max(0.0, interval_s / period * (1 - lost / mttf_s))


def intervals(mttf_s: float, per_decade: int) -> list[float]:
    """Checkpoint intervals from 1 s to the MTTF, evenly spaced on a log scale."""
    return [10 ** (k / per_decade) for k in range(0, int(per_decade * math.log10(mttf_s)) + 1)]


def best_interval(
    checkpoint_s: float,
    recovery_s: float,
    mttf_s: float,
    lost_s: float | None = None,
    fallback: tuple[float, float] | None = None,
):
    """(the checkpoint interval with the highest ETTR, that ETTR), over a fine log grid up to M."""
    grid = intervals(mttf_s, per_decade=200)
    scored = ((t, ettr(t, checkpoint_s, recovery_s, mttf_s, lost_s, fallback)) for t in grid)
    return max(scored, key=lambda p: p[1])


def add_arguments(p) -> None:
    p.add_argument("--recovery-json", dest="recovery", help="lab bench recovery's result (default: OUT/recovery.json)")
    p.add_argument("--checkpoint-s", type=float, help="what a save costs, seconds (default: the measured one)")
    p.add_argument("--gpu-mttf-hours", type=float, default=GPU_MTTF_HOURS, help="one GPU's MTTF (default: Llama 3's)")
    p.add_argument(
        "--fallback-share",
        type=float,
        help="the share of failures in-process recovery does not survive (a lost node, a dead GPU with no spare "
        "on its node): they cost a tuned restart and the work since the last checkpoint "
        f"(default {DEFAULT_FALLBACK_SHARE}, or what --chaos-json measured)",
    )
    p.add_argument(
        "--chaos-json",
        help="a `lab chaos` ledger (or `lab bench chaos`'s result): its share of faults that needed a restart",
    )


def load_recovery(path: Path) -> dict:
    try:
        figures = json.loads(path.read_text())["figures"]
        styles = figures["styles"]
    except FileNotFoundError:
        raise LabError(f"{path} does not exist: run `lab bench recovery` first (or --recovery-json FILE)") from None
    except (ValueError, KeyError, TypeError):
        raise LabError(f"{path} is not a result of `lab bench recovery` with recovery styles") from None
    missing = [s for s in STYLES if s not in styles]
    if missing:
        raise LabError(f"{path} lacks the styles {', '.join(missing)}: run `lab bench recovery` with all styles")
    return figures


def project(figures: dict, checkpoint_s: float, gpu_mttf_hours: float, fallback_share: float = 0.0) -> list[dict]:
    """Each style's best ETTR at each scale; in-process pays a tuned restart for fallback_share
    of its failures (the ones it does not survive)."""
    rows = []
    restart_s = figures["styles"]["tuned"]["median_s"]
    for gpus in SCALES:
        mttf_s = gpu_mttf_hours * 3600 / gpus
        for style in STYLES:
            recovery_s = figures["styles"][style]["median_s"]
            lost_s = figures["step_s"] if style == "in-process" else None
            fallback = (fallback_share, restart_s) if style == "in-process" else None
            interval, best = best_interval(checkpoint_s, recovery_s, mttf_s, lost_s, fallback)
            rows.append(
                {"gpus": gpus, "mttf_s": mttf_s, "style": style, "recovery_s": recovery_s, "interval_s": interval,
                 "ettr": best, "young_s": math.sqrt(2 * checkpoint_s * mttf_s)}
            )  # fmt: skip
    return rows


def run(args, out_dir: Path) -> BenchResult:
    if args.checkpoint_s is not None and args.checkpoint_s <= 0:
        raise LabError("--checkpoint-s must be positive")
    if args.gpu_mttf_hours <= 0:
        raise LabError("--gpu-mttf-hours must be positive")
    path = Path(args.recovery) if args.recovery else out_dir / "recovery.json"
    figures = load_recovery(path)
    checkpoint_s = args.checkpoint_s or figures.get("checkpoint_s")
    source = "--checkpoint-s" if args.checkpoint_s else "the trainer's, measured"
    if not checkpoint_s:
        raise LabError(f"{path} has no checkpoint time: give --checkpoint-s")
    ledger = load_ledger(args.chaos_json) if args.chaos_json else None
    share, share_source = fallback_share(args, ledger)
    rows = project(figures, checkpoint_s, args.gpu_mttf_hours, share)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot(rows, figures, checkpoint_s, out_dir / "goodput.png")
    mix_lines: list[str] = []
    mix: dict | None = None
    if ledger is not None:
        mix_lines, mix = goodput_mix.section(args.chaos_json, ledger, figures["styles"], path.parent / "startup.json")
    return BenchResult(
        "goodput",
        this_command(),
        [*report(rows, checkpoint_s, source, args.gpu_mttf_hours, path), "", fallback_line(share, share_source),
         *mix_lines],
        {"checkpoint_s": checkpoint_s, "gpu_mttf_hours": args.gpu_mttf_hours, "fallback_share": share, "rows": rows,
         "campaign_mix": mix},
        ["goodput.png"],
    )  # fmt: skip


def load_ledger(path: str) -> dict:
    """A `lab chaos` ledger (or `lab bench chaos`'s result, which saves it as its figures) that
    struck at least one fault; one line if not."""
    try:
        data = json.loads(files.read_regular(path, 16 << 20) or b"")
        ledger = data.get("figures", data)
        struck = [f for f in ledger["faults"] if f["time"] is not None]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise LabError(f"--chaos-json {path} is not a `lab chaos` ledger") from None
    if not struck:
        raise LabError(f"--chaos-json {path}: the campaign injected no fault")
    return ledger


def fallback_share(args, ledger: dict | None = None) -> tuple[float, str]:
    """The share of failures in-process recovery does not survive, and where it came from;
    ledger: --chaos-json's, where the caller has read it already."""
    if args.fallback_share is not None:
        if not 0 <= args.fallback_share <= 1:
            raise LabError(f"--fallback-share is a share, 0 to 1; got {args.fallback_share}")
        return args.fallback_share, "--fallback-share"
    if ledger is None and args.chaos_json:
        ledger = load_ledger(args.chaos_json)
    if ledger is not None:
        faults = [f for f in ledger["faults"] if f["time"] is not None]
        restarted = sum(f["kind"] in RESTARTED_KINDS for f in faults)
        return restarted / len(faults), f"measured: {restarted} of {len(faults)} faults in {args.chaos_json}"
    return DEFAULT_FALLBACK_SHARE, "assumed (no campaign given: --chaos-json)"


RESTARTED_KINDS = (
    "hang-in-python",
    "preempt-node",
    "kill-node",
    "lose-node-in-restart",
    "lose-store",
    "partition-node",
)  # chaos kinds in-process recovery survives only by a restart


def fallback_line(share: float, source: str) -> str:
    return (
        f"- In-process rows: {100 * share:.0f}% of failures ({source}) are not survived in-process and cost a tuned "
        "restart and the work since the last checkpoint, so their best checkpoint interval is finite again."
    )


def duration(seconds: float) -> str:
    return (
        f"{seconds:.1f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def report(
    rows: list[dict], checkpoint_s: float, checkpoint_source: str, gpu_mttf_hours: float, path: Path
) -> list[str]:
    lines = [
        f"The effective training time ratio (ETTR) of one job, projected from `lab bench recovery` ({path.name}): "
        f"its median kill-to-first-step per style, and a checkpoint save that blocks training "
        f"{checkpoint_s * 1000:.1f} ms ({checkpoint_source}). Job MTTF = {gpu_mttf_hours:,.0f} GPU-hours / N "
        "(from Llama 3's interruption count). The checkpoint interval is the one that maximises ETTR for each row.",
        "",
        "| GPUs | job MTTF | recovery style | recovery | best checkpoint interval | ETTR | lost to failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['gpus']:,} | {duration(r['mttf_s'])} | {r['style']} | {r['recovery_s']:.2f} s "
            f"| {duration(r['interval_s'])} | {100 * r['ettr']:.3f}% | {100 * (1 - r['ettr']):.3f}% |"
        )
    lines += [
        "",
        "- The recovery times are those of a 2 x 2 job on one machine: a lower bound for a job of thousands of "
        "GPUs, whose restart also waits for a replacement node, a larger rendezvous and a checkpoint read from "
        "shared storage. Rerun with `--checkpoint-s` for a larger model's save time.",
        "- In-process recovery costs the step in flight, not the work since the last checkpoint, for the failures "
        "it survives; the others (a lost node, a GPU with no spare on its node) cost a restart, and they are "
        "what its checkpoints are for.",
        "",
        "![ETTR against the checkpoint interval](goodput.png)",
        "",
        "Sources:",
        "",
        *[f"- {s}" for s in SOURCES],
    ]
    return lines


def plot(rows: list[dict], figures: dict, checkpoint_s: float, path: Path) -> None:
    title = "ETTR against the checkpoint interval (dots: the best interval, tuned restart)"
    with figure(path, xlabel="checkpoint interval (s)", ylabel="effective training time ratio (%)", title=title) as ax:
        for gpus, color in zip(SCALES, ("tab:blue", "tab:orange", "tab:red"), strict=True):
            mttf_s = next(r["mttf_s"] for r in rows if r["gpus"] == gpus)
            xs = intervals(mttf_s, per_decade=50)
            for style, dash in (("bare torchrun", ":"), ("tuned", "-")):
                recovery_s = figures["styles"][style]["median_s"]
                curve = [100 * ettr(t, checkpoint_s, recovery_s, mttf_s) for t in xs]
                ax.plot(xs, curve, linestyle=dash, color=color, label=f"{gpus:,} GPUs, {style}")
            best = next(r for r in rows if r["gpus"] == gpus and r["style"] == "tuned")
            ax.plot([best["interval_s"]], [100 * best["ettr"]], marker="o", color=color)
        ax.set_xscale("log")
        ax.set_ylim(min(90.0, 100 * min(r["ettr"] for r in rows) - 5), 100.2)
