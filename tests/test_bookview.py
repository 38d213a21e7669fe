"""compendium.bookview: the executed notebook as the book shows it (no build, no browser)."""

import json

import nbformat
import yaml

from compendium import bookview
from compendium.registry import load_registry

REGISTRY = load_registry()


def _code(source, tags=(), outputs=()):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = list(tags)
    cell.outputs = list(outputs)
    return cell


def _executed(tmp_path, entry, cells, parameters):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {entry.title}\n\nIntro.")] + cells
    path = tmp_path / f"{entry.slug}.ipynb"
    nbformat.write(nb, str(path))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"chapter": entry.slug, "scale": "smoke",
                                                         "parameters": parameters}))
    return path


def _entry_with_integer_parameter():
    for entry in REGISTRY.ready:
        for name, spec in entry.parameters.items():
            if spec["type"] == "integer":
                return entry, name
    raise AssertionError("no chapter with an integer parameter")


def test_parameters_shown_once_with_their_origin(tmp_path):
    entry, name = _entry_with_integer_parameter()
    registry = entry.resolve("smoke")
    effective = {**registry, name: registry[name] + 1}  # as after --set name=...
    own = "\n".join(f"{k} = {v!r}" for k, v in registry.items())
    injected = "# Parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in effective.items())
    path = _executed(tmp_path, entry, [_code(own, ["parameters"]), _code(injected, ["injected-parameters"]),
                                       _code("x = 1")], effective)
    nb = json.loads(bookview.chapter_view(path, entry, "smoke"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any("injected-parameters" in c["metadata"].get("tags", []) for c in code)
    params = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(params) == 1
    lines = {ln.split(" = ")[0]: ln for ln in params[0]["source"].splitlines() if " = " in ln and not ln.startswith("#")}
    assert f"{name} = {registry[name] + 1}" in lines[name] and "--set override" in lines[name]
    assert f"registry: {registry[name]}" in lines[name]
    others = [ln for k, ln in lines.items() if k != name]
    assert others and not any("--set" in ln for ln in others)
    assert "the run's scale" in lines["scale"]


def test_glue_only_cells_removed_and_plotting_folded_with_library_calls_visible(tmp_path):
    entry = REGISTRY.ready[0]
    cells = [
        _code("from compendium.papers import x as paper\nimport matplotlib.pyplot as plt\nch = start()"),
        _code('ch.glue("a", 1)\n_ = ch.glue("b", 2, ".3f")\nfor k in range(2):\n    ch.glue(f"c{k}", k)'),
        _code('ch.glue("a", 1)\ny = 2'),
        _code('data = paper.load()\nfig, ax = plt.subplots()\nax.plot(data)\nch.figure(fig, "f")\nch.glue("n", 3)\n'
              'gap = paper.gap(data)\nch.glue("gap", gap)',
              outputs=[nbformat.v4.new_output("display_data", {"text/plain": "x"})]),
        _code("def draw(ax):\n    ax.plot([1])"),
        _code("ledger = ch.ledger\nledger.check('a', 'b', measured=1)"),
        _code('z = 1\nch.glue("z", z)', outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "1"},
                                                                        execution_count=1)]),
    ]
    path = _executed(tmp_path, entry, cells, entry.resolve("smoke"))
    nb = json.loads(bookview.chapter_view(path, entry, "smoke"))
    code = [(c["source"], c["metadata"].get("tags", []), len(c["outputs"])) for c in nb["cells"] if c["cell_type"] == "code"]
    assert code[0][1] == []                                  # imports and setup: shown
    assert "remove-cell" in code[1][1]                       # glue only
    assert "remove-cell" not in code[2][1]                   # glue and something else
    assert code[3] == ("data = paper.load()", [], 0)         # the library call stays visible ...
    assert code[4][0].startswith("fig, ax") and "hide-input" in code[4][1] and code[4][2] == 0  # ... the plot folds
    assert code[5][0] == "gap = paper.gap(data)" and code[5][1] == []  # a library call after it: visible
    assert code[6][0] == 'ch.glue("gap", gap)' and "hide-input" in code[6][1] and code[6][2] == 1  # outputs last
    assert "hide-input" in code[7][1]                        # a drawing helper
    assert code[8][1] == []                                  # the ledger: shown
    assert code[9][2] == 0                                   # a trailing glue's return value is not shown


def test_source_box_after_the_title_names_existing_files(tmp_path):
    entry = REGISTRY.ready[0]
    path = _executed(tmp_path, entry, [_code("x = 1")], entry.resolve("smoke"))
    nb = json.loads(bookview.chapter_view(path, entry, "smoke"))
    first = nb["cells"][0]["source"]
    assert first.startswith(f"# {entry.title}\n")
    assert first.index("chapter-sources") < first.index("Intro.")
    from compendium import paths

    for what, rel in bookview.source_files(entry):
        assert f"`{rel}`" in first
        assert (paths.ROOT / rel.rstrip("/")).exists(), rel


