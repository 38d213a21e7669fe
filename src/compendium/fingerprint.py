"""Content fingerprints of what a job executes, and a cache of file hashes.

A rerun is decided by *what runs*, not by timestamps or the text of files. Each library module is
read as its syntax tree with docstrings dropped (comments never reach the tree), so a comment, a
docstring or a reformat changes nothing. The tree is cut into **units**: each top-level ``def`` or
``class`` (by name, with its place among the other statements: defaults, decorators and class
bodies are evaluated there) and the module's *module level* (every other top-level statement). A
job depends on:

* the module level of every module it loads (importing ``compendium.a.b`` runs ``compendium``,
  ``compendium.a`` and ``compendium.a.b``), and
* each unit it uses: ``from m import f``, ``m.f`` through a module alias, and transitively the
  names those units reference (in their own module, or imported there).

Whatever cannot be followed by name falls back to the **whole module**: a module alias used other
than as ``alias.name`` (passed around, ``getattr(alias, ...)``), ``from m import *``,
``importlib.import_module("compendium.m")``, a module that calls ``globals()``, ``vars()``,
``eval`` or ``exec`` (the whole of that module), and a module-level ``__getattr__`` (PEP 562) for a
name the module does not define. A top-level definition with a decorator outside
:data:`PURE_DECORATORS` (one that could register it somewhere at import) counts as module level. A
module that reads ``__doc__`` keeps its docstrings. Not followed (documented limits): an import by
a computed name (the registry's asset builders are roots of their own jobs; the data loaders of
``data/manifest.yaml`` are outside the library, and the manifest is an input), code reached only
through a string (a pickled class loaded by ``torch.load``), and side effects of a class's metaclass
or ``__init_subclass__``.

Every file hash goes through :class:`HashCache`, keyed on (device, inode, size, mtime_ns,
ctime_ns): an unchanged file is not read again, a touched or rewritten one is. Module analyses are
cached by the sha256 of the source. Both caches live in ``.snakemake/compendium-cache/`` and are
rebuilt from nothing if missing or unreadable.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from . import paths

#: Bump to invalidate every cached analysis (and so every fingerprint) after a change of the rules.
ANALYSIS_VERSION = f"3-py{sys.version_info[0]}.{sys.version_info[1]}"
#: Decorators that only wrap or describe a definition (no registration): such a definition stays a unit.
PURE_DECORATORS = frozenset({
    "dataclass", "dataclasses.dataclass", "torch.no_grad", "torch.inference_mode", "torch.enable_grad",
    "functools.cache", "functools.lru_cache", "functools.cached_property", "functools.wraps", "cache",
    "lru_cache", "cached_property", "wraps", "contextmanager", "contextlib.contextmanager", "staticmethod",
    "classmethod", "property", "overload", "typing.overload", "triton.jit",
})
DYNAMIC_CALLS = frozenset({"globals", "vars", "eval", "exec"})
PACKAGE = "compendium"
#: Cache sizes past which entries are dropped (files gone; analyses of old versions).
MAX_HASH_ENTRIES = 20000
MAX_CODE_ENTRIES = 3000


# ---------------------------------------------------------------------------- persistent caches
def cache_dir() -> Path:
    return paths.ROOT / ".snakemake" / "compendium-cache"


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_json(path: Path, data: dict) -> None:
    """Atomic replace; a cache that cannot be written (read-only tree, full disk) is just not kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_json(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class HashCache:
    """sha256 of files, re-read only when (device, inode, size, mtime_ns, ctime_ns) changed.

    ``trust=False`` (``compendium status``) hashes every file again and refreshes the entries.
    """

    def __init__(self, path: Path | None = None, trust: bool = True):
        self.path = path or cache_dir() / "hashes.json"
        self.trust = trust
        self.entries = _load_json(self.path) if trust else {}
        self.dirty = False

    def sha256(self, path: Path) -> str:
        """The file's sha256; raises OSError when it cannot be read."""
        path = Path(path)
        st = path.stat()
        key = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        name = str(path.absolute())
        hit = self.entries.get(name)
        if self.trust and hit is not None and hit[:5] == key:
            return hit[5]
        digest = sha256_file(path)
        self.entries[name] = key + [digest]
        self.dirty = True
        return digest

    def save(self) -> None:
        if self.dirty:
            if len(self.entries) > MAX_HASH_ENTRIES:  # forget files that are gone
                self.entries = {k: v for k, v in self.entries.items() if os.path.exists(k)}
            _save_json(self.path, self.entries)
            self.dirty = False


# ---------------------------------------------------------------------------- module analysis
_MODULE_FILES: dict[tuple[str, str], Path | None] = {}


def module_file(name: str) -> Path | None:
    """``'compendium.papers.x'`` → its file (``x.py`` or ``x/__init__.py``), or None if not a module.

    Looked up once per process and name (:class:`CodeIndex` starts afresh)."""
    key = (str(paths.ROOT), name)
    if key in _MODULE_FILES:
        return _MODULE_FILES[key]
    parts = name.split(".")
    found = None
    if parts[0] == PACKAGE:
        base = paths.ROOT.joinpath("src", *parts)
        if len(parts) > 1 and base.with_suffix(".py").is_file():
            found = base.with_suffix(".py")
        elif (base / "__init__.py").is_file():
            found = base / "__init__.py"
    _MODULE_FILES[key] = found
    return found


def _rel(path: Path) -> str:
    try:
        return str(Path(path).relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def _dump(nodes) -> str:
    text = "\n".join(ast.dump(n, annotate_fields=False, include_attributes=False) for n in nodes)
    return hashlib.sha256(text.encode()).hexdigest()


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _decorator_name(node: ast.AST) -> str | None:
    return _dotted(node.func if isinstance(node, ast.Call) else node)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    package = module if is_package else module.rpartition(".")[0]
    anchor = package.split(".") if package else []
    if level > 1:
        anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join(anchor + ([target] if target else []))


class _Scan(ast.NodeVisitor):
    """Names, attribute chains, imports and dynamic features inside one unit."""

    def __init__(self, module: str, is_package: bool):
        self.module, self.is_package = module, is_package
        self.bare: set[str] = set()
        self.chains: set[tuple[str, ...]] = set()
        self.bindings: dict[str, set] = {}  # name -> {("module", M) | ("attr", M, name)}
        self.loads: set[str] = set()  # compendium modules whose import runs here
        self.whole: set[str] = set()  # compendium modules used whole (import *, import_module("..."))
        self.all_imports: set[str] = set()  # what the file-level import scan of earlier versions saw
        self.dynamic = False
        self.reads_doc = False

    def _bind(self, name: str, target: tuple) -> None:
        self.bindings.setdefault(name, set()).add(target)

    def visit_Import(self, node):
        for alias in node.names:
            if not alias.name.startswith(PACKAGE + ".") and alias.name != PACKAGE:
                continue
            self.loads.add(alias.name)
            self.all_imports.add(alias.name)
            if alias.asname:
                self._bind(alias.asname, ("module", alias.name))
            else:
                self._bind(alias.name.split(".")[0], ("module", alias.name.split(".")[0]))

    def visit_ImportFrom(self, node):
        base = _resolve_relative(self.module, self.is_package, node.level, node.module) if node.level \
            else (node.module or "")
        if base != PACKAGE and not base.startswith(PACKAGE + "."):
            return
        subs = [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        # earlier versions' file-level scan: `from pkg import sub` is the submodule, anything else pkg
        self.all_imports.update(m for m in subs if module_file(m) is not None)
        if any(module_file(m) is None for m in subs) or not subs:
            self.all_imports.add(base)
        self.loads.add(base)
        for alias in node.names:
            if alias.name == "*":
                self.whole.add(base)
                continue
            sub = f"{base}.{alias.name}"
            if module_file(sub) is not None:
                self.loads.add(sub)
                self._bind(alias.asname or alias.name, ("module", sub))
            else:
                self._bind(alias.asname or alias.name, ("attr", base, alias.name))

    def visit_Name(self, node):
        self.bare.add(node.id)
        if node.id == "__doc__":
            self.reads_doc = True

    def visit_Attribute(self, node):
        parts, cur = [], node
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name):
            self.chains.add((cur.id, *reversed(parts)))
            if "__doc__" in parts:
                self.reads_doc = True
        else:
            self.visit(cur)

    def visit_Call(self, node):
        name = _dotted(node.func)
        if name in DYNAMIC_CALLS:
            self.dynamic = True
        elif name is not None and name.split(".")[-1] in ("import_module", "__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith(PACKAGE):
                self.whole.add(arg.value)
        self.generic_visit(node)


def _unit_record(scan: _Scan, digest: str) -> dict:
    return {"hash": digest, "bare": sorted(scan.bare), "chains": sorted(list(c) for c in scan.chains),
            "bindings": {k: sorted(list(t) for t in v) for k, v in scan.bindings.items()},
            "loads": sorted(scan.loads), "whole": sorted(scan.whole)}


def analyse_source(source: str, module: str, is_package: bool) -> dict:
    """The units of one module (see the module docstring); raises SyntaxError."""
    tree = ast.parse(source)
    probe = _Scan(module, is_package)
    probe.visit(tree)
    if not probe.reads_doc:
        _strip_docstrings(tree)
    units: dict[str, list] = {}
    level: list[ast.AST] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and all(
                _decorator_name(d) in PURE_DECORATORS for d in stmt.decorator_list):
            # where it sits among the module-level statements is part of a definition (defaults,
            # decorators and class bodies are evaluated then); other definitions are not counted,
            # so adding one leaves the rest as they were
            units.setdefault(stmt.name, []).append(ast.Expr(ast.Constant(f"after statement {len(level)}")))
            units[stmt.name].append(stmt)
        else:
            level.append(stmt)
    out = {"units": {}, "dynamic": probe.dynamic, "all_imports": sorted(probe.all_imports)}
    for name, nodes in units.items():
        scan = _Scan(module, is_package)
        for n in nodes:
            scan.visit(n)
        out["units"][name] = _unit_record(scan, _dump(nodes))
    scan = _Scan(module, is_package)
    for n in level:
        scan.visit(n)
    out["level"] = _unit_record(scan, _dump(level))
    return out


_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_MENTION = re.compile(r"\bcompendium(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def notebook_code(text: str) -> str:
    """The code cells of a MyST notebook, without cell options, magics and shell escapes."""
    lines = []
    for cell in _CODE_CELL.findall(text):
        for line in cell.splitlines():
            if line.lstrip().startswith((":", "%", "!")):
                continue
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def analyse_notebook(text: str) -> dict:
    """A notebook's code cells as one module level (run top to bottom); a chunk that does not parse
    alone makes every ``compendium`` module it mentions a whole-module dependency."""
    code = notebook_code(text)
    try:
        chunks = [ast.parse(code)]
        broken = []
    except SyntaxError:
        chunks, broken = [], []
        for chunk in code.split("\n\n"):
            try:
                chunks.append(ast.parse(chunk))
            except SyntaxError:
                broken.append(chunk)
    scan = _Scan("", False)
    for tree in chunks:
        scan.visit(tree)
    for chunk in broken:
        for name in _MENTION.findall(chunk):
            while name and module_file(name) is None:
                name = name.rpartition(".")[0]
            if name:
                scan.whole.add(name)
    record = _unit_record(scan, "")
    record["dynamic"] = scan.dynamic
    return record


class CodeIndex:
    """Analyses of library modules and notebooks, cached by content (see the module docstring)."""

    def __init__(self, hashes: HashCache | None = None, path: Path | None = None):
        _MODULE_FILES.clear()  # files may have come or gone since the last index
        self.hashes = hashes or HashCache()
        self.path = path or cache_dir() / "code.json"
        stored = _load_json(self.path)
        self.entries = stored.get("entries", {}) if stored.get("version") == ANALYSIS_VERSION else {}
        self.dirty = False
        self._modules: dict[str, dict | None] = {}
        self._used: set[str] = set()
        self._tree: str | None = None
        self._resolved: dict[str, dict] = {}
        self._resolved_dirty = False

    def save(self) -> None:
        if self.dirty:
            if len(self.entries) > MAX_CODE_ENTRIES:  # keep what this process used: the rest is old versions
                self.entries = {k: v for k, v in self.entries.items() if k in self._used}
            _save_json(self.path, {"version": ANALYSIS_VERSION, "entries": self.entries})
            self.dirty = False
        if self._resolved_dirty:
            _save_json(self.path.with_name("resolved.json"), {"tree": self._tree, "roots": self._resolved})
            self._resolved_dirty = False
        self.hashes.save()

    def tree(self) -> str:
        """One hash of every library file (name and content, through the hash cache)."""
        if self._tree is None:
            library = paths.ROOT / "src" / PACKAGE
            h = hashlib.sha256(ANALYSIS_VERSION.encode())
            for path in sorted(library.rglob("*.py")):
                h.update(f"{path.relative_to(library)}\0{self.hashes.sha256(path)}\n".encode())
            self._tree = h.hexdigest()
            stored = _load_json(self.path.with_name("resolved.json"))
            self._resolved = stored.get("roots", {}) if stored.get("tree") == self._tree else {}
        return self._tree

    def resolved(self, root: str, compute) -> dict[str, str]:
        """``compute()`` for ``root``, reused while no library file changed (keyed by :meth:`tree`)."""
        self.tree()
        hit = self._resolved.get(root)
        if hit is None:
            hit = self._resolved[root] = compute()
            self._resolved_dirty = True
        return dict(hit)

    def _cached(self, kind: str, path: Path, compute) -> tuple[str, dict]:
        digest = self.hashes.sha256(path)
        key = f"{kind}:{digest}:{_rel(path)}"
        self._used.add(key)
        hit = self.entries.get(key)
        if hit is None:
            hit = compute(path.read_text(encoding="utf-8"))
            self.entries[key] = hit
            self.dirty = True
        return digest, hit

    def module(self, name: str) -> dict | None:
        """The analysis of library module ``name`` (None when it is not a library module)."""
        if name in self._modules:
            return self._modules[name]
        path = module_file(name)
        result = None
        if path is not None:
            is_package = path.name == "__init__.py"

            def compute(text):
                try:
                    return analyse_source(text, name, is_package)
                except SyntaxError as err:  # the file itself, whole, stands for it
                    return {"syntax_error": str(err)}

            digest, result = self._cached("module", path, compute)
            result = {**result, "file": _rel(path), "sha256": digest, "is_package": is_package}
        self._modules[name] = result
        return result

    def notebook(self, path: Path) -> tuple[str, dict]:
        return self._cached("notebook", Path(path), analyse_notebook)


# ---------------------------------------------------------------------------- dependencies
class Resolver:
    """Walks units from roots and collects ``{component: hash}`` (see :func:`components`)."""

    def __init__(self, index: CodeIndex):
        self.index = index
        self.out: dict[str, str] = {}
        self.done: set = set()
        self.queue: list = []

    def _add(self, item: tuple) -> None:
        if item not in self.done:
            self.done.add(item)
            self.queue.append(item)

    def run(self) -> dict[str, str]:
        while self.queue:
            item = self.queue.pop()
            getattr(self, f"_{item[0]}")(*item[1:])
        return self.out

    # an import of `name` runs its parents' module level too
    def _load(self, name: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts)):
            self._add(("load", ".".join(parts[:i])))
        mod = self.index.module(name)
        if mod is None:
            return
        if "syntax_error" in mod:
            self.out[mod["file"]] = mod["sha256"]
            return
        self.out[mod["file"]] = mod["level"]["hash"]
        self._use_refs(name, mod["level"], {})
        if mod["dynamic"]:
            self._add(("whole", name))

    def _whole(self, name: str) -> None:
        self._add(("load", name))
        mod = self.index.module(name)
        if mod is None or "syntax_error" in mod:
            return
        for unit in mod["units"]:
            self._add(("unit", name, unit))

    def _unit(self, name: str, unit: str) -> None:
        mod = self.index.module(name)
        if mod is None:
            return
        self._add(("load", name))
        if "syntax_error" in mod:
            return
        rec = mod["units"].get(unit)
        if rec is not None:
            self.out[f"{mod['file']}::{unit}"] = rec["hash"]
            self._use_refs(name, rec, mod["level"]["bindings"])
            return
        sub = f"{name}.{unit}"
        if module_file(sub) is not None:  # `pkg.sub` reached as an attribute: the submodule
            self._add(("load", sub))
            return
        targets = mod["level"]["bindings"].get(unit)
        if targets:  # a re-export: follow it
            for target in targets:
                self._target(target, ())
        elif "__getattr__" in mod["units"]:
            self._add(("unit", name, "__getattr__"))

    def _target(self, target, chain: tuple) -> None:
        """A binding used as ``name.chain...``: a unit, a module attribute, or a whole module."""
        if target[0] == "attr":
            self._add(("unit", target[1], target[2]))
            return
        module = target[1]
        self._add(("load", module))
        for attr in chain:
            sub = f"{module}.{attr}"
            if module_file(sub) is None:
                self._add(("unit", module, attr))
                return
            module = sub
            self._add(("load", module))
        self._add(("whole", module))  # the module itself is used as a value

    def _use_refs(self, module: str, rec: dict, module_bindings: dict) -> None:
        for m in rec["loads"]:
            self._add(("load", m))
        for m in rec["whole"]:
            self._add(("whole", m))
        mod = self.index.module(module) if module else None
        units = mod["units"] if mod and "units" in mod else {}

        def resolve(name: str, chain: tuple) -> None:
            for target in rec["bindings"].get(name) or module_bindings.get(name) or ():
                self._target(tuple(target), chain)
            if name in units:
                self._add(("unit", module, name))

        for name in rec["bare"]:
            resolve(name, ())
        for chain in rec["chains"]:
            resolve(chain[0], tuple(chain[1:]))


def components(index: CodeIndex, *, notebook: Path | None = None, units=(), modules=()) -> dict[str, str]:
    """``{component: hash}`` of the library code reached from the roots.

    ``notebook``: a chapter notebook (whole file; its code cells are the roots); ``units``:
    ``(module, name)`` pairs, e.g. an asset builder; ``modules``: modules used whole.
    """
    key = json.dumps([_rel(notebook) if notebook is not None else None,
                      index.hashes.sha256(notebook) if notebook is not None else None,
                      sorted(map(list, units)), sorted(modules)])
    return index.resolved(key, lambda: _components(index, notebook, units, modules))


def _components(index: CodeIndex, notebook, units, modules) -> dict[str, str]:
    res = Resolver(index)
    if notebook is not None:
        digest, rec = index.notebook(notebook)
        res.out[_rel(notebook)] = digest
        res._use_refs("", rec, {})
        if rec.get("dynamic"):  # globals(), eval, exec ... in a notebook: any library code may run
            library = paths.ROOT / "src" / PACKAGE
            for path in library.rglob("*.py"):
                parts = path.relative_to(library.parent).with_suffix("").parts
                res._add(("whole", ".".join(parts[:-1] if parts[-1] == "__init__" else parts)))
    for module, name in units:
        res._add(("unit", module, name))
    for module in modules:
        res._add(("whole", module))
    return dict(sorted(res.run().items()))


def legacy_sources(index: CodeIndex, modules) -> list[str]:
    """The library files earlier versions made rule inputs for ``modules``: every ``compendium``
    import anywhere in a file, followed transitively; a parent package's ``__init__`` counted as a
    file but not followed. Used once, to adopt outputs built before content fingerprints."""
    seen: set[str] = set()
    followed: set[str] = set()
    queue = [m for m in modules if module_file(m)]
    while queue:
        name = queue.pop()
        path = module_file(name)
        if path is None:
            continue
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = module_file(".".join(parts[:i]))
            if parent is not None:
                seen.add(_rel(parent))
        seen.add(_rel(path))
        if name in followed:
            continue
        followed.add(name)
        mod = index.module(name)
        if mod and "all_imports" in mod:
            queue.extend(mod["all_imports"])
    return sorted(seen)


def notebook_imports(index: CodeIndex, notebook: Path) -> list[str]:
    """The ``compendium`` modules a notebook's code imports (what earlier versions followed)."""
    text = Path(notebook).read_text(encoding="utf-8")
    code = notebook_code(text)
    found: set[str] = set()
    for chunk in [code, *code.split("\n\n")]:
        try:
            tree = ast.parse(chunk)
        except SyntaxError:
            continue
        scan = _Scan("", False)
        scan.visit(tree)
        found |= scan.all_imports
    return sorted(found)
