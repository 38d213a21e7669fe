"""No number typed by hand: a chapter's prose states no measured value of this project.

Every chapter notebook's narrative Markdown (the MyST text outside code cells) is scanned for
numbers that could state a result: decimals (``0.91``, ``1.5``, ``3e-4``), integers followed by a
percent sign or "points" (``12 %``, ``5 points``) and integers written with an explicit sign (``+5``, ``−24``). Integers
otherwise are counts, seeds, sizes or years and are not scanned. Not scanned either: the front
matter, section titles, code cells and other code blocks (the parameters cell among them), math
(``$...$``, ``$$...$$``, ``{math}`` roles and directives), roles such as ``{cite}``, ``{glue:text}``
and ``{ref}``, inline code, link targets and URLs, MyST comments and targets, and the opening line
and options of a directive (a ``{glue:figure}``'s caption is prose and is scanned). A number after
"Section", "Table", "Eq." and the like is a reference into the paper, not a value.

Each number found must be in ``tests/fixtures/narrative_numbers.yaml``, keyed by chapter, with
the number as written, a ``context`` (a literal excerpt of its line) or a ``pattern`` (a regular
expression searched in its line), and a ``reason``: ``paper`` (a value the paper reports),
``criterion`` (a threshold fixed in advance, mirrored in the ledger), ``constant`` (a constant of
the method or the setup that equals the registry's or the module's value) or ``definition`` (part
of a formula or a definition in words). A measured value of this project is never allow-listed: it
is glued (``ch.glue(...)`` in a code cell, ``{glue:text}`` in the prose) or the sentence is worded
so that it states no result (docs/CHAPTER_GUIDE.md, "Honesty rules").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from compendium.registry import load_registry

REGISTRY = load_registry()
READY = [c for c in REGISTRY.chapters if c.ready]
ALLOW_FILE = Path(__file__).parent / "fixtures" / "narrative_numbers.yaml"
REASONS = {"paper", "criterion", "constant", "definition"}

# Code blocks whose whole body is skipped (code, math); other directives keep their body (prose).
SKIP_BODY = re.compile(r"^\{(code-cell|code|code-block|math|glue:math|raw|eval-rst|list-table|csv-table)\}|^[\w+-]*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}|:{3,})\s*(.*)$")
ROLE = re.compile(r"\{[\w:.-]+\}(`+)(?:.*?)\1")          # {cite}`...`, {glue:text}`...`, {math}`...`
INLINE_CODE = re.compile(r"(`+).*?\1")
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$")
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)[^$]*?(?<![\s\\])\$(?!\d)")
LINK_TARGET = re.compile(r"\]\([^)]*\)|\]\[[^\]]*\]|<https?://[^>]*>|https?://\S+")
HTML_COMMENT = re.compile(r"<!--.*?-->")
PAPER_REF = re.compile(
    r"(?:Section|Sec\.|§|Table|Tab\.|Figure|Fig\.|Eq\.|Eqs\.|Equation|Appendix|App\.|Theorem|Thm\.|"
    r"Lemma|Proposition|Prop\.|Corollary|Cor\.|Definition|Def\.|Algorithm|Alg\.|Assumption|Remark|"
    r"Example|Step|line|lines|Listing)\s*\(?$",
    re.I,
)
MINUS = "−-"  # U+2212 and ASCII hyphen-minus
NUMBER = re.compile(
    r"(?<![\w.,/@^\-−])"                                     # not inside a word, version or range
    r"(?:"
    r"(?P<signed>[+±−-]?\d+(?:\.\d+)?[eE][+−-]?\d+)"          # 3e-4, 1.5e3
    r"|(?P<decimal>[+±−-]?\d*\.\d+)"                          # 0.91, .5, −0.3
    r"|(?P<percent>[+±−-]?\d+(?=\s?%|\s(?:points?|pp)\b))"    # 12 %, 12%, 5 points
    r"|(?P<sign>(?:(?<=\s)|(?<=^)|(?<=\())[+±−]\d+)"          # +5, −24 (an explicit sign)
    r")"
    r"(?![\w.]\d|\d)"
)


@dataclass(frozen=True)
class Hit:
    line: int      # 1-based line in the notebook file
    number: str    # as written
    text: str      # the whole source line
    col: int = -1  # 0-based column of the number in the line


def blank(m: re.Match) -> str:
    return " " * (m.end() - m.start())


def prose_lines(text: str):
    """Yield (line number, line with the non-narrative parts blanked) for every narrative line."""
    lines = text.splitlines()
    i = 0
    if lines and lines[0].strip() == "---":                  # front matter
        i = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), len(lines) - 1) + 1
    fences: list[tuple[str, bool]] = []                       # (fence, body skipped)
    in_math = False
    in_comment = False
    while i < len(lines):
        raw = lines[i]
        lineno = i + 1
        i += 1
        stripped = raw.strip()
        if in_comment:
            if "-->" in stripped:
                in_comment = False
            continue
        m = FENCE.match(raw)
        if m:
            mark, info = m.group(2), m.group(3).strip()
            if fences and mark[0] == fences[-1][0][0] and len(mark) >= len(fences[-1][0]) and not info:
                fences.pop()
                continue
            if not (fences and fences[-1][1]):
                fences.append((mark, bool(SKIP_BODY.match(info)) and mark[0] != ":" or info.startswith("{math}")))
                continue
        if fences and fences[-1][1]:
            continue
        if in_math:
            if "$$" in stripped:
                in_math = False
            continue
        if stripped.startswith("$$") and stripped.count("$$") == 1:
            in_math = True
            continue
        if stripped.startswith("<!--") and "-->" not in stripped:
            in_comment = True
            continue
        if (not stripped or stripped.startswith("#") or stripped.startswith("%")
                or re.match(r"^\(.+\)=\s*$", stripped) or re.match(r"^:[\w-]+:", stripped)):
            continue                                          # titles, comments, targets, options
        line = raw
        for pattern in (HTML_COMMENT, DISPLAY_MATH, ROLE, INLINE_CODE, INLINE_MATH, LINK_TARGET):
            line = pattern.sub(blank, line)
        yield lineno, line


def scan(text: str) -> list[Hit]:
    raw_lines = text.splitlines()
    hits = []
    for lineno, line in prose_lines(text):
        for m in NUMBER.finditer(line):
            if PAPER_REF.search(line[:m.start()].rstrip()) and not m.group("sign"):
                continue
            hits.append(Hit(lineno, m.group(0), raw_lines[lineno - 1], m.start()))
    return hits


@functools.lru_cache(maxsize=None)
def load_allow(path: Path = ALLOW_FILE) -> dict[str, list[dict]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {slug: list(entries or []) for slug, entries in data.items()}


def entry_matches(entry: dict, hit: Hit) -> bool:
    if str(entry["number"]) != hit.number:
        return False
    if "pattern" in entry:
        return re.search(entry["pattern"], hit.text) is not None
    return entry["context"] in hit.text


def check(slug: str, text: str, allow: list[dict]) -> tuple[list[str], list[dict]]:
    """(failures naming chapter, line and number; allow-list entries that matched nothing)."""
    failures, used = [], set()
    for hit in scan(text):
        found = [k for k, e in enumerate(allow) if entry_matches(e, hit)]
        if found:
            used.update(found)
        else:
            failures.append(f"{slug}: line {hit.line}: {hit.number!r} typed in prose: {hit.text.strip()[:120]}")
    unused = [e for k, e in enumerate(allow) if k not in used]
    return failures, unused


# --- the allow-list itself -------------------------------------------------------------------------

def test_allow_list_is_well_formed():
    allow = load_allow()
    slugs = {c.slug for c in READY}
    problems = []
    for slug, entries in allow.items():
        if slug not in slugs:
            problems.append(f"{slug}: not a ready chapter")
        for e in entries:
            if not isinstance(e, dict) or "number" not in e or ("context" in e) == ("pattern" in e):
                problems.append(f"{slug}: {e!r}: needs 'number' and exactly one of 'context'/'pattern'")
                continue
            if e.get("reason") not in REASONS:
                problems.append(f"{slug}: {e['number']!r}: reason {e.get('reason')!r} not in {sorted(REASONS)}")
            if "context" in e and str(e["number"]) not in e["context"]:
                problems.append(f"{slug}: {e['number']!r}: context {e['context']!r} does not contain the number")
    assert not problems, "\n".join(problems)


# --- every chapter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", READY, ids=lambda e: e.slug)
def test_no_number_typed_by_hand(entry):
    allow = load_allow().get(entry.slug, [])
    failures, unused = check(entry.slug, entry.notebook.read_text(encoding="utf-8"), allow)
    assert not failures, (
        "numbers in prose that are neither glued nor allow-listed (glue a measured value, or add a "
        f"paper/criterion/constant/definition to {ALLOW_FILE.name}):\n" + "\n".join(failures))
    assert not unused, f"{entry.slug}: allow-list entries that match nothing: {unused}"


# --- self-test on a synthetic notebook -------------------------------------------------------------

SYNTHETIC = '''---
jupytext:
  text_representation:
    format_name: myst
---

# A chapter 0.5 in its title

## Claim

The paper reports an accuracy of 0.93 {cite}`paper_2026`.
We measured 0.87 on the toy, a gain of +4 points, i.e. 12 % of the gap.
Math is skipped: $\\alpha = 0.05$ and $$x = 1.5$$; so is code `lr=3e-4` and {math}`\\beta=0.9`.
A glued value {glue:text}`ch-acc` and a citation {cite:p}`other_2025, p. 2.3` are skipped.
See [the docs](https://example.org/v1.2/page) and Table 2.1 of the paper; seed 17, 2024, 32×32 scenes.
A range of 2–4 objects and a version v2.0 are not values.

$$
y = 0.25 x
$$

```{math}
z = 0.75
```

```{code-cell} ipython3
:tags: [parameters]

lr = 0.001
```

```{glue:figure} ch-fig
:name: fig-ch
:width: 0.8

The caption says the loss fell to 0.42.
```

:::{admonition} Note
Inside an admonition, 1e-3 is scanned.
:::
'''


def test_self_test_catches_typed_numbers_and_ignores_the_rest():
    hits = [(h.number, h.line) for h in scan(SYNTHETIC)]
    numbers = [n for n, _ in hits]
    assert numbers == ["0.93", "0.87", "+4", "12", "0.42", "1e-3"], hits
    lines = SYNTHETIC.splitlines()
    assert all(h.number in lines[h.line - 1] for h in scan(SYNTHETIC))


def test_self_test_allow_list_and_failure_message():
    allow = [{"number": "0.93", "context": "accuracy of 0.93", "reason": "paper"},
             {"number": "12", "pattern": r"\d+ % of the gap", "reason": "definition"},
             {"number": "9.99", "context": "never 9.99", "reason": "paper"}]
    failures, unused = check("toy", SYNTHETIC, allow)
    lines = SYNTHETIC.splitlines()
    at = {n: 1 + next(k for k, t in enumerate(lines) if n in t) for n in ("0.87", "0.42", "1e-3")}
    assert [f.split(":")[1].strip() for f in failures] == [
        f"line {at['0.87']}", f"line {at['0.87']}", f"line {at['0.42']}", f"line {at['1e-3']}"], failures
    assert failures[0].startswith(f"toy: line {at['0.87']}: '0.87'"), failures
    assert "'+4'" in failures[1]
    assert unused == [allow[2]]


def test_self_test_real_chapter():
    """A typed number added to a real chapter's prose is caught; the same value glued is not."""
    entry = READY[0]
    text = entry.notebook.read_text(encoding="utf-8")
    allow = load_allow().get(entry.slug, [])
    assert "\n## Limits\n" in text
    typed = text.replace("\n## Limits\n", "\n## Limits\n\nThe full run measured 0.8125 here.\n", 1)
    glued = text.replace("\n## Limits\n", "\n## Limits\n\nThe full run measured {glue:text}`x-acc` here.\n", 1)
    failures = check(entry.slug, typed, allow)[0]
    assert len(failures) == 1 and "'0.8125'" in failures[0], failures
    assert check(entry.slug, glued, allow)[0] == []
