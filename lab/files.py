"""Writing the files the lab hands back to the user (reports, pictures, results) safely.

They go to directories the user names (--report-dir, --out), as root perhaps: each file is
written to a new temp file beside it and renamed over its name, so a link planted at that
name is replaced, never followed, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_with(path: Path, write: Callable[[str], None]) -> None:
    """write(temp_path) fills a fresh file beside path; then it takes path's place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    replace_with(path, lambda tmp: None if Path(tmp).write_text(text) else None)
