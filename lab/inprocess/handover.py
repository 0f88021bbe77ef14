"""The state handover of a regroup: every rank ends with the model and optimizer of the lowest
rank holding the newest step (lab.inprocess.api's Attempt.adopt). A replacement holds nothing
yet, a survivor the step it finished; nothing is read from disk."""

from __future__ import annotations

import torch
import torch.distributed as dist


def newest_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, step: int | None
) -> tuple[int, int | None]:
    """(the step every rank now holds, the rank whose state was handed over, or None when every
    rank held the same step). step None: this rank holds nothing yet; -1: no rank holds anything."""
    device = next(model.parameters()).device
    held = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(held, torch.tensor([-1 if step is None else step], device=device))
    steps = [int(t) for t in held]
    newest = max(steps)
    if newest < 0 or steps.count(newest) == len(steps):
        return newest, None  # every rank holds the same step (or nothing): nothing to hand over
    source = steps.index(newest)
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=source)
    if optimizer is not None:
        payload = [optimizer.state_dict()]
        dist.broadcast_object_list(payload, src=source)
        optimizer.load_state_dict(payload[0])
    return newest, source
