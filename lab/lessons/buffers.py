"""buffers: BatchNorm's running statistics are buffers, not gradients; DDP treats them apart.

    lab exercise run buffers

bn_buffers.py trains a model with BatchNorm on 2 ranks whose data have different means,
three ways: DDP's default broadcast_buffers=True, broadcast_buffers=False, and
SyncBatchNorm. Each rank prints running_mean as its BatchNorm saw it at the start of the
last forward. The verdict asserts: equal with broadcast, diverging without; SyncBatchNorm
equal on a GPU, and on a CPU the error torch raises for it.
"""

from lab.lessons import all_equal
from lab.topology import Topology

NAME = "buffers"
SUMMARY = "BatchNorm statistics with broadcast_buffers on, off, and SyncBatchNorm"
KIND = "lesson"
COMMAND = "lab exercise run buffers"
LINE = r"rank (?P<rank>\d+) mode \S+ running_mean at last forward (?P<seen>\S+) after training (?P<after>\S+)"
SYNC_CPU_ERROR = "SyncBatchNorm layers only work with GPU modules"  # DDP says so at construction
DEPTHS = {
    "beginner": """
Some layers keep running averages of the data they saw (BatchNorm does). Those are not
learned by gradients, so DDP's averaging does not touch them. By default DDP copies rank
0's averages to everyone before each forward; turn that off and every copy keeps its own.""",
    "developer": """
broadcast_buffers=True (the default) costs one broadcast per forward and makes every
rank use rank 0's running statistics, which are computed from rank 0's data only.
broadcast_buffers=False lets them drift (fine if only rank 0 evaluates and saves).
SyncBatchNorm (convert_sync_batchnorm) computes batch statistics over all ranks' batches
every forward: what you want with small per-GPU batches. It needs an accelerator: on CPU
torch refuses it.""",
    "researcher": """
Buffers are synchronised in DDP's pre-forward (_sync_buffers: a broadcast from rank 0
of module buffers) while parameters are synchronised through gradient all-reduce in
backward. The statistics a rank uses in its forward are therefore rank 0's; the update
that forward makes is local and overwritten next time. SyncBatchNorm all-gathers
per-rank mean, variance and counts, so the normalisation itself is global.""",
}


def run(lesson) -> None:
    import torch  # here, not at the top: `lab --help` need not import torch

    report = lesson.report
    topology = Topology(nodes=1, nproc_per_node=2)
    seen = {}
    for mode in ("broadcast", "local"):
        output = lesson.job(f"--mode {mode}", topology, "bn_buffers", ["--mode", mode])
        seen[mode] = {int(m["rank"]): m["seen"] for m in output.matches(LINE)}
    report.facts["running_mean_at_last_forward"] = seen
    report.check(
        "broadcast_buffers=True: every rank used the same statistics",
        len(seen["broadcast"]) == 2 and all_equal(seen["broadcast"].values()),
        str(seen["broadcast"]),
    )
    report.check(
        "broadcast_buffers=False: the statistics diverged",
        len(seen["local"]) == 2 and not all_equal(seen["local"].values()),
        str(seen["local"]),
    )
    sync = lesson.job("--mode sync", topology, "bn_buffers", ["--mode", "sync"])
    if torch.cuda.is_available():
        values = {int(m["rank"]): m["seen"] for m in sync.matches(LINE)}
        report.check(
            "SyncBatchNorm: every rank used the same statistics",
            len(values) == 2 and all_equal(values.values()),
            str(values),
        )
    else:
        report.check(
            "SyncBatchNorm on CPU: torch refuses it, naming the reason",
            not sync.ok and bool(sync.matches(SYNC_CPU_ERROR)),
            SYNC_CPU_ERROR,
        )
    report.explanation = "buffers travel by broadcast from rank 0 before each forward, not by gradient averaging"
