"""`lab chaos --script PATH [-- ARGS]`: the campaign on a user's own training script, unmodified.

The script runs as a drill on a script runs it (lab.node.user_script watches it from the
outside: each progress line becomes a step event of its rank), in a working dir of its own
under the run dir, recovering by the lab's tuned restart or torch's rendezvous (in-process
recovery needs the script to use lab.inprocess: `lab run --recovery in-process`). Two kinds
are the trainer's alone (TRAINER_ONLY says why). The job's length is the script's: the campaign
does not end it early, and a fault planned after its end is not injected. With --compare, the
file the script writes at its end is set against a fault-free run of the same script in a
working dir of its own: the final result, bit-identical or why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.exercises.script.compare import compare, keep
from lab.exercises.script.spec import ScriptSpec
from lab.topology import Topology

HUNG = "a hung rank of your script is seen at its own process group's timeout, which the lab does not set"
TRAINER_ONLY = {
    "hang-worker": HUNG,
    "kill-after-save": "the lab's trainer says when a checkpoint save begins; your script does not",
    "hang-in-python": HUNG,
    "corrupt-checkpoint": "the lab knows the trainer's checkpoint folder, not your script's: "
    "`lab exercise run corrupt-checkpoint --script ... --ckpt-dir DIR` damages what it saved",
    "kill-in-save": "the lab's trainer saves at a known interval from rank 0; your script's next save may be far off",
}
REFERENCE = "reference"


@dataclass(frozen=True)
class ScriptTarget:
    spec: ScriptSpec
    workdir: Path  # the job's working dir, as the nodes see it (this machine sees it too: HOST_FILES)
    reference_workdir: Path  # the fault-free run's
    keep_dir: Path  # where the result files are kept (the working dirs go with `lab down`)

    def topology(self, base: Topology, workdir: Path | None = None) -> Topology:
        return base.replace(script_wrapper=self.spec.wrapper(workdir or self.workdir))

    def final_result(self, drill: Any, job_s: float) -> dict[str, Any]:
        """The --compare file of the job against the fault-free run's: {"identical", "why"}. job_s:
        how long the struck job ran; the reference, the same steps without its faults, gets as
        long and --deadline more (a 100-fault campaign's reference once had 180 s for 18 minutes
        of steps, and the 30 minutes of ledger before it were lost)."""
        if not self.spec.compare:
            return {"identical": None, "why": "not compared: give --compare FILE, a file your script writes at its end"}
        ours = self._keep(self.workdir, "job")
        bound_s = job_s + self.spec.deadline_s
        drill.progress(f"running the uninterrupted reference, in a working dir of its own (up to {bound_s:.0f} s)")
        alone = self.topology(drill.topology, self.reference_workdir)
        drill.rerun(list(self.spec.args), fresh=REFERENCE, topology=alone)
        try:
            drill.wait_job(bound_s)
        except LabError as e:
            return {"identical": False, "why": f"not compared: the uninterrupted reference did not end ({e})",
                    "reference_ended": False}  # fmt: skip
        theirs = self._keep(self.reference_workdir, REFERENCE)
        equal, how = compare(ours, theirs, self.spec.rtol)
        return {"identical": equal, "why": "" if equal else how, "compared": self.spec.compare, "how": how}

    def _keep(self, workdir: Path, label: str) -> Path:
        kept = self.keep_dir / f"{label}-{Path(str(self.spec.compare)).name}"
        keep(self.spec.compare_path(workdir), kept)
        return kept
