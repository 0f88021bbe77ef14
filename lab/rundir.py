"""The run directory: the one place a running lab keeps its state.

`lab up` writes it; `lab status` and `lab down` read it from any shell. Every
process the lab starts carries MARKER=<run dir> in its environment, so `lab down`
finds them even when this state was never written (the `lab` process was killed).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MARKER = "TORCHRUN_LAB_RUN_DIR"
NODE_MARKER = "TORCHRUN_LAB_NODE"
DEFAULT_RUN_DIR = "/tmp/torchrun-lab"


class RunDir:
    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path or os.environ.get("LAB_RUN_DIR") or DEFAULT_RUN_DIR).resolve()

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    def read_state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write_state(self, state: dict) -> None:
        """Atomically: a reader in another shell never sees half a file."""
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)

    @property
    def reports(self) -> Path:
        """Exercise reports: the one thing `lab down` keeps."""
        return self.path / "reports"

    def exists(self) -> bool:
        """True while the run directory holds anything besides reports."""
        return self.path.exists() and any(p.name != "reports" for p in self.path.iterdir())

    def remove(self) -> None:
        if not self.path.exists():
            return
        for entry in self.path.iterdir():
            if entry.name == "reports":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        if not any(self.path.iterdir()):
            self.path.rmdir()
