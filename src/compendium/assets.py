"""Shared assets: things a rule builds once and chapters use (for example a tiny trained model).

An asset is declared in the registry::

    assets:
      digits_tokens_lm:
        description: "a small causal LM over quantized digits, trained here"
        builder: "compendium.papers.speculative_coupled_decoding:build_asset"

The builder is called as ``builder(out_dir: Path, scale: str, seed: int)`` and writes its files
into ``out_dir`` (``results/<scale>/assets/<name>/``); it must be deterministic for a given scale
and seed. Snakemake's ``asset`` rule runs it before any chapter that lists the asset; a notebook
finds it with :func:`asset_dir`, which refuses an asset whose files are not the ones its builder
wrote (``provenance.json`` records their sha256, :mod:`compendium.provenance`).

Beside the builder's files the runner writes ``metrics.json``: the training metrics (what the
builder returns as a dict, else the ``metrics`` of its ``metadata.json``) and the environment
that trained it (exact Python, numpy and torch versions, torch threads, CPU model and instruction
set). A builder that writes its own ``metrics.json`` keeps it; ``training`` is then its content and
only ``environment`` is added.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from pathlib import Path

from .provenance import (Fingerprinter, asset_folder, asset_problem, environment_record, hash_outputs, make_record,
                         sha256_json, write_provenance)


class AssetMissing(FileNotFoundError):
    pass


class AssetInvalid(AssetMissing):
    """The asset's files are not the ones its builder wrote (or were never recorded)."""


def asset_dir(name: str, scale: str) -> Path:
    """Where asset ``name`` lives for ``scale``, after checking its files against their recorded
    sha256; raise a clear one-line error if it was not built or is corrupted."""
    path = asset_folder(name, scale)
    problem = asset_problem(name, scale)
    if problem is None:
        return path
    how = (f"run `compendium asset {name} --scale {scale}` or `compendium build` (`make chapter SLUG=...`), "
           "which build it first")
    if not (path / ".complete").is_file():
        raise AssetMissing(f"{problem}: {how}")
    raise AssetInvalid(f"{problem}; it is not used: {how}")


def load_builder(spec: str):
    """``'package.module:function'`` → the function."""
    module_name, _, func = spec.partition(":")
    if not module_name.startswith("compendium.") or not func:
        raise ValueError(f"an asset builder is 'compendium.module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), func)


def build_asset(name: str, spec: str, out_dir: str | Path, scale: str, seed: int = 0, requires=()) -> Path:
    """Run the builder into a temporary folder and move it into place when it succeeds, with
    ``provenance.json``: its inputs (taken before the build) and the sha256 of every file it wrote."""
    out_dir = Path(out_dir)
    builder = load_builder(spec)
    fp = Fingerprinter()
    record = make_record(fp.asset_inputs({"builder": spec, "seed": seed, "requires": list(requires)}, scale),
                         fp.environment())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out_dir.parent) as tmp:
        work = Path(tmp) / name
        work.mkdir()
        result = builder(work, scale, seed)
        write_metrics(work, result)
        (work / ".complete").write_text(f"{name} {scale} {seed}\n")
        record["outputs"] = hash_outputs(work, [work])
        record["content"] = sha256_json(record["outputs"])
        write_provenance(work, record)
        shutil.rmtree(out_dir, ignore_errors=True)
        work.rename(out_dir)
    fp.save()
    return out_dir


def training_metrics(work: Path, result) -> dict:
    """What the builder reported: its return value if a dict, else ``metadata.json``'s metrics."""
    if isinstance(result, dict):
        return result
    meta_path = work / "metadata.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if isinstance(meta, dict) and "metrics" in meta:
            return meta["metrics"]
        if isinstance(meta, dict):  # keep the small entries (settings, losses), not index lists
            return {k: v for k, v in meta.items() if len(json.dumps(v, default=str)) <= 2000}
    return {}


def write_metrics(work: Path, result=None) -> Path:
    """``metrics.json``: training metrics and the exact environment (deterministic per machine)."""
    path = work / "metrics.json"
    if path.is_file():  # the builder's own metrics file: add the environment beside its keys
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            record = {"training": record}
    else:
        record = {"training": training_metrics(work, result)}
    record["environment"] = environment_record()
    path.write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path
