"""Repositories from the Python standard library, and the seeded version mutator.

The manifest's loaders (``data/manifest.yaml``) are :func:`stdlib_package` bound to one package:
``data`` is the bytes of every ``.py`` file of the package (sorted by path; test folders left
out), each file as its path, a NUL byte, its source, a NUL byte; ``target`` holds one
``(path bytes, source bytes)`` length pair per file. The checksum therefore covers names and
sources. :func:`load_repository` reads a package through ``compendium.data.load`` and returns
``{path: source}``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from compendium import data

#: The packages a chapter may index (each has a manifest entry ``stdlib_<name>_source``).
PACKAGES = ("email", "importlib", "unittest", "xml", "multiprocessing")


def _package_files(package: str) -> list[tuple[str, str]]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is not an installed package")
    root = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(p for p in root.rglob("*.py")
                   if not {"test", "tests", "__pycache__"} & set(p.relative_to(root).parts[:-1]))
    return [(p.relative_to(root.parent).as_posix(), p.read_text(encoding="utf-8")) for p in files]


def stdlib_package(package: str) -> SimpleNamespace:
    """The manifest loader: one package's sources packed into ``data`` / ``target`` arrays."""
    chunks, lengths = [], []
    for path, source in _package_files(package):
        p, s = path.encode("utf-8"), source.encode("utf-8")
        chunks += [p, b"\0", s, b"\0"]
        lengths.append((len(p), len(s)))
    return SimpleNamespace(data=np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(),
                           target=np.asarray(lengths, dtype=np.int64))


def stdlib_email() -> SimpleNamespace:
    """Manifest loader: the ``email`` package."""
    return stdlib_package("email")


def stdlib_importlib() -> SimpleNamespace:
    """Manifest loader: the ``importlib`` package."""
    return stdlib_package("importlib")


def stdlib_unittest() -> SimpleNamespace:
    """Manifest loader: the ``unittest`` package (its ``test`` folder left out)."""
    return stdlib_package("unittest")


def stdlib_xml() -> SimpleNamespace:
    """Manifest loader: the ``xml`` package."""
    return stdlib_package("xml")


def stdlib_multiprocessing() -> SimpleNamespace:
    """Manifest loader: the ``multiprocessing`` package."""
    return stdlib_package("multiprocessing")


def unpack(blob: np.ndarray, lengths: np.ndarray) -> dict[str, str]:
    """Invert :func:`stdlib_package`: ``{path: source}``."""
    raw, out, at = blob.tobytes(), {}, 0
    for lp, ls in np.asarray(lengths):
        path = raw[at: at + lp].decode("utf-8")
        at += lp + 1
        out[path] = raw[at: at + ls].decode("utf-8")
        at += ls + 1
    if at != len(raw):
        raise ValueError("packed repository has trailing bytes")
    return out


def load_repository(package: str) -> dict[str, str]:
    """A package's sources, verified against the manifest (``stdlib_<package>_source``)."""
    if package not in PACKAGES:
        raise ValueError(f"unknown repository {package!r}; choose from {', '.join(PACKAGES)}")
    got = data.load(f"stdlib_{package}_source")
    return unpack(got.data, got.target)


# ------------------------------------------------------------------------------------------------
# The version mutator
# ------------------------------------------------------------------------------------------------

OPERATIONS = ("add", "delete", "modify", "move")


@functools.lru_cache(maxsize=32)  # ast trees are large: keep only the files of the current edit
def _functions(path: str, source: str) -> list:
    """(node, parent body, is_top_level) for every def of a file."""
    out = []

    def walk(body, top):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node, body, top))
                walk(node.body, False)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, False)

    walk(ast.parse(source, filename=path).body, True)
    return out


def _span(node) -> tuple[int, int]:
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return start - 1, node.end_lineno  # 0-based [start, end)


def _cut(source: str, node) -> tuple[str, str]:
    lines = source.splitlines(keepends=True)
    a, b = _span(node)
    return "".join(lines[:a] + lines[b:]), "".join(lines[a:b])


def _append(source: str, block: str) -> str:
    return source.rstrip("\n") + "\n\n\n" + block.rstrip("\n") + "\n"


def mutate(repo: dict, fraction: float, rng: np.random.Generator) -> tuple[dict, list]:
    """A new version: ``round(fraction * functions)`` edits (add / delete / modify / move), at least one.

    ``modify`` inserts a call to another top-level function of the file (or ``pass``) at the top of
    a body; ``delete`` removes a def (never the last statement of a body); ``add`` appends a new
    helper that calls an existing function; ``move`` cuts a top-level def and appends it to another
    file that does not define the name. Returns the new ``{path: source}`` and the applied edits.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    new = dict(repo)
    paths = sorted(new)
    total = sum(len(_functions(p, s)) for p, s in new.items())
    want = max(1, int(round(fraction * total)))
    vocab = sorted({w for p in paths for w in Path(p).stem.strip("_").split("_") if w.isalpha() and len(w) > 2}
                   | {"value", "item", "record", "state", "buffer", "token", "entry", "field"})
    log, attempts, serial = [], 0, 0
    while len(log) < want and attempts < 50 * want:
        attempts += 1
        op = OPERATIONS[int(rng.integers(len(OPERATIONS)))]
        path = paths[int(rng.integers(len(paths)))]
        src = new[path]
        defs = _functions(path, src)
        tops = [n.name for n, _, top in defs if top]
        if op == "add":
            serial += 1
            w1, w2 = (vocab[int(i)] for i in rng.integers(len(vocab), size=2))
            name = f"_{w1}_{w2}_v{serial}"
            callee = tops[int(rng.integers(len(tops)))] + "(value)" if tops else "value"
            block = f'def {name}(value, {w2}=None):\n    """Return the {w1} {w2} of a value."""\n    return {callee}\n'
            candidate = {path: _append(src, block)}
        elif not defs:
            continue
        else:
            node, body, top = defs[int(rng.integers(len(defs)))]
            if op == "modify":
                first = node.body[0]
                if first.lineno == node.lineno:
                    continue
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                    if len(node.body) == 1:
                        continue
                    first = node.body[1]
                others = [t for t in tops if t != node.name]
                stmt = f"{others[int(rng.integers(len(others)))]}()" if others else "pass"
                lines = src.splitlines(keepends=True)
                lines.insert(first.lineno - 1, " " * first.col_offset + stmt + "\n")
                candidate = {path: "".join(lines)}
            elif op == "delete":
                if len(body) < 2:
                    continue
                candidate = {path: _cut(src, node)[0]}
            else:  # move
                if not top or len(paths) < 2:
                    continue
                dest = paths[int(rng.integers(len(paths)))]
                if dest == path or node.name in {n.name for n, _, _ in _functions(dest, new[dest])}:
                    continue
                rest, block = _cut(src, node)
                candidate = {path: rest, dest: _append(new[dest], block)}
        try:
            for p, s in candidate.items():
                ast.parse(s, filename=p)
        except SyntaxError:
            continue
        new.update(candidate)
        log.append((op, path))
    return new, log
