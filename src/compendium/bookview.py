"""The executed chapter notebook as the book shows it: transformations applied at staging.

The notebooks under ``notebooks/`` are never edited; :func:`chapter_view` takes the executed
notebook of a chapter (``results/<scale>/<slug>/<slug>.ipynb``) and returns the notebook the book
renders:

- **Parameters once.** Papermill's ``injected-parameters`` cell is dropped and the tagged
  ``parameters`` cell is rewritten to the values that ran, each commented with where it came
  from: the registry's value for the scale, or a ``--set`` override (the registry value that it
  replaced is named). ``params.yaml`` beside the executed notebook holds the resolved values.
- **Glue-only cells removed.** A code cell whose every statement is a ``glue(...)`` call is tagged
  ``remove-cell`` (MyST-NB still reads its glued values); a cell that ends in one does not show
  the glued value as its output.
- **No build details on the page.** A result shown only as the plain repr of bookkeeping (a saved
  figure's path, a matplotlib object, a ledger row) or naming a folder of the build is dropped;
  printed paths lose the build's folders (:func:`strip_build_details`).
- **Plotting code folded.** A cell that draws (matplotlib, seaborn, ``ch.figure``) gets the
  ``hide-input`` tag, so the page shows a "show code" toggle. The cell is split at statement
  boundaries: what comes before its first drawing statement stays visible, and so does every later
  statement that calls into the library (a name imported from ``compendium``), so the calls a
  student reads stay on the page.
- **Source files.** A "Source files" box after the title names the chapter's notebook, library
  module or package and tests: links when ``repository.url`` is set in ``book/_config.yml``,
  repository-relative paths otherwise.

Every transformation only adds tags, rewrites the parameters cell or splits a cell at statement
boundaries, so the notebook a reader downloads still runs top to bottom with the same result.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .registry import COMMON_PARAMETERS, ChapterEntry

PLOT_ROOTS = frozenset({"plt", "sns", "matplotlib", "mpl", "seaborn"})
FOLD_TAG, REMOVE_TAG = "hide-input", "remove-cell"


# ---------------------------------------------------------------------------- parameters
def _literal(value: Any) -> str:
    """A Python literal for ``value`` as Papermill writes it (double-quoted strings)."""
    try:
        from papermill.translators import PythonTranslator

        return PythonTranslator.translate(value)
    except Exception:  # noqa: BLE001 - papermill missing or a type it cannot write
        return repr(value)


def _assignments(source: str) -> dict[str, Any]:
    """``name = literal`` lines of a parameters cell (other statements are ignored)."""
    out: dict[str, Any] = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                continue
    return out


def parameter_origins(entry: ChapterEntry, scale: str, effective: dict) -> dict[str, str]:
    """Where each effective value came from: ``'registry ...'`` or ``'--set override ...'``."""
    try:
        registry = entry.resolve(scale)
    except Exception:  # noqa: BLE001 - a registry changed since the run: say nothing wrong
        registry = {}
    origins = {}
    for name, value in effective.items():
        if name == "scale":
            origins[name] = "the run's scale"
        elif name in registry and (value != registry[name] or type(value) is not type(registry[name])):
            how = "--set override or the profile's device" if name == "device" else "--set override"
            origins[name] = f"{how} (registry: {_literal(registry[name])})"
        elif name in entry.parameters:
            origins[name] = f"registry, {scale} scale" if scale in entry.parameters[name] else "registry default"
        elif name in COMMON_PARAMETERS:
            origins[name] = "registry" if name == "seed" and entry.seed else "default"
        else:
            origins[name] = "injected"
    return origins


def effective_parameters_source(notebook_values: dict, effective: dict, origins: dict, scale: str) -> str:
    names = list(notebook_values) + [n for n in effective if n not in notebook_values]
    rows = []
    for name in names:
        value = effective.get(name, notebook_values.get(name))
        note = origins.get(name, "notebook")
        if name in notebook_values and notebook_values[name] != value:
            note += f"; notebook: {_literal(notebook_values[name])}"
        rows.append((f"{name} = {_literal(value)}", note))
    width = max((len(code) for code, _ in rows), default=0)
    overridden = sum("--set" in note for _, note in rows)
    head = [f"# The values this chapter ran with ({scale} scale; {overridden} set with --set).",
            "# Where a value differs from the notebook's own, that one follows 'notebook:'."]
    return "\n".join(head + [f"{code:<{width}}  # {note}" for code, note in rows])


def show_parameters_once(nb: dict, entry: ChapterEntry, scale: str, params_file: Path | None) -> None:
    """Drop the injected cell; rewrite the ``parameters`` cell to the effective values."""
    cells = nb["cells"]
    injected = [c for c in cells if "injected-parameters" in _tags(c)]
    effective: dict[str, Any] = {}
    for c in injected:
        effective.update(_assignments(_source(c)))
    if params_file is not None and params_file.is_file():
        recorded = (yaml.safe_load(params_file.read_text(encoding="utf-8")) or {}).get("parameters") or {}
        effective = {**recorded, **effective} if effective else dict(recorded)
    nb["cells"] = [c for c in cells if "injected-parameters" not in _tags(c)]
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "parameters" in _tags(cell):
            own = _assignments(_source(cell))
            cell["source"] = effective_parameters_source(own, effective, parameter_origins(entry, scale, effective),
                                                         scale)
            _add_tag(cell, "effective-parameters")
            break


# ---------------------------------------------------------------------------- code cells
def _tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _add_tag(cell: dict, tag: str) -> None:
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def library_names(nb: dict) -> set[str]:
    """Names the notebook imports from ``compendium`` (``paper``, ``asset_dir``, ...)."""
    names: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compendium"):
                names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("compendium")}
    names.discard("start_chapter")
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def is_glue(stmt: ast.stmt) -> bool:
    """``ch.glue(...)`` / ``glue(...)`` / ``_ = ch.glue(...)``, or a loop or branch of only those."""
    value = None
    if isinstance(stmt, ast.Expr):
        value = stmt.value
    elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id == "_" for t in stmt.targets):
        value = stmt.value
    elif isinstance(stmt, (ast.For, ast.If)):
        return all(is_glue(s) for s in stmt.body + stmt.orelse)
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    return (isinstance(func, ast.Attribute) and func.attr == "glue") or (isinstance(func, ast.Name) and func.id == "glue")


class _Plotting:
    """Which statements draw: they touch matplotlib/seaborn, a name bound from them, or ``.figure``."""

    def __init__(self):
        self.names = set(PLOT_ROOTS)

    def _uses(self, node: ast.AST) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.names:
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "figure":
                return True
        return False

    def statement(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return False
        if isinstance(stmt, ast.FunctionDef):
            args = {a.arg for a in stmt.args.args + stmt.args.kwonlyargs}
            if self._uses(stmt) or any(a.startswith(("ax", "fig")) for a in args):
                self.names.add(stmt.name)
                return True
            return False
        draws = self._uses(stmt)
        for node in ast.walk(stmt):  # fig, axes = plt.subplots(...); for ax in axes.flat: they draw too
            bound = None
            if isinstance(node, ast.Assign) and self._uses(node.value):
                bound = node.targets
            elif isinstance(node, (ast.For, ast.comprehension)) and self._uses(node.iter):
                bound = [node.target]
            for target in bound or []:
                self.names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and n.id != "_"}
        return draws


def _calls_library(stmt: ast.stmt, library: set[str]) -> bool:
    return any(isinstance(n, ast.Call) and _root(n.func) in library for n in ast.walk(stmt))


def _segments(source: str, tree: ast.Module, visible: list[bool]) -> list[tuple[bool, str]]:
    """Split ``source`` at statement boundaries into runs of equal visibility."""
    lines = source.splitlines(keepends=True)
    out: list[tuple[bool, list[str]]] = []
    start = 0
    for i, stmt in enumerate(tree.body):
        end = stmt.end_lineno if i + 1 < len(tree.body) else len(lines)
        chunk = lines[start:end]
        start = end
        if out and out[-1][0] == visible[i]:
            out[-1][1].extend(chunk)
        else:
            out.append((visible[i], chunk))
    return [(v, "".join(chunk).strip("\n")) for v, chunk in out]


def _only_glue(text: str) -> bool:
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return False
    return bool(body) and all(is_glue(st) for st in body)


def fold_code_cells(nb: dict) -> None:
    """Tag glue-only cells ``remove-cell``; fold drawing cells, keeping library calls visible."""
    library = library_names(nb)
    plotting = _Plotting()
    cells = []
    for cell in nb["cells"]:
        tags = _tags(cell)
        if cell["cell_type"] != "code" or "parameters" in tags or {FOLD_TAG, REMOVE_TAG} & set(tags):
            cells.append(cell)
            continue
        source = _source(cell)
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics: leave as is
            cells.append(cell)
            continue
        if tree.body and all(is_glue(s) for s in tree.body):
            _add_tag(cell, REMOVE_TAG)
            cells.append(cell)
            continue
        if tree.body and is_glue(tree.body[-1]):  # `ch.glue` returns its value: not an output to show
            cell["outputs"] = [o for o in cell.get("outputs", []) if o.get("output_type") != "execute_result"]
        draws = [plotting.statement(s) for s in tree.body]
        if not any(draws):
            cells.append(cell)
            continue
        # what prepares the figure's data before it is drawn stays on the page; after the first
        # drawing statement only calls into the library do
        first = draws.index(True)
        visible = [not d and (i < first or (_calls_library(s, library) and not is_glue(s)))
                   for i, (s, d) in enumerate(zip(tree.body, draws))]  # a glue after a drawing folds with it
        parts = _segments(source, tree, visible)
        for k, (shown, text) in enumerate(parts):
            last = k == len(parts) - 1
            part = copy.deepcopy(cell) if last else {
                "cell_type": "code", "execution_count": None, "outputs": [],
                "metadata": {"tags": [t for t in tags]},
                **({"id": f"{cell['id']}-{k}"} if "id" in cell else {}),
            }
            part["source"] = text
            if not shown:
                shows_output = last and any(  # glued values (papermill records) are read, not shown
                    o.get("output_type") == "stream" or (o.get("output_type") in ("display_data", "execute_result")
                                                          and not all(k.startswith("application/papermill.record")
                                                                      for k in o.get("data", {})))
                    for o in part.get("outputs", []))
                # a folded piece of only glue calls is removed, as a glue-only cell is (its values stay glued)
                _add_tag(part, REMOVE_TAG if _only_glue(text) and not shows_output else FOLD_TAG)
            cells.append(part)
    nb["cells"] = cells


# ---------------------------------------------------------------------------- build details
def strip_build_details(nb: dict) -> None:
    """Keep what belongs to the build, not the book, off the page.

    A result whose only form is plain text (no table, image or markup) and that is the repr of
    bookkeeping (a path, a matplotlib object, a ledger row, an object at an address) or names a
    folder of the build is dropped. In printed text (a library's warning on stderr, a traceback) the
    folders of the build, the Python environment's packages and the project, are cut from the
    paths, which read ``tqdm/auto.py:21`` or ``results/smoke/...``. Glued values are left as they
    are (the prose reads them).
    """
    import os
    import re
    import sys
    import sysconfig

    bookkeeping = re.compile(r"\s*\[?\s*(?:\w*Path\(|<Figure size |<Axes|<matplotlib\.|Claim\(id=|<[\w.]+ object at 0x)")
    results = paths.results_root()  # cut on its own only where it lies outside the project
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | {sys.prefix, str(paths.ROOT)}
    roots |= set() if results.is_relative_to(paths.ROOT) else {str(results)}
    roots |= {os.path.realpath(r) for r in roots}
    cut = sorted((r.rstrip(os.sep) + os.sep for r in roots), key=len, reverse=True)  # the longest folder first

    def relative(text: str) -> str:
        for root in cut:
            text = text.replace(root, "")
        return text

    for cell in nb["cells"]:
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if (out.get("output_type") in ("execute_result", "display_data") and set(data) == {"text/plain"}
                    and "scrapbook" not in out.get("metadata", {})):
                text = "".join(data["text/plain"])
                if bookkeeping.match(text) or relative(text) != text:
                    continue
            if out.get("output_type") == "stream":
                out["text"] = relative("".join(out.get("text", "")))
            elif out.get("output_type") == "error":
                out["traceback"] = [relative(line) for line in out.get("traceback", [])]
            kept.append(out)
        if "outputs" in cell:
            cell["outputs"] = kept


# ---------------------------------------------------------------------------- source box
def source_files(entry: ChapterEntry) -> list[tuple[str, str]]:
    """``(what, repository-relative path)``: the notebook, the paper's package or module, its tests.

    The layout is the chapter contract's (the contract tests check that these files exist); only
    the choice between a package and a single module is read from ``src/``.
    """
    package = paths.ROOT / "src" / "compendium" / "papers" / entry.slug
    library = f"src/compendium/papers/{entry.slug}/" if package.is_dir() else f"src/compendium/papers/{entry.slug}.py"
    return [("notebook", f"notebooks/{entry.part}/{entry.slug}.md"), ("library", library),
            ("tests", f"tests/papers/test_{entry.slug}.py")]


def repository() -> tuple[str, str] | None:
    """``(url, branch)`` from ``repository:`` in ``book/_config.yml``; None when not configured."""
    try:
        config = yaml.safe_load((paths.BOOK / "_config.yml").read_text(encoding="utf-8")) or {}
    except OSError:
        return None
    repo = config.get("repository") or {}
    url = str(repo.get("url") or "").strip().rstrip("/")
    return (url, str(repo.get("branch") or "main")) if url.startswith(("https://", "http://")) else None


def source_box(entry: ChapterEntry, scale: str) -> str:
    repo = repository()
    items = []
    for what, rel in source_files(entry):
        if repo:
            kind = "tree" if rel.endswith("/") else "blob"
            items.append(f"- {what}: [`{rel}`]({repo[0]}/{kind}/{repo[1]}/{rel})")
        else:
            items.append(f"- {what}: `{rel}`")
    items.append(f"- results of this run: `results/{scale}/{entry.slug}/` (`claims.json`, `params.yaml`, figures)")
    where = "in the repository" if repo else "relative to the repository root"
    return "\n".join([":::{admonition} Source files", ":class: seealso chapter-sources",
                      f"The code behind this chapter's claims, {where}:", "", *items, ":::"])


def add_source_box(nb: dict, entry: ChapterEntry, scale: str) -> None:
    """Insert the box right after the chapter's title (the first ``# `` heading)."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        lines = _source(cell).splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# "):
                lines[i + 1:i + 1] = ["", source_box(entry, scale), ""]
                cell["source"] = "\n".join(lines)
                return
    nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": source_box(entry, scale)})


# ---------------------------------------------------------------------------- entry point
def chapter_view(executed: Path, entry: ChapterEntry, scale: str) -> bytes:
    """The executed notebook at ``executed`` as the book shows it (nbformat JSON bytes)."""
    nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    show_parameters_once(nb, entry, scale, Path(executed).parent / "params.yaml")
    fold_code_cells(nb)
    strip_build_details(nb)
    add_source_box(nb, entry, scale)
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
