"""Seed sweeps and parameter sweeps: every chapter rerun as ordinary Snakemake wildcard jobs.

A *variant* of a chapter is the chapter with one parameter changed: ``seed-<n>`` for a stability
run at another seed, ``<sweep>-<i>`` for the i-th value of a sweep the registry declares::

    - slug: continuized_hippo
      sweeps:
        tau:                          # the sweep's name
          parameter: tau_max
          values: [4.0, 8.0, 16.0]
          caption: "..."              # optional

Variants run through the ``chapter_variant`` rule into
``results/<scale>/<slug>/variants/<variant>/`` (parallel, cached, on any profile, SLURM
included). :func:`aggregate` then reads every variant's ``claims.json`` and writes
``results/<scale>/stability.json``: per claim, how many seeds agree with the recorded verdict
(the chapter's own run) and the measured value at each seed; per sweep, the verdict and value at
each swept value. The book renders it on its Stability page, in the dashboard ("k/K seeds agree")
and at the end of each chapter's Verification section.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path

from . import paths

VARIANT = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)-(?P<index>[0-9]+)$")
SEED_SWEEP = "seed"


@dataclass(frozen=True)
class Variant:
    slug: str
    name: str  # "seed-3", "tau-1"
    sweep: str  # "seed" or the registry sweep's name
    parameter: str
    value: object


def seed_variants(slug: str, base_seed: int, seeds: int) -> list[Variant]:
    """``seeds`` further seeds after the chapter's own: ``base+1 .. base+seeds``."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise ValueError(f"the number of stability seeds must be a whole number >= 0, got {seeds!r}")
    return [Variant(slug, f"{SEED_SWEEP}-{s}", SEED_SWEEP, "seed", s)
            for s in range(base_seed + 1, base_seed + 1 + seeds)]


def sweep_variants(slug: str, sweeps: dict) -> list[Variant]:
    out = []
    for name, spec in sweeps.items():
        for i, value in enumerate(spec["values"]):
            out.append(Variant(slug, f"{name}-{i}", name, spec["parameter"], value))
    return out


def plan_variants(plan, seeds: int, only: list[str] | None = None, sweeps: bool = True) -> list[Variant]:
    """Every variant to run for ``plan``'s ready chapters (or ``only`` those)."""
    slugs = [c.slug for c in plan.registry.ready]
    if only:
        unknown = [s for s in only if s not in slugs]
        if unknown:
            from .registry import RegistryError

            raise RegistryError(f"stability: unknown or planned chapter(s) {unknown}; ready: {', '.join(slugs)}")
        slugs = [s for s in slugs if s in only]
    out = []
    for slug in slugs:
        out += seed_variants(slug, plan.params[slug]["seed"], seeds)
        if sweeps:
            out += sweep_variants(slug, plan.registry.chapter(slug).sweeps)
    return out


def variant_params(plan, slug: str, variant: str) -> dict:
    """The chapter's effective parameters with the variant's one change, validated."""
    m = VARIANT.match(variant)
    if not m:
        raise ValueError(f"not a variant name: {variant!r} (expected <sweep>-<index>)")
    entry = plan.registry.chapter(slug)
    base = dict(plan.params[slug])
    name, index = m["name"], int(m["index"])
    if name == SEED_SWEEP:
        return entry.resolve(plan.scale, {**_overrides(base), "seed": index})
    if name not in entry.sweeps:
        raise ValueError(f"chapter {slug!r} declares no sweep {name!r}; sweeps: {', '.join(entry.sweeps) or 'none'}")
    spec = entry.sweeps[name]
    if index >= len(spec["values"]):
        raise ValueError(f"sweep {slug}/{name} has {len(spec['values'])} values, not {index + 1}")
    return entry.resolve(plan.scale, {**_overrides(base), spec["parameter"]: spec["values"][index]})


def _overrides(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "scale"}


def variant_dir(scale: str, slug: str, variant: str) -> Path:
    return paths.results_root() / scale / slug / "variants" / variant


