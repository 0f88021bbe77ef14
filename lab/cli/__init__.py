"""The `lab` command: one module per subcommand, one-line errors, non-zero exits."""

from __future__ import annotations

import argparse
import sys

from lab.errors import LabError


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exits 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    from lab.cli import bench, down, exercise, run, status, up

    parser = Parser(prog="lab", description="Run, break and watch multi-node torchrun jobs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (up, down, status, run, exercise, bench):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except LabError as e:
        print(f"lab {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"lab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
