"""What a drill on the user's own script is told: the script, its checkpoints, how to read its progress."""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lab import files
from lab.errors import LabError
from lab.node.user_script import DEFAULT_REGEX
from lab.options import MAX_RESTARTS, NODES, NPROC_PER_NODE, RDZV_PORT, Option

SCRIPT = Option(
    "--script", "run the drill on your own torchrun script, unmodified, instead of the lab's trainer", metavar="PATH"
)
CKPT_DIR = Option(
    "--ckpt-dir",
    "where your script writes its checkpoints (relative to its working dir, or absolute): a progress "
    "signal, and what corrupt-checkpoint damages",
    metavar="DIR",
)
PROGRESS_REGEX = Option(
    "--progress-regex",
    "a line of your script's output that gives its progress: the group n (else the first) is the number, "
    "the group unit its unit (default: 'step 12', 'Epoch 3', 'iter 40/100', ...)",
    metavar="REGEX",
)
AT_TIME = Option(
    "--at-time",
    "with no step in the output, inject this many seconds after the workers' process group is up (default %(default)s)",
    15.0,
    float,
    metavar="SECONDS",
)
DEADLINE = Option(
    "--deadline",
    "how long the job gets after the fault before the drill calls it stuck (default %(default)s)",
    180.0,
    float,
    metavar="SECONDS",
)
COMPARE = Option(
    "--compare",
    "a file your script writes at the end (relative to its working dir): compared with a fault-free reference run's",
    metavar="FILE",
)
WORKDIR = Option(
    "--workdir",
    "the folder your script runs in (default: a fresh one per run under the run dir, so no run sees another's "
    "checkpoints): your project's folder when the script reads files relative to where it starts; its "
    "checkpoints there are then yours to clear between runs (local runtime)",
    metavar="DIR",
)
RTOL = Option(
    "--rtol",
    "compare the numbers in --compare within this relative tolerance, of each number or of the numbers' "
    "typical size, whichever is larger (default: bitwise)",
    type=float,
)
SCRIPT_TOPOLOGY = (
    NODES,
    NPROC_PER_NODE,
    MAX_RESTARTS.but(default=None, help="torchrun's --max-restarts (default: the drill's)"),
    RDZV_PORT.but(default=None, help="the rendezvous store's port (default: 29400; `lab ci`: a free one)"),
)
OPTIONS = (SCRIPT, WORKDIR, CKPT_DIR, PROGRESS_REGEX, AT_TIME, DEADLINE, COMPARE, RTOL)
DEFAULT_AT_STEP = 3  # a user's script may have few epochs: hit it early, after a few


@dataclass(frozen=True)
class ScriptSpec:
    path: str  # absolute
    args: tuple[str, ...] = ()
    ckpt_dir: str | None = None  # as given: relative to the run's working dir, or absolute
    progress_regex: str = DEFAULT_REGEX
    at_time_s: float = 15.0
    deadline_s: float = 180.0
    compare: str | None = None
    rtol: float | None = None
    workdir: str | None = None  # absolute: the user's folder to run in; None: a fresh one per run

    def wrapper(self, workdir: Path) -> tuple[str, ...]:
        """lab.node.user_script's arguments for one run (see Topology.script_wrapper)."""
        return ("--workdir", str(workdir), "--progress-regex", self.progress_regex)

    def ckpt_path(self, workdir: Path) -> Path | None:
        return workdir / self.ckpt_dir if self.ckpt_dir else None  # an absolute ckpt_dir stays itself

    def compare_path(self, workdir: Path) -> Path | None:
        """The result file in the run's working dir. A pattern (`checkpoints/*/model.pt`: a folder
        named for the time it was made, as pytorch/examples' FSDP2 names its) names the newest
        regular file it matches there, reached through no link (lab.files.regular_files)."""
        if not self.compare:
            return None
        if not PATTERN.search(self.compare):
            return workdir / self.compare
        found = [(info.st_mtime, str(rel)) for info, rel in files.regular_files(workdir) if _matches(rel, self.compare)]
        return workdir / max(found)[1] if found else workdir / self.compare


PATTERN = re.compile(r"[*?\[]")  # --compare names a pattern: the newest file it matches


def _matches(relative: Path, pattern: str) -> bool:
    """The path matches the pattern as glob matches it: part by part, `*` within one folder's name."""
    wanted = Path(pattern).parts
    return len(relative.parts) == len(wanted) and all(map(fnmatch.fnmatchcase, relative.parts, wanted))


def spec_from_args(args: argparse.Namespace, on_this_machine: bool = True) -> ScriptSpec:
    """The spec from `--script ... -- ARGS`, checked: one-line errors. on_this_machine: the
    nodes run the script from this machine's files (else from their image, at the path given)."""
    path = Path(args.script)
    if on_this_machine and not path.is_file():
        raise LabError(f"--script: no such file: {args.script}")
    regex = args.progress_regex or DEFAULT_REGEX
    try:
        re.compile(regex)
    except re.error as e:
        raise LabError(f"--progress-regex is not a regular expression: {e}") from None
    for flag, value in (("--at-time", args.at_time), ("--deadline", args.deadline)):
        if not value > 0:
            raise LabError(f"{flag} must be a positive number of seconds; got {value}")
    if args.rtol is not None and not args.rtol >= 0:
        raise LabError(f"--rtol must be 0 or more; got {args.rtol}")
    if args.rtol is not None and not args.compare:
        raise LabError("--rtol compares the --compare file: give --compare too")
    if args.compare and (os.path.isabs(args.compare) or ".." in Path(args.compare).parts):
        raise LabError("--compare is a path relative to the script's working dir (each run has its own), not above it")
    workdir = getattr(args, "workdir", None)
    if workdir is not None and not Path(workdir).is_dir():
        raise LabError(f"--workdir: no such folder: {workdir}")
    script_args = list(args.script_args)
    return ScriptSpec(
        path=str(path.resolve()) if on_this_machine else args.script,
        args=tuple(script_args[1:] if script_args[:1] == ["--"] else script_args),
        ckpt_dir=args.ckpt_dir,
        progress_regex=regex,
        at_time_s=args.at_time,
        deadline_s=args.deadline,
        compare=args.compare,
        rtol=args.rtol,
        workdir=str(Path(workdir).resolve()) if workdir else None,
    )
