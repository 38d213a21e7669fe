"""Sphinx extension of this book: per-chapter figure numbers, and folded code in ``singlehtml``.

**Figure numbers.** Figures (and tables, code blocks) are numbered from 1 in each page.

Sphinx numbers figures per *section number* (``numfig_secnum_depth``), and a page only has one
when the toctree is ``numbered``; this book's is not, so Sphinx counts across the whole book
("Fig. 32" in chapter 12). After Sphinx assigns its numbers, this renumbers them per document in
the same order, so every chapter starts at "Fig. 1". Cross-references ({numref}) follow.
"""

from __future__ import annotations


def renumber_per_document(app, env) -> list[str]:
    previous = getattr(env, "compendium_fignumbers", {})
    changed = []
    for docname, by_type in env.toc_fignumbers.items():
        for figtype, numbers in by_type.items():
            order = sorted(numbers, key=lambda ident: numbers[ident])
            by_type[figtype] = {ident: (i,) for i, ident in enumerate(order, start=1)}
        if previous.get(docname) != by_type:
            changed.append(docname)
    env.compendium_fignumbers = {d: {t: dict(n) for t, n in v.items()} for d, v in env.toc_fignumbers.items()}
    return changed


def register_singlehtml_visitors(app) -> None:
    """MyST-NB registers its folded-code node for the ``html`` format only; Sphinx then skips it for
    the ``singlehtml`` builder (``make pdf``) once any other extension registers a ``singlehtml``
    visitor. Register the same visitors for ``singlehtml`` too."""
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput, visit_HideCellInput

    app.add_node(HideCodeCellNode, override=True, html=(visit_HideCellInput, depart_HideCellInput),
                 singlehtml=(visit_HideCellInput, depart_HideCellInput))


def setup(app):
    app.connect("builder-inited", register_singlehtml_visitors)
    # after Sphinx's own TocTreeCollector (priority 500) has assigned the book-wide numbers
    app.connect("env-get-updated", renumber_per_document, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
