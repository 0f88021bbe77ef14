"""torch's log lines with a traceback, formatted without importing torch._dynamo.

torch formats its loggers' records with torch._logging's TorchLogsFormatter, which imports
torch._dynamo the first time a record carries an exception, only to read one flag of its config
(whether a graph break's traceback is shown). That import is 1.1-1.4 CPU-seconds here.
torchelastic logs every worker failure with its exception, so a torchrun agent paid it at its
first failure, between seeing the worker die and restarting it (0.7 s late), or ahead of time:
the lab's agents that spawn their workers used to import it in a background thread once their
workers ran, 1.1 CPU-seconds in each whether a worker failed or not (about 30 such agents in a
system-tier run: docs/architecture.md).

Here the agent's torch handlers format such a record as TorchLogsFormatter does, without the
import: the traceback is rendered first by logging's own formatException (what
TorchLogsFormatter calls too) and cached on the record, as logging caches it, and the torch
formatter is handed a copy without exc_info, so it appends that text and reads no config. The
lines are the same (graph-break records, the one case the flag changes, come from torch.compile,
which an agent never runs). Handlers torch makes later (torch._logging.set_logs) format as torch
does, import and all.
"""

from __future__ import annotations

import copy
import logging


class TracebackFirst(logging.Formatter):
    """Formats as the TorchLogsFormatter it wraps, an exception's text rendered beforehand."""

    def __init__(self, torch_formatter: logging.Formatter) -> None:
        super().__init__()
        self.torch_formatter = torch_formatter

    def format(self, record: logging.LogRecord) -> str:
        if not record.exc_info:
            return self.torch_formatter.format(record)
        if not record.exc_text:
            record.exc_text = self.torch_formatter.formatException(record.exc_info)
        without = copy.copy(record)  # other handlers still see the record's exc_info
        without.exc_info = None
        return self.torch_formatter.format(without)


def install() -> int:
    """Wrap the formatter of every handler torch gave its loggers at import; returns how many
    were wrapped (none where torch logs through handlers of its own kind no more)."""
    from torch._logging._internal import TorchLogsFormatter

    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    wrapped = 0
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler.formatter, TorchLogsFormatter):
                handler.setFormatter(TracebackFirst(handler.formatter))
                wrapped += 1
    return wrapped
