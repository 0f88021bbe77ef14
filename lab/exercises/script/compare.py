"""The script's result file against the fault-free reference run's: bitwise, or its numbers within --rtol
(of each number, or of the numbers' typical size where that is larger)."""

from __future__ import annotations

import io
import math
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
    # Relative to each number, or to the numbers' typical size (their root mean square) where that
    # is larger: a weight near zero differs by a large share of itself over rounding alone. A
    # 100-fault campaign on plain_train failed on a weight of 1e-5 that differed by 0.45 of itself,
    # while 3 resumes of 3,000 steps left every weight within 1.2e-6 of the reference's.
    scale = math.sqrt(sum(q * q for q in y) / len(y))
    worst = max(abs(p - q) / max(abs(q), scale, 1e-300) if p != q else 0.0 for p, q in zip(x, y, strict=True))
    ok = worst <= rtol
    said = f"{len(x)} numbers, largest difference {worst:.3g} of the number or of their typical size {scale:.3g}"
    return ok, f"{said}, whichever is larger ({'within' if ok else 'over'} {rtol:g})"
