"""The `lab` command: one module per subcommand, one-line errors, non-zero exits.

Ctrl-C, SIGTERM and SIGHUP stop a verb alike (the same teardown runs, and a second signal
cannot cut it short), and no
failure ends in a traceback: the lab's own errors, the OS's, a subprocess that timed
out, the Docker SDK's and Ray's each become one line (LAB_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from lab.errors import LabError
from lab.procs import Stopped, stop_on


def printable(text: str) -> str:
    """One line whatever the user typed: control characters (newlines too) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exits 2."""

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)  # what error() may quote
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        given = getattr(self, "given", [])
        if self._subparsers is not None and "invalid choice" in message and given and given[0].startswith("-"):
            # `lab exercise run --runtime docker kill-worker`: the flag's value was read as the name.
            names = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
            choices = list(names.choices or ())
            word = str(names.metavar or names.dest or "name")
            what, example = (
                (repr(choices[0]), choices[0]) if len(choices) == 1 else (f"the {word.lower()}", word.upper())
            )
            message = f"{given[0]} goes after {what}: {self.prog} {example} {given[0]} ..."
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def build_parser() -> Parser:
    from lab.cli import bench, chaos, ci, doctor, down, exercise, image, run, status, up, why

    parser = Parser(prog="lab", description="Run, break and watch multi-node torchrun jobs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (up, down, status, run, why, doctor, exercise, chaos, ci, bench, image):
        module.register(sub)
    return parser


def one_line(error: BaseException) -> str:
    """What went wrong, on one line, for the errors that are not the lab's own."""
    cause = getattr(error, "cause", None)  # a Ray task's error: the exception it wraps, not its traceback
    if isinstance(cause, BaseException):
        return one_line(cause)
    if isinstance(error, subprocess.TimeoutExpired):
        cmd = error.cmd if isinstance(error.cmd, str) else " ".join(map(str, error.cmd))
        return f"`{cmd}` did not finish within {error.timeout:g}s"
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text[:300]}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = stop_on(signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    try:
        return args.handler(args)
    except LabError as e:
        print(f"lab {args.command}: error: {printable(str(e))}", file=sys.stderr)
        return 1
    except Stopped as e:
        said = "interrupted" if e.signum == signal.SIGINT else f"stopped by {signal.Signals(e.signum).name}"
        print(f"lab {args.command}: {said}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print(f"lab {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 -- the CLI's promise: one line, never a traceback
        if os.environ.get("LAB_DEBUG"):
            raise
        print(f"lab {args.command}: error: {printable(one_line(e))} (LAB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
