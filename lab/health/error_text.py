"""What an exit record says a rank died of: an exception in one line."""

from __future__ import annotations


def error_text(error: BaseException) -> str:
    """An exit record's `error`: the exception's type and the first line of its message. An
    exception that wraps each rank's own (DCP's CheckpointException: `failures`, {rank: (error,
    its frames)}) says the first rank's, which its own first line (the ranks' numbers) does not."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, (inner, *_frames) = min(failures.items(), key=lambda item: item[0])
        if isinstance(inner, BaseException):
            first_line = f"on rank {rank}, {error_text(inner)}"
    return f"{type(error).__name__}: {first_line}"[:300]
