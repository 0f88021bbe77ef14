"""no-ddp-drift: the same training without the DDP wrapper, and the ranks drift apart.

    lab exercise run no-ddp-drift

Runs ddp_train.py twice with 2 processes: as is, and with --no-ddp (each rank trains its
own copy on its own batch). The verdict asserts equal checksums with DDP and different
ones without.
"""

from lab.lessons import all_equal, checksums
from lab.topology import Topology

NAME = "no-ddp-drift"
SUMMARY = "without the DDP wrapper every rank trains alone and the weights differ"
KIND = "lesson"
COMMAND = "lab exercise run no-ddp-drift"
DEPTHS = {
    "beginner": """
torchrun only starts copies; it does not make them cooperate. Without DDP each copy
learns from its own data alone, so after a few steps every copy holds a different
model: you trained N separate models, not one.""",
    "developer": """
Nothing fails when you forget the wrapper (or call the unwrapped module's forward): the
job runs, losses go down, and the checkpoint rank 0 saves only ever saw rank 0's data.
Compare a weight checksum across ranks once in a while; it costs one all-reduce.""",
    "researcher": """
Gradient synchronisation lives in DDP's autograd hooks, installed when the module is
wrapped and fired by backward through the wrapper. Without them the per-rank updates
are w <- w - lr * g_r with different g_r, so the replicas diverge after the first
step even from identical initial weights.""",
}


def run(lesson) -> None:
    report = lesson.report
    topology = Topology(nodes=1, nproc_per_node=2)
    with_ddp = checksums(lesson.job("with DDP", topology, "ddp_train"))
    without = checksums(lesson.job("without DDP (--no-ddp)", topology, "ddp_train", ["--no-ddp"]))
    report.facts.update(with_ddp=with_ddp, without_ddp=without)
    report.check(
        "with DDP the checksums are equal",
        len(with_ddp) == 2 and all_equal(with_ddp.values()),
        str(sorted(set(with_ddp.values()))),
    )
    report.check(
        "without DDP they differ across ranks",
        len(without) == 2 and not all_equal(without.values()),
        str(sorted(set(without.values()))),
    )
    report.explanation = "only DDP's gradient all-reduce keeps the copies equal"
