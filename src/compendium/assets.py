"""Shared assets: things a rule builds once and chapters use (for example a tiny trained model).

An asset is declared in the registry::

    assets:
      digits_tokens_lm:
        description: "a small causal LM over quantized digits, trained here"
        builder: "compendium.papers.speculative_coupled_decoding:build_asset"

The builder is called as ``builder(out_dir: Path, scale: str, seed: int)`` and writes its files
into ``out_dir`` (``results/<scale>/assets/<name>/``); it must be deterministic for a given scale
and seed. Snakemake's ``asset`` rule runs it before any chapter that lists the asset; a notebook
finds it with :func:`asset_dir`.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path

from . import paths


class AssetMissing(FileNotFoundError):
    pass


def asset_dir(name: str, scale: str) -> Path:
    """Where asset ``name`` lives for ``scale``; raise a clear error if it was not built."""
    path = paths.ROOT / "results" / scale / "assets" / name
    if not (path / ".complete").is_file():
        raise AssetMissing(
            f"asset {name!r} for scale {scale!r} is not built ({path}): run `compendium asset {name} "
            f"--scale {scale}` or `make chapter SLUG=...`, which builds it first"
        )
    return path


def load_builder(spec: str):
    """``'package.module:function'`` → the function."""
    module_name, _, func = spec.partition(":")
    if not module_name.startswith("compendium.") or not func:
        raise ValueError(f"an asset builder is 'compendium.module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), func)


def build_asset(name: str, spec: str, out_dir: str | Path, scale: str, seed: int = 0) -> Path:
    """Run the builder into a temporary folder and move it into place when it succeeds."""
    out_dir = Path(out_dir)
    builder = load_builder(spec)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out_dir.parent) as tmp:
        work = Path(tmp) / name
        work.mkdir()
        builder(work, scale, seed)
        (work / ".complete").write_text(f"{name} {scale} {seed}\n")
        shutil.rmtree(out_dir, ignore_errors=True)
        work.rename(out_dir)
    return out_dir