def variant_outputs(scale: str, slug: str, variant: str) -> dict[str, str]:
    from .workflow import results_dir

    base = f"{results_dir(scale)}/{slug}/variants/{variant}"
    return {"notebook": f"{base}/{slug}.ipynb", "claims": f"{base}/claims.json", "params": f"{base}/params.yaml"}


# ---------------------------------------------------------------------------- aggregation
def _read_claims(path: Path) -> list[dict] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))["claims"]
    except (OSError, ValueError, KeyError):
        return None


def _point(measured):
    if isinstance(measured, dict) and "point" in measured:
        return measured["point"]
    return measured


def aggregate(plan, variants: list[Variant]) -> dict:
    """Read the chapter runs and their variants; return the content of ``stability.json``."""
    root = paths.results_root() / plan.scale
    chapters: dict[str, dict] = {}
    for slug in sorted({v.slug for v in variants}):
        own = _read_claims(root / slug / "claims.json")
        entry = plan.registry.chapter(slug)
        record = {"recorded_seed": plan.params[slug]["seed"], "seeds": [], "failed": [], "claims": {}, "sweeps": {}}
        chapters[slug] = record
        if own is None:
            record["failed"].append("the chapter's own run (no claims.json)")
            continue
        rows = {c["id"]: c for c in own if not c.get("volatile")}
        for cid, c in rows.items():
            record["claims"][cid] = {"role": c.get("role", "claim"), "recorded": c["verdict"],
                                     "measured": {str(record["recorded_seed"]): _point(c["measured"])},
                                     "verdicts": {}, "agree": 0, "total": 0}
        for v in [v for v in variants if v.slug == slug]:
            claims = _read_claims(variant_dir(plan.scale, slug, v.name) / "claims.json")
            if claims is None:
                record["failed"].append(v.name)
                continue
            by_id = {c["id"]: c for c in claims if not c.get("volatile")}
            if v.sweep == SEED_SWEEP:
                record["seeds"].append(v.value)
                for cid, row in record["claims"].items():
                    got = by_id.get(cid)
                    verdict = got["verdict"] if got else "missing"
                    row["verdicts"][str(v.value)] = verdict
                    row["measured"][str(v.value)] = _point(got["measured"]) if got else None
                    row["total"] += 1
                    row["agree"] += verdict == row["recorded"]
            else:
                spec = entry.sweeps[v.sweep]
                sweep = record["sweeps"].setdefault(v.sweep, {
                    "parameter": spec["parameter"], "values": list(spec["values"]),
                    "caption": spec.get("caption", ""), "claims": {}})
                index = int(VARIANT.match(v.name)["index"])
                for cid in rows:
                    row = sweep["claims"].setdefault(cid, {"verdicts": [None] * len(spec["values"]),
                                                           "measured": [None] * len(spec["values"])})
                    got = by_id.get(cid)
                    row["verdicts"][index] = got["verdict"] if got else "missing"
                    row["measured"][index] = _point(got["measured"]) if got else None
    return {"scale": plan.scale, "chapters": chapters}


def write(plan, variants: list[Variant]) -> Path:
    data = aggregate(plan, variants)
    out = paths.results_root() / plan.scale / "stability.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def load(scale: str) -> dict | None:
    path = paths.results_root() / scale / "stability.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def agreement(data: dict | None) -> dict[tuple[str, str], str]:
    """``{(slug, claim_id): "k/K seeds agree"}`` for the dashboard and the chapter tables."""
    out = {}
    for slug, ch in (data or {}).get("chapters", {}).items():
        for cid, row in ch["claims"].items():
            if row["total"]:
                out[(slug, cid)] = f"{row['agree']}/{row['total']} seeds agree"
    return out


def flips(data: dict | None) -> list[tuple[str, str, int, int]]:
    """``(slug, claim, agree, total)`` of every claim whose verdict changed at some seed."""
    out = []
    for slug, ch in sorted((data or {}).get("chapters", {}).items()):
        for cid, row in sorted(ch["claims"].items()):
            if row["total"] and row["agree"] < row["total"]:
                out.append((slug, cid, row["agree"], row["total"]))
    return out


