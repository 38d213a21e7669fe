"""One plotting theme for the whole book, and the helper that saves figures."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

PALETTE = "colorblind"


def set_theme() -> None:
    """Apply the book's seaborn theme (called by the chapter set-up)."""
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE)
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "savefig.dpi": 120,
            "savefig.bbox": "tight",
            "axes.titleweight": "bold",
            # PNG metadata would carry the matplotlib version and a date: keep files reproducible
            "savefig.format": "png",
        }
    )


def save_figure(fig, path: str | Path) -> Path:
    """Save ``fig`` as a PNG without time-stamped metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    return path
