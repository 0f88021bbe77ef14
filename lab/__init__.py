"""torchrun lab: run, break and watch multi-node PyTorch DDP jobs on real hosts."""

__version__ = "0.1.0"
