"""The scaffold writes a chapter that already satisfies the contract's shape."""

import ast

import jupytext
import pytest

from compendium import paths
from compendium.registry import load_registry
from compendium.scaffold import render, scaffold


def test_rendered_chapter_has_sections_parameters_and_config():
    entry = load_registry().chapter("continuized_hippo")
    files = render(entry)
    nb = jupytext.reads(files[entry.notebook], fmt="md:myst")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    names = [n.targets[0].id for n in ast.parse(params[0].source).body]
    assert names == entry.parameter_names()
    module_src = files[paths.module_path(entry.slug)]
    compile(module_src, "module", "exec")
    namespace = {}
    exec(module_src, namespace)  # noqa: S102 - our own template
    config = namespace["Config"]()
    assert config.seed == 0 and config.num_modes == 4
    with pytest.raises(NotImplementedError):
        namespace["run"](config)
    compile(files[paths.test_path(entry.slug)], "tests", "exec")


def test_scaffold_refuses_to_overwrite():
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        scaffold("continuized_hippo")


def test_scaffolded_notebook_cites_the_scaffolded_bibliography_key():
    import re

    entry = load_registry().chapter("continuized_hippo")
    files = render(entry)
    bib = files[paths.BOOK / "references" / f"{entry.slug}.bib"]
    key = re.search(r"@inproceedings\{([^,]+),", bib)[1]
    assert f"{{cite:t}}`{key}`" in files[entry.notebook]
    assert "seed file" not in files[entry.notebook]
