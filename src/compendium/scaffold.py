"""Scaffold a chapter from its registry entry: notebook, library module and test file.

``compendium new <slug>`` writes three files that every chapter starts from, so chapters share
one shape (the seven sections of DESIGN.md, a ``Config``/``run`` module, the four kinds of test).
It never overwrites a file.
"""

from __future__ import annotations

from pathlib import Path

from . import paths
from .registry import ChapterEntry, load_registry

_PY_TYPES = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "array": "tuple"}

NOTEBOOK = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3 (compendium)
  language: python
  name: compendium
---

# {title}

:::{{admonition}} Paper and code
:class: note
The paper: {{cite:t}}`{slug}2026` (ICML 2026). Library module:
`src/compendium/papers/{slug}.py`; tests: `tests/papers/test_{slug}.py`.
:::

## Claim

State the paper's claims in one paragraph, in our words, with its headline numbers.

## Method

The algorithm with its equations, and where each piece lives in `src/compendium/papers/{slug}.py`.

## Parameters

Papermill overrides this cell (`make chapter SLUG={slug} SET="seed=1"`). Literals only.

```{{code-cell}} ipython3
:tags: [parameters]

scale = "smoke"
seed = {seed}
device = "auto"
{knobs}
```

```{{code-cell}} ipython3
from compendium import start_chapter
from compendium.claims import at_most
from compendium.papers import {slug} as paper

ch = start_chapter("{slug}", scale=scale, seed=seed, device=device)
config = paper.Config({config_args})
result = paper.run(config)
```

## Experiments

What the toy is and why it is faithful; figures through `ch.figure(fig, name)` shown with
`{{glue:figure}}`; numbers in prose through `ch.glue(name, value)`.

## Verification

Criteria are fixed before results are seen (they come from the chapter's issue).

```{{code-cell}} ipython3
ledger = ch.ledger
# ledger.check("id", "statement", kind="exact", measured=..., criterion=at_most(...))
ch.finish()
```

## Limits

What this scale cannot show, said plainly.

## Exercises

:::{{exercise}}
:label: {slug}-ex1

Something a student can change, and what to look for.
:::

:::{{solution}} {slug}-ex1
:class: dropdown

What they should see, and why.
:::
'''

MODULE = '''"""{title}.

Paper card
----------
ICML 2026, seed file ``{seed_file}``, abstract {abstract}.

Equations implemented
---------------------
(list them, with the symbols used below)

Small-scale deviations
----------------------
(what differs from the paper at this scale, and why)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell)."""

{fields}
    seed: int = {seed}

    def __post_init__(self) -> None:
        # check ranges here with ValueError (the registry checks them before a run, too)
        pass


@dataclass(frozen=True)
class Result:
    """What :func:`run` returns: data and metrics, never plots."""

    metrics: dict


def run(config: Config) -> Result:
    """Run the chapter's experiment for ``config``."""
    rng = np.random.default_rng(config.seed)  # noqa: F841 - explicit generator, passed down
    raise NotImplementedError("{slug}: implement the method")
'''

TEST = '''"""Tests for compendium.papers.{slug}: shape, property, reference, tiny run."""

import pytest

from compendium.papers import {slug} as paper


def test_shapes():
    pytest.fail("write a shape test")


def test_mathematical_property():
    pytest.fail("write a property test (closed form, invariant, symmetry)")


def test_reference_implementation():
    pytest.fail("compare with a slow or brute-force reference")


def test_tiny_run_is_deterministic():
    config = paper.Config()
    assert paper.run(config) == paper.run(config)
'''


BIB = """% The paper of chapter {slug}: fill in the authors and a public link where there is one
% ("authors not listed" stays only where no author list can be found; never "Anonymous").
@inproceedings{{{slug}2026,
  title     = {{{title}}},
  author    = {{{{authors not listed}}}},
  booktitle = {{Proceedings of the International Conference on Machine Learning (ICML)}},
  year      = {{2026}},
  note      = {{Registry: seed file {seed_file}, abstract {abstract}}}
}}
"""


def render(entry: ChapterEntry) -> dict[Path, str]:
    """The three files for ``entry`` (paths → text)."""
    knobs = "\n".join(f"{name} = {entry.default_value(name, 'smoke')!r}" for name in entry.parameters)
    config_args = ", ".join(["seed=seed"] + [f"{n}={n}" for n in entry.parameters])
    fields = []
    for name, spec in entry.parameters.items():
        default = entry.default_value(name, "smoke")
        if spec["type"] == "array":
            default = tuple(default)
        fields.append(f"    {name}: {_PY_TYPES[spec['type']]} = {default!r}  # {spec['help']}")
    fmt = dict(
        slug=entry.slug,
        title=entry.title,
        seed_file=entry.seed_file,
        abstract=entry.abstract,
        seed=entry.seed,
        knobs=knobs,
        config_args=config_args,
        fields="\n".join(fields),
    )
    return {
        entry.notebook: NOTEBOOK.format(**fmt),
        paths.module_path(entry.slug): MODULE.format(**fmt),
        paths.test_path(entry.slug): TEST.format(**fmt),
        paths.BOOK / "references" / f"{entry.slug}.bib": BIB.format(**fmt),
    }


def scaffold(slug: str, registry_path: str | Path | None = None) -> list[Path]:
    """Write the chapter's notebook, module and tests; refuse to overwrite any of them."""
    entry = load_registry(registry_path, check_files=False).chapter(slug)
    files = render(entry)
    existing = [p for p in files if p.exists()]
    if existing:
        raise FileExistsError(
            "refusing to overwrite: " + ", ".join(str(p.relative_to(paths.ROOT)) for p in existing)
        )
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