def test_a_glue_after_a_drawing_folds_with_it():
    from compendium.bookview import fold_code_cells

    src = ("x = paper.run(config)\nfig, ax = plt.subplots()\nax.plot(x)\nch.figure(fig, 'a')\n"
           "ch.glue('crossover', paper.crossover(x))\ntable = paper.summary(x)\ntable")
    nb = {"cells": [{"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": 1}],
          "metadata": {}}
    nb["cells"].insert(0, {"cell_type": "code", "source": "from compendium.papers import demo as paper",
                           "metadata": {}, "outputs": [], "execution_count": 0})
    fold_code_cells(nb)
    shown = [c["source"] for c in nb["cells"] if "hide-input" not in c["metadata"].get("tags", [])]
    assert not any(s.strip().startswith("ch.glue") for s in shown), shown
    folded = [c["source"] for c in nb["cells"] if "hide-input" in c["metadata"].get("tags", [])]
    assert any("ch.glue('crossover'" in s and "ax.plot" in s for s in folded), folded


def test_build_details_do_not_reach_the_page(tmp_path):
    """A figure's path, a matplotlib or ledger repr, the build folder: dropped; tables, numbers,
    glued values and printed text: kept, the build's folders cut from printed paths. Checked
    through ``chapter_view``, as staging runs it."""
    import sysconfig

    from compendium import paths

    def result(text, kind="execute_result", **extra):
        data = {"text/plain": text, **extra}
        if kind == "execute_result":
            return nbformat.v4.new_output(kind, data, execution_count=1)
        return nbformat.v4.new_output(kind, data)

    built = str(paths.results_root() / "smoke" / "demo" / "figures" / "f.png")
    dropped = [
        result(f"PosixPath('{built}')"),                                  # ch.figure(...) as the last line
        result("<Figure size 640x480 with 0 Axes>", "display_data"),
        result("[<matplotlib.lines.Line2D at 0x7f1c2a3b4c50>]"),
        result("<Axes: title={'center': 'x'}>"),
        result("Claim(id='a', statement='b', kind='exact', verdict='pass')"),  # ledger.check(...) last
        result("<compendium.demo.Thing object at 0x7f00>"),
        result(repr(built)),                                               # str(path): the builder's layout
    ]
    kept = [
        result("   a\n0  1", **{"text/html": "<table></table>"}),             # a DataFrame
        result("kappa    0.25\ngamma    1.00\ndtype: float64"),                 # a Series, plain text
        result("<Figure size 640x480 with 1 Axes>", "display_data", **{"image/png": "iVBORw0KGgo="}),
        nbformat.v4.new_output("display_data", {"application/papermill.record/text/plain": "PosixPath('x')"},
                               metadata={"scrapbook": {"name": "demo-p", "mime_prefix": "application/papermill.record/"}}),
        nbformat.v4.new_output("stream", name="stdout", text="42 rows\n"),
        nbformat.v4.new_output("stream", name="stderr", text=f"{sysconfig.get_paths()['purelib']}/tqdm/auto.py:21: "
                               f"TqdmWarning: IProgress not found\nsaved {paths.ROOT}/results/smoke/demo/f.png\n"),
        nbformat.v4.new_output("error", ename="ValueError", evalue="x",
                               traceback=[f"File {paths.ROOT}/src/compendium/demo.py:3", "ValueError: x"]),
    ]
    entry = REGISTRY.ready[0]
    cells = [_code(f"x{i}", outputs=[out]) for i, out in enumerate(dropped + kept)]
    path = _executed(tmp_path, entry, cells, entry.resolve("smoke"))
    nb = json.loads(bookview.chapter_view(path, entry, "smoke"))
    code = [("".join(c["source"]), c["outputs"]) for c in nb["cells"] if c["cell_type"] == "code"]
    shown = {s: outs for s, outs in code if s.startswith("x")}
    assert [s for s, outs in shown.items() if outs] == [f"x{i}" for i in range(len(dropped), len(dropped) + len(kept))]
    assert [s for s, outs in shown.items() if not outs] == [f"x{i}" for i in range(len(dropped))]
    warning = "".join(shown[f"x{len(dropped) + len(kept) - 2}"][0]["text"])
    assert shown[f"x{len(dropped) + len(kept) - 1}"][0]["traceback"] == ["File src/compendium/demo.py:3", "ValueError: x"]
    assert warning == "tqdm/auto.py:21: TqdmWarning: IProgress not found\nsaved results/smoke/demo/f.png\n"



def test_a_folded_piece_of_only_glue_calls_is_removed():
    """A cell split around a drawing: a piece holding only glue calls is removed (remove-cell), as a
    glue-only cell is, never shown behind a fold; the pieces that compute stay."""
    from compendium.bookview import fold_code_cells

    src = ("x = paper.run(config)\nfig, ax = plt.subplots()\nax.plot(x)\nch.figure(fig, 'a')\n"
           "tol = 2 * paper.bound(x)\ny = paper.other(x)\nch.glue('tol', tol)\nch.glue('n', len(x))")
    nb = {"cells": [{"cell_type": "code", "source": "from compendium.papers import demo as paper",
                     "metadata": {}, "outputs": [], "execution_count": 0},
                    {"cell_type": "code", "source": src, "metadata": {}, "execution_count": 1, "outputs": [
                        {"output_type": "display_data", "metadata": {}, "data": {
                            "application/papermill.record/text/plain": "0.1"}}]}],
          "metadata": {}}
    fold_code_cells(nb)
    tags = lambda c: c["metadata"].get("tags", [])  # noqa: E731
    glue_only = [c for c in nb["cells"] if c["source"].strip() and all(
        ln.startswith("ch.glue") for ln in c["source"].strip().splitlines())]
    assert glue_only and all("remove-cell" in tags(c) for c in glue_only), nb["cells"]
    assert any("tol = 2 * paper.bound(x)" in c["source"] and "remove-cell" not in tags(c) for c in nb["cells"])
