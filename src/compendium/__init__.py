"""compendium: the library behind the ICML 2026 verified compendium.

Shared pieces live at the top level (claims ledger, chapter handle, registry, seeding, plotting,
paths); one module per paper lives in :mod:`compendium.papers`.
"""

from .chapter import Chapter, start_chapter
from .claims import Ledger

__all__ = ["Chapter", "Ledger", "start_chapter"]
__version__ = "0.1.0"
