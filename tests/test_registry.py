"""The registry and every way bad input is refused before any notebook runs."""

import re
from pathlib import Path

import pytest
import yaml

from compendium import paths
from compendium.registry import RegistryError, load_registry, overrides_from_strings
from compendium.workflow import Plan

from conftest import REPO, compendium, hippo, registry_with


def test_registry_lists_the_38_papers_once_each():
    registry = load_registry()
    assert len(registry.chapters) == 38
    refs = [(c.seed_file, c.abstract) for c in registry.chapters]
    assert len(set(refs)) == len(refs), "one chapter per (seed file, abstract)"
    # every ready chapter cites its paper through a key of its own bibliography file
    for entry in registry.ready:
        bib = REPO / "book" / "references" / f"{entry.slug}.bib"
        keys = re.findall(r"^@\w+\{([^,]+),", bib.read_text(encoding="utf-8"), flags=re.M)
        box = entry.notebook.read_text(encoding="utf-8").split("Paper and code", 1)[1].split(":::", 1)[0]
        cited = re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", box)
        assert cited and cited[0] in keys, f"{entry.slug}: the 'Paper and code' box cites {cited}, not a key of {bib.name}"


NOT_LISTED = "authors not listed"  # what a paper whose authors could not be found is cited as


def author_problems(bib_text: str, papers: set[str] = frozenset()) -> list[str]:
    """Entries of a 2026 paper (``year`` 2026, or a key in ``papers``) cited with no real authors.

    "Anonymous" is never right for a published paper; a chapter's own paper has a list of names or,
    where none could be found, exactly ``{authors not listed}``, never a made-up group ("X authors").
    """
    from pybtex.database import parse_string

    problems = []
    for key, item in parse_string(bib_text, "bibtex").entries.items():
        if key not in papers and item.fields.get("year", "").strip() != "2026":
            continue
        names = [str(p) for p in item.persons.get("author", [])]
        if not names:
            problems.append(f"{key}: no author field")
        elif any("anonymous" in n.lower() for n in names):
            problems.append(f"{key}: cited as Anonymous")
        elif key in papers and len(names) == 1 and names[0].startswith("{") and names[0].strip("{}") != NOT_LISTED:
            problems.append(f"{key}: placeholder author {names[0]!r}")
    return problems


