"""Parsing and dependency resolution: entities from ``ast``, import aliases, inheritance, calls.

A repository is a ``dict`` ``{path: source}`` with POSIX paths relative to the folder that holds
the package (``"email/message.py"``), so ``email/message.py`` is module ``email.message``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import posixpath
import re
from collections import Counter
from dataclasses import dataclass

# ------------------------------------------------------------------------------------------------
# Entities and parsing
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entity:
    """One low-level node: a file, a class or a function (methods included).

    ``key`` hashes what the lifter reads (the unit's source; for a file, its units' features), so
    an entity whose key is unchanged needs no new lifter call.
    """

    id: str
    kind: str  # "file" | "class" | "function"
    path: str
    qualname: str
    lineno: int
    end_lineno: int
    args: tuple = ()
    bases: tuple = ()
    doc: str = ""
    code: str = ""
    key: str = ""


@dataclass(frozen=True)
class ParsedFile:
    """The parse of one file: its entities and the unresolved references they make."""

    path: str
    module: str
    entities: tuple  # of Entity, the file first
    refs: tuple  # (source id, edge type, target) with target a tuple, see _Refs
    aliases: tuple  # ((local name, dotted target), ...)


def module_name(path: str) -> str:
    """``"a/b/c.py"`` -> ``"a.b.c"``, ``"a/__init__.py"`` -> ``"a"``."""
    if not path.endswith(".py"):
        raise ValueError(f"not a Python file: {path!r}")
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _first_sentence(doc: str | None) -> str:
    if not doc:
        return ""
    text = " ".join(doc.strip().split())
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200]


def _dotted(node) -> tuple | None:
    """``a.b.c`` -> ("a", "b", "c"); None for anything that is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return (node.id, *reversed(parts))
    return None


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    package = module if is_package else module.rpartition(".")[0]
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return name or ""
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))


class _Collector(ast.NodeVisitor):
    """Walk one module: entities, import aliases, call / inheritance / import references."""

    def __init__(self, path: str, source: str):
        self.path, self.source = path, source
        self.lines = source.splitlines(keepends=True)
        self.module = module_name(path)
        self.is_package = path.endswith("__init__.py")
        self.entities: list[Entity] = []
        self.refs: list[tuple] = []
        self.aliases: dict[str, str] = {}
        self.scope: list[tuple[str, str]] = []  # (kind, name)
        self.seen: Counter = Counter()

    def _qual(self, name: str) -> str:
        return ".".join([n for _, n in self.scope] + [name])

    def _owner(self) -> str:
        return f"{self.path}::{'.'.join(n for _, n in self.scope)}" if self.scope else self.path

    def _import(self, node):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.aliases[a.asname] = a.name
                else:
                    self.aliases.setdefault(a.name.split(".")[0], a.name.split(".")[0])
                self.refs.append((self.path, "import", ("module", a.name)))
        else:
            base = _resolve_relative(self.module, self.is_package, node.level, node.module)
            for a in node.names:
                if a.name == "*":
                    continue
                target = f"{base}.{a.name}" if base else a.name
                self.aliases[a.asname or a.name] = target
                self.refs.append((self.path, "import", ("module", base)))
                self.refs.append((self.path, "import", ("module", target)))

    visit_Import = visit_ImportFrom = _import

    def _unit(self, node, kind: str):
        qual = self._qual(node.name)
        self.seen[qual] += 1
        if self.seen[qual] > 1:  # a second definition of one name (try/except, if/else): its own node
            qual = f"{qual}#{self.seen[qual]}"
        eid = f"{self.path}::{qual}"
        doc = _first_sentence(ast.get_docstring(node))
        if kind == "function":
            a = node.args
            args = tuple(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls"))
            code = "".join(self.lines[node.lineno - 1: node.end_lineno])  # whole lines of the def
            key = _sha(code)
            bases = ()
        else:
            args = ()
            bases = tuple(ast.unparse(b) for b in node.bases)
            methods = tuple(b.name for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)))
            code = f"class {node.name}({', '.join(bases)}): {doc}\n" + " ".join(methods)
            key = _sha(code)
            for b in node.bases:
                target = _dotted(b)
                if target:
                    self.refs.append((eid, "inherit", ("name",) + target))
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        self.entities.append(Entity(eid, kind, self.path, qual, start, node.end_lineno, args, bases, doc, code, key))
        self.scope.append((kind, node.name))
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node):
        self._unit(node, "function")

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._unit(node, "class")

    def visit_Call(self, node):
        if self.scope and self.scope[-1][0] == "function":
            target = _dotted(node.func)
            if target:
                classes = [n for k, n in self.scope if k == "class"]
                if len(target) == 2 and target[0] in ("self", "cls") and classes:
                    qual = ".".join(n for k, n in self.scope[: max(i for i, (k, _) in enumerate(self.scope) if k == "class") + 1])
                    self.refs.append((self._owner(), "call", ("self", qual, target[1])))
                else:
                    self.refs.append((self._owner(), "call", ("name",) + target))
        self.generic_visit(node)


