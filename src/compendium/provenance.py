"""Provenance: what produced each output, as content fingerprints, and whether that still holds.

A job's **inputs** are ``{component: hash}`` (:mod:`compendium.fingerprint`): for a chapter, its
notebook (the whole file: the notebook is the page), the library units its code reaches, its
effective parameters, the recorded content of each asset it reads, ``data/manifest.yaml`` and the
kernel spec; for an asset, the units its builder reaches, the builder and seed, the recorded
content of the assets it ``requires`` and the data manifest. The job's **fingerprint** is the
sha256 of its inputs. A comment, a docstring or a reformat changes no component; an asset rebuilt
with the same files keeps its content hash, so the chapters that read it stay current.

Every finished job writes ``provenance.json`` beside its outputs: the fingerprint, the inputs, the
lock file's hash (``environment``: reported by ``compendium status``, never a rerun by itself) and
the sha256 of every file it wrote (``outputs``; for an asset its ``content`` is the hash of that
map). Outputs are **verified on read** (:func:`verify_outputs`, through the hash cache): a file
that is missing, unreadable or not what was written makes the output *invalid*; the next build
reruns that job (nothing else), and until then nothing uses it. ``compendium status`` re-hashes
every file.

Outputs built before fingerprints were recorded are *adopted* once (:func:`chapter_state`,
:func:`asset_state`) when the rules of that time called them current: a chapter whose recorded
file hashes match the working tree, an asset whose files are newer than every file its builder
imported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .fingerprint import (CodeIndex, HashCache, components, legacy_sources, notebook_imports, sha256_file,
                          sha256_json)

PROVENANCE = "provenance.json"
LAST_GOOD = "last_good"
#: Files that describe the data and the environment; hashed when they exist.
DATA_MANIFEST = "data/manifest.yaml"
LOCK_FILES = ("requirements.lock", "uv.lock", "conda-lock.yml")
KERNEL_SPEC = "kernels/compendium/kernel.json"
#: Written into a directory output by Snakemake after the job: not part of what the job wrote.
NOT_OUTPUTS = frozenset({".snakemake_timestamp", PROVENANCE})


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


# ---------------------------------------------------------------------------- fingerprints
def _rel(path: Path) -> str:
    try:
        return str(Path(path).relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def asset_folder(name: str, scale: str) -> Path:
    return paths.results_root() / scale / "assets" / name


def fingerprint_of(inputs: dict) -> str:
    return sha256_json(inputs)


class Fingerprinter:
    """Inputs of chapters and assets, computed in one process with shared caches.

    ``trust=False`` re-hashes every file instead of trusting the hash cache (``compendium status``).
    Call :meth:`save` to keep what was learned for the next process.
    """

    def __init__(self, trust: bool = True):
        self.hashes = HashCache(trust=trust)
        self.code = CodeIndex(self.hashes)
        self._asset_content: dict[tuple[str, str], str] = {}

    def save(self) -> None:
        self.code.save()

    def _files(self, names) -> dict[str, str]:
        out = {}
        for rel in names:
            path = paths.ROOT / rel
            if path.is_file():
                out[rel] = self.hashes.sha256(path)
        return out

    def environment(self) -> dict[str, str]:
        return self._files(LOCK_FILES)

    def asset_content(self, name: str, scale: str) -> str:
        """The content hash an asset's provenance records (``missing`` without one)."""
        key = (name, scale)
        if key not in self._asset_content:
            record = read_record(asset_folder(name, scale))
            content = record.get("content") if record else None
            self._asset_content[key] = content if isinstance(content, str) else "missing"
        return self._asset_content[key]

    def forget_asset(self, name: str, scale: str) -> None:
        self._asset_content.pop((name, scale), None)

    def chapter_inputs(self, notebook: Path, parameters: dict, scale: str, assets) -> dict[str, str]:
        out = components(self.code, notebook=Path(notebook))
        out.update(self._files((DATA_MANIFEST, KERNEL_SPEC)))
        out["parameters"] = sha256_json(parameters)
        for name in assets:
            out[f"asset:{name}"] = self.asset_content(name, scale)
        return dict(sorted(out.items()))

    def asset_inputs(self, spec: dict, scale: str) -> dict[str, str]:
        module, _, function = spec["builder"].partition(":")
        out = components(self.code, units=[(module, function)])
        out.update(self._files((DATA_MANIFEST,)))
        out["builder"] = sha256_json({"builder": spec["builder"], "seed": spec.get("seed", 0)})
        for req in spec.get("requires", []):
            out[f"asset:{req}"] = self.asset_content(req, scale)
        return dict(sorted(out.items()))