def test_no_2026_paper_is_cited_as_anonymous():
    papers = set()
    for entry in load_registry().ready:
        box = entry.notebook.read_text(encoding="utf-8").split("Paper and code", 1)[1].split(":::", 1)[0]
        papers.add(re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", box)[0])
    problems = []
    for bib in sorted((REPO / "book" / "references").glob("*.bib")):
        problems += [f"{bib.name}: {p}" for p in author_problems(bib.read_text(encoding="utf-8"), papers)]
    assert problems == []


@pytest.mark.parametrize("author, problem", [
    ("Anonymous", "cited as Anonymous"), ("{{Anonymous}}", "cited as Anonymous"),
    ("{{B-Spar authors}}", "placeholder author"), (None, "no author field"),
    ("{{authors not listed}}", None), ("Luo, Shuqing and Chen, Tianlong", None),
])
def test_author_check_catches_placeholders(author, problem):
    field = f"  author = {{{author}}},\n" if author else ""
    entry = f"@inproceedings{{p2026,\n  title = {{T}},\n{field}  year = {{2026}}\n}}\n"
    found = author_problems(entry, {"p2026"})
    assert (problem in found[0]) if problem else found == [], found
    # an older reference is not a 2026 paper unless it is a chapter's own paper
    assert author_problems(entry.replace("2026}", "2019}")) == []


def test_parts_cover_every_chapter_and_ready_chapters_resolve():
    registry = load_registry()
    assert {c.part for c in registry.chapters} <= {p.id for p in registry.parts}
    for scale in registry.scales:
        params = registry.resolve_all(scale)
        assert set(params) == {c.slug for c in registry.ready}
        for values in params.values():
            assert values["scale"] == scale and values["device"] == "auto"


_write_registry = registry_with
_hippo = hippo


BAD_REGISTRIES = {
    "unknown chapter key": (lambda r: _hippo(r).update(colour="red"), r"continuized_hippo.*colour"),
    "wrong type of abstract": (lambda r: _hippo(r).update(abstract="fourteen"), r"continuized_hippo.*abstract"),
    "abstract out of range": (lambda r: _hippo(r).update(abstract=0), r"continuized_hippo.*abstract.*less than the minimum"),
    "malformed seed file name": (lambda r: _hippo(r).update(seed_file="seeds.txt"), r"continuized_hippo.*seed_file.*does not match"),
    "unknown part": (lambda r: _hippo(r).update(part="poetry"), r"continuized_hippo.*part.*poetry"),
    "duplicate slug": (lambda r: r["chapters"].append(dict(_hippo(r))), r"continuized_hippo.*twice"),
    "bad status": (lambda r: _hippo(r).update(status="done"), r"continuized_hippo.*status"),
    "parameter without a value for a scale": (
        lambda r: _hippo(r)["parameters"]["num_modes"].pop("default"), r"num_modes.*no value for scale"),
    "registry value out of range": (
        lambda r: _hippo(r)["parameters"]["num_modes"].update(default=99), r"num_modes.*out of range.*\[1, 8\]"),
    "reserved parameter name": (
        lambda r: _hippo(r)["parameters"].update(seed={"type": "integer", "help": "x", "default": 1}), r"continuized_hippo.*parameters"),
    "parameter spec without help": (
        lambda r: _hippo(r)["parameters"]["num_modes"].pop("help"), r"continuized_hippo.*help"),
    "unknown asset": (lambda r: _hippo(r).update(assets=["gpt5"]), r"continuized_hippo.*unknown asset 'gpt5'"),
    "unknown top-level key": (lambda r: r.update(chapterz=[]), r"chapterz"),
    "asset requires an unknown asset": (
        lambda r: r["assets"]["pi_distill_policies"].update(requires=["pi_distill_base"]),
        r"asset 'pi_distill_policies'.*requires.*unknown asset 'pi_distill_base'"),
    "asset requires itself": (
        lambda r: r["assets"]["pi_distill_policies"].update(requires=["pi_distill_policies"]),
        r"asset 'pi_distill_policies'.*a cycle, pi_distill_policies -> pi_distill_policies"),
    "asset requirements in a cycle": (
        lambda r: (r["assets"]["pi_distill_policies"].update(requires=["matryoshka_3d_mrl"]),
                   r["assets"]["matryoshka_3d_mrl"].update(requires=["pi_distill_policies"])),
        r"a cycle, (pi_distill_policies -> matryoshka_3d_mrl -> pi_distill_policies"
        r"|matryoshka_3d_mrl -> pi_distill_policies -> matryoshka_3d_mrl)"),
    "asset requires not a list": (
        lambda r: r["assets"]["pi_distill_policies"].update(requires="matryoshka_3d_mrl"),
        r"pi_distill_policies.*requires"),
}


def test_asset_requirements_are_accepted_and_planned(tmp_path):
    """A diamond (a needs b and c, both need d) is no cycle; the plan names the upstream folders."""
    from compendium.workflow import Plan

    def mutate(raw):
        names = ["pi_distill_policies", "matryoshka_3d_mrl", "poster_agent_policies", "cofact_gvr_policies"]
        a, b, c, d = (raw["assets"][n] for n in names)
        a["requires"], b["requires"], c["requires"] = [names[1], names[2]], [names[3]], [names[3]]

    registry = load_registry(_write_registry(tmp_path, mutate))
    assert registry.assets["pi_distill_policies"]["requires"] == ["matryoshka_3d_mrl", "poster_agent_policies"]
    plan = Plan(registry=registry, scale="full", params={}, device="cpu", partial=False, profile="local")
    upstream = [path for path, _ancient in plan.asset_upstream("pi_distill_policies")]
    assert upstream == ["results/full/assets/matryoshka_3d_mrl", "results/full/assets/poster_agent_policies"]
    assert plan.asset_upstream("cofact_gvr_policies") == []


def test_the_longest_chain_of_work_starts_first(tmp_path, monkeypatch):
    """Snakemake priorities: a job's own seconds (last recorded run, else the registry's estimate_s)
    plus the longest chain waiting for it, so an asset that a long asset is built from starts first."""
    from compendium.workflow import Plan

    def mutate(raw):
        raw["assets"]["matryoshka_3d_stage0"]["estimate_s"] = {"smoke": 30}
        raw["assets"]["matryoshka_3d_mrl"]["estimate_s"] = {"smoke": 500}
        raw["assets"]["gass_digits_unet"]["estimate_s"] = {"smoke": 200, "full": 900}

    registry = load_registry(_write_registry(tmp_path, mutate))
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    plan = Plan(registry=registry, scale="smoke", params={}, device="cpu", partial=False, profile="local")
    assert plan.priority("asset-matryoshka_3d_stage0") == 530  # waits for nothing, but mrl waits for it
    assert plan.priority("asset-matryoshka_3d_mrl") == 500
    assert plan.priority("asset-gass_digits_unet") == 200 and plan.priority("asset-energs_splats") == 0
    bench = tmp_path / "results" / "smoke" / "benchmarks" / "asset-gass_digits_unet.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\n250.5\t0:04:10\n")  # a recorded run takes precedence over the estimate
    assert Plan(registry=registry, scale="smoke", params={}, device="cpu", partial=False,
                profile="local").priority("asset-gass_digits_unet") == 250


