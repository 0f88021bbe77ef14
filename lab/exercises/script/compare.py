"""The script's result file against the fault-free reference run's: bitwise, or its numbers within --rtol."""

from __future__ import annotations

import io
import re
from pathlib import Path

from lab import files

RESULT_LIMIT_BYTES = 64 << 20  # a result file larger than this is not kept (a job's sparse 1 GiB file)
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)


def numbers(raw: bytes) -> list[float]:
    """Every number in the file's bytes: the tensors of a torch.save'd object (weights_only:
    loading a result never runs code), else the numbers written in its text."""
    import torch

    try:
        loaded = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception:  # not a torch file: read it as text
        return [float(n) for n in NUMBER.findall(raw.decode(errors="replace"))]
    found: list[float] = []
    _collect(loaded, found)
    return found


def _collect(value: object, found: list[float]) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        found.extend(value.detach().double().flatten().tolist())
    elif isinstance(value, bool):
        found.append(float(value))
    elif isinstance(value, int | float):
        found.append(float(value))
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _collect(value[key], found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)


def keep(produced: Path | None, kept: Path) -> None:
    """The result file copied out of the job's working dir (which `lab down` removes) to kept.
    The working dir is the job's: read as a regular file reached through no link, bounded."""
    raw = files.read_regular(produced, RESULT_LIMIT_BYTES) if produced is not None else None
    kept.parent.mkdir(parents=True, exist_ok=True)
    if raw is not None:
        files.replace_with(kept, lambda f: f.write(raw))


def compare(ours: Path, reference: Path, rtol: float | None) -> tuple[bool, str]:
    """(equal?, what was compared and found)."""
    b = files.read_regular(reference, RESULT_LIMIT_BYTES)
    if b is None:
        return False, f"the reference run wrote no {reference.name} (a regular file of at most 64 MiB)"
    a = files.read_regular(ours, RESULT_LIMIT_BYTES)
    if a is None:
        return False, f"this run wrote no {ours.name} (a regular file of at most 64 MiB)"
    if a == b:
        return True, f"bitwise equal ({len(a)} bytes)"
    if rtol is None:
        return False, f"{ours.name} differs from the reference's, bitwise (--rtol compares its numbers)"
    x, y = numbers(a), numbers(b)
    if len(x) != len(y) or not x:
        return False, f"{len(x)} numbers against the reference's {len(y)}"
    worst = max(abs(p - q) / max(abs(q), 1e-300) if p != q else 0.0 for p, q in zip(x, y, strict=True))
    ok = worst <= rtol
    return ok, f"{len(x)} numbers, largest relative difference {worst:.3g} ({'within' if ok else 'over'} {rtol:g})"
