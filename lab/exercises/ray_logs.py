"""Ray's own notices during a drill go to the run dir's logs, not to the newcomer's terminal.

`ray.init` announces token authentication and other library matters on stderr, through
loggers it configures during the call and from the processes it starts. A drill's
output is the lab's own lines: while Ray starts, stderr (the file descriptor, so child
processes are covered too) goes to `<run dir>/logs/ray-driver.log`, which `lab down`
keeps, as it keeps reports. With `-v` nothing is redirected.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def ray_notices_to(log_path: Path, verbose: bool = False) -> Iterator[None]:
    if verbose:
        yield
        return
    log_path.parent.mkdir(mode=0o700, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)
