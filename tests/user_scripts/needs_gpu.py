"""A script written for GPU machines only: it puts every rank on its GPU, with no CPU fallback.

torchrun --nproc-per-node=2 needs_gpu.py    # on a CPU runner: AssertionError, Torch not compiled with CUDA
"""

import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
for step in range(100):
    print(f"step {step}", flush=True)
