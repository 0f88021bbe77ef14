"""buffers: BatchNorm's running statistics are buffers, not gradients; DDP treats them apart.

    lab exercise run buffers

bn_buffers.py trains a model with BatchNorm on 2 ranks whose data have different means,
three ways: DDP's default broadcast_buffers=True, broadcast_buffers=False, and
SyncBatchNorm, with nccl on 2 GPUs when the machine has them, else with gloo on the CPU.
Each rank prints its device and running_mean as its BatchNorm saw it at the start of the
last forward. The verdict asserts: every rank on the device its backend gives it; equal
with broadcast, diverging without; SyncBatchNorm equal on GPUs, and on the CPU the error
torch raises for it.
"""

from lab.lessons import all_equal
from lab.topology import Topology

NAME = "buffers"
SUMMARY = "BatchNorm statistics with broadcast_buffers on, off, and SyncBatchNorm"
KIND = "lesson"
COMMAND = "lab exercise run buffers"
MODES = ("broadcast", "local", "sync")
LINE = (
    r"rank (?P<rank>\d+) mode \S+ on (?P<device>\S+) "
    r"running_mean at last forward (?P<seen>\S+) after training (?P<after>\S+)"
)
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
    report = lesson.report
    backend = "nccl" if lesson.gpus >= 2 else "gloo"  # nccl: one GPU per rank; SyncBatchNorm needs them
    topology = Topology(nodes=1, nproc_per_node=2, backend=backend)
    report.facts["backend"] = backend
    seen, outputs = {}, {}
    for mode in MODES:
        outputs[mode] = lesson.job(f"--mode {mode}", topology, "bn_buffers", ["--mode", mode])
        seen[mode] = {int(m["rank"]): m for m in outputs[mode].matches(LINE)}
    report.facts["running_mean_at_last_forward"] = {
        mode: {rank: m["seen"] for rank, m in lines.items()} for mode, lines in seen.items()
    }
    _check_devices(report, backend, seen)
    claims = [
        ("broadcast", "broadcast_buffers=True: every rank used the same statistics", True),
        ("local", "broadcast_buffers=False: the statistics diverged", False),
    ]
    if backend == "nccl":
        claims.append(("sync", "SyncBatchNorm: every rank used the same statistics", True))
    for mode, claim, same in claims:
        values = [m["seen"] for m in seen[mode].values()]
        report.check(claim, len(values) == 2 and all_equal(values) == same, str(values))
    if backend != "nccl":
        sync = outputs["sync"]
        report.check(
            f"SyncBatchNorm on CPU ({lesson.gpus} GPU(s) here, 2 needed): torch refuses it, naming the reason",
            not sync.ok and bool(sync.matches(SYNC_CPU_ERROR)),
            SYNC_CPU_ERROR,
        )
    report.explanation = "buffers travel by broadcast from rank 0 before each forward, not by gradient averaging"


def _check_devices(report, backend: str, seen: dict) -> None:
    """Every rank that printed ran where the backend puts it: its own GPU with nccl, the CPU with gloo.

    The lesson's expectations follow from that device, so a mismatch (a GPU on the machine, the
    ranks on its CPU) must fail here, by name, not as a wrong claim about SyncBatchNorm.
    """
    wrong = {
        f"{mode} rank {rank}": m["device"]
        for mode, lines in seen.items()
        for rank, m in lines.items()
        if m["device"] != (f"cuda:{rank}" if backend == "nccl" else "cpu")
    }
    report.check(f"every rank ran on the device {backend} gives it", not wrong, str(wrong or "all as expected"))
