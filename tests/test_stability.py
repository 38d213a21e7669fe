"""Seed sweeps and registry sweeps: variants as Snakemake wildcard jobs, aggregation, the book pages."""

import json

import pytest
import yaml

from compendium import stability
from compendium.registry import RegistryError
from compendium.workflow import Plan

from conftest import compendium


def _plan(project, monkeypatch):
    monkeypatch.setattr("compendium.paths.ROOT", project)
    monkeypatch.setattr("compendium.paths.NOTEBOOKS", project / "notebooks")
    monkeypatch.setattr("compendium.paths.REGISTRY", project / "workflow" / "config" / "chapters.yaml")
    monkeypatch.setenv("COMPENDIUM_RESULTS", str(project / "results"))
    return Plan.from_config({"registry": str(project / "workflow" / "config" / "chapters.yaml")})


def _declare_sweep(project, values=(500, 4000)):
    path = project / "workflow" / "config" / "chapters.yaml"
    reg = yaml.safe_load(path.read_text())
    reg["chapters"][0]["sweeps"] = {"size": {"parameter": "num_samples", "values": list(values),
                                             "caption": "the check at two sample sizes"}}
    path.write_text(yaml.safe_dump(reg, sort_keys=False))


def test_variants_change_exactly_one_parameter(project, monkeypatch):
    _declare_sweep(project)
    plan = _plan(project, monkeypatch)
    names = [v.name for v in stability.plan_variants(plan, 2, ["demo_mean"])]
    assert names == ["seed-1", "seed-2", "size-0", "size-1"]
    base = plan.params["demo_mean"]
    seeded = stability.variant_params(plan, "demo_mean", "seed-2")
    assert seeded == {**base, "seed": 2}
    assert stability.variant_params(plan, "demo_mean", "size-1") == {**base, "num_samples": 4000}
    with pytest.raises(ValueError, match="declares no sweep"):
        stability.variant_params(plan, "demo_mean", "tau-0")
    with pytest.raises(ValueError, match="has 2 values"):
        stability.variant_params(plan, "demo_mean", "size-5")
    with pytest.raises(RegistryError, match="unknown or planned"):
        stability.plan_variants(plan, 1, ["demo_planned"])
    with pytest.raises(ValueError, match=">= 0"):
        stability.seed_variants("demo_mean", 0, -1)


def test_a_sweep_value_the_parameter_refuses_is_refused_before_anything_runs(project, monkeypatch):
    _declare_sweep(project, values=(5, 4000))  # num_samples has minimum 10
    with pytest.raises(RegistryError, match="sweep 'size'"):
        _plan(project, monkeypatch)
    proc = compendium(project, "stability", "--seeds", "1", "--dry-run")
    assert proc.returncode == 2 and "sweep 'size'" in proc.stderr


def _claims(verdict, value):
    return {"claims": [{"id": "estimate", "role": "claim", "verdict": verdict, "volatile": False,
                        "measured": {"point": value, "low": value - 1, "high": value + 1}}]}


def test_aggregation_counts_agreement_with_the_recorded_verdict(project, monkeypatch):
    plan = _plan(project, monkeypatch)
    root = project / "results" / "smoke" / "demo_mean"
    root.mkdir(parents=True)
    (root / "claims.json").write_text(json.dumps(_claims("pass", 0.1)))
    for seed, verdict in ((1, "pass"), (2, "inconclusive"), (3, "pass")):
        d = root / "variants" / f"seed-{seed}"
        d.mkdir(parents=True)
        (d / "claims.json").write_text(json.dumps(_claims(verdict, seed / 10)))
    variants = stability.plan_variants(plan, 4, ["demo_mean"])  # seed 4 never ran: a failed variant
    data = stability.aggregate(plan, variants)
    row = data["chapters"]["demo_mean"]["claims"]["estimate"]
    assert (row["agree"], row["total"]) == (2, 3)
    assert row["verdicts"] == {"1": "pass", "2": "inconclusive", "3": "pass"}
    assert row["measured"]["0"] == 0.1 and row["measured"]["2"] == 0.2
    assert data["chapters"]["demo_mean"]["failed"] == ["seed-4"]
    assert stability.flips(data) == [("demo_mean", "estimate", 2, 3)]
    assert stability.agreement(data) == {("demo_mean", "estimate"): "2/3 seeds agree"}
    page = stability.stability_page(data, {"demo_mean": "Demo"})
    assert "2/3" in page and "verdict-inconclusive" in page
    section = stability.chapter_markdown("demo_mean", data)
    assert section.startswith("## Stability") and "seed-4" in section


