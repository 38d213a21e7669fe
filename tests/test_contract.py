"""Contract tests: every registered chapter has what the chapter contract promises."""

import ast
import dataclasses
import importlib
import re

import jupytext
import pytest

from compendium import paths
from compendium.book import toc
from compendium.registry import load_registry

REGISTRY = load_registry()
READY = [c for c in REGISTRY.chapters if c.ready]
SECTIONS = ["Claim", "Method", "Parameters", "Experiments", "Verification", "Limits", "Exercises"]


def _parameters_cell(nb):
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    return cells[0]


@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_chapter_has_module_notebook_tests_and_toc_entry(entry):
    assert entry.notebook.is_file()
    assert paths.module_path(entry.slug).is_file() or paths.module_path(entry.slug).with_suffix("").is_dir()
    assert paths.test_path(entry.slug).is_file()
    files = [ch["file"] for part in toc(REGISTRY)["parts"] for ch in part["chapters"]]
    assert f"chapters/{entry.slug}" in files


@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_notebook_has_the_seven_sections_in_order(entry):
    text = entry.notebook.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+?)\s*$", text, flags=re.M)
    found = [h for h in headings if h in SECTIONS]
    assert found == SECTIONS, f"sections {found}"
    nb = jupytext.read(entry.notebook)
    assert nb.metadata["kernelspec"]["name"] == paths.KERNEL_NAME


@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_parameters_cell_matches_registry_and_config(entry):
    nb = jupytext.read(entry.notebook)
    tree = ast.parse(_parameters_cell(nb).source)
    values = {}
    for node in tree.body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, "parameters cell holds assignments only"
        values[node.targets[0].id] = ast.literal_eval(node.value)  # literals only
    assert list(values) == entry.parameter_names()
    smoke = entry.resolve("smoke")
    assert values == smoke, "parameters cell must hold the registry's smoke values"
    module = importlib.import_module(entry.module)
    fields = {f.name for f in dataclasses.fields(module.Config)}
    assert fields == set(entry.parameters) | {"seed"}, "Config fields must be the registry parameters plus seed"
    assert callable(module.run)


@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_notebook_follows_the_rules(entry):
    nb = jupytext.read(entry.notebook)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not re.search(r"^\s*class\s", code, flags=re.M), "no classes in notebooks"
    assert not re.search(r"^\s*[!%]pip|sys\.path\.(append|insert)|!wget|!curl", code, flags=re.M)
    assert f'start_chapter("{entry.slug}"' in code
    assert "ch.finish()" in code
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"
    text = entry.notebook.read_text(encoding="utf-8")
    for key in re.findall(r"\{glue:(?:text|figure)\}`?\s*([\w-]+)", text):
        assert key.startswith(entry.slug + "-"), f"glue key {key} must start with the slug"


@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_module_docstring_is_the_paper_card(entry):
    module = importlib.import_module(entry.module)
    doc = module.__doc__ or ""
    assert entry.seed_file in doc and str(entry.abstract) in doc
    assert "Small-scale deviations" in doc
