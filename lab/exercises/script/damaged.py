"""What a user's script loaded after corrupt-checkpoint damaged one of its checkpoints: a DCP step
(`--damage no-metadata` or `mixed-steps`: the damaged step, or the one before it), or a file
(`truncate`: the damaged file, whether its load worked or raised, or another one).

torch.distributed.checkpoint checks neither that a folder's files are whole nor that they are
one step's: a folder without its `.metadata` fails to load, and shards of two steps load
without a word, as a state that never was. So what a script loaded after the fault says
whether it checks what it resumes from, and the finding says what a careful script does."""

from __future__ import annotations

from pathlib import PurePosixPath

from lab.exercises.script.cut import same_file
from lab.health.events import Event
from lab.report import Report
from lab.workloads.checkpoint_files import DCP_DAMAGES

CAREFUL = (
    "a careful script writes a manifest (each file's size and sha256) once every rank's save is done, checks it "
    "before loading, and falls back to the step before (as lab/workloads/checkpoint_dcp.py does)"
)


def loaded_step(faults: list[dict], loaded: list[str]) -> dict | None:
    """{"damage", "step", "loaded", "took_damaged"} where the drill damaged a DCP step and rank 0
    loaded something after it; else None. A load names the step's folder as the script wrote it
    (often relative to its working dir), the damage the file's full path: matched by their tail."""
    damage = next((f for f in faults if f["fault"] == "corrupt_checkpoint"), None)
    if damage is None or damage["args"].get("mode") not in DCP_DAMAGES or not loaded or not damage.get("result"):
        return None
    step = PurePosixPath(damage["result"]).parent
    first = PurePosixPath(loaded[0])
    took = step.parts[-len(first.parts) :] == first.parts
    return {"damage": damage["args"]["mode"], "step": step.name, "loaded": loaded[0], "took_damaged": took}


def check(report: Report, found: dict | None) -> None:
    """Where the drill damaged a DCP step and the script loaded after it: whether it passed over
    the damaged step (to the one before, or none)."""
    if not found:
        return
    if found["took_damaged"]:
        detail = f"it loaded {found['loaded']}, the step the drill damaged ({found['damage']}): {CAREFUL}"
    else:
        detail = f"it passed over the damaged {found['step']} ({found['damage']}) and loaded {found['loaded']}"
    report.check("it did not resume from the step the drill damaged", not found["took_damaged"], detail)


CAREFUL_FILE = (
    "a careful script checks a checkpoint before trusting it (a checksum, or a load that can fail) and falls back "
    "to the one before (as lab/workloads/checkpoint.py does)"
)


def loaded_file(faults: list[dict], events: list[dict]) -> dict | None:
    """{"path", "loaded", "error", "took_damaged", "in_folder"}: the file the drill damaged (not a DCP
    step's own damage) and the script's first load after the damage, any rank, whether it worked or
    raised, and whether that load named the damaged file's folder (a DCP step); None where no file
    was damaged or nothing was loaded after."""
    damage = next((f for f in faults if f["fault"] == "corrupt_checkpoint"), None)
    if damage is None or damage["args"].get("mode") in DCP_DAMAGES or not damage.get("result"):
        return None
    loads = [e for e in events if e["event"] in (Event.LOADED, Event.LOAD_FAILED) and e["time"] > damage["time"]]
    if not loads:
        return None
    first = min(loads, key=lambda e: e["time"])
    damaged_file = PurePosixPath(damage["result"])  # a file, or a DCP folder's file (loaded by its folder)
    in_folder = same_file(str(damaged_file.parent), first["path"])
    took = in_folder or same_file(str(damaged_file), first["path"])
    return {
        "path": damage["result"], "loaded": first["path"], "error": first.get("error"), "took_damaged": took,
        "in_folder": in_folder,
    }  # fmt: skip


def check_file(report: Report, found: dict | None) -> None:
    """Where the drill damaged a file and the script loaded after it: whether it passed over it."""
    if not found:
        return
    if found["took_damaged"]:
        how = (
            f"and it failed ({found['error'].split('. ')[0]})" if found.get("error") else "and it loaded without a word"
        )
        careful = CAREFUL if found.get("in_folder") else CAREFUL_FILE  # a DCP step's file, or a file of its own
        detail = f"it loaded {found['loaded']}, the file the drill damaged, {how}: {careful}"
    else:
        detail = f"it passed over {found['path']} (damaged) and loaded {found['loaded']}"
    report.check("it did not resume from the checkpoint the drill damaged", not found["took_damaged"], detail)
