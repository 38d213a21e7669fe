"""Content fingerprints (compendium.fingerprint): what a job depends on, read from the syntax tree.

Each test writes a tiny library under a temporary root and asks which components a root reaches
and whether an edit changes them: comments, docstrings and reformatting must change nothing; a
real change must change what uses it, and only that.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from compendium import fingerprint as fpr
from compendium import paths


@pytest.fixture
def lib(tmp_path, monkeypatch):
    """``write(name, source)`` puts ``src/compendium/<name>.py`` under a fresh root;
    ``comps(...)`` computes components with fresh caches (as a new process would)."""
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    pkg = tmp_path / "src" / "compendium"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")

    def write(name: str, source: str) -> Path:
        path = pkg / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.parents:
            if parent == pkg:
                break
            (parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
        return path

    def comps(**roots):
        index = fpr.CodeIndex(fpr.HashCache(tmp_path / "h.json"), tmp_path / "c.json")
        out = fpr.components(index, **roots)
        index.save()
        return out

    write.comps = comps
    return write


STATS = '''
    """Shared statistics."""
    import math

    LEVEL = 0.95


    def mean(xs):
        """The mean."""
        return sum(xs) / len(xs)


    def spread(xs):
        m = mean(xs)  # uses mean
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


    def unused(xs):
        return 42
'''


def test_comments_docstrings_and_reformatting_change_nothing(lib):
    path = lib("stats", STATS)
    before = lib.comps(units=[("compendium.stats", "spread")])
    assert {"src/compendium/stats.py", "src/compendium/stats.py::spread", "src/compendium/stats.py::mean"} <= set(before)
    assert "src/compendium/stats.py::unused" not in before
    text = path.read_text()
    text = text.replace('"""The mean."""', '"""The arithmetic mean, reworded."""')  # docstring
    text = text.replace("# uses mean", "# a different comment") + "\n# a trailing comment\n"
    text = text.replace("return sum(xs) / len(xs)", "return (sum(xs)\n            / len(xs))")  # reformat
    path.write_text(text)
    assert lib.comps(units=[("compendium.stats", "spread")]) == before


def test_a_real_change_changes_its_users_only(lib):
    path = lib("stats", STATS)
    spread = lib.comps(units=[("compendium.stats", "spread")])
    unused_before = lib.comps(units=[("compendium.stats", "unused")])
    path.write_text(path.read_text().replace("/ len(xs)", "/ (len(xs) + 0)"))  # mean changes
    after = lib.comps(units=[("compendium.stats", "spread")])
    assert after["src/compendium/stats.py::mean"] != spread["src/compendium/stats.py::mean"]  # spread calls mean
    assert lib.comps(units=[("compendium.stats", "unused")]) == unused_before  # nothing of unused changed

    path.write_text(path.read_text().replace("return 42", "return 43"))  # a function nobody uses
    assert lib.comps(units=[("compendium.stats", "spread")]) == after
    path.write_text(path.read_text().replace("LEVEL = 0.95", "LEVEL = 0.9"))  # module level: every user
    assert lib.comps(units=[("compendium.stats", "spread")]) != after


def test_adding_a_function_changes_nothing_moving_one_past_a_statement_does(lib):
    path = lib("stats", STATS)
    before = lib.comps(units=[("compendium.stats", "spread")])
    path.write_text(path.read_text() + "\n\ndef brand_new(xs):\n    return 0\n")
    assert lib.comps(units=[("compendium.stats", "spread")]) == before
    # a definition moved above a module-level statement: its defaults and decorators now see other values
    text = path.read_text()
    body = "def mean(xs):\n    \"\"\"The mean.\"\"\"\n    return sum(xs) / len(xs)\n"
    assert body in text
    path.write_text(body + "\n" + text.replace(body, ""))
    assert lib.comps(units=[("compendium.stats", "spread")]) != before


def test_imports_attribute_access_and_reexports_resolve_to_units(lib):
    lib("stats", STATS)
    lib("papers.demo", '''
        import compendium.stats as st
        from compendium.stats import mean as average
        from ..stats import spread


        def run(xs):
            return st.mean(xs), average(xs)


        def other(xs):
            return spread(xs)
    ''')
    lib("rl.__init__", "from .grpo import advantages\n")
    lib("rl.grpo", "def advantages(r):\n    return r\n\n\ndef loss(r):\n    return r\n")
    run = lib.comps(units=[("compendium.papers.demo", "run")])
    assert "src/compendium/stats.py::mean" in run and "src/compendium/stats.py::spread" not in run
    assert "src/compendium/papers/demo.py::other" not in run
    assert "src/compendium/papers/__init__.py" in run and "src/compendium/__init__.py" in run  # parents run
    assert "src/compendium/stats.py::spread" in lib.comps(units=[("compendium.papers.demo", "other")])
    reexport = lib.comps(units=[("compendium.rl", "advantages")])  # `from compendium.rl import advantages`
    assert "src/compendium/rl/grpo.py::advantages" in reexport and "src/compendium/rl/grpo.py::loss" not in reexport


@pytest.mark.parametrize("body", [
    "import compendium.stats as st\n\ndef run(xs):\n    return getattr(st, 'mean')(xs)\n",  # alias used as a value
    "from compendium.stats import *\n\ndef run(xs):\n    return mean(xs)\n",
    "import importlib\n\ndef run(xs):\n    return importlib.import_module('compendium.stats').mean(xs)\n",
])
def test_what_cannot_be_followed_by_name_is_the_whole_module(lib, body):
    lib("stats", STATS)
    lib("papers.demo", body)
    assert "src/compendium/stats.py::unused" in lib.comps(units=[("compendium.papers.demo", "run")])


def test_globals_getattr_module_and_impure_decorators(lib):
    lib("dyn", "def pick(name):\n    return globals()[name]\n\n\ndef far():\n    return 1\n")
    assert "src/compendium/dyn.py::far" in lib.comps(units=[("compendium.dyn", "pick")])
    lib("lazy", "def __getattr__(name):\n    from . import stats\n    return getattr(stats, name)\n")
    lib("stats", STATS)
    assert "src/compendium/stats.py::unused" in lib.comps(units=[("compendium.lazy", "mean")])
    path = lib("reg", "REGISTRY = {}\n\n\ndef register(f):\n    REGISTRY[f.__name__] = f\n    return f\n\n\n"
                      "@register\ndef plugin():\n    return 1\n\n\ndef use():\n    return REGISTRY['plugin']()\n")
    before = lib.comps(units=[("compendium.reg", "use")])
    path.write_text(path.read_text().replace("return 1", "return 2"))  # reached only through the registry
    assert lib.comps(units=[("compendium.reg", "use")]) != before


def test_a_notebook_is_its_whole_file_and_its_code_cells_roots(lib, tmp_path):
    lib("stats", STATS)
    nb = tmp_path / "nb.md"
    nb.write_text("# Title\n\nProse.\n\n```{code-cell} ipython3\nfrom compendium.stats import mean\n"
                  "%matplotlib inline\nprint(mean([1, 2]))\n```\n")
    before = lib.comps(notebook=nb)
    assert "src/compendium/stats.py::mean" in before and "src/compendium/stats.py::spread" not in before
    nb.write_text(nb.read_text().replace("Prose.", "Other prose."))
    after = lib.comps(notebook=nb)
    assert after["nb.md"] != before["nb.md"] and {k for k in after} == {k for k in before}


def test_hash_cache_rereads_only_changed_files(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    reads = []
    real = fpr.sha256_file
    monkeypatch.setattr(fpr, "sha256_file", lambda p: reads.append(p) or real(p))
    cache = fpr.HashCache(tmp_path / "h.json")
    first = cache.sha256(path)
    cache.save()
    again = fpr.HashCache(tmp_path / "h.json")
    assert again.sha256(path) == first and len(reads) == 1  # unchanged: not read again
    st = path.stat()
    with open(path, "r+b") as fh:  # one flipped bit, the modification time put back
        fh.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again.sha256(path) != first and len(reads) == 2  # the change time still differs
    assert fpr.HashCache(tmp_path / "h.json", trust=False).sha256(path) == again.sha256(path)
