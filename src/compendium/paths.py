"""Every location the project uses, in one place (results, registry, notebooks, book)."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding ``pyproject.toml``); override with COMPENDIUM_ROOT.
ROOT = Path(os.environ.get("COMPENDIUM_ROOT", Path(__file__).resolve().parents[2]))

WORKFLOW = ROOT / "workflow"
CONFIG = WORKFLOW / "config"
REGISTRY = CONFIG / "chapters.yaml"
REGISTRY_SCHEMA = Path(__file__).resolve().parent / "schemas" / "chapters.schema.json"
CLAIMS_SCHEMA = Path(__file__).resolve().parent / "schemas" / "claims.schema.json"
EXPECTED_VERDICTS = CONFIG / "expected_verdicts.yaml"
NOTEBOOKS = ROOT / "notebooks"
BOOK = ROOT / "book"
KERNELS = ROOT / "kernels"
DATA = ROOT / "data"
#: The dataset manifest (checksums of every dataset a chapter reads); compendium.data honours COMPENDIUM_DATA_MANIFEST.
DATA_MANIFEST = DATA / "manifest.yaml"
#: Exact versions of the environment that built the book (``make lock`` writes it).
LOCK = ROOT / "requirements.lock"
KERNEL_NAME = "compendium"


def results_root() -> Path:
    """Where generated results go (``results/`` unless COMPENDIUM_RESULTS says otherwise)."""
    return Path(os.environ.get("COMPENDIUM_RESULTS", ROOT / "results"))


def chapter_dir(slug: str, scale: str) -> Path:
    """``results/<scale>/<slug>/``; the runner points COMPENDIUM_OUTPUT_DIR at it explicitly."""
    explicit = os.environ.get("COMPENDIUM_OUTPUT_DIR")
    if explicit:
        return Path(explicit)
    return results_root() / scale / slug


def notebook_path(part: str, slug: str) -> Path:
    return NOTEBOOKS / part / f"{slug}.md"


def module_path(slug: str) -> Path:
    return ROOT / "src" / "compendium" / "papers" / f"{slug}.py"


def test_path(slug: str) -> Path:
    return ROOT / "tests" / "papers" / f"test_{slug}.py"