@pytest.mark.e2e
def test_make_stability_runs_variants_as_jobs_and_renders(project):
    _declare_sweep(project)
    proc = compendium(project, "stability", "--seeds", "2", "--only", "demo_mean", check=True, timeout=1200)
    out = project / "results" / "smoke"
    for seed in (1, 2):
        claims = json.loads((out / "demo_mean" / "variants" / f"seed-{seed}" / "claims.json").read_text())
        assert claims["seed"] == seed
    assert not (out / "demo_variance" / "variants").exists()
    assert (out / "demo_mean" / "variants" / "size-1" / "claims.json").is_file()
    data = json.loads((out / "stability.json").read_text())
    assert data["chapters"]["demo_mean"]["seeds"] == [1, 2]
    assert data["chapters"]["demo_mean"]["sweeps"]["size"]["values"] == [500, 4000]
    html = out / "book" / "_build" / "html"
    page = (html / "stability.html").read_text()
    assert "Parameter sweeps" in page and "num_samples" in page
    chapter = (html / "chapters" / "demo_mean.html").read_text()
    assert "Stability" in chapter and "seeds agree" in chapter and "Sweep" in chapter
    assert "seeds agree" in (html / "dashboard.html").read_text()
    # cached: asking again runs no chapter job
    again = compendium(project, "stability", "--seeds", "2", "--only", "demo_mean", "--dry-run", check=True)
    assert "chapter_variant" not in again.stdout + again.stderr, proc.stdout[-2000:]


@pytest.mark.e2e
def test_stability_no_book_stops_after_the_record(project):
    """`--no-book` writes the variants and stability.json and builds nothing else: no book, and no
    other chapter brought up to date (at full scale that could be hours of other chapters' runs)."""
    proc = compendium(project, "stability", "--seeds", "1", "--only", "demo_mean", "--no-sweeps", "--no-book",
                      check=True, timeout=900)
    out = project / "results" / "smoke"
    assert json.loads((out / "demo_mean" / "variants" / "seed-1" / "claims.json").read_text())["seed"] == 1
    assert json.loads((out / "stability.json").read_text())["chapters"]["demo_mean"]["seeds"] == [1]
    assert "book not rebuilt (--no-book)" in proc.stdout
    assert not (out / "book").exists()
    assert not (out / "demo_variance").exists()


def test_execute_with_seeds_runs_variants_and_prints_the_flips(project):
    """`compendium execute SLUG --seeds K`: the chapter, then K further seeds into the variant
    folders `stability` uses, and one agreement line per row."""
    proc = compendium(project, "execute", "demo_mean", "--seeds", "1", check=True, timeout=600)
    out = project / "results" / "smoke" / "demo_mean"
    assert json.loads((out / "claims.json").read_text())["seed"] == 0
    assert json.loads((out / "variants" / "seed-1" / "claims.json").read_text())["seed"] == 1
    rows = json.loads((out / "claims.json").read_text())["claims"]
    lines = [line for line in proc.stdout.splitlines() if " agree " in line]
    assert len(lines) == len([c for c in rows if not c.get("volatile")]) and all("/1 agree" in x for x in lines)
    assert "rows flip at some seed" in proc.stdout
