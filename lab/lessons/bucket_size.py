"""bucket-size: DDP's gradient buckets and the step time, measured.

    lab exercise run bucket-size

Runs the trainer on 2 hosts x 2 with a wide model (about 1.1 M parameters, 4.2 MB of
gradients), unpaced, with bucket_cap_mb 0.25, 1, 25 (DDP's default) and 100, and reports
rank 0's milliseconds per step for each. The verdict asserts that every run trained and
reported its step time; the figures are in report.json. On 2 shared cores they measure
the per-bucket cost more than any overlap.
"""

from lab.topology import Topology

NAME = "bucket-size"
SUMMARY = "step time as bucket_cap_mb varies: gradient bucketing and overlap"
KIND = "lesson"
COMMAND = "lab exercise run bucket-size"
BUCKETS_MB = (0.25, 1, 25, 100)
TRAINER = ["--steps", "40", "--ckpt-every", "0", "--width", "65536", "--batch-size", "16"]
DEPTHS = {
    "beginner": """
DDP does not send each gradient on its own: it packs them into "buckets" and sends a
bucket as soon as it is full, while the rest of backward is still computing. Bucket size
trades many small messages against waiting longer before the first one leaves.""",
    "developer": """
bucket_cap_mb (default 25) sets the bucket size. Smaller buckets start communicating
earlier and overlap more of backward, but pay per-message latency; larger buckets send
fewer, bigger messages. Tune it with measurements on your network and model, like this
exercise does; gradient_as_bucket_view=True saves a copy per step.""",
    "researcher": """
The Reducer assigns parameters to buckets in reverse registration order (roughly the
order gradients become ready in backward), rebuilds the assignment after the first
iteration from the observed ready order, and launches an all-reduce per bucket when all
its gradients are marked ready. Overlap needs compute left to hide behind; on 2 CPU
cores shared by 4 ranks there is little, so the per-bucket cost dominates.""",
}


def run(lesson) -> None:
    report = lesson.report
    ms_per_step: dict[str, float | None] = {}
    for cap in BUCKETS_MB:
        output = lesson.job(
            f"bucket_cap_mb {cap:g}",
            Topology(nodes=2, nproc_per_node=2),
            "trainer",
            [*TRAINER, "--bucket-cap-mb", str(cap)],
        )
        found = output.matches(r"\(([\d.]+) ms/step\)")
        ms_per_step[f"{cap:g}"] = float(found[0][1]) if output.ok and found else None
    report.facts["ms_per_step_by_bucket_cap_mb"] = ms_per_step
    for mb, ms in ms_per_step.items():
        report.check(f"bucket_cap_mb {mb}: trained and measured", ms is not None, f"{ms} ms/step")
    fastest = min((v, k) for k, v in ms_per_step.items() if v is not None)[1] if any(ms_per_step.values()) else None
    report.explanation = (
        f"fastest here: bucket_cap_mb {fastest}; the figure depends on the network, "
        "the model and how much backward compute there is to overlap"
    )