def test_ensure_asset_builds_what_an_asset_requires_first(tmp_path, monkeypatch):
    """`compendium asset`/`execute` build a missing required asset before the asset that needs it,
    and reuse one that is built; a forced rebuild forces only the asset named."""
    from compendium import assets, cli, paths
    from compendium.workflow import Plan

    def mutate(raw):
        raw["assets"]["pi_distill_policies"]["requires"] = ["matryoshka_3d_mrl"]
        raw["assets"]["matryoshka_3d_mrl"]["requires"] = ["poster_agent_policies"]

    registry = load_registry(_write_registry(tmp_path, mutate))
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    built = []

    def fake_loader(spec):
        def builder(out_dir, scale, seed):
            name = next(n for n, a in registry.assets.items() if a["builder"] == spec)
            for req in registry.assets[name].get("requires", []):
                assets.asset_dir(req, scale)            # raises if the required one is not there yet
            built.append(name)
            return {}
        return builder

    monkeypatch.setattr(assets, "load_builder", fake_loader)
    monkeypatch.setattr(assets, "environment_record", lambda: {})
    plan = Plan(registry=registry, scale="smoke", params={}, device="cpu", partial=False, profile="local")
    cli._ensure_asset(plan, "pi_distill_policies")
    assert built == ["poster_agent_policies", "matryoshka_3d_mrl", "pi_distill_policies"]
    cli._ensure_asset(plan, "pi_distill_policies", force=True)
    assert built[3:] == ["pi_distill_policies"]


@pytest.mark.parametrize("case", sorted(BAD_REGISTRIES))
def test_bad_registry_is_refused_with_chapter_and_key(tmp_path, case):
    mutate, pattern = BAD_REGISTRIES[case]
    path = _write_registry(tmp_path, mutate)
    with pytest.raises(RegistryError, match=pattern):
        load_registry(path)


def test_malformed_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "chapters.yaml"
    bad.write_text("chapters: [\n  - slug: x\n")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(bad)
    with pytest.raises(RegistryError, match="not found"):
        load_registry(tmp_path / "nope.yaml")


def test_ready_chapter_without_notebook(tmp_path):
    def mutate(raw):
        # the first planned chapter; once every chapter is ready, a copy of one under a slug
        # that has no notebook, so the check is still exercised
        c = next((c for c in raw["chapters"] if c["status"] == "planned"), None)
        if c is None:
            free = 1 + max(e["abstract"] for e in raw["chapters"])      # (seed file, abstract) must be new
            c = dict(_hippo(raw), slug="chapter_without_notebook", abstract=free)
            raw["chapters"].append(c)
        c["status"] = "ready"
    with pytest.raises(RegistryError, match="ready but its notebook is missing"):
        load_registry(_write_registry(tmp_path, mutate))


def _plan_hippo(raw):
    """continuized_hippo marked planned: every chapter is ready now, so the refusals of a planned
    chapter below need one made for them."""
    hippo(raw)["status"] = "planned"


