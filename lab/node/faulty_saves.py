"""A watched script's saves as the in-rank storage faults change them (lab.health.injected_error).

A full disk (SIGRTMIN+6): the next torch.save to a path goes to /dev/full, so the error the script
meets is torch's own.

Storage that stalls (SIGRTMIN+8, the kill-in-save drill): the rank's next save pauses for PAUSE_S,
announced first by a `save_paused` event, and the drill kills the rank inside the pause. Where
the pause falls is where slow storage would leave a save that a kill cuts:

- torch.save(obj, PATH): the file holds the first half of its bytes (a script that writes its
  checkpoint straight to its final name is left with a truncated file under it; one that writes
  to a temporary name and renames is left with its old file whole);
- dcp.save (and async_save's writes): every shard written, the `.metadata` not yet (DCP's
  coordinator writes it last, in FileSystemWriter.finish, on the coordinating rank: rank 0).

Paused or not, the bytes are torch's own for that name (only their timing changes): the script's
behaviour is unchanged.
A torch.save to a file object or a buffer is not paused (the script owns where its bytes go).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from lab.health import injected_error
from lab.health.events import Event, EventLog


def onto_a_full_disk(save):
    """torch.save, whose path goes to a full disk once the disk-full fault came
    (lab.health.injected_error): the error the script then meets is torch's own."""

    def wrapped(obj, *args, **kwargs):
        if args and isinstance(args[0], str | os.PathLike):
            args = (injected_error.written_to(args[0]), *args[1:])
        elif isinstance(kwargs.get("f"), str | os.PathLike):
            kwargs["f"] = injected_error.written_to(kwargs["f"])
        return save(obj, *args, **kwargs)

    wrapped.__wrapped__ = save  # type: ignore[attr-defined]
    return wrapped


def paused_torch_save(save: Callable[..., Any], log: EventLog) -> Callable[..., Any]:
    """torch.save, which once armed writes half the file, pauses, then writes the rest."""

    def wrapped(obj, *args, **kwargs):
        path = args[0] if args else kwargs.get("f")
        if not injected_error.save_pauses() or not isinstance(path, str | os.PathLike):
            return save(obj, *args, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k != "f"}
        # The bytes torch.save writes to this name (its archive is named after the file), made
        # beside nothing of the script's, then written here in two halves.
        with tempfile.TemporaryDirectory(prefix="tlab-pause-") as aside:
            whole = os.path.join(aside, os.path.basename(os.fspath(path)))
            save(obj, whole, *args[1:], **rest)
            with open(whole, "rb") as made:
                data = made.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            injected_error.midway(lambda: log.write(Event.SAVE_PAUSED, path=os.path.abspath(path), how="torch.save"))
            f.write(data[len(data) // 2 :])
        return None

    wrapped.__wrapped__ = save  # type: ignore[attr-defined]
    return wrapped


def pause_dcp_before_metadata(log: EventLog) -> None:
    """DCP's coordinator pauses (once armed) before it writes a step's `.metadata`."""
    from torch.distributed.checkpoint import filesystem

    writer = filesystem._FileSystemWriter
    finish = writer.finish

    def paused_finish(self, metadata, results):
        folder = os.path.abspath(os.fspath(self.path))
        injected_error.midway(lambda: log.write(Event.SAVE_PAUSED, path=folder, how="dcp.save"))
        return finish(self, metadata, results)

    paused_finish.__wrapped__ = finish  # type: ignore[attr-defined]
    writer.finish = paused_finish  # type: ignore[method-assign]
