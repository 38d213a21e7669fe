"""The evidence record: a finished full-scale run of each chapter, kept in the repository.

``evidence/<scale>/<slug>/`` (``evidence/full/`` in practice) holds what the book needs from one
run of the chapter, so every build, smoke included, can show it as the chapter's results of record:

- ``record.json`` (validated by ``schemas/record.schema.json``): the ledger (``claims.json`` as it
  was written), every glued value (name, value, format), the parameters, the figures with their
  sha256, the page with its sha256, and provenance: the chapter's input components and
  fingerprint (:mod:`compendium.provenance`), each asset's input components (builder sources, seed,
  the data manifest) and the sha256 of the asset files it read, the lock file's hash, the commit,
  the machine (CPU model, instruction set, cores), wall and CPU time of the chapter and of each
  asset, the date and the scale;
- ``page.ipynb``: the executed notebook with every image taken out (an output names its figure);
- ``figures/*.png``: those images, re-encoded as PNG at most :data:`MAX_WIDTH` pixels wide.

No model weights and no embedded images; the whole store stays under :data:`BUDGET_BYTES`.

An asset enters the record by what *built* it (its input components, followed through the assets
it requires), not by its bytes: a fresh clone has no full-scale assets, and the record is current
as long as the code that produced them is unchanged. The asset files' hashes are kept as
evidence of what was read.

:func:`record_chapters` copies runs in (``compendium record``), refusing, with one line naming the
chapter and the reason, a missing, failed, stale, partial or other-scale run; it writes nothing
unless every chapter asked for can be recorded. Each chapter's folder is replaced by an atomic
swap: the previous record stays until the new one is complete. :func:`record_status` says whether
a record is current, stale (what changed), missing or invalid (schema, a missing figure, a hash).
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import paths
from .fingerprint import sha256_json
from .provenance import (PROVENANCE, Fingerprinter, asset_folder, changes, changes_env, chapter_state,
                         environment_record, read_record)

SCHEMA_VERSION = 1
RECORD = "record.json"
PAGE = "page.ipynb"
FIGURES = "figures"
#: The whole store's budget (38 chapters).
BUDGET_BYTES = 30 * 2**20
#: Figures wider than this are scaled down (the book's page is narrower).
MAX_WIDTH = 1400
#: Output metadata key naming the figure file an image was replaced by.
FIGURE_KEY = "compendium-record-figure"
SCHEMA = Path(__file__).resolve().parent / "schemas" / "record.schema.json"


class Refused(Exception):
    """A run that cannot be recorded; ``str()`` is one line naming the chapter and the reason."""

    def __init__(self, slug: str, reason: str):
        super().__init__(f"{slug}: {reason}")
        self.slug, self.reason = slug, reason


def store_root() -> Path:
    return paths.ROOT / "evidence"


def record_dir(slug: str, scale: str = "full") -> Path:
    return store_root() / scale / slug


def store_size(root: Path | None = None) -> int:
    """Bytes of every file under the store."""
    root = root or store_root()
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


# ---------------------------------------------------------------------------- inputs
def asset_source_inputs(registry, name: str, fp: Fingerprinter, scale: str) -> dict[str, str]:
    """What built asset ``name``: its input components, each required asset replaced by the
    fingerprint of *its* source inputs (so no asset's bytes are needed to compare)."""
    spec = registry.assets[name]
    out = fp.asset_inputs(spec, scale)
    for req in spec.get("requires", []):
        out[f"asset:{req}"] = sha256_json(asset_source_inputs(registry, req, fp, scale))
    return dict(sorted(out.items()))


def asset_closure(registry, names) -> list[str]:
    from .provenance import asset_order

    return asset_order(registry, list(names))


def source_inputs(entry, registry, parameters: dict, scale: str, fp: Fingerprinter) -> dict[str, str]:
    """A chapter's inputs as the record keeps them: its components, each asset by its sources."""
    out = fp.chapter_inputs(entry.notebook, parameters, scale, entry.assets)
    for name in entry.assets:
        out[f"asset:{name}"] = sha256_json(asset_source_inputs(registry, name, fp, scale))
    return dict(sorted(out.items()))


def what_changed(record: dict, entry, registry, parameters: dict, fp: Fingerprinter) -> list[str]:
    """The differences between a record's inputs and the working tree, in words (empty: current)."""
    prov = record["provenance"]
    scale = record["scale"]
    current = source_inputs(entry, registry, parameters, scale, fp)
    out = []
    for line in changes(prov["inputs"], current):
        out.append(line)
    assets = prov.get("assets", {})
    for name in entry.assets:
        key = f"asset:{name}"
        if key in prov["inputs"] and prov["inputs"][key] != current.get(key) and name in assets:
            for sub in asset_closure(registry, [name]):
                recorded = assets.get(sub, {}).get("inputs")
                if recorded is not None:
                    out += [f"asset {sub}: {x}" for x in changes(recorded, asset_source_inputs(registry, sub, fp, scale))]
    out += [f"{k} changed" for k in changes_env(prov.get("environment", {}), fp.environment())]
    return out


# ---------------------------------------------------------------------------- checks before recording
def _notebook_error(nb: dict) -> str | None:
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                return f"cell {i} raised {out.get('ename', 'an error')}"
    return None


def check_run(entry, registry, scale: str, parameters: dict, fp: Fingerprinter) -> Path:
    """The folder of a finished, current run of ``entry`` at ``scale``; raises :class:`Refused`."""
    out = paths.results_root() / scale / entry.slug
    where = out.relative_to(paths.ROOT) if out.is_relative_to(paths.ROOT) else out
    if (out / "FAILED.json").is_file():
        raise Refused(entry.slug, f"its last run at scale {scale} failed ({where}/FAILED.json)")
    notebook, claims = out / f"{entry.slug}.ipynb", out / "claims.json"
    if not claims.is_file() and not notebook.is_file():
        raise Refused(entry.slug, f"no run at scale {scale} ({where}/ has no claims.json)")
    for path in (notebook, claims, out / "params.yaml"):
        if not path.is_file():
            raise Refused(entry.slug, f"partial run: {where}/{path.name} is missing")
    try:
        data = json.loads(claims.read_text(encoding="utf-8"))
        ran = yaml.safe_load((out / "params.yaml").read_text(encoding="utf-8")) or {}
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise Refused(entry.slug, f"partial run: its outputs cannot be read ({type(err).__name__})") from None
    for got in (data.get("scale"), ran.get("scale")):
        if got != scale:
            raise Refused(entry.slug, f"the run in {where}/ is at scale {got}, not {scale}")
    problem = _notebook_error(nb)
    if problem:
        raise Refused(entry.slug, f"partial run: {problem}")
    record = read_record(out)
    if record is None or "outputs" not in record:
        raise Refused(entry.slug, f"partial run: {where}/{PROVENANCE} records no outputs")
    state = chapter_state(entry, scale, parameters, fp, out_dir=out, last_good=False)
    if state.state != "current":
        why = "; ".join(state.reasons) or state.state
        raise Refused(entry.slug, f"{state.state} run ({why})")
    return out


# ---------------------------------------------------------------------------- building a record
def _png(data: bytes) -> tuple[bytes, int, int]:
    """``data`` (an image) as PNG at most MAX_WIDTH wide; returns (bytes, width, height)."""
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.load()
    if img.width > MAX_WIDTH:
        img = img.resize((MAX_WIDTH, round(img.height * MAX_WIDTH / img.width)), Image.LANCZOS)
    if img.mode not in ("RGB", "RGBA", "L", "LA", "P"):
        img = img.convert("RGBA")
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue(), img.width, img.height


def strip_images(nb: dict) -> tuple[dict, dict[str, bytes], list[dict]]:
    """The notebook with every PNG/JPEG output taken out, the figure files, and the glued values."""
    figures: dict[str, bytes] = {}
    glued: list[dict] = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            data = out.get("data") or {}
            for key in sorted(data):
                if key.endswith(("image/png", "image/jpeg")):
                    raw = data.pop(key)
                    raw = "".join(raw) if isinstance(raw, list) else raw
                    png, width, height = _png(base64.b64decode(raw))
                    name = f"{FIGURES}/fig-{len(figures) + 1:02d}.png"
                    figures[name] = png
                    prefix = key[: key.rindex("image/")]
                    out.setdefault("metadata", {}).setdefault(FIGURE_KEY, {})[prefix + "image/png"] = name
            scrap = (out.get("metadata") or {}).get("scrapbook")
            if isinstance(scrap, dict) and scrap.get("name"):
                prefix = scrap.get("mime_prefix") or ""
                mimes = sorted({k[len(prefix):] for k in data if k.startswith(prefix)}
                               | {k[len(prefix):] for k in (out.get("metadata", {}).get(FIGURE_KEY) or {})})
                value = data.get(prefix + "text/plain", "")
                value = "".join(value) if isinstance(value, list) else value
                figs = list((out.get("metadata", {}).get(FIGURE_KEY) or {}).values())
                glued.append({"name": scrap["name"], "value": figs[0] if figs else value, "format": mimes})
    return nb, figures, glued


def restore_images(nb: dict, folder: Path) -> dict:
    """Put a recorded page's figures back into its outputs (base64 PNG)."""
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            names = (out.get("metadata") or {}).pop(FIGURE_KEY, None) or {}
            for key, name in names.items():
                out.setdefault("data", {})[key] = base64.b64encode((folder / name).read_bytes()).decode("ascii")
    return nb


def _benchmark(path: Path) -> dict:
    from .book import read_benchmark

    bench = read_benchmark(path) or {}
    return {"wall_s": bench.get("s"), "cpu_s": bench.get("cpu_time")}


def commit() -> str:
    """The working tree's commit (``+dirty`` when it has uncommitted changes), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True,
                              timeout=30)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=paths.ROOT,
                               capture_output=True, text=True, timeout=60).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _utc(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_record(entry, registry, scale: str, parameters: dict, fp: Fingerprinter, out: Path) -> tuple[dict, dict]:
    """``(record.json content, {relative path: bytes})`` of a checked run in ``out``."""
    import hashlib

    prov = read_record(out)
    claims = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    ran = yaml.safe_load((out / "params.yaml").read_text(encoding="utf-8"))
    notebook = out / f"{entry.slug}.ipynb"
    nb, figures, glued = strip_images(json.loads(notebook.read_text(encoding="utf-8")))
    page = (json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
    files = {PAGE: page, **figures}
    machine = environment_record()
    bench = paths.results_root() / scale / "benchmarks"
    assets = {}
    for name in asset_closure(registry, entry.assets):
        arec = read_record(asset_folder(name, scale)) or {}
        assets[name] = {"inputs": asset_source_inputs(registry, name, fp, scale),
                        "content": fp.asset_content(name, scale),
                        "files": arec.get("outputs", {}) if isinstance(arec.get("outputs"), dict) else {},
                        **_benchmark(bench / f"asset-{name}.tsv")}
    inputs = source_inputs(entry, registry, parameters, scale, fp)
    record = {
        "schema_version": SCHEMA_VERSION,
        "chapter": entry.slug,
        "title": entry.title,
        "scale": scale,
        "run_date": _utc(notebook.stat().st_mtime),
        "recorded_at": _utc(_dt.datetime.now(_dt.timezone.utc).timestamp()),
        "commit": commit(),
        "machine": {**machine["machine"], "versions": machine["versions"]},
        "times": {"chapter": _benchmark(bench / f"{entry.slug}.tsv")},
        "parameters": ran.get("parameters", parameters),
        "claims": claims,
        "glued": glued,
        "figures": [],
        "page": {"file": PAGE, "sha256": hashlib.sha256(page).hexdigest()},
        "provenance": {"fingerprint": sha256_json(inputs), "inputs": inputs,
                       "run_fingerprint": prov.get("fingerprint", ""),
                       "environment": prov.get("environment", {}), "assets": assets,
                       "outputs": {k: v for k, v in prov.get("outputs", {}).items() if not k.startswith(FIGURES)}},
    }
    for name, data in figures.items():
        from PIL import Image

        img = Image.open(io.BytesIO(data))
        record["figures"].append({"file": name, "sha256": hashlib.sha256(data).hexdigest(),
                                  "width": img.width, "height": img.height})
    problem = schema_problem(record)
    if problem:  # a bug here, not bad input: never write a record the reader would call invalid
        raise RuntimeError(f"{entry.slug}: the record does not match its schema: {problem}")
    return record, files


def write_record(slug: str, scale: str, record: dict, files: dict) -> Path:
    """Write a record folder next to the old one, then swap it in (the old one stays until then)."""
    target = record_dir(slug, scale)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{slug}.new-", dir=target.parent))
    old = target.parent / f".{slug}.old"
    try:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                                  encoding="utf-8")
        os.chmod(tmp, 0o755)
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    except BaseException:
        if not target.exists() and old.exists():
            os.replace(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return target


def record_chapters(registry, scale: str, params: dict, slugs, *, skip_refused: bool = False,
                    log=print) -> tuple[list[str], list[Refused]]:
    """Record the runs of ``slugs`` at ``scale``: ``(recorded, refused)``.

    Every chapter is checked first; unless ``skip_refused``, one refusal means nothing is written.
    """
    fp = Fingerprinter(trust=False)
    ready, refused = [], []
    for slug in slugs:
        entry = registry.chapter(slug)
        try:
            ready.append((entry, check_run(entry, registry, scale, params[slug], fp)))
        except Refused as err:
            refused.append(err)
    if refused and not skip_refused:
        fp.save()
        return [], refused
    built = [(entry, *build_record(entry, registry, scale, params[entry.slug], fp, out)) for entry, out in ready]
    fp.save()
    done = []
    for entry, record, files in built:
        write_record(entry.slug, scale, record, files)
        log(f"recorded {entry.slug} ({scale}): {record_dir(entry.slug, scale).relative_to(paths.ROOT)}")
        done.append(entry.slug)
    return done, refused


# ---------------------------------------------------------------------------- reading a record
def schema_problem(record) -> str | None:
    import jsonschema

    try:
        jsonschema.validate(record, json.loads(SCHEMA.read_text(encoding="utf-8")))
    except jsonschema.ValidationError as err:
        where = "/".join(map(str, err.absolute_path)) or "top level"
        return f"{where}: {err.message}"
    return None


@dataclass
class RecordStatus:
    slug: str
    state: str  # current | stale | missing | invalid
    reasons: list[str] = field(default_factory=list)
    record: dict | None = None
    folder: Path | None = None

    def line(self) -> str:
        text = f"{self.state:<8} record {self.slug}"
        if self.record is not None:
            text += f" ({self.record['scale']}, {self.record['run_date'][:10]})"
        return text + (": " + "; ".join(self.reasons) if self.reasons else "")


def load_record(slug: str, scale: str = "full") -> tuple[dict | None, str | None]:
    """``(record, None)`` for a valid record; ``(None, why)`` when invalid; ``(None, None)`` if none."""
    import hashlib

    folder = record_dir(slug, scale)
    path = folder / RECORD
    if not folder.is_dir():
        return None, None
    rel = f"evidence/{scale}/{slug}"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{rel}/{RECORD} is missing"
    except (OSError, ValueError) as err:
        return None, f"{rel}/{RECORD} is not valid JSON ({type(err).__name__})"
    problem = schema_problem(record)
    if problem:
        return None, f"{rel}/{RECORD} does not match the record schema ({problem})"
    if record["chapter"] != slug or record["scale"] != scale:
        return None, f"{rel}/{RECORD} is the record of {record['chapter']} at {record['scale']}"
    for item in [record["page"], *record["figures"]]:
        try:
            digest = hashlib.sha256((folder / item["file"]).read_bytes()).hexdigest()
        except OSError:
            return None, f"{rel}/{item['file']} is named in the record but missing"
        if digest != item["sha256"]:
            return None, f"{rel}/{item['file']} does not match its sha256 in the record"
    return record, None


def record_status(entry, registry, fp: Fingerprinter | None = None, scale: str = "full") -> RecordStatus:
    """Whether the record of ``entry`` is current, stale (what changed), missing or invalid."""
    record, problem = load_record(entry.slug, scale)
    folder = record_dir(entry.slug, scale)
    if problem:
        return RecordStatus(entry.slug, "invalid", [problem], folder=folder)
    if record is None:
        return RecordStatus(entry.slug, "missing")
    fp = fp or Fingerprinter()
    try:
        parameters = entry.resolve(scale)
    except Exception as err:  # noqa: BLE001 - a registry that no longer resolves: say so
        return RecordStatus(entry.slug, "stale", [f"parameters cannot be resolved ({err})"], record, folder)
    reasons = what_changed(record, entry, registry, parameters, fp)
    return RecordStatus(entry.slug, "stale" if reasons else "current", reasons, record, folder)


def status_all(registry, scale: str = "full", rehash: bool = True) -> list[RecordStatus]:
    fp = Fingerprinter(trust=not rehash)
    out = [record_status(entry, registry, fp, scale) for entry in registry.ready]
    fp.save()
    return out
