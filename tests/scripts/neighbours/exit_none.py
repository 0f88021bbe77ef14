"""Imports a module next to it, chooses its own multiprocessing start method (as a script that
starts processes of its own may), and ends with sys.exit(main()), main returning None."""

import multiprocessing
import os
import sys

from helper import GREETING


def main() -> None:
    print(f"rank {os.environ['RANK']}: {GREETING}", flush=True)


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")  # raises where a start method was already set
    sys.exit(main())