BAD_OVERRIDES = {
    "unknown slug": (["nochapter.seed=1"], r"unknown chapter 'nochapter'"),
    "unknown parameter": (["continuized_hippo.tau=1"], r"'continuized_hippo'.*unknown parameter 'tau'.*tau_max"),
    "wrong type": (["continuized_hippo.num_modes=many"], r"'continuized_hippo'.*'num_modes'.*wrong type.*integer"),
    "out of range": (["continuized_hippo.num_modes=0"], r"'continuized_hippo'.*'num_modes'.*out of range.*\[1, 8\]"),
    "list item out of range": (["continuized_hippo.orders=[8, 16, 32]"], r"'orders'.*out of range"),
    "bad seed": (["continuized_hippo.seed=-1"], r"'seed'.*invalid"),
    "bool for integer": (["continuized_hippo.num_modes=true"], r"'num_modes'.*wrong type"),
    "bad device": (["continuized_hippo.device=tpu"], r"'device'.*'tpu'.*one of"),
    "planned chapter": (["continuized_hippo.seed=1"], r"'continuized_hippo' is planned"),
    "scale per chapter": (["continuized_hippo.scale=full"], r"'scale' is chosen for the whole run"),
}


@pytest.mark.parametrize("case", sorted(BAD_OVERRIDES))
def test_bad_override_is_refused(case, tmp_path):
    items, pattern = BAD_OVERRIDES[case]
    registry = load_registry(registry_with(tmp_path, _plan_hippo)) if case == "planned chapter" else load_registry()
    with pytest.raises(RegistryError, match=pattern):
        registry.resolve_all("smoke", overrides_from_strings(items))


def test_bad_workflow_config_is_refused():
    with pytest.raises(RegistryError, match="unknown scale 'huge'"):
        Plan.from_config({"scale": "huge"})
    with pytest.raises(RegistryError, match="unknown workflow config key"):
        Plan.from_config({"scale": "smoke", "treads": 4})
    with pytest.raises(RegistryError, match="unknown profile 'cloud'"):
        Plan.from_config({"scale": "smoke", "profile": "cloud"})
    with pytest.raises(RegistryError, match="override looks like"):
        overrides_from_strings(["seed3"])


def test_overrides_apply_and_are_typed():
    params = load_registry().resolve_all("smoke", overrides_from_strings(["continuized_hippo.seed=7", "continuized_hippo.tau_max=4"]))
    assert params["continuized_hippo"]["seed"] == 7
    assert params["continuized_hippo"]["tau_max"] == 4


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["build", "--set", "continuized_hippo.num_modes=0"], r"'num_modes'.*out of range"),
        (["build", "--profile", "cloud"], r"unknown profile 'cloud'"),
        (["build", "--scale", "huge"], r"unknown scale 'huge'"),
        (["build", "--only", "nochapter"], r"unknown chapter 'nochapter'"),
        (["build", "--only", "continuized_hippo", "--planned"], r"'continuized_hippo' is planned"),
        (["build", "--force", "demo"], r"unknown chapter 'demo'"),
    ],
)
def test_cli_refuses_bad_input_and_writes_nothing(tmp_path, args, pattern):
    from conftest import make_project

    root = make_project(tmp_path / "p", fixture=False)
    if "--planned" in args:  # this project's registry (a copy) lists continuized_hippo as planned
        args = [a for a in args if a != "--planned"]
        (root / "workflow" / "config" / "chapters.yaml").write_text(registry_with(tmp_path, _plan_hippo).read_text())
    proc = compendium(root, *args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert re.search(pattern, proc.stderr), proc.stderr
    assert not (root / "results").exists() and not (root / ".snakemake").exists()


def test_snakemake_itself_refuses_bad_config_before_running(tmp_path):
    """Running snakemake directly (not through the CLI) validates too."""
    import subprocess
    import sys

    from conftest import make_project, project_env

    root = make_project(tmp_path / "p", fixture=False)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--config", "scale=huge"],
        cwd=root, env=project_env(root), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "unknown scale 'huge'" in proc.stderr + proc.stdout
    assert not (root / "results").exists()
