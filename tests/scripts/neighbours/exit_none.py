"""Imports a module next to it and ends with sys.exit(main()), main returning None."""

import os
import sys

from helper import GREETING


def main() -> None:
    print(f"rank {os.environ['RANK']}: {GREETING}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
