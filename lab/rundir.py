"""The run directory: the one place a running lab keeps its state, and proof of what it owns.

`lab up` writes it; `lab status` and `lab down` read it from any shell. Every
process the lab starts carries MARKER=<run dir> in its environment, so `lab down`
finds them even when this state was never written (the `lab` process was killed).

Every entry point opens the run dir the same way (lab.options.run_dir_from_args):
`check` refuses, in one line, what the lab must not touch (lab.ownership says what
and why); commands that write there (`lab up`, `lab run`, every drill and lesson,
their reports) `claim` it, so whichever comes first makes it, mode 0700 with its mark;
commands that start jobs also `hold` it, so a second one waits its turn in words
instead of racing. `remove` deletes only the entries the lab writes, through a file
descriptor on the directory it checked, never following a link. The lab id in the
mark names everything the lab makes outside the run dir (hosts, bridges, containers,
networks), so two labs with different run dirs run side by side.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from lab.errors import LabError
from lab.ownership import (
    MARK_FILE,
    PICK_ANOTHER,
    REPORTS_DIR,
    Mark,
    adopt_older_labs,
    check_dir,
    check_parents,
    check_private,
    create_marked,
    new_lab_id,
    older_labs_layout,
    open_dir,
    read_mark,
    write_mark,
)

__all__ = ["MARKER", "NODE_MARKER", "MARK_FILE", "LAB_ENTRIES", "RunDir", "default_path", "new_lab_id"]

MARKER = "TORCHRUN_LAB_RUN_DIR"
NODE_MARKER = "TORCHRUN_LAB_NODE"
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
    "doctor.json",  # lab.why.doctor_note
    ".shared-disk-token",  # lab.runtimes.ray_mirror: SHARE_TOKEN, KNOWN_DIR
    ".mirror",
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
        if path is not None and not str(path):
            raise LabError("--run-dir is empty (an unset variable?): name a directory, or leave it out for the default")
        given = path or os.environ.get("LAB_RUN_DIR")
        raw = Path(os.path.abspath(given)) if given else default_path()
        # Resolve the parents, never the run dir itself: a symlink there must be seen, not followed.
        self.path = raw.parent.resolve() / raw.name if raw.name else raw
        self._provisional_id: str | None = None
        self._held: int | None = None  # the fd `hold` keeps locked (on the directory as it is now)

    # Ownership ---------------------------------------------------------------------------

    @property
    def mark_file(self) -> Path:
        return self.path / MARK_FILE

    def mark(self) -> Mark | None:
        """The checked mark (None when the dir or its mark is missing); a forged one is refused."""
        if not os.path.lexists(self.path):
            return None
        fd = open_dir(self.path)
        try:
            return read_mark(fd, self.path)
        finally:
            os.close(fd)

    def check(self) -> None:
        """Refuse, in one line, a run dir the lab must not touch. A missing one is fine."""
        check_parents(self.path)
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise LabError(f"run dir {self.path}: {e.strerror}") from None
        check_dir(info, self.path)
        fd = open_dir(self.path)
        try:
            mark = read_mark(fd, self.path)
            if mark is not None:
                check_private(os.fstat(fd), self.path)
            elif not older_labs_layout(os.listdir(fd)):
                raise LabError(
                    f"run dir {self.path} holds files the lab did not make (no {MARK_FILE} mark); {PICK_ANOTHER} "
                    "(a new path: the lab makes it)"
                )
        finally:
            os.close(fd)

    def claim(self) -> str:
        """Make the run dir (0700, its mark inside from the first moment) or check it is ours;
        returns the lab id. Called by every command that writes here, whichever comes first."""
        self.check()
        if not os.path.lexists(self.path):
            create_marked(self.path, self._provisional_id or new_lab_id())  # False: another command was first
        fd = open_dir(self.path)
        try:
            check_dir(os.fstat(fd), self.path)
            mark = read_mark(fd, self.path)
            if mark is None:
                mark = adopt_older_labs(fd, self.path)
            elif mark.dir is None:  # an older lab's mark: from now on it names this directory
                os.unlink(MARK_FILE, dir_fd=fd)
                mark = write_mark(fd, mark.lab_id)
            check_private(os.fstat(fd), self.path)
        finally:
            os.close(fd)
        if self._held is not None:
            self._relock()
        return mark.lab_id

    def hold(self) -> None:
        """Keep every other command that starts jobs out of this run dir until this process
        ends: two `lab up`s, two lessons, a lesson beside a drill. Claims the dir first. The
        hold follows the run dir when `lab down` removed it and a later step made it anew."""
        if self._held is None:
            self.claim()
            self._lock()

    def release(self) -> None:
        """Let the next command in (a process that runs many jobs, like the soak, between them)."""
        if self._held is not None:
            os.close(self._held)  # closing the last fd on it drops the flock
            self._held = None

    def _relock(self) -> None:
        assert self._held is not None
        held, now = os.fstat(self._held), os.lstat(self.path)
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
            os.close(self._held)
            self._held = None
            self._lock()

    def _lock(self) -> None:
        fd = open_dir(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LabError(
                f"another lab command is using run dir {self.path} right now (starting a lab, a drill or a "
                "lesson); wait for it to end, or stop it with `lab down`"
            ) from None
        self._held = fd

    @property
    def lab_id(self) -> str:
        """The id that names the lab's hosts, containers and networks. Before `claim` (a dry
        run), a provisional one that claim will then use."""
        mark = self.mark()
        if mark is not None:
            return mark.lab_id
        if self._provisional_id is None:
            self._provisional_id = new_lab_id()
        return self._provisional_id

    def is_marked(self) -> bool:
        return self.mark() is not None

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
        fd = open_dir(self.path)
        try:
            try:
                os.unlink("state.tmp", dir_fd=fd)
            except FileNotFoundError:
                pass
            tmp = os.open("state.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            with os.fdopen(tmp, "w") as f:
                f.write(json.dumps(state, indent=2))
            os.replace("state.tmp", "state.json", src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)

    @property
    def reports(self) -> Path:
        """Exercise reports: the one thing `lab down` keeps (read it with this; write with reports_dir)."""
        return self.path / REPORTS_DIR

    def reports_dir(self) -> Path:
        """The reports folder, made (0700, not through a link) in a claimed run dir."""
        self.claim()
        try:
            os.mkdir(self.reports, 0o700)
        except FileExistsError:
            check_dir(os.lstat(self.reports), self.reports)
        return self.reports

    def claim_for_report(self, where: Path) -> None:
        """A report bound for the run dir's reports claims it then, once its command's flags are
        checked (bad input never makes a run dir); --report-dir elsewhere claims nothing."""
        if where.is_relative_to(self.reports):
            self.reports_dir()

    def exists(self) -> bool:
        """True while the run directory holds anything of the lab's besides reports."""
        return self.is_marked() and any(os.path.lexists(self.path / name) for name in LAB_ENTRIES)

    def take_down(self) -> list[str]:
        """`lab down`'s last step: remove what the lab wrote here; says so when there was any."""
        had = self.exists()
        self.remove()
        return [f"run dir {self.path}"] if had else []

    def remove(self) -> list[str]:
        """Delete what the lab wrote here (never a link's target), through an fd on the directory
        whose mark was checked; keep reports and anything else. The dir itself goes when nothing
        else is left. Returns what it left behind."""
        if not os.path.lexists(self.path):
            return []
        fd = open_dir(self.path)
        try:
            if read_mark(fd, self.path) is None:
                return []
            for name in LAB_ENTRIES:
                _remove_entry(fd, name)
            left = sorted(name for name in os.listdir(fd) if name != MARK_FILE)
            if not left:
                os.unlink(MARK_FILE, dir_fd=fd)
                try:
                    os.rmdir(self.path)
                except OSError:
                    pass
            return left
        finally:
            os.close(fd)


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)  # fd-based: links inside are unlinked, not followed
    else:
        os.unlink(name, dir_fd=dir_fd)