# ---------------------------------------------------------------------------- pages
def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value))


def _badge(verdict: str | None) -> str:
    from .claims import verdict_badge

    return verdict_badge(verdict) if verdict else ""


def _sweep_table(slug: str, name: str, sweep: dict) -> list[str]:
    head = " | ".join(f"`{sweep['parameter']}` = {_fmt(v)}" for v in sweep["values"])
    lines = [f"**Sweep `{name}`** over `{sweep['parameter']}`"
             + (f": {escape(sweep['caption'])}" if sweep.get("caption") else "") + "", "",
             f"| check | {head} |", "|---|" + "---|" * len(sweep["values"])]
    for cid, row in sorted(sweep["claims"].items()):
        cells = " | ".join(f"{_badge(v)} {_fmt(m)}" for v, m in zip(row["verdicts"], row["measured"]))
        lines.append(f"| `{cid}` | {cells} |")
    return lines


def chapter_markdown(slug: str, data: dict | None) -> str | None:
    """The Stability section appended to a chapter page, or None when nothing was swept."""
    ch = (data or {}).get("chapters", {}).get(slug)
    if not ch or (not ch["seeds"] and not ch["sweeps"]):
        return None
    lines = ["## Stability", ""]
    if ch["seeds"]:
        seeds = ", ".join(map(str, ch["seeds"]))
        lines += [f"Rerun at seeds {seeds} (the chapter above ran at seed {ch['recorded_seed']}); "
                  "for each check, how many of those seeds give the verdict recorded above "
                  "(`make stability`, `results/<scale>/stability.json`).", "",
                  "| check | role | recorded | seeds agree | verdict by seed | measured by seed |",
                  "|---|---|---|---|---|---|"]
        for cid, row in ch["claims"].items():
            by_seed = " ".join(f"{s}: {_badge(row['verdicts'].get(str(s)))}" for s in ch["seeds"])
            values = ", ".join(_fmt(row["measured"].get(str(s))) for s in [ch["recorded_seed"], *ch["seeds"]])
            lines.append(f"| `{cid}` | {row['role']} | {_badge(row['recorded'])} | {row['agree']}/{row['total']} | "
                         f"{by_seed} | {values} |")
        lines.append("")
    for name, sweep in ch["sweeps"].items():
        lines += _sweep_table(slug, name, sweep) + [""]
    if ch["failed"]:
        lines += [f"Variants that failed to run: {', '.join(ch['failed'])}.", ""]
    return "\n".join(lines)