@functools.lru_cache(maxsize=2048)
def parse_file(path: str, source: str) -> ParsedFile:
    """Parse one file into entities and unresolved references (no lifting; memoised on the text)."""
    tree = ast.parse(source, filename=path)
    c = _Collector(path, source)
    c.visit(tree)
    lines = source.count("\n") + 1
    file_entity = Entity(path, "file", path, "", 1, lines, doc=_first_sentence(ast.get_docstring(tree)), key=_sha(source))
    return ParsedFile(path, c.module, (file_entity, *c.entities), tuple(dict.fromkeys(c.refs)),
                      tuple(sorted(c.aliases.items())))


# ------------------------------------------------------------------------------------------------
# Dependency resolution
# ------------------------------------------------------------------------------------------------

#: Method names of built-in types: ``x.append()`` is far more often a list's than the one
#: repository method of that name, so the fuzzy rule never resolves them.
BUILTIN_METHODS = frozenset(name for t in (object, list, dict, set, frozenset, str, bytes, bytearray, tuple, int, float)
                            for name in dir(t))

class SymbolTable:
    """Qualified names of a repository and the resolution rules used for every edge."""

    def __init__(self, parsed: dict[str, ParsedFile]):
        self.parsed = parsed
        self.modules = {p.module: p for p in parsed.values()}
        self.symbols: dict[str, str] = {}
        self.methods: dict[str, list[str]] = {}
        self.kind: dict[str, str] = {}
        for p in parsed.values():
            self.symbols[p.module] = p.path
            for e in p.entities[1:]:
                self.symbols[f"{p.module}.{e.qualname}"] = e.id
                self.kind[e.id] = e.kind
                if e.kind == "function" and "." in e.qualname:
                    self.methods.setdefault(e.qualname.rsplit(".", 1)[1], []).append(e.id)
        self.alias = {p.module: dict(p.aliases) for p in parsed.values()}
        self.bases: dict[str, list[str]] = {}
        for p in parsed.values():
            for src, kind, target in p.refs:
                if kind == "inherit":
                    hit = self.resolve(p, target)
                    if hit and self.kind.get(hit) == "class":
                        self.bases.setdefault(src, []).append(hit)

    def resolve_dotted(self, dotted: str, depth: int = 0) -> str | None:
        """A dotted name to an entity id, following import aliases of modules (re-exports)."""
        if dotted in self.symbols:
            return self.symbols[dotted]
        if depth > 8:
            return None
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if module in self.modules:
                head, rest = parts[cut], parts[cut + 1:]
                target = self.alias[module].get(head)
                if target and target != dotted:
                    return self.resolve_dotted(".".join([target, *rest]), depth + 1)
                return None
        return None

    def lookup_method(self, class_id: str, name: str, seen: frozenset = frozenset()) -> str | None:
        """Method ``name`` of a class or, failing that, of its bases in order (inheritance chain)."""
        if class_id in seen:
            return None
        path, qual = class_id.split("::")
        hit = self.symbols.get(f"{self.parsed[path].module}.{qual}.{name}")
        if hit:
            return hit
        for base in self.bases.get(class_id, []):
            hit = self.lookup_method(base, name, seen | {class_id})
            if hit:
                return hit
        return None

    def resolve(self, p: ParsedFile, target: tuple) -> str | None:
        if target[0] == "module":
            return self.symbols.get(target[1]) if target[1] in self.modules else None
        if target[0] == "self":
            return self.lookup_method(f"{p.path}::{target[1]}", target[2])
        names = target[1:]
        head, rest = names[0], names[1:]
        local = self.symbols.get(f"{p.module}.{'.'.join(names)}")
        if local:
            return local
        if head in self.alias[p.module]:
            return self.resolve_dotted(".".join([self.alias[p.module][head], *rest]))
        if (len(rest) == 1 and rest[0] not in BUILTIN_METHODS
                and len(self.methods.get(rest[0], [])) == 1):  # var.method: the one method of that name
            return self.methods[rest[0]][0]
        return None


def resolve_edges(parsed: dict[str, ParsedFile]) -> frozenset:
    """Every typed dependency edge ``(source id, target id, type)``, self-loops dropped."""
    table = SymbolTable(parsed)
    edges = set()
    for p in parsed.values():
        for src, kind, target in p.refs:
            dst = table.resolve(p, target)
            if dst is None or dst == src:
                continue
            if kind == "import" and table.kind.get(dst, "file") != "file":
                continue
            edges.add((src, dst, kind))
    return frozenset(edges)


def lca_directory(paths) -> str:
    """The deepest directory containing every path (prefix of path components; "" for the root)."""
    dirs = [posixpath.dirname(p).split("/") if posixpath.dirname(p) else [] for p in paths]
    if not dirs:
        raise ValueError("lca_directory needs at least one path")
    common = []
    for parts in zip(*dirs):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common)
