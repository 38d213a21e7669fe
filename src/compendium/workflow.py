"""What the Snakefile needs, as plain tested Python (no logic in rule lambdas).

:class:`Plan` turns the workflow config (scale, overrides, device, partial) and the registry
into targets, per-chapter inputs, parameters and resources. Building a plan validates
everything, so a bad registry entry, parameter or override stops the run before any notebook
starts.

**Stamps.** Snakemake decides reruns by file times; here content decides. Each chapter and asset
job has one input, a stamp file ``results/<scale>/.stamps/<job>.fp`` holding the job's current
fingerprint (:mod:`compendium.provenance`). :meth:`Plan.refresh_stamps` (run at every Snakemake
start, by the Snakefile) rewrites a stamp only when its content differs, and dates it long before
the job's outputs when their recorded fingerprint equals the current one and they verify, now
otherwise. A job whose outputs are invalid (a file is not what was written) gets a stamp with a
new line naming the problem, so its content differs from every checksum Snakemake recorded. An
asset a job reads is also an input (for the order), marked ``ancient`` while the asset's own
inputs are unchanged: repairing a corrupted asset does not rerun the chapters that read it.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .registry import DEVICES, Registry, RegistryError, load_registry

CONFIG_KEYS = {"scale", "registry", "overrides", "device", "partial", "profile", "only"}
PROFILES = ("local", "gpu", "slurm")
#: The time a current job's stamp carries (2000-01-01): older than any output it could have.
STAMP_CURRENT_TIME = 946684800


def results_base() -> str:
    """Where results go, as the rules name it: ``results`` (relative to the workflow's working
    directory, the repository root) or the absolute folder COMPENDIUM_RESULTS names elsewhere."""
    root = paths.results_root().absolute()
    try:
        return root.relative_to(paths.ROOT.absolute()).as_posix()
    except ValueError:
        return root.as_posix()


def results_dir(scale: str) -> str:
    """``<results>/<scale>`` as the rules name it (see :func:`results_base`)."""
    return f"{results_base()}/{scale}"


def stamp_path(scale: str, job: str) -> str:
    """The stamp of a job: ``chapter-<slug>``, ``asset-<name>`` or ``variant-<slug>--<variant>``.

    A variant's stamp is written while Snakemake builds its DAG (which variants run is known only
    then), after Snakemake has listed ``.stamps/`` once and cached what it saw: so each variant's
    stamp sits in a folder of its own, which that listing never covered."""
    if job.startswith("variant-"):
        return f"{results_dir(scale)}/.stamps/variants/{job}/stamp.fp"
    return f"{results_dir(scale)}/.stamps/{job}.fp"


def write_stamp(path: Path, status, outputs) -> None:
    """Write a job's stamp: its fingerprint (plus the problem, for invalid outputs), dated before
    its outputs when it needs no rerun, after them otherwise. Rewritten only when it differs."""
    text = status.fingerprint + "\n"
    if status.state == "invalid":
        text += f"rerun {time.time_ns()}: {status.reasons[0] if status.reasons else 'invalid outputs'}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        same = path.read_text(encoding="utf-8") == text
    except OSError:
        same = False
    if not same:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    mtime = path.stat().st_mtime
    if not status.rerun:
        if mtime != STAMP_CURRENT_TIME:
            os.utime(path, (STAMP_CURRENT_TIME, STAMP_CURRENT_TIME))
        return
    newest = 0.0
    for out in map(Path, outputs):
        if out.is_dir():
            newest = max([newest, out.stat().st_mtime] + [p.stat().st_mtime for p in out.rglob("*")])
        elif out.exists():
            newest = max(newest, out.stat().st_mtime)
    if mtime <= newest or mtime == STAMP_CURRENT_TIME:
        when = max(time.time(), newest + 1)
        os.utime(path, (when, when))


# ---------------------------------------------------------------------------- the plan cache
_PLAN_CACHE_SIZE = 8  # plans kept (the command's and the Snakefile's configs differ; scales; overrides)


def _plan_key(config: dict) -> str | None:
    """Everything a validated plan depends on, hashed; None when that cannot be said (then no cache)."""
    import hashlib
    import sys

    defaults = {"scale": "smoke", "registry": "workflow/config/chapters.yaml", "overrides": {}, "device": "auto",
                "partial": False, "profile": "local", "only": []}
    effective = {**defaults, **{k: v for k, v in config.items() if v is not None}}
    effective["overrides"] = effective["overrides"] or {}
    try:
        h = hashlib.sha256(json.dumps([effective, str(paths.ROOT), sys.version], sort_keys=True).encode())
    except (TypeError, ValueError):
        return None
    code = Path(__file__).resolve().parent
    for path in (paths.ROOT / config.get("registry", "workflow/config/chapters.yaml"), paths.REGISTRY_SCHEMA,
                 code / "registry.py", code / "workflow.py", code / "validation.py", code / "paths.py"):
        try:
            h.update(str(path).encode() + b"\0" + path.read_bytes())
        except OSError:
            h.update(str(path).encode() + b"\0missing")
    return h.hexdigest()


def _plan_cache_path() -> Path:
    return paths.ROOT / ".snakemake" / "compendium-cache" / "plans.pickle"


def _read_plans() -> dict:
    import pickle

    try:
        with open(_plan_cache_path(), "rb") as fh:
            plans = pickle.load(fh)
        return plans if isinstance(plans, dict) else {}
    except Exception:  # noqa: BLE001 - a missing, old or broken cache is rebuilt
        return {}


def _cached_plan(key: str | None) -> "Plan | None":
    if key is None:
        return None
    plan = _read_plans().get(key)
    if not isinstance(plan, Plan):
        return None
    # what load_registry also checks on the file system: every ready chapter's notebook is there
    if any(not entry.notebook.is_file() for entry in plan.registry.ready):
        return None
    return plan


def _keep_plan(key: str | None, plan: "Plan") -> None:
    import pickle

    if key is None:
        return
    plans = _read_plans()
    plans.pop(key, None)
    plans[key] = Plan(plan.registry, plan.scale, plan.params, plan.device, plan.partial, plan.profile, plan.only)
    while len(plans) > _PLAN_CACHE_SIZE:
        plans.pop(next(iter(plans)))
    path = _plan_cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        with open(tmp, "wb") as fh:
            pickle.dump(plans, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass


def previous_book(index: Path) -> Path:
    """Where a hard link to the book's ``index.html`` is kept while Snakemake runs (outside the html
    folder, which Snakemake removes when it empties it)."""
    return Path(index).parents[2] / ".index.html.previous"


def keep_book(index: Path) -> None:
    """At Snakemake's start: keep a hard link to the current ``index.html`` (Snakemake deletes a job's
    output before it reruns the job, and again when the job fails)."""
    index, previous = Path(index), previous_book(index)
    if index.is_file():
        previous.unlink(missing_ok=True)
        os.link(index, previous)


def restore_book(index: Path) -> bool:
    """Put the previous book's ``index.html`` back when a failed book job left it deleted (a job
    that failed before jupyter-book rewrote any page; see workflow/scripts/build_book.py); True when
    it did. A kept link beside a present ``index.html`` is dropped."""
    index, previous = Path(index), previous_book(index)
    if index.is_file() or not previous.is_file():
        previous.unlink(missing_ok=True)
        return False
    index.parent.mkdir(parents=True, exist_ok=True)
    os.replace(previous, index)
    return True


def last_run_seconds(path: Path) -> float | None:
    """The wall time Snakemake's benchmark file recorded for a job's last run."""
    try:
        with open(path, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        return float(rows[-1]["s"]) if rows else None
    except (OSError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class Plan:
    registry: Registry
    scale: str
    params: dict  # slug -> resolved notebook parameters
    device: str
    partial: bool
    profile: str
    only: tuple = ()  # `build --only`: the book waits for these chapters alone and shows the rest as they are
    states: dict = field(default_factory=dict, compare=False, repr=False)  # job -> provenance Status
    paths_s: dict = field(default_factory=dict, compare=False, repr=False)  # job -> longest path, seconds

    @classmethod
    def from_config(cls, config: dict, keep: bool = True) -> "Plan":
        """Validate the workflow config and the registry; raise RegistryError on any fault.

        A plan validated before from the same registry bytes, schema, validating code and config
        is read back from ``.snakemake/compendium-cache/plans.pickle`` instead (every build starts
        two plans: the command's and the Snakefile's; validating the registry took about a second).
        ``keep=False`` reads that cache but writes nothing (the command line: bad input writes
        nothing; the Snakefile keeps the plans).
        """
        key = _plan_key(config)
        cached = _cached_plan(key)
        if cached is not None:
            return cached
        plan = cls._validated(config)
        if keep:
            _keep_plan(key, plan)
        return plan

    @classmethod
    def _validated(cls, config: dict) -> "Plan":
        unknown = set(config) - CONFIG_KEYS
        if unknown:
            raise RegistryError(
                f"unknown workflow config key(s) {sorted(unknown)}; allowed: {', '.join(sorted(CONFIG_KEYS))}"
            )
        registry = load_registry(paths.ROOT / config.get("registry", "workflow/config/chapters.yaml"))
        scale = config.get("scale", "smoke")
        registry.check_scale(scale)
        device = config.get("device", "auto")
        if device not in DEVICES:
            raise RegistryError(f"config 'device' = {device!r} is not allowed: one of {', '.join(DEVICES)}")
        profile = config.get("profile", "local")
        if profile not in PROFILES:
            raise RegistryError(f"unknown profile {profile!r}; allowed: {', '.join(PROFILES)}")
        overrides = config.get("overrides") or {}
        if isinstance(overrides, str):  # `--config overrides='{...}'` may arrive as text
            try:
                overrides = json.loads(overrides)
            except json.JSONDecodeError:
                raise RegistryError(f"config 'overrides' is not a JSON mapping: {overrides!r}") from None
        if device != "auto":
            # the run-wide device applies to every chapter unless a chapter override names one
            overrides = {**{c.slug: {} for c in registry.ready}, **overrides}
            overrides = {s: {"device": device, **v} for s, v in overrides.items()}
        params = registry.resolve_all(scale, overrides)
        partial = config.get("partial", False)
        if not isinstance(partial, bool):
            raise RegistryError(f"config 'partial' must be true or false, got {partial!r}")
        only = config.get("only") or []
        if not isinstance(only, (list, tuple)) or not all(isinstance(s, str) for s in only):
            raise RegistryError(f"config 'only' must be a list of chapter slugs, got {only!r}")
        ready = {c.slug for c in registry.ready}
        unknown = [s for s in only if s not in ready]
        if unknown:
            raise RegistryError(f"config 'only' names chapters that are not ready: {', '.join(unknown)}")
        return cls(registry, scale, params, device, partial, profile, tuple(only))

    # ---------------------------------------------------------------- chapter paths
    def out(self, slug: str, name: str) -> str:
        return f"{results_dir(self.scale)}/{slug}/{name}"

    def chapter_outputs(self, slug: str) -> dict[str, str]:
        return {
            "notebook": self.out(slug, f"{slug}.ipynb"),
            "claims": self.out(slug, "claims.json"),
            "params": self.out(slug, "params.yaml"),
        }

    def chapter_notebook(self, slug: str) -> str:
        return str(self.registry.chapter(slug).notebook.relative_to(paths.ROOT))

    # ---------------------------------------------------------------- stamps
    def refresh_stamps(self) -> None:
        """Bring every chapter's and asset's stamp up to date (see the module docstring); adopt
        outputs built before fingerprints once, where the rules of that time called them current."""
        from .provenance import Fingerprinter, asset_folder, asset_order, asset_state, chapter_state

        fp = Fingerprinter()
        root = paths.ROOT
        for name in asset_order(self.registry):
            st = asset_state(self.registry, name, self.scale, fp, adopt=True)
            self.states[f"asset-{name}"] = st
            write_stamp(root / stamp_path(self.scale, f"asset-{name}"), st, [asset_folder(name, self.scale)])
        for entry in self.registry.ready:
            st = chapter_state(entry, self.scale, self.params[entry.slug], fp, adopt=True, last_good=False)
            self.states[f"chapter-{entry.slug}"] = st
            outputs = [*self.chapter_outputs(entry.slug).values(), self.out(entry.slug, "figures")]
            write_stamp(root / stamp_path(self.scale, f"chapter-{entry.slug}"), st, [root / p for p in outputs])
        fp.save()

    def variant_stamp(self, slug: str, variant: str, parameters: dict, outputs: dict) -> str:
        """The stamp of a seed or sweep variant of a chapter (computed when Snakemake asks)."""
        from .provenance import Fingerprinter, chapter_state

        job = f"variant-{slug}--{variant}"
        path = stamp_path(self.scale, job)
        fp = Fingerprinter()
        out_dir = paths.ROOT / Path(outputs["claims"]).parent
        st = chapter_state(self.registry.chapter(slug), self.scale, parameters, fp, out_dir=out_dir,
                           adopt=True, last_good=False)
        self.states[job] = st
        write_stamp(paths.ROOT / path, st, [paths.ROOT / p for p in outputs.values()] + [out_dir / "figures"])
        fp.save()
        return path

    def asset_inputs(self, names) -> list[tuple[str, bool]]:
        """``(folder, ancient)`` for assets a job reads: ``ancient`` unless the asset is missing or
        its own inputs changed (a repair of a corrupted asset reruns nothing downstream)."""
        out = []
        for name in names:
            st = self.states.get(f"asset-{name}")
            ancient = st is not None and st.state in ("current", "invalid")
            out.append((f"{results_dir(self.scale)}/assets/{name}", ancient))
        return out

    def chapter_assets(self, slug: str) -> list[tuple[str, bool]]:
        return self.asset_inputs(self.registry.chapter(slug).assets)

    def asset_upstream(self, name: str) -> list[tuple[str, bool]]:
        """The folders of the assets ``name`` requires (built first; a rebuilt one rebuilds it)."""
        return self.asset_inputs(self.registry.assets[name].get("requires", []))

    def _seconds(self, job: str) -> float:
        """The wall seconds of a job's last recorded run, else the registry's ``estimate_s`` (assets)."""
        seconds = last_run_seconds(paths.ROOT / results_dir(self.scale) / "benchmarks" / f"{job.removeprefix('chapter-')}.tsv")
        if seconds is None and job.startswith("asset-"):
            seconds = (self.registry.assets[job.split("-", 1)[1]].get("estimate_s") or {}).get(self.scale)
        return float(seconds or 0)

    def priority(self, job: str) -> int:
        """Longest path first: a job's own seconds plus the longest chain of jobs waiting for it (the
        assets built from an asset, the chapters that read it), so that a long asset and what it
        feeds start before short independent work."""
        if not self.paths_s:
            readers: dict[str, list[str]] = {}
            for entry in self.registry.ready:
                for name in entry.assets:
                    readers.setdefault(f"asset-{name}", []).append(f"chapter-{entry.slug}")
            for name, spec in self.registry.assets.items():
                for req in spec.get("requires", []):
                    readers.setdefault(f"asset-{req}", []).append(f"asset-{name}")
            longest: dict[str, float] = {}

            def path(j: str) -> float:
                if j not in longest:
                    longest[j] = self._seconds(j) + max((path(r) for r in readers.get(j, [])), default=0.0)
                return longest[j]

            self.paths_s.update({j: path(j) for j in [f"asset-{a}" for a in self.registry.assets]
                                 + [f"chapter-{c.slug}" for c in self.registry.ready]})
        return int(self.paths_s.get(job, 0))

    def params_json(self, slug: str) -> str:
        """Resolved parameters as canonical JSON: Snakemake reruns a chapter when they change."""
        return json.dumps(self.params[slug], sort_keys=True)

    def all_params_json(self) -> str:
        """Every chapter's effective parameters: the book marks claims computed with others stale."""
        return json.dumps(self.params, sort_keys=True)

    def finished(self, slug: str) -> bool:
        return all((paths.ROOT / p).is_file() for p in self.chapter_outputs(slug).values())

    # ---------------------------------------------------------------- book
    def book_chapters(self) -> list[str]:
        """Chapters the book waits for; with ``partial`` only those that already finished; with ``only``
        (``build --only``) those chapters alone: the others are shown as they are (stale, not run), so
        rerunning one chapter never runs the rest of the book, nor trains their assets."""
        if self.only:
            return list(self.only)
        slugs = [c.slug for c in self.registry.ready]
        if self.partial:
            slugs = [s for s in slugs if self.finished(s)]
        return slugs

    def book_index(self) -> str:
        return f"{results_dir(self.scale)}/book/_build/html/index.html"

    def claims_csv(self) -> str:
        return f"{results_dir(self.scale)}/claims.csv"

    def benchmark(self, slug: str) -> str:
        return f"{results_dir(self.scale)}/benchmarks/{slug}.tsv"

    def book_static(self) -> list[str]:
        return sorted(
            str(p.relative_to(paths.ROOT))
            for p in paths.BOOK.rglob("*")
            if p.is_file() and "_build" not in p.parts
        )

    def timeout_s(self) -> int:
        return int(self.registry.scales[self.scale]["timeout_s"])
