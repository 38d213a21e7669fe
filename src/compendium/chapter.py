"""What a chapter notebook holds on to: its ledger, its output folder, figures and glued numbers.

A notebook starts with::

    ch = start_chapter("continuized_hippo", scale=scale, seed=seed, device=device)

and ends with ``ch.finish()``, which writes ``results/<scale>/<slug>/claims.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths
from .claims import Ledger
from .plotting import save_figure, set_theme
from .runtime import resolve_device, seed_everything

SCALES = ("smoke", "full")


def _glue(name: str, value: Any, display: bool = False) -> None:
    """MyST-NB ``glue`` when running in a kernel; a no-op elsewhere (tests, scripts)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    if get_ipython() is None:
        return
    from myst_nb import glue

    glue(name, value, display=display)


@dataclass
class Chapter:
    """Handle for one chapter run. Build it with :func:`start_chapter`."""

    slug: str
    scale: str
    seed: int
    device: str
    output_dir: Path
    ledger: Ledger
    figures: list[str] = field(default_factory=list)

    @property
    def figures_dir(self) -> Path:
        return self.output_dir / "figures"

    def figure(self, fig, name: str) -> Path:
        """Save ``fig`` as ``figures/<name>.png`` and glue it under ``<slug>-<name>``.

        The notebook shows it with a ``{glue:figure}`` directive that carries the caption.
        """
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"figure name must be a word of letters, digits, '-' or '_', got {name!r}")
        if name in self.figures:
            raise ValueError(f"figure {name!r} was already saved in this chapter")
        path = save_figure(fig, self.figures_dir / f"{name}.png")
        self.figures.append(name)
        _glue(f"{self.slug}-{name}", fig, display=False)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return path

    def glue(self, name: str, value: Any, fmt: str | None = None) -> Any:
        """Glue a number for the prose: ``{glue:text}`<slug>-<name>``` in the Markdown."""
        shown = format(value, fmt) if fmt else value
        _glue(f"{self.slug}-{name}", shown, display=False)
        return value

    def finish(self) -> Ledger:
        """Write ``claims.json``; call once, at the end of the Verification section."""
        self.ledger.save(self.output_dir / "claims.json")
        return self.ledger


def start_chapter(slug: str, *, scale: str, seed: int, device: str = "auto") -> Chapter:
    """Seed everything, apply the plotting theme, and return the chapter handle."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    seed_everything(seed)
    set_theme()
    out = paths.chapter_dir(slug, scale)
    out.mkdir(parents=True, exist_ok=True)
    return Chapter(
        slug=slug,
        scale=scale,
        seed=int(seed),
        device=resolve_device(device),
        output_dir=out,
        ledger=Ledger(slug, scale=scale, seed=seed),
    )
