"""A syntax error: every rank fails before anything runs. The truth: every rank, the error and
its line (the node log holds `SyntaxError: invalid syntax` and the line).

    torchrun --nproc-per-node=2 syntax_error.py
"""

import torch.distributed as dist

dist.init_process_group("gloo")
print("never here"
