"""set-device-first (GPU only): tensors made before torch.cuda.set_device land on GPU 0.

    lab exercise run set-device-first

On a machine with 2 or more GPUs, set_device.py creates a CUDA tensor before and after
calling torch.cuda.set_device(LOCAL_RANK) on each of 2 ranks and prints where each
landed. The verdict asserts that the early tensor is on cuda:0 on every rank and the
later one on cuda:LOCAL_RANK. Without 2 GPUs the exercise is skipped and says why.
"""

from lab.topology import Topology

NAME = "set-device-first"
SUMMARY = "GPU only: tensors created before set_device land on GPU 0"
KIND = "lesson"
COMMAND = "lab exercise run set-device-first"
DEPTHS = {
    "beginner": """
On a machine with several GPUs each copy should use its own GPU. Until a copy says
which one (torch.cuda.set_device), "cuda" means GPU 0, so every copy piles its data onto
the first GPU, which fills up or slows everyone down.""",
    "developer": """
Call torch.cuda.set_device(local_rank) before creating any CUDA tensor, model or NCCL
process group, or pass explicit devices (f"cuda:{local_rank}") everywhere. Symptoms of
forgetting: GPU 0's memory holds N contexts in nvidia-smi, out-of-memory on GPU 0 only,
or NCCL hangs when two ranks share a device.""",
    "researcher": """
The current device is per-thread CUDA state that defaults to 0. A CUDA context is
created lazily on the first use of a device, so an early tensor on the default device
also costs each rank a context (hundreds of MB) on GPU 0. NCCL binds its communicator to
the current device at init time (or the device_id passed to init_process_group).""",
}


def run(lesson) -> None:
    report = lesson.report
    if lesson.gpus < 2:
        report.skipped = f"needs at least 2 GPUs; this machine has {lesson.gpus} (nvidia-smi -L)"
        return
    output = lesson.job("2 ranks on one host, nccl", Topology(nodes=1, nproc_per_node=2, backend="nccl"), "set_device")
    found = {int(m[1]): (m[2], m[3]) for m in output.matches(r"rank (\d+) before set_device (\S+) after (\S+)")}
    report.facts["devices"] = found
    report.check("both ranks reported", output.ok and sorted(found) == [0, 1], str(found))
    report.check(
        "before set_device every tensor is on cuda:0", all(b == "cuda:0" for b, _ in found.values()), str(found)
    )
    report.check(
        "after set_device each rank's is on cuda:LOCAL_RANK",
        all(a == f"cuda:{r}" for r, (_, a) in found.items()),
        str(found),
    )
    report.explanation = "call torch.cuda.set_device(local_rank) before creating any CUDA tensor"