# ---------------------------------------------------------------------------- records
def make_record(inputs: dict, environment: dict) -> dict:
    return {"fingerprint": fingerprint_of(inputs), "inputs": inputs, "environment": environment}


def output_files(base: Path, outputs) -> list[Path]:
    """The files of ``outputs`` (folders expanded), Snakemake's and provenance's own files left out."""
    files = []
    for path in map(Path, outputs):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.name not in NOT_OUTPUTS)
        elif path.name not in NOT_OUTPUTS:
            files.append(path)
    return files


def hash_outputs(base: Path, outputs, hashes: HashCache | None = None) -> dict[str, str]:
    """``{path relative to base: sha256}`` of what a job wrote (read now, from the disk)."""
    hashes = hashes or HashCache(trust=False)
    return {str(f.relative_to(base)): hashes.sha256(f) for f in output_files(base, outputs)}


def write_provenance(out_dir: Path, record: dict) -> Path:
    """Write ``provenance.json`` atomically (a reader never sees half a record)."""
    import os
    import tempfile

    path = Path(out_dir) / PROVENANCE
    fd, tmp = tempfile.mkstemp(prefix=f".{PROVENANCE}.", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_record(out_dir: Path) -> dict | None:
    """The whole provenance record; None when there is none, ``{"unreadable": why}`` when broken."""
    path = Path(out_dir) / PROVENANCE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return {"unreadable": f"{_rel(path)} cannot be read ({type(err).__name__})"}
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), dict):
        return {"unreadable": f"{_rel(path)} is not a provenance record"}
    return data


def read_provenance(out_dir: Path) -> dict[str, str] | None:
    """The recorded inputs, or None."""
    record = read_record(out_dir)
    return record.get("inputs") if record and "unreadable" not in record else None


def verify_outputs(base: Path, record: dict | None, hashes: HashCache | None = None) -> str | None:
    """None when every file the record lists is there with the recorded sha256; else one line
    naming the first file that is not (missing, unreadable or changed)."""
    hashes = hashes or HashCache()
    if record is None:
        return f"{_rel(Path(base) / PROVENANCE)} is missing"
    if "unreadable" in record:
        return record["unreadable"]
    outputs = record.get("outputs")
    if not isinstance(outputs, dict) or not outputs:
        return (f"{_rel(Path(base))} was written before its outputs were recorded (the next build records "
                "them, or reruns it if its inputs changed)")
    for rel, expected in sorted(outputs.items()):
        path = Path(base) / rel
        try:
            actual = hashes.sha256(path)
        except FileNotFoundError:
            return f"{_rel(path)} is missing"
        except OSError as err:
            return f"{_rel(path)} cannot be read ({err.strerror or err})"
        if actual != expected:
            return f"{_rel(path)} is not the file that was written (sha256 differs from its provenance)"
    return None


def asset_problem(name: str, scale: str, hashes: HashCache | None = None) -> str | None:
    """Why asset ``name`` must not be used (not built, unrecorded, corrupted), or None."""
    folder = asset_folder(name, scale)
    if not (folder / ".complete").is_file():
        return f"asset {name!r} for scale {scale!r} is not built ({_rel(folder)})"
    record = read_record(folder)
    if record is None or "outputs" not in record:
        return f"asset {name!r} ({scale}) has no record of the files it wrote ({_rel(folder / PROVENANCE)})"
    problem = verify_outputs(folder, record, hashes)
    return f"asset {name!r} ({scale}) is invalid: {problem}" if problem else None


# ---------------------------------------------------------------------------- status
@dataclass
class Status:
    slug: str
    state: str  # current | stale | missing | invalid
    reasons: list[str] = field(default_factory=list)
    failed: bool = False  # the last run failed (a last good result may still be shown)
    kind: str = "chapter"
    fingerprint: str = ""
    rerun: bool = False  # the next build reruns it (missing, invalid, or its inputs changed)

    def line(self) -> str:
        name = self.slug if self.kind == "chapter" else f"asset {self.slug}"
        text = f"{self.state:<8} {name}"
        if self.failed:
            text += " (last run failed" + (", showing last good result)" if self.state != "missing" else ")")
        if self.reasons:
            text += ": " + "; ".join(self.reasons)
        return text


def _label(key: str) -> str:
    if key.startswith("asset:"):
        return f"asset {key[6:]}"
    if "::" in key:
        path, _, unit = key.partition("::")
        return f"{path}: {unit}"
    if key.startswith("src/"):
        return f"{key} (module level)"
    return key


def changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """What differs between two sets of inputs, in words (empty when nothing did)."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        if key not in current:
            out.append(f"{_label(key)} is no longer an input")
        elif key not in recorded:
            out.append(f"{_label(key)} is a new input")
        elif recorded[key] != current[key]:
            out.append(f"{_label(key)} changed")
    return out


def result_dir(out_dir: Path) -> Path | None:
    """Where a chapter's claims live: its output folder, or ``last_good/`` after a failed rerun."""
    if (out_dir / "claims.json").is_file():
        return out_dir
    if (out_dir / LAST_GOOD / "claims.json").is_file():
        return out_dir / LAST_GOOD
    return None


def _legacy_chapter_inputs(fp: Fingerprinter, entry, scale: str, parameters: dict) -> dict[str, str]:
    """The file hashes earlier versions recorded for a chapter (lock files left out: the old rule
    never reran for them)."""
    files = [_rel(entry.notebook), *legacy_sources(fp.code, notebook_imports(fp.code, entry.notebook)),
             KERNEL_SPEC, DATA_MANIFEST]
    out = fp._files(files)
    out["parameters"] = sha256_json(parameters)
    for name in entry.assets:
        folder = asset_folder(name, scale)
        if not folder.is_dir():
            out[f"asset:{name}"] = "missing"
            continue
        h = hashlib.sha256()
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != PROVENANCE):
            h.update(str(f.relative_to(folder)).encode() + b"\0" + fp.hashes.sha256(f).encode() + b"\n")
        out[f"asset:{name}"] = h.hexdigest()
    return out


def chapter_outputs(out_dir: Path, slug: str) -> list[Path]:
    return [out_dir / f"{slug}.ipynb", out_dir / "claims.json", out_dir / "params.yaml", out_dir / "figures"]


def chapter_state(entry, scale: str, parameters: dict, fp: Fingerprinter, *, out_dir: Path | None = None,
                  adopt: bool = False, last_good: bool = True) -> Status:
    """Compare a chapter's recorded provenance with the working tree (nothing is executed).

    ``out_dir`` defaults to ``results/<scale>/<slug>`` (a variant's folder for seed sweeps). With
    ``adopt``, outputs from before fingerprints (a record of file hashes only) that the rules of
    that time called current get a fingerprint record now. ``last_good=False`` looks at the
    outputs only, not at a kept last good result (what the workflow asks).
    """
    out_dir = out_dir or paths.results_root() / scale / entry.slug
    failed = (out_dir / "FAILED.json").is_file()
    inputs = fp.chapter_inputs(entry.notebook, parameters, scale, entry.assets)
    fingerprint = fingerprint_of(inputs)

    def status(state, reasons=(), rerun=True):
        return Status(entry.slug, state, list(reasons), failed, fingerprint=fingerprint, rerun=rerun)

    where = result_dir(out_dir) if last_good else (out_dir if (out_dir / "claims.json").is_file() else None)
    if where is None:
        return status("missing")
    record = read_record(where)
    if record is None:
        return status("stale", ["no provenance record"])
    if "unreadable" in record:
        return status("invalid", [record["unreadable"]])
    if "fingerprint" not in record:
        legacy = {k: v for k, v in record["inputs"].items() if k not in LOCK_FILES}
        if changes(legacy, _legacy_chapter_inputs(fp, entry, scale, parameters)):
            return status("stale", ["built before content fingerprints, and its inputs changed since"])
        if not adopt:
            return status("current", ["built before content fingerprints (adopted at the next build)"], False)
        record = {**make_record(inputs, fp.environment()),
                  "outputs": hash_outputs(where, chapter_outputs(where, entry.slug), fp.hashes)}
        write_provenance(where, record)
    problem = verify_outputs(where, record, fp.hashes)
    reasons = changes(record.get("inputs", {}), inputs)
    if problem and not reasons:
        return status("invalid", [problem])
    reasons += [problem] if problem else []
    rerun = bool(reasons)
    reasons += [f"{k} changed" for k in changes_env(record.get("environment", {}), fp.environment())]
    if where != out_dir:  # shown from last_good/: never current while the outputs themselves are not there
        reasons = ["its last run failed" if failed else "its outputs are missing (its last good result is kept)"] + reasons
        rerun = rerun or not failed
    return status("stale" if reasons else "current", reasons, rerun)


