"""An agent's log line for a failed worker, formatted without torch._dynamo (lab/node/torch_log_format.py).

Each check runs in a fresh interpreter: a test process may have torch._dynamo loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import copy, json, logging, sys
    import torch.distributed.run
    from torch._logging._internal import TorchLogsFormatter
    from lab.node import torch_log_format

    wrapped = torch_log_format.install()
    logger = logging.getLogger("torch.distributed.elastic.agent.server.api")
    try:
        raise RuntimeError("worker 1 died")
    except RuntimeError:
        logger.exception("failed")  # torchelastic's way; goes to torch's handler, on stderr
        record = logger.makeRecord(logger.name, logging.ERROR, "api.py", 7, "failed", (), sys.exc_info())
    plain = copy.copy(record)
    ours = torch_log_format.TracebackFirst(TorchLogsFormatter()).format(record)
    dynamo_after = "torch._dynamo" in sys.modules
    torchs = TorchLogsFormatter().format(plain)  # torch's own, which imports torch._dynamo
    print(json.dumps({"wrapped": wrapped, "dynamo_after": dynamo_after, "ours": ours, "torchs": torchs,
                      "dynamo_then": "torch._dynamo" in sys.modules, "exc_info_kept": record.exc_info is not None}))
    """
)


def probe() -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout), done.stderr


def test_a_failure_is_logged_with_its_traceback_as_torch_formats_it_and_torch_dynamo_stays_unimported():
    seen, stderr = probe()
    assert seen["wrapped"] >= 1  # torch's own handlers, found and wrapped
    assert not seen["dynamo_after"], "formatting an exception imported torch._dynamo"
    assert seen["dynamo_then"]  # the probe can tell: torch's formatter does import it
    assert seen["ours"] == seen["torchs"]
    assert "RuntimeError: worker 1 died" in seen["ours"] and "Traceback (most recent call last)" in seen["ours"]
    assert seen["exc_info_kept"]  # other handlers still get the exception itself
    # The line torchelastic logged through the installed handler carries the traceback too.
    assert "failed" in stderr and "RuntimeError: worker 1 died" in stderr
