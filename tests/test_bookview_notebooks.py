"""Every chapter notebook, shaped as the book shows it, leaves no glue-only cell on the page.

The browser test finds such a cell only after the whole smoke book is built (a cell that glues
values *before* it draws keeps those glue lines visible as a segment of their own); this check runs
``compendium.bookview.fold_code_cells`` on the notebook sources directly, in a second.
"""
from __future__ import annotations

import ast
import json

import jupytext
import pytest

from compendium import bookview, paths

NOTEBOOKS = sorted((paths.ROOT / "notebooks").glob("*/*.md"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_glue_only_cell_is_shown(notebook):
    nb = json.loads(jupytext.writes(jupytext.read(notebook), fmt="ipynb"))
    bookview.fold_code_cells(nb)
    shown = []
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or {bookview.REMOVE_TAG, bookview.FOLD_TAG} & set(tags):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        if body and all(bookview.is_glue(s) for s in body):
            shown.append(source.splitlines()[0])
    assert not shown, f"{notebook.name}: glue-only code shown on the page (glue after drawing instead): {shown}"
