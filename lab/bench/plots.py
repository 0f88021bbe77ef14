"""The benchmarks' plots: one matplotlib figure, labelled and saved the same way everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def figure(path: Path, *, xlabel: str, ylabel: str, title: str) -> Iterator:
    """Yield the axes to draw on; on leaving, label them, add the legend and save a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the PNG is the only output
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        yield ax
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
