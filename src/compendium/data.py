"""Every dataset a chapter reads, loaded through one door that checks it against ``data/manifest.yaml``.

The manifest lists two kinds of entry:

``package``
    Data shipped inside an installed package (scikit-learn's digits, wine, ...), named by its
    loader (``module:function``), the package, its version and licence, the shapes and dtypes of
    the arrays, and the sha256 of the *canonical bytes* (below).
``file``
    A small file this project authors, kept in ``data/``: its path there, a description, a licence
    and the sha256 of the file's bytes.

Canonical bytes of a package dataset: for ``data`` then ``target``, the line
``"<name> <dtype> <shape>\\n"`` (dtype as little-endian numpy ``dtype.str``, e.g. ``<f8``; shape as
comma-separated integers) followed by the array's C-contiguous little-endian bytes. The hash
therefore covers values, dtypes and shapes, and is the same on every platform.

:func:`load` computes the checksum on every load and raises :class:`DataChecksumError`, naming the
dataset and both hashes, when it differs; :func:`verify` checks every entry (``compendium data
verify``, run by CI and before every build).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from . import paths

__all__ = ["DataChecksumError", "DataError", "Dataset", "canonical_sha256", "load", "manifest_path", "read_manifest", "verify"]


class DataError(ValueError):
    """The manifest or a dataset name is wrong (unknown name, malformed entry)."""


class DataChecksumError(DataError):
    """A dataset's checksum differs from the manifest's."""

    def __init__(self, name: str, expected: str, actual: str, detail: str = ""):
        self.name, self.expected, self.actual = name, expected, actual
        super().__init__(
            f"dataset {name!r}: checksum mismatch: manifest says sha256 {expected}, the loaded data has {actual}"
            + (f" ({detail})" if detail else "")
        )


@dataclass(frozen=True)
class Dataset:
    """A verified package dataset: the arrays and names its loader returned (attribute names as sklearn's Bunch)."""

    name: str
    data: np.ndarray
    target: np.ndarray
    feature_names: list = field(default_factory=list)
    target_names: list = field(default_factory=list)
    sha256: str = ""


def manifest_path(path: str | Path | None = None) -> Path:
    """The manifest in use: ``path``, else ``$COMPENDIUM_DATA_MANIFEST``, else ``data/manifest.yaml``."""
    return Path(path or os.environ.get("COMPENDIUM_DATA_MANIFEST") or paths.DATA_MANIFEST)


def read_manifest(path: str | Path | None = None) -> dict[str, dict]:
    """The manifest's datasets, ``{name: entry}``; raises :class:`DataError` if it is malformed."""
    where = manifest_path(path)
    if not where.is_file():
        raise DataError(f"dataset manifest not found: {where}")
    try:
        raw = yaml.safe_load(where.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise DataError(f"{where.name} is not valid YAML: {err}") from None
    datasets = raw.get("datasets")
    if not isinstance(datasets, dict) or not datasets:
        raise DataError(f"{where}: expected a 'datasets:' mapping of name -> entry")
    for name, entry in datasets.items():
        kind = entry.get("kind") if isinstance(entry, dict) else None
        required = {"package": ("loader", "package", "version", "licence", "shape", "dtype", "sha256"),
                    "file": ("path", "description", "licence", "sha256")}.get(kind)
        if required is None:
            raise DataError(f"{where.name}: dataset {name!r}: key 'kind' must be 'package' or 'file', got {kind!r}")
        missing = [k for k in required if k not in entry]
        if missing:
            raise DataError(f"{where.name}: dataset {name!r}: missing key(s) {', '.join(missing)}")
    return datasets


def _canonical_bytes(arrays: dict[str, np.ndarray]):
    for label, array in arrays.items():
        a = np.asarray(array)
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        yield f"{label} {a.dtype.str} {','.join(map(str, a.shape))}\n".encode()
        yield a.tobytes(order="C")


def canonical_sha256(data: np.ndarray, target: np.ndarray) -> str:
    """sha256 of the canonical bytes of ``(data, target)`` (see the module docstring)."""
    h = hashlib.sha256()
    for chunk in _canonical_bytes({"data": data, "target": target}):
        h.update(chunk)
    return h.hexdigest()


def _sklearn_digits_csv():
    """``load_digits`` without importing sklearn (seconds): the same CSV it reads, parsed the same way."""
    spec = importlib.util.find_spec("sklearn")
    csv = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if csv is None or not csv.is_file():
        return None
    with gzip.open(csv, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",")
    names = [f"pixel_{row}_{col}" for row in range(8) for col in range(8)]
    return table[:, :-1], table[:, -1].astype(int), names, list(range(10))


#: Loaders with a faster path that yields the same arrays (the checksum confirms it on every load).
_FAST = {"sklearn.datasets:load_digits": _sklearn_digits_csv}


def _call_loader(spec: str):
    fast = _FAST.get(spec)
    got = fast() if fast else None
    if got is not None:
        return got
    module, _, function = spec.partition(":")
    bunch = getattr(importlib.import_module(module), function)()
    names = [getattr(bunch, key, None) for key in ("feature_names", "target_names")]
    return (bunch.data, bunch.target, *([] if n is None else list(n) for n in names))


def _installed_version(package: str) -> str | None:
    if package == "python":  # the standard library has no distribution metadata; it ships with the interpreter
        import platform

        return platform.python_version()
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(name: str, where: str | Path | None) -> tuple[dict, Path]:
    datasets = read_manifest(where)
    if name not in datasets:
        raise DataError(f"unknown dataset {name!r}: not in {manifest_path(where)}; known: {', '.join(sorted(datasets))}")
    return datasets[name], manifest_path(where)


def load(name: str, *, manifest: str | Path | None = None) -> Dataset | Path:
    """Load dataset ``name`` and check it against the manifest.

    Parameters
    ----------
    name : str
        A key of the manifest's ``datasets``.
    manifest : path, optional
        Another manifest (default: ``$COMPENDIUM_DATA_MANIFEST`` or ``data/manifest.yaml``).

    Returns
    -------
    Dataset or Path
        For a ``package`` entry the arrays (``data`` of the recorded shape, ``target``); for a
        ``file`` entry the verified file's path.

    Raises
    ------
    DataChecksumError
        The data differ from what the manifest recorded (names the dataset and both hashes).
    DataError
        The name is not in the manifest, or the entry is malformed.
    """
    entry, where = _entry(name, manifest)
    if entry["kind"] == "file":
        path = where.parent / entry["path"]
        if not path.is_file():
            raise DataError(f"dataset {name!r}: file {entry['path']} not found beside {where.name}")
        actual = _file_sha256(path)
        if actual != entry["sha256"]:
            raise DataChecksumError(name, entry["sha256"], actual, f"file {entry['path']}")
        return path
    X, y, feature_names, target_names = _call_loader(entry["loader"])
    actual = canonical_sha256(X, y)
    if actual != entry["sha256"]:
        installed = _installed_version(entry["package"])
        raise DataChecksumError(name, entry["sha256"], actual,
                                f"{entry['package']} {installed} installed, manifest recorded {entry['version']}")
    return Dataset(name, np.asarray(X), np.asarray(y), feature_names, target_names, actual)


def loader_problem(name: str, entry: dict) -> str | None:
    """Why a package entry's ``loader`` cannot be called (not ``module:function``, a module that does not
    import, a missing function), or None. :func:`verify` (run before every build) reports it as a
    FAILED line instead of letting an import error reach a chapter as a traceback."""
    if entry.get("kind") != "package":
        return None
    loader = entry.get("loader")
    module, _, function = str(loader).partition(":")
    if not module or not function:
        return f"dataset {name!r}: loader {loader!r} is not 'module:function'"
    if loader in _FAST:
        return None
    try:
        found = callable(getattr(importlib.import_module(module), function, None))
    except ImportError as err:  # ModuleNotFoundError included
        return f"dataset {name!r}: loader {loader!r}: module {module!r} cannot be imported ({err})"
    if not found:
        return f"dataset {name!r}: loader {loader!r}: module {module!r} has no attribute {function!r}"
    return None


def verify(manifest: str | Path | None = None) -> list[tuple[str, bool, str]]:
    """Check every entry: ``[(name, ok, message)]`` in manifest order (never raises for a bad checksum)."""
    report = []
    for name, entry in read_manifest(manifest).items():
        problem = loader_problem(name, entry)
        if problem:
            report.append((name, False, problem))
            continue
        try:
            got = load(name, manifest=manifest)
        except DataError as err:
            report.append((name, False, str(err)))
            continue
        if isinstance(got, Path):
            report.append((name, True, f"file {entry['path']}, sha256 {entry['sha256'][:12]}"))
            continue
        note = ""
        installed = _installed_version(entry["package"])
        if installed != str(entry["version"]):
            note = f"; {entry['package']} {installed} installed, recorded {entry['version']}, same data"
        report.append((name, True, f"{entry['package']} {entry['loader']} {tuple(got.data.shape)}, "
                                   f"sha256 {got.sha256[:12]}{note}"))
    return report


def preflight(stamp: str | Path | None = None, manifest: str | Path | None = None) -> None:
    """Before a build: :func:`verify` every entry, or nothing when an identical check already passed.

    ``stamp`` (default ``.snakemake/compendium-data-verified.json``) records the manifest's hash and
    the versions of the packages it names after a check passes, so an unchanged environment costs
    one file read. Any edit of the manifest or an upgrade re-runs the full check; :func:`load`
    still verifies every dataset when a chapter reads it.

    Raises
    ------
    DataError
        Naming each dataset that failed (nothing has run yet).
    """
    import json

    where = manifest_path(manifest)
    entries = read_manifest(where)
    key = {"manifest": _file_sha256(where),
           "packages": {e["package"]: _installed_version(e["package"]) for e in entries.values() if e["kind"] == "package"},
           "files": {n: _file_sha256(where.parent / e["path"]) if (where.parent / e["path"]).is_file() else None
                     for n, e in entries.items() if e["kind"] == "file"}}
    stamp = Path(stamp or paths.ROOT / ".snakemake" / "compendium-data-verified.json")
    try:
        if json.loads(stamp.read_text(encoding="utf-8")) == key:
            return
    except (OSError, ValueError):
        pass
    failed = [msg for _, ok, msg in verify(where) if not ok]
    if failed:
        raise DataError("data check failed before any chapter ran:\n  " + "\n  ".join(failed)
                        + f"\n(fix the data or {where}; `compendium data verify` shows every entry)")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(key, sort_keys=True), encoding="utf-8")