def stability_page(data: dict | None, titles: dict[str, str]) -> str:
    """The book's Stability page."""
    lines = ["# Stability", "",
             "How often each verdict survives a change of seed: every ready chapter is rerun at further "
             "seeds as ordinary Snakemake jobs (`make stability K=3`, or `compendium stability --seeds 3`), "
             "and each check's verdict is compared with the one the chapter recorded. Chapters may also "
             "declare a sweep over one of their parameters in the registry (`sweeps:`); it runs through "
             "the same rule and is tabulated here and in the chapter.", ""]
    if not data or not data.get("chapters"):
        lines += ["No seed sweep has been run for this build yet: run `make stability`.", ""]
        return "\n".join(lines)
    total = sum(1 for ch in data["chapters"].values() for r in ch["claims"].values() if r["total"])
    flipped = flips(data)
    paper = [f for f in flipped if data["chapters"][f[0]]["claims"][f[1]]["role"] == "claim"]
    lines += [f"Checks compared across seeds: {total}; checks whose verdict changed at some seed: "
              f"{len(flipped)} ({len(paper)} of them paper claims).", ""]
    lines += ["## Checks whose verdict changed", ""]
    if flipped:
        lines += ["| chapter | check | role | recorded | seeds agree | verdicts by seed |", "|---|---|---|---|---|---|"]
        for slug, cid, agree, n in flipped:
            row = data["chapters"][slug]["claims"][cid]
            by_seed = " ".join(f"{s}: {_badge(v)}" for s, v in row["verdicts"].items())
            lines.append(f"| [{escape(titles.get(slug, slug))}](/chapters/{slug}) | `{cid}` | {row['role']} | "
                         f"{_badge(row['recorded'])} | {agree}/{n} | {by_seed} |")
    else:
        lines += ["None: every check gave its recorded verdict at every seed run."]
    lines += ["", "## Per chapter", "",
              "| chapter | seeds | checks | all seeds agree | variants failed |", "|---|---|---|---|---|"]
    for slug, ch in sorted(data["chapters"].items()):
        rows = [r for r in ch["claims"].values() if r["total"]]
        steady = sum(r["agree"] == r["total"] for r in rows)
        lines.append(f"| [{escape(titles.get(slug, slug))}](/chapters/{slug}) | "
                     f"{', '.join(map(str, ch['seeds'])) or '—'} | {len(rows)} | {steady} | {len(ch['failed'])} |")
    sweeps = [(slug, name, sw) for slug, ch in sorted(data["chapters"].items()) for name, sw in ch["sweeps"].items()]
    if sweeps:
        lines += ["", "## Parameter sweeps", ""]
        for slug, name, sw in sweeps:
            lines += [f"### [{escape(titles.get(slug, slug))}](/chapters/{slug}): `{name}`", ""]
            lines += _sweep_table(slug, name, sw) + [""]
    return "\n".join(lines) + "\n"


def add_to_notebook(raw: bytes, slug: str, data: dict | None) -> bytes:
    """The staged notebook with its Stability section inserted before "Limits" (or at the end)."""
    text = chapter_markdown(slug, data)
    if text is None:
        return raw
    nb = json.loads(raw)
    cell = {"cell_type": "markdown", "id": "compendium-stability", "metadata": {}, "source": text}
    at = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
               and "".join(c["source"]).lstrip().startswith("## Limits")), len(nb["cells"]))
    nb["cells"].insert(at, cell)
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


# ------------------------------------------------------------------ verdicts across scales
def _point(measured):
    if isinstance(measured, dict):
        return measured.get("point")
    return getattr(measured, "point", measured)


def scale_differences(rows: dict, other_claims: str | Path) -> list | None:
    """Ledger rows whose verdict differs from another run's ``claims.json`` (``None`` if absent).

    ``rows``: ``{id: (verdict, measured)}`` of this run (for example the other scale's run of the
    same chapter); returns ``[(id, verdict here, verdict there, point here, point there)]`` in
    ``rows`` order; rows not_checkable on either side (a part run at one scale only) and ids
    missing there skipped. A chapter's Limits glue
    :func:`describe_differences` of it, so what they say about the scales stays true at any run."""
    path = Path(other_claims)
    if not path.is_file():
        return None
    other = {c["id"]: c for c in json.loads(path.read_text())["claims"]}
    out = []
    for cid, (verdict, measured) in rows.items():
        o = other.get(cid)
        if o is None or "not_checkable" in (verdict, o["verdict"]) or o["verdict"] == verdict:
            continue
        out.append((cid, verdict, o["verdict"], _point(measured), _point(o.get("measured"))))
    return out


def describe_differences(diffs: list | None, here: str, there: str) -> str:
    """One sentence for a chapter's Limits, computed from :func:`scale_differences`."""
    def num(v):
        return "n/a" if v is None or isinstance(v, bool) else f"{float(v):.3g}"
    if diffs is None:
        return f"no {there}-scale run of this chapter is in this results folder, so no comparison is made"
    if not diffs:
        return f"every ledger row has the same verdict at {here} and {there} scale"
    parts = [f"{cid} ({here}: {a}, {num(pa)}; {there}: {b}, {num(pb)})" for cid, a, b, pa, pb in diffs]
    return f"{len(diffs)} rows differ between {here} and {there} scale: " + "; ".join(parts)
