"""compendium: the library behind the ICML 2026 verified compendium.

Shared pieces live at the top level (claims ledger, chapter handle, registry, seeding, plotting,
paths); one module per paper lives in :mod:`compendium.papers`.

The chapter handle and the ledger are re-exported lazily (PEP 562): ``from compendium import
start_chapter`` works as before, but importing ``compendium.workflow`` (every Snakemake start) or a
paper module does not load the ledger, scipy and matplotlib.
"""

__all__ = ["Chapter", "Ledger", "start_chapter"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("Chapter", "start_chapter"):
        from . import chapter

        return getattr(chapter, name)
    if name == "Ledger":
        from .claims import Ledger

        return Ledger
    raise AttributeError(f"module 'compendium' has no attribute {name!r}")