def changes_env(recorded: dict, current: dict) -> list[str]:
    return [k for k in sorted(set(recorded) | set(current)) if recorded.get(k) != current.get(k)]


def asset_state(registry, name: str, scale: str, fp: Fingerprinter, *, adopt: bool = False) -> Status:
    """An asset as current, stale (its inputs changed), invalid (its files are not what was
    written) or missing. Assets it requires must be settled first (adoption writes their record)."""
    spec = registry.assets[name]
    folder = asset_folder(name, scale)
    inputs = fp.asset_inputs(spec, scale)
    fingerprint = fingerprint_of(inputs)

    def status(state, reasons=(), rerun=True):
        return Status(name, state, list(reasons), kind="asset", fingerprint=fingerprint, rerun=rerun)

    if not (folder / ".complete").is_file():
        return status("missing")
    record = read_record(folder)
    if record is not None and "unreadable" in record:
        return status("invalid", [record["unreadable"]])
    if record is None:
        if not _legacy_asset_current(fp, spec, scale, folder):
            return status("stale", ["built before content fingerprints, and its inputs changed since"])
        if not adopt:
            return status("current", ["built before content fingerprints (adopted at the next build)"], False)
        record = {**make_record(inputs, fp.environment()),
                  "outputs": hash_outputs(folder, [folder], fp.hashes)}
        record["content"] = sha256_json(record["outputs"])
        write_provenance(folder, record)
        fp.forget_asset(name, scale)
    problem = verify_outputs(folder, record, fp.hashes)
    reasons = changes(record.get("inputs", {}), inputs)
    if problem and not reasons:  # its inputs are unchanged: a rebuild repairs it, same content expected
        return status("invalid", [problem])
    reasons += [problem] if problem else []
    return status("stale" if reasons else "current", reasons, bool(reasons))


def _legacy_asset_current(fp: Fingerprinter, spec: dict, scale: str, folder: Path) -> bool:
    """What the asset rule before fingerprints decided: current when every file it wrote is newer
    than every file of its old input list (the builder's imports, the data manifest, and the files
    of the assets it requires)."""
    def mtimes(path):
        return [p.stat().st_mtime for p in path.rglob("*") if p.is_file() and p.name not in NOT_OUTPUTS]

    written = mtimes(folder)
    if not written:
        return False
    module = spec["builder"].partition(":")[0]
    inputs = [paths.ROOT / f for f in legacy_sources(fp.code, [module])] + [paths.ROOT / DATA_MANIFEST]
    newest = [p.stat().st_mtime for p in inputs if p.is_file()]
    for req in spec.get("requires", []):
        newest += mtimes(asset_folder(req, scale)) or [float("inf")]
    return min(written) > max(newest, default=0)


def asset_order(registry, names=None) -> list[str]:
    """``names`` (default: every asset) with the assets they require first."""
    order: list[str] = []

    def visit(name):
        if name not in order:
            for req in registry.assets[name].get("requires", []):
                visit(req)
            order.append(name)

    for name in names if names is not None else registry.assets:
        visit(name)
    return order


def status_report(plan, rehash: bool = True) -> list[Status]:
    """Every asset the ready chapters use, then every ready chapter, of a
    :class:`~compendium.workflow.Plan` (``rehash``: read every file again, trust no cache)."""
    fp = Fingerprinter(trust=not rehash)
    used = sorted({a for c in plan.registry.ready for a in c.assets})
    out = [asset_state(plan.registry, a, plan.scale, fp) for a in asset_order(plan.registry, used)]
    out += [chapter_state(c, plan.scale, plan.params[c.slug], fp) for c in plan.registry.ready]
    fp.save()
    return out


def readers_of_changed_assets(registry, scale: str) -> list[str]:
    """Chapters whose finished run read an asset whose recorded content has changed since: an asset
    repaired (rebuilt for corrupted files) that did not come out bit for bit the same. The workflow
    does not rerun readers for a repair, expecting the same bytes; ``compendium build`` then runs
    once more for these."""
    fp = Fingerprinter()
    out = []
    for entry in registry.ready:
        recorded = read_provenance(paths.results_root() / scale / entry.slug) or {}
        if any(recorded.get(f"asset:{a}") not in (None, fp.asset_content(a, scale)) for a in entry.assets):
            out.append(entry.slug)
    return out


def chapter_status(entry, scale: str, parameters: dict, fp: Fingerprinter | None = None) -> Status:
    """:func:`chapter_state` with a fresh :class:`Fingerprinter` (the book's stale badges)."""
    return chapter_state(entry, scale, parameters, fp or Fingerprinter())
