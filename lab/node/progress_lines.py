"""A script's progress, read from its own output as it prints it: which lines say a step (the
default pattern, or the user's --progress-regex), which count a tqdm bar shows (BarReader), and a
stand-in for sys.stdout/sys.stderr that hands each whole line (a tqdm redraw included) to a
reader. lab.node.user_script watches with them."""

from __future__ import annotations

import re
from typing import Any

# "step 12", "Step: 12", "Epoch 3", "epoch=3", "iter 40/100", "Iteration 40", "[GPU0] Epoch 3 | ...",
# "Epoch: [14][1/4]" (pytorch/examples' imagenet), '"step": 12' (JSON logs), "global_step=300",
# "Epoch 2: 45%|####" (tqdm, Lightning). Not "'epoch': 10.5" (Hugging Face's Trainer: a fraction
# is not a count, whatever its digits), nor "Iteration:  45%|" (tqdm's percentage, not the
# iteration), nor "step 1,234" (read as 1 it would be wrong: no count is safer). No quote or
# percent character in the pattern itself (\x22, \x27, \x25): it travels in pods' and containers'
# command lines.
DEFAULT_REGEX = (
    r"(?i)(?:\bglobal[_ ]|\b)(?P<unit>step|epoch|iter(?:ation)?)\b"
    r"[\x22\x27]?\s*[:=#]?\s*\[?(?P<n>\d+)(?![.,]?\d|\s*\x25)"
)
UNITS = {"iteration": "iter"}
# A tqdm bar with no unit word before it (Hugging Face's Trainer, most scripts' `tqdm(loader)`):
# "  8%|8         | 5/60 [00:01<00:11,  4.9it/s]" is step 5 (BarReader); read only where the
# pattern above finds nothing (Lightning's "Epoch 2:  45%|...| 45/100 [" is epoch 2).
TQDM_BAR = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")
# tqdm redraws its bar after a carriage return, with no newline until it closes: each redraw is a line.
LINE_ENDS = re.compile(r"\r\n|\r|\n")
# A line about a checkpoint's loading is not progress: minGPT-ddp prints "Resuming training from
# snapshot at Epoch 13", the epoch it *finished*, then runs epoch 14; read as progress, it made
# the work redone one epoch too many. (Scripts that print the epoch they start at print it again
# on their next progress line.) Only the default pattern skips them: a --progress-regex is the user's.
# A verb of loading followed by what is loaded ("data loading 0.1 s" in a progress line is progress).
RESUMING = re.compile(
    r"(?i)\b(?:resum\w*|restor\w*|load(?:ed|ing)?|continu\w*)\b.*\b(?:from|checkpoint|snapshot|ckpt|model|weights|state)"
)


def progress_value(pattern: re.Pattern[str], line: str) -> tuple[int, str] | None:
    """(number, unit) from the first match in a line of output, or None."""
    if pattern.pattern == DEFAULT_REGEX and RESUMING.search(line):
        return None
    match = pattern.search(line)
    if not match:
        return None
    groups = match.groupdict()
    try:
        number = int(groups["n"] if groups.get("n") is not None else match.group(1))
    except (IndexError, TypeError, ValueError):
        return None
    unit = (groups.get("unit") or "step").lower()
    return number, UNITS.get(unit, unit)


class LineWatcher:
    """Stands in for sys.stdout/sys.stderr: passes everything through, reads whole lines."""

    def __init__(self, stream: Any, on_line):
        self._stream, self._on_line, self._partial = stream, on_line, ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        *lines, self._partial = LINE_ENDS.split(self._partial + text)
        for line in lines:
            if line:  # "\r\n" split twice, or a bare redraw
                self._on_line(line)
        return written

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


class BarReader:
    """One process's tqdm bar counts, as steps: of one bar only, the first one drawn (by its
    total: an outer bar over epochs and an inner one over batches are two), and only while its
    count does not go back, without a restart: a bar drawn afresh every epoch counts batches of
    that epoch, not the job's steps, and from then on none of its counts is read."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.last = -1
        self.off = False

    def read(self, line: str) -> int | None:
        match = None if self.off else TQDM_BAR.search(line)
        if not match:
            return None
        count, total = int(match["n"]), int(match["total"])
        self.total = total if self.total is None else self.total
        if total != self.total:
            return None
        if count < self.last:
            self.off = True
            return None
        self.last = count
        return count
