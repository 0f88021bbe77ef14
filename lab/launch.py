"""A node's entry point: torchrun itself, plus the environment the lab needs, set loudly.

    python -m lab.launch [--env=NAME=VALUE ...] [--torch-defaults] <torchrun flags> SCRIPT [ARGS...]

Everything after the lab's own leading flags goes unchanged to torchrun's `main`
(`torch.distributed.run`). Before that, each variable the lab needs is set only if
you did not set it yourself: a variable it sets is logged, and one you set to
something else is kept, with a warning that names both values.

The restart workaround (pytorch/pytorch#135712): since torch 2.4 the agent shares
its rendezvous TCPStore with the workers. After a worker dies and the group
restarts, the new workers read the previous round's gloo addresses from that
store and fail in `connectFullMesh`, so `--max-restarts` never recovers.
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` gives every round a fresh store and the
restart works. `--torch-defaults` leaves it unset, to show the failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

RESTART_WORKAROUND = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def split_lab_flags(argv: list[str]) -> tuple[dict[str, str], bool, list[str]]:
    """Take the lab's leading flags off argv: (env to set, torch_defaults, torchrun argv)."""
    env: dict[str, str] = {}
    torch_defaults = False
    rest = list(argv)
    while rest:
        flag = rest[0]
        if flag == "--torch-defaults":
            torch_defaults = True
        elif flag.startswith("--env="):
            name, sep, value = flag[len("--env="):].partition("=")
            if not name or not sep:
                raise SystemExit(f"lab.launch: error: --env expects NAME=VALUE, got {flag!r}")
            env[name] = value
        else:
            break
        rest.pop(0)
    return env, torch_defaults, rest


def apply_env(wanted: Mapping[str, str], environ: dict[str, str], log=print) -> dict[str, str]:
    """Set each wanted variable the user left unset; keep the user's value otherwise.

    Returns the variables actually set. Never silent: every decision is logged.
    """
    applied = {}
    for name, value in wanted.items():
        current = environ.get(name)
        if current is None:
            environ[name] = value
            applied[name] = value
            log(f"[lab.launch] setting {name}={value}")
        elif current != value:
            log(f"[lab.launch] WARNING: keeping your {name}={current} (the lab would set {value})")
    return applied


def lab_environment(extra: Mapping[str, str], torch_defaults: bool) -> dict[str, str]:
    wanted = {} if torch_defaults else dict(RESTART_WORKAROUND)
    wanted.update(extra)
    return wanted


def main(argv: list[str] | None = None) -> None:
    extra, torch_defaults, torchrun_argv = split_lab_flags(sys.argv[1:] if argv is None else argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    apply_env(lab_environment(extra, torch_defaults), os.environ, log)
    if torch_defaults:
        log("[lab.launch] --torch-defaults: restarts reuse the shared rendezvous store "
            "(pytorch/pytorch#135712); expect a restarted group to fail in connectFullMesh")

    # Imported late: torch takes seconds to import and the flags above need none of it.
    from torch.distributed.run import main as torchrun_main

    torchrun_main(torchrun_argv)


if __name__ == "__main__":
    main()
