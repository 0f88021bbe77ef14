"""Process-group setup and teardown for every workload, in one place.

The five lines that make a script distributed are all here:

    dist.init_process_group(backend)             # join the others (env:// from torchrun)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(local_rank)            # nccl only, before any CUDA tensor
    model = DDP(model, device_ids=[local_rank])  # broadcast rank 0's weights, sync grads
    dist.destroy_process_group()                 # in `finally`, also when training fails

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each copy.
The lab adds LAB_BACKEND (gloo or nccl) and LAB_PG_TIMEOUT_S: a short collective
timeout, so a hung peer becomes an error in a minute, not gloo's 30.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from lab.health import hang_dump
from lab.nodeenv import NodeEnv


@dataclass(frozen=True)
class Ctx:
    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device
    host: str
    distributed: bool = True  # False: one plain process, no process group, no DDP
    rendezvous_seconds: float = 0.0


def default_backend() -> str:
    return NodeEnv.parse().backend or ("nccl" if torch.cuda.is_available() else "gloo")


def single() -> Ctx:
    """A plain process, no torchrun: one rank, no group, no DDP."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    host = socket.gethostname()
    return Ctx(rank=0, local_rank=0, world_size=1, backend="none", device=device, host=host, distributed=False)


def joined(rendezvous_seconds: float, backend: str | None = None) -> Ctx:
    """This rank in the group it has joined (by process_group, or by an in-process attempt)."""
    backend, local_rank = backend or dist.get_backend(), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    hang_dump.install(NodeEnv.parse().events_dir, dist.get_rank())  # hang forensics on request
    return Ctx(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        backend=backend,
        device=device,
        host=socket.gethostname(),
        rendezvous_seconds=rendezvous_seconds,
    )


@contextmanager
def process_group(backend: str | None = None, allow_single: bool = False):
    """Join the job's process group for the duration of the block; always leave it.

    With allow_single, a script started without torchrun runs as one plain process.
    """
    if "RANK" not in os.environ:
        if allow_single:
            yield single()
            return
        raise RuntimeError(
            "RANK is not set: this script is meant to be started by torchrun, e.g. "
            "`torchrun --nproc-per-node=2 SCRIPT` (or `lab run SCRIPT`)"
        )
    backend = backend or default_backend()
    if backend == "nccl":
        # Before any CUDA tensor exists: otherwise it lands on GPU 0 for every rank.
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    timeout = timedelta(seconds=NodeEnv.parse().pg_timeout_s or 60)
    started = time.monotonic()
    dist.init_process_group(backend=backend, timeout=timeout)
    finished = False
    try:
        yield joined(time.monotonic() - started, backend)
        finished = True
    finally:
        # Free whatever still holds the group (a DDP model in a reference cycle, say). One
        # left for interpreter shutdown keeps gloo's threads alive into C++ static
        # destruction, which aborts with "terminate called without an active exception":
        # measured in 1 of 4 runs of the trainer before its model moved into a function the
        # block calls (so it is freed here), none in 16 after. Callers: keep the DDP model
        # out of the `with` block's own frame.
        gc.collect()
        if finished:
            dist.barrier()  # nobody tears down while a peer is still in a collective
        dist.destroy_process_group()


def ddp(model: torch.nn.Module, ctx: Ctx, **kwargs) -> torch.nn.Module:
    """Wrap a model for this rank; on GPUs it names the rank's one device. Single process: as is."""
    if not ctx.distributed:
        return model
    device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **kwargs)


def settle_buckets(ddp_model, dataset, batch_size, loss_fn, optimizer, ctx: Ctx) -> None:
    """One throw-away backward, so every run trains in DDP's rebuilt bucket layout.

    DDP regroups its gradient buckets after the first backward. With more than two ranks
    the all-reduce's summation order depends on where a gradient sits in its bucket, so
    a resumed run whose first step used the initial layout would drift from the
    uninterrupted run in the last bits (measured: 4 ranks, resumed at step 20, checksum
    -2.855061 against -2.855063). Running this in every run, fresh or resumed, makes
    the first real step of both use the same layout.
    """
    x, y = (t.to(ctx.device) for t in dataset[list(range(batch_size))])
    loss_fn(ddp_model(x), y).backward()
    optimizer.zero_grad(set_to_none=True)


def say(line: str) -> None:
    """Print one line in one write(), so lines from ranks sharing a terminal never merge.

    print() writes the text and the newline separately when Python runs unbuffered
    (PYTHONUNBUFFERED=1, as on the lab machines), and two ranks then interleave:
    "rank 0 ...rank 1 ...\\n\\n".
    """
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class StepDeadline:
    """torchelastic's file-timer watchdog around each training step (LAB_STEP_WATCHDOG_S).

    With TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent runs a FileTimerServer; a rank that
    starts a step registers a deadline with it, and one whose step overruns is SIGKILLed by
    its own agent. A hung rank then ends in seconds, without waiting for the process-group
    timeout, and without torchrun's 30 s SIGTERM-to-SIGKILL wait for a frozen process.
    Off (no-ops) unless both variables are set.
    """

    SCOPE = "lab-step"

    def __init__(self) -> None:
        self.seconds = NodeEnv.parse().step_watchdog_s or 0.0
        path = os.environ.get("TORCHELASTIC_TIMER_FILE")
        self.client = None
        if self.seconds > 0 and path:
            from torch.distributed.elastic.timer import FileTimerClient

            self.client = FileTimerClient(path)

    def start(self) -> None:
        if self.client:
            self.client.acquire(self.SCOPE, time.time() + self.seconds)

    def stop(self) -> None:
        if self.client:
            self.client.release(self.SCOPE)


class Preemption:
    """SIGTERM (torchrun passes on its own, a preempted VM's, `kubectl delete pod`'s) asks the
    job to stop at the next step boundary. The ranks agree with one tiny all-reduce per
    step, so every rank checkpoints the same step and stops, even those whose node was
    not the one told to go."""

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.requested = False
        signal.signal(signal.SIGTERM, self._request)

    def _request(self, _signum, _frame) -> None:
        self.requested = True

    @staticmethod
    def leave_if_uncollected(seconds: float = 1.0) -> None:
        """Exit once `seconds` pass, unless the process ends first: a preempted worker's agent
        that is itself shutting down never collects its return value (lab/workloads/trainer.py)."""
        leave = threading.Timer(seconds, os._exit, (0,))
        leave.daemon = True
        leave.start()

    def agreed(self) -> bool:
        if not self.ctx.distributed:
            return self.requested
        flag = torch.tensor([1 if self.requested else 0], device=self.ctx.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def finite(loss: torch.Tensor, rank: int, step: int) -> torch.Tensor:
    """The loss, checked before its gradients reach the all-reduce: a NaN or an infinity there
    would spread to every rank's weights, and no rank could say where it came from."""
    value = loss.item()
    if not math.isfinite(value):
        raise FloatingPointError(f"rank {rank}: the loss is {value} at step {step} (diverged, or a bad batch)")
    return loss
