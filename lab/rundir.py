"""The run directory: the one place a running lab keeps its state, and proof of what it owns.

`lab up` writes it; `lab status` and `lab down` read it from any shell. Every
process the lab starts carries MARKER=<run dir> in its environment, so `lab down`
finds them even when this state was never written (the `lab` process was killed).

The lab runs as root and deletes what it made, so it must be sure what it made. A
run dir is the lab's only when the lab created it: `claim` makes it (mode 0700, never
through a symlink) and writes an ownership mark (`.torchrun-lab`: owner uid and a
random lab id). Every verb checks the directory first (`check`) and refuses, in one
line, a symlink, a directory of another uid, or one that holds files but no mark.
`remove` deletes only the entries the lab itself writes, never following a link.
The lab id names everything the lab makes outside the run dir (hosts, bridges,
containers, networks), so two labs with different run dirs run side by side.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from lab.errors import LabError

MARKER = "TORCHRUN_LAB_RUN_DIR"
NODE_MARKER = "TORCHRUN_LAB_NODE"
MARK_FILE = ".torchrun-lab"
# What the lab writes at the top of a run dir; `remove` deletes these and nothing else.
LAB_ENTRIES = (
    "state.json",
    "state.tmp",
    "nodes",
    "events",
    "checkpoints",
    "prometheus",
    "etcd",
    "reference",
    "applied.yaml",
    "work",
    "userns.log",
)


def default_path() -> Path:
    """Per user: $XDG_RUNTIME_DIR/torchrun-lab when that is the caller's own dir, else
    /tmp/torchrun-lab-<uid> (a shared /tmp name anyone could plant a link at is refused by check)."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        try:
            info = os.stat(runtime_dir)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                return Path(runtime_dir) / "torchrun-lab"
        except OSError:
            pass
    return Path(tempfile.gettempdir()) / f"torchrun-lab-{os.geteuid()}"


class RunDir:
    def __init__(self, path: str | os.PathLike | None = None):
        given = path or os.environ.get("LAB_RUN_DIR")
        raw = Path(os.path.abspath(given)) if given else default_path()
        # Resolve the parents, never the run dir itself: a symlink there must be seen, not followed.
        self.path = raw.parent.resolve() / raw.name if raw.name else raw
        self._provisional_id: str | None = None

    # Ownership ---------------------------------------------------------------------------

    @property
    def mark_file(self) -> Path:
        return self.path / MARK_FILE

    def read_mark(self) -> dict | None:
        try:
            fd = os.open(self.mark_file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd) as f:
            try:
                mark = json.load(f)
            except ValueError:
                return None
        return mark if isinstance(mark, dict) and isinstance(mark.get("lab_id"), str) else None

    def check(self) -> None:
        """Refuse, in one line, a run dir the lab must not touch. A missing one is fine."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise LabError(f"run dir {self.path}: {e.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            raise LabError(
                f"run dir {self.path} is a symlink; the lab never follows one it did not make (pick another --run-dir)"
            )
        if not stat.S_ISDIR(info.st_mode):
            raise LabError(f"run dir {self.path} exists and is not a directory (pick another --run-dir)")
        if info.st_uid != os.geteuid():
            raise LabError(
                f"run dir {self.path} belongs to uid {info.st_uid}, not to you (uid {os.geteuid()}); "
                "pick another --run-dir"
            )
        mark = self.read_mark()
        if mark is None and any(True for _ in os.scandir(self.path)):
            raise LabError(
                f"run dir {self.path} holds files the lab did not make (no {MARK_FILE} mark); "
                "pick an empty or new --run-dir"
            )
        if mark is not None and mark.get("uid") != os.geteuid():
            raise LabError(f"run dir {self.path} was made by uid {mark.get('uid')}, not by you; pick another --run-dir")

    def claim(self) -> str:
        """Make the run dir (0700, not through a link) and its mark, or check it is ours; returns the lab id."""
        self.check()
        mark = self.read_mark()
        if mark is not None:
            return mark["lab_id"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            pass  # an empty dir of ours (check passed): adopt it
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
            lab_id = self._provisional_id or new_lab_id()
            body = json.dumps({"uid": os.geteuid(), "lab_id": lab_id}).encode()
            mark_fd = os.open(MARK_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            with os.fdopen(mark_fd, "wb") as f:
                f.write(body)
        finally:
            os.close(fd)
        self.check()  # the path could have been swapped for a link between mkdir and open
        return lab_id

    @property
    def lab_id(self) -> str:
        """The id that names the lab's hosts, containers and networks. Before `claim` (a dry
        run), a provisional one that claim will then use."""
        mark = self.read_mark()
        if mark is not None:
            return mark["lab_id"]
        if self._provisional_id is None:
            self._provisional_id = new_lab_id()
        return self._provisional_id

    def is_marked(self) -> bool:
        return self.read_mark() is not None

    # State -------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    def read_state(self) -> dict | None:
        if not self.is_marked():
            return None
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def write_state(self, state: dict) -> None:
        """Atomically: a reader in another shell never sees half a file."""
        self.claim()
        tmp = self.path / "state.tmp"
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)

    @property
    def reports(self) -> Path:
        """Exercise reports: the one thing `lab down` keeps."""
        return self.path / "reports"

    def exists(self) -> bool:
        """True while the run directory holds anything of the lab's besides reports."""
        return self.is_marked() and any(
            (self.path / name).is_symlink() or (self.path / name).exists() for name in LAB_ENTRIES
        )

    def take_down(self) -> list[str]:
        """`lab down`'s last step: remove what the lab wrote here; says so when there was any."""
        had = self.exists()
        self.remove()
        return [f"run dir {self.path}"] if had else []

    def remove(self) -> list[str]:
        """Delete what the lab wrote here (never a link's target); keep reports and anything
        else. The dir itself goes when nothing else is left. Returns what it left behind."""
        if not self.is_marked():
            return []
        for name in LAB_ENTRIES:
            entry = self.path / name
            try:
                info = os.lstat(entry)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry, ignore_errors=True)  # fd-based on Linux: links inside are unlinked, not followed
            else:
                entry.unlink(missing_ok=True)
        left = sorted(p.name for p in self.path.iterdir() if p.name != MARK_FILE)
        if not left:
            self.mark_file.unlink(missing_ok=True)
            try:
                self.path.rmdir()
            except OSError:
                pass
        return left


def new_lab_id() -> str:
    """Five hex digits: short enough for Linux's 15-character interface names."""
    return secrets.token_hex(3)[:5]
