"""Provenance: what produced a chapter's claims, as content hashes, and whether that still holds.

Each rule's inputs are derived from what its code *imports*, read statically (``ast``): the
``compendium.*`` imports of a chapter's notebook code cells, or of an asset's builder module,
followed transitively inside ``src/compendium``. So editing ``claims.py`` reruns the chapters
(their notebooks import it) but no asset (builders never import it), and editing one paper module
reruns only its chapter.

A package ``__init__.py`` that runs only because a submodule below it is imported counts as a
file (an edit to it reruns the importer) but its imports are not followed: the library's
``__init__`` files only re-export, and ``compendium/__init__.py`` does so lazily (PEP 562), so
importing a paper module really does not load the ledger. An explicit ``from compendium import
start_chapter`` follows the imports of ``compendium/__init__.py``, function bodies included.

After a successful run the chapter rule writes ``provenance.json`` beside ``claims.json``: the
sha256 of the notebook, of every library file in the import closure, of the effective parameters,
of each asset directory the chapter read, of ``data/manifest.yaml`` and of the lock file (when
those exist). :func:`chapter_status` recomputes the same hashes from the working tree and names
what changed; ``compendium status`` and the book's stale badges both use it. ``claims.json`` itself
is left as the ledger writes it (deterministic for a scale and seed).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import paths

PROVENANCE = "provenance.json"
LAST_GOOD = "last_good"
#: Files that describe the data and the environment; hashed when they exist.
DATA_MANIFEST = "data/manifest.yaml"
LOCK_FILES = ("requirements.lock", "uv.lock", "conda-lock.yml")
KERNEL_SPEC = "kernels/compendium/kernel.json"


# ---------------------------------------------------------------------------- the import graph
def _library_root() -> Path:
    return paths.ROOT / "src" / "compendium"


def module_file(name: str) -> Path | None:
    """``'compendium.papers.x'`` → its file (``x.py`` or ``x/__init__.py``), or None if not a module."""
    parts = name.split(".")
    if parts[0] != "compendium":
        return None
    base = _library_root().joinpath(*parts[1:])
    if base.with_suffix(".py").is_file() and len(parts) > 1:
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _module_name(path: Path) -> tuple[str, bool]:
    """File → (dotted module name, is_package)."""
    rel = path.relative_to(_library_root().parent).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def imported_modules(source: str, module: str = "", is_package: bool = False) -> set[str]:
    """Every ``compendium.*`` module ``source`` imports (anywhere, function bodies included).

    ``from a import b`` yields the submodule ``a.b`` when there is one, else ``a``.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import sub` imports the submodule (pkg's __init__ runs as its parent);
            # `from pkg import name` of anything else needs pkg itself
            subs = [f"{base}.{a.name}" for a in node.names if a.name != "*"]
            found.update(m for m in subs if module_file(m) is not None)
            if any(module_file(m) is None for m in subs) or not subs:
                found.add(base)
    return {m for m in found if m == "compendium" or m.startswith("compendium.")}


def library_closure(modules) -> list[Path]:
    """The library files that importing ``modules`` brings in, transitively (sorted)."""
    seen: set[Path] = set()
    queue = [m for m in modules if module_file(m)]
    followed: set[Path] = set()
    while queue:
        name = queue.pop()
        path = module_file(name)
        if path is None:
            continue
        # parent packages run their __init__: count the file, do not follow its imports
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = module_file(".".join(parts[:i]))
            if parent is not None:
                seen.add(parent)
        seen.add(path)
        if path in followed:
            continue
        followed.add(path)
        queue.extend(_file_imports(path))
    return sorted(seen)


@lru_cache(maxsize=None)
def _file_imports_cached(path: Path, mtime_ns: int) -> frozenset[str]:
    mod, is_package = _module_name(path)
    return frozenset(imported_modules(_read_text(path), mod, is_package))


def _file_imports(path: Path) -> frozenset[str]:
    """``imported_modules`` of one library file, parsed once per version of the file.

    Snakemake asks for every chapter's and asset's closure while it builds the DAG; without this
    cache each start re-parsed the shared library files once per closure (2400 parses, 15 s CPU
    for 36 chapters)."""
    return _file_imports_cached(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=None)
def _read_text_cached(path: Path, mtime_ns: int) -> str:
    return path.read_text(encoding="utf-8")


def _read_text(path: Path) -> str:
    return _read_text_cached(path, path.stat().st_mtime_ns)


_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def notebook_code(notebook: Path) -> str:
    """The code cells of a notebook (MyST Markdown read directly; other formats via jupytext)."""
    if notebook.suffix == ".md":
        cells = _CODE_CELL.findall(_read_text(notebook))
    else:
        import jupytext

        cells = [c.source for c in jupytext.read(str(notebook)).cells if c.cell_type == "code"]
    lines = []
    for cell in cells:
        for line in cell.splitlines():
            stripped = line.lstrip()
            if stripped.startswith((":", "%", "!")):  # cell options, magics, shell escapes
                continue
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def notebook_sources(notebook: Path) -> list[str]:
    """Library files a chapter notebook imports (repository-relative, sorted)."""
    notebook = Path(notebook)
    mods = _notebook_imports(notebook, notebook.stat().st_mtime_ns)
    return [_rel(p) for p in library_closure(mods)]


@lru_cache(maxsize=None)
def _notebook_imports(notebook: Path, mtime_ns: int) -> frozenset[str]:
    """The ``compendium`` modules a notebook's code cells import (parsed once per version)."""
    code = notebook_code(notebook)
    mods = set()
    for chunk in code.split("\n\n"):  # a cell that does not parse alone still yields the rest
        mods |= imported_modules(chunk)
    mods |= imported_modules(code)
    return frozenset(mods)


def builder_sources(spec: str) -> list[str]:
    """Library files an asset builder ``'compendium.module:function'`` imports."""
    module = spec.split(":")[0]
    return [_rel(p) for p in library_closure([module])]


def optional_inputs() -> list[str]:
    """The data manifest and the lock file, where they exist."""
    return [name for name in (DATA_MANIFEST, *LOCK_FILES) if (paths.ROOT / name).is_file()]


# ---------------------------------------------------------------------------- environment
PACKAGES = ("numpy", "torch", "scipy", "scikit-learn", "pandas", "transformers", "sympy", "statsmodels")
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "neon", "asimd")


def cpu_model() -> tuple[str, list[str]]:
    """The CPU's model name and the SIMD instruction-set flags that matter for numerics."""
    import platform

    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine()):
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                have = set(value.split())
                flags = [f for f in ISA_FLAGS if f in have]
    except OSError:
        pass
    return model, flags


def environment_record() -> dict:
    """Exact versions (Python and the numeric packages) and the machine; no timestamps."""
    import os
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    model, flags = cpu_model()
    record = {"versions": versions,
              "machine": {"cpu": model, "instruction_set": flags, "cores": os.cpu_count(),
                          "platform": platform.platform()}}
    try:
        import torch

        record["torch"] = {"intra_op_threads": torch.get_num_threads(),
                           "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except ImportError:  # pragma: no cover
        pass
    return record


# ---------------------------------------------------------------------------- hashes
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tree(folder: Path) -> str:
    """One hash for a folder: its files' relative paths and contents, in sorted order."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + sha256_file(f).encode() + b"\n")
    return h.hexdigest()


def sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def chapter_fingerprint(notebook: Path, parameters: dict, scale: str, assets: list[str]) -> dict[str, str]:
    """``{input: sha256}`` for one chapter run, from the working tree as it is now.

    Keys are repository-relative paths for files, ``parameters`` for the effective parameters and
    ``asset:<name>`` for each asset folder (``missing`` when the asset is not built).
    """
    out = {_rel(notebook): sha256_file(notebook)}
    for rel in notebook_sources(notebook) + [KERNEL_SPEC] + optional_inputs():
        path = paths.ROOT / rel
        if path.is_file():
            out[rel] = sha256_file(path)
    out["parameters"] = sha256_json(parameters)
    for name in assets:
        folder = paths.results_root() / scale / "assets" / name
        out[f"asset:{name}"] = sha256_tree(folder) if folder.is_dir() else "missing"
    return dict(sorted(out.items()))


def write_provenance(out_dir: Path, fingerprint: dict[str, str]) -> Path:
    path = out_dir / PROVENANCE
    path.write_text(json.dumps({"inputs": fingerprint}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_provenance(out_dir: Path) -> dict[str, str] | None:
    path = out_dir / PROVENANCE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["inputs"]
    except (ValueError, KeyError):
        return None


def changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """What differs between two fingerprints, in words (empty when nothing did)."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        label = f"asset {key[6:]}" if key.startswith("asset:") else key
        if key not in current:
            out.append(f"{label} is no longer an input")
        elif key not in recorded:
            out.append(f"{label} is a new input")
        elif recorded[key] != current[key]:
            out.append(f"{label} changed")
    return out


# ---------------------------------------------------------------------------- chapter status
@dataclass
class Status:
    slug: str
    state: str  # current | stale | missing
    reasons: list[str] = field(default_factory=list)
    failed: bool = False  # the last run failed (a last good result may still be shown)

    def line(self) -> str:
        text = f"{self.state:<8} {self.slug}"
        if self.failed:
            text += " (last run failed" + (", showing last good result)" if self.state != "missing" else ")")
        if self.reasons:
            text += ": " + "; ".join(self.reasons)
        return text


def result_dir(out_dir: Path) -> Path | None:
    """Where a chapter's claims live: its output folder, or ``last_good/`` after a failed rerun."""
    if (out_dir / "claims.json").is_file():
        return out_dir
    if (out_dir / LAST_GOOD / "claims.json").is_file():
        return out_dir / LAST_GOOD
    return None


def chapter_status(entry, scale: str, parameters: dict) -> Status:
    """Compare a chapter's recorded provenance with the working tree (nothing is executed)."""
    out_dir = paths.results_root() / scale / entry.slug
    failed = (out_dir / "FAILED.json").is_file()
    where = result_dir(out_dir)
    if where is None:
        return Status(entry.slug, "missing", failed=failed)
    recorded = read_provenance(where)
    if recorded is None:
        return Status(entry.slug, "stale", ["no provenance record (built before provenance was kept)"], failed)
    current = chapter_fingerprint(entry.notebook, parameters, scale, list(entry.assets))
    reasons = changes(recorded, current)
    if failed and where != out_dir:
        reasons = ["its last run failed"] + reasons
    return Status(entry.slug, "stale" if reasons else "current", reasons, failed)


def status_report(plan) -> list[Status]:
    """:func:`chapter_status` of every ready chapter of a :class:`~compendium.workflow.Plan`."""
    return [chapter_status(c, plan.scale, plan.params[c.slug]) for c in plan.registry.ready]
