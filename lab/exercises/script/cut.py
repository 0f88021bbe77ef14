"""What a user's script loaded after kill-in-save cut one of its saves midway: the half, or a whole one.

The drill paused the target's save (lab.node.faulty_saves: half a torch.save file written, or a
DCP step's shards without their `.metadata`) and killed it there. A script that wrote straight
to its checkpoint's final name, or moved a `latest` marker before the save was whole, finds the
half under the name it loads on restart; torch.load (or dcp.load) then fails, or worse, loads.
Its first load after the kill, whether it worked or raised (lab.node.user_script records both),
says which kind of script it is."""

from __future__ import annotations

from pathlib import PurePosixPath

from lab.health.events import Event
from lab.report import Report

CAREFUL = {
    "torch.save": "a careful script writes each checkpoint under a temporary name and renames it once whole, and "
    "moves a `latest` marker only after that",
    "dcp.save": "a careful script loads only a folder whose save completed (its .metadata there, or a marker written "
    "after dcp.save returned) and falls back to the one before",
}


def loaded_cut(events: list[dict], kill_time: float) -> dict | None:
    """{"path", "how", "loaded", "error", "took_cut", "rewritten_by"}: the save cut at the kill and
    the first load after it (any rank; a load that raised counts); None where no save was cut or
    nothing was loaded."""
    cut = max(
        (e for e in events if e["event"] == Event.SAVE_PAUSED and e["time"] <= kill_time),
        key=lambda e: e["time"],
        default=None,
    )
    loads = [e for e in events if e["event"] in (Event.LOADED, Event.LOAD_FAILED) and e["time"] > kill_time]
    if cut is None or not loads:
        return None
    first = min(loads, key=lambda e: e["time"])
    took = same_file(cut["path"], first["path"])
    # Another rank's save of the same file, done after the cut began, wrote it whole again: a load
    # that then worked read that copy, not the half (writers.py flags several ranks on one file).
    again = sorted(
        {
            e["rank"]
            for e in events
            if e["event"] == Event.SAVED
            and cut["time"] < e["time"] < first["time"]
            and same_file(cut["path"], e["path"])
        }
    )
    rewritten = again if took and not first.get("error") else []
    return {
        "path": cut["path"],
        "how": cut.get("how", "torch.save"),
        "loaded": first["path"],
        "error": first.get("error"),
        "took_cut": took and not rewritten,
        "rewritten_by": rewritten,
    }


def same_file(cut: str, loaded: str) -> bool:
    """A load names the file as the script wrote it (often relative to its working dir), the cut
    its full path: the same file when the load's path is the cut's tail."""
    tail = PurePosixPath(loaded).parts  # "./a" is ("a",): no "." part is left
    return bool(tail) and PurePosixPath(cut).parts[-len(tail) :] == tail


def check(report: Report, found: dict | None) -> None:
    """Where kill-in-save cut a save and the script loaded after it: whether it passed over the half."""
    if not found:
        return
    state = "with its shards and no .metadata" if found["how"] == "dcp.save" else "half written"
    left = f"{state} (its {found['how']} cut midway)"
    if found["took_cut"]:
        failed = f" ({found['error'].split('. ')[0]})" if found.get("error") else ""
        careful = CAREFUL[found["how"]]
        detail = f"it loaded {found['loaded']}{failed}, which the kill left {left}: {careful}"
    elif found.get("rewritten_by"):
        ranks = ", ".join(str(rank) for rank in found["rewritten_by"])
        detail = (
            f"it loaded {found['loaded']}, the file the kill left {left}, whole: rank(s) {ranks} saved it again "
            "after the cut (which copy a restart finds is a race while several ranks write one file)"
        )
    else:
        detail = f"it passed over {found['path']}, which the kill left {left}, and loaded {found['loaded']}"
    report.check("it did not load the save the kill cut short", not found["took_cut"], detail)
