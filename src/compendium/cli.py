"""``compendium``: the command line behind the Makefile.

    compendium validate [--scale S] [--set slug.key=value ...]
    compendium build    [--scale S] [--profile P] [--cores N] [--only SLUG ...] [--force SLUG ...]
                        [--set slug.key=value ...] [--no-keep-going] [--dry-run] [-- SNAKEMAKE ARGS]
    compendium execute SLUG [--scale S] [--set KEY=VALUE ...]
    compendium asset NAME [--scale S]
    compendium verdicts [--scale S] [--compare | --write [--only SLUG ...] [--sweep K]]
    compendium status   [--scale S]
    compendium record   [--scale full] [--only SLUG ...] [--current]
    compendium new SLUG
    compendium data verify
    compendium kernel

``build`` validates the registry, the scale, the profile and every override *before* it starts
Snakemake, so bad input costs nothing and writes nothing. With ``--keep-going`` (the default) a
failing chapter does not stop the others; the book is then built from the chapters that finished,
the failed ones marked as failed, and the command still exits non-zero.

Overrides also come from the environment: ``COMPENDIUM_SET`` holds overrides separated by
whitespace outside brackets and quotes (``'seed=3 orders=[64, 128]'``); the Makefile's ``SET``
reaches the CLI this way, never through a shell. ``build`` and ``execute`` refuse to start with
less than ``COMPENDIUM_MIN_FREE_MB`` (default 300) megabytes free where results are written.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import paths
from .registry import RegistryError, _bounded, excerpt, overrides_from_strings, split_overrides
from .workflow import PROFILES, Plan

MIN_FREE_MB = 300  # default of COMPENDIUM_MIN_FREE_MB: a smoke build writes well under this


class Refused(RuntimeError):
    """The command cannot start (no disk space, another build running): nothing was written."""


def _profile_dir(profile: str) -> Path:
    if profile not in PROFILES:
        raise RegistryError(f"unknown profile {profile!r}; allowed: {', '.join(PROFILES)}")
    path = paths.WORKFLOW / "profiles" / profile
    if not (path / "config.yaml").is_file():
        raise RegistryError(f"profile {profile!r} has no {path / 'config.yaml'}")
    return path


def _plan(args) -> Plan:
    only = getattr(args, "only", None) or []
    default_slug = only[0] if len(only) == 1 else None
    overrides = overrides_from_strings(args.set or [], default_slug=default_slug)
    config = {"scale": args.scale, "overrides": overrides, "device": getattr(args, "device", "auto"),
              "profile": getattr(args, "profile", "local")}
    plan = Plan.from_config(config, keep=False)
    for slug in list(only) + list(getattr(args, "force", None) or []):
        entry = plan.registry.chapter(slug)
        if not entry.ready:
            raise RegistryError(f"chapter {slug!r} is planned, not ready: there is nothing to run")
    if only:
        # an override of a chapter that is not run would rerun it (its parameters changed) or be ignored
        for slug in overrides:
            if slug not in only:
                raise RegistryError(
                    f"--set overrides chapter {slug!r}, which --only does not run ({', '.join(only)}): "
                    f"add it to --only or drop the override"
                )
    return plan


def _chapter_config(plan: Plan, slug: str):
    """The chapter's own ``Config`` class, or None (no paper module, as for test fixtures, or no Config)."""
    import dataclasses
    import importlib

    module_name = plan.registry.chapter(slug).module
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            return None
        raise
    config_cls = getattr(module, "Config", None)
    return config_cls if config_cls is not None and dataclasses.is_dataclass(config_cls) else None


def config_problem(plan: Plan, slug: str, params: dict) -> str | None:
    """What the chapter's ``Config`` (and its ``check_scale``) says against ``params``, or None."""
    import dataclasses

    config_cls = _chapter_config(plan, slug)
    if config_cls is None:
        return None
    fields = {f.name for f in dataclasses.fields(config_cls)}
    try:
        config = config_cls(**{k: v for k, v in params.items() if k in fields})
        if hasattr(config, "check_scale"):  # what the chapter's assets allow at this scale
            config.check_scale(plan.scale)
    except (ValueError, TypeError) as err:
        return _bounded(str(err))
    return None


def check_configs(plan: Plan, slugs=None) -> None:
    """Build each chapter's own ``Config`` from its effective parameters, as its notebook does.

    The registry checks types and ranges; a ``Config`` also checks what a schema cannot say (a
    list that must be increasing), and its ``check_scale(scale)``, where it has one, what the
    chapter's assets allow at the scale (a seed below the number of seed blocks trained).
    Chapters without a paper module (test fixtures) are skipped.
    """
    for slug in plan.params if slugs is None else slugs:
        problem = config_problem(plan, slug, plan.params[slug])
        if problem:
            raise RegistryError(f"chapter {slug!r}: its Config rejects the parameters at scale {plan.scale!r}: {problem}")


def check_free_space() -> None:
    """Refuse to start with less than COMPENDIUM_MIN_FREE_MB megabytes free for results and state."""
    raw = os.environ.get("COMPENDIUM_MIN_FREE_MB", str(MIN_FREE_MB))
    try:
        need = float(raw)
    except ValueError:
        need = math.nan
    if not math.isfinite(need) or need < 0:
        raise Refused(f"COMPENDIUM_MIN_FREE_MB must be a number of megabytes >= 0, got {raw!r}")
    for target in dict.fromkeys([paths.results_root(), paths.ROOT / ".snakemake"]):
        probe = Path(target)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free / 2**20
        if free < need:
            raise Refused(
                f"only {free:.1f} MB free on {probe} (for {target}); a run needs at least {need:g} MB: "
                "free some space (or set COMPENDIUM_MIN_FREE_MB)"
            )


def _run_config(args, plan: Plan, partial: bool) -> Path:
    """The run-level config as a YAML file (``--config k=v`` would mangle nested values)."""
    import tempfile

    import yaml

    only = args.only or []
    overrides = overrides_from_strings(args.set or [], default_slug=only[0] if len(only) == 1 else None)
    device = args.device if args.device != "auto" else ("cuda" if args.profile == "gpu" else "auto")
    config = {"scale": plan.scale, "overrides": overrides, "device": device, "profile": args.profile,
              "partial": partial, "only": list(only)}
    # inside the project, not /tmp: cluster jobs (--profile slurm) read it on other nodes
    (paths.ROOT / ".snakemake").mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="compendium-run-", suffix=".yaml", dir=paths.ROOT / ".snakemake")
    with open(fd, "w", encoding="utf-8") as fh:
        yaml.safe_dump(config, fh, sort_keys=True)
    return Path(name)


def _snakemake_cmd(args, plan: Plan, config_file: Path, partial: bool = False) -> list[str]:
    targets = []
    if args.only and not partial:
        targets += [plan.chapter_outputs(slug)["claims"] for slug in args.only]
        targets += [plan.claims_csv(), plan.book_index()]
    if partial:
        targets = [plan.claims_csv(), plan.book_index()]
    # compendium.snakemake_launch is `python -m snakemake` that loads the SLURM plugin only when used
    cmd = [sys.executable, "-m", "compendium.snakemake_launch", *targets,
           "--snakefile", str(paths.WORKFLOW / "Snakefile"),
           "--directory", str(paths.ROOT),
           "--profile", str(_profile_dir(args.profile)),
           "--configfile", str(config_file)]
    if args.cores:
        cmd += ["--cores", str(args.cores)]
    if args.keep_going and not partial:
        cmd.append("--keep-going")
    if args.dry_run:
        cmd.append("--dry-run")
    if args.force and not partial:
        cmd += ["--forcerun"] + [plan.chapter_outputs(s)["claims"] for s in args.force]
    return cmd + list(args.snakemake_args or [])


def cmd_validate(args) -> int:
    plan = _plan(args)
    check_configs(plan)
    ready = plan.registry.ready
    try:
        print(f"registry OK: {len(plan.registry.chapters)} chapters ({len(ready)} ready, "
              f"{len(plan.registry.chapters) - len(ready)} planned); scale {plan.scale!r}")
        for slug, values in plan.params.items():
            print(f"  {slug}: {json.dumps(values, sort_keys=True)}")
        sys.stdout.flush()
    except BrokenPipeError:  # `compendium validate | head`: the reader has seen enough
        _silence_stdout()
    return 0


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the exit flush raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _BuildLock:
    """One build per project at a time, with a lock the kernel releases when the holder dies.

    Snakemake's own lock files survive a killed run and then block the next one until
    ``--unlock``; an ``flock`` cannot go stale, so builds run with ``--nolock`` under it.
    ``shared=True`` is what ``compendium execute`` takes: any number of single-chapter runs may
    hold it together (each also holds its chapter's own lock), while a build, which holds it
    exclusively, excludes them all.
    """

    def __init__(self, root: Path, shared: bool = False):
        self.path = root / ".snakemake" / "compendium-build.lock"
        self.shared = shared

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = self.path.open("a")
        try:
            fcntl.flock(self.fh, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            what = "another build is running" if self.shared else "another build or chapter run is running"
            raise Refused(f"{what} in {self.path.parents[1]} (lock {self.path})") from None
        if not self.shared:
            # a build: no job of an earlier (killed) build may still be writing; then nobody is, and
            # what killed runs left behind goes. Snakemake inherits this lock (see _call).
            from .locks import LockBusy, clean_leftovers, inheritable, no_work_left

            try:
                no_work_left(self.path.parents[1])
            except LockBusy as err:
                self.fh.close()
                raise Refused(str(err)) from None
            root = self.path.parents[1]
            clean_leftovers(root, paths.results_root() if root == paths.ROOT else root / "results")
            _INHERITED.append(inheritable(self.fh))
        return self

    def __exit__(self, *exc):
        if not self.shared and self.fh.fileno() in _INHERITED:
            _INHERITED.remove(self.fh.fileno())
        self.fh.close()


_INHERITED: list[int] = []  # the build lock's descriptor, handed to Snakemake: it holds the lock while it runs


class _NamedLock:
    """An exclusive ``flock`` on ``.snakemake/compendium-<name>.lock``.

    ``wait=False`` refuses at once when another process holds it (two runs of one chapter);
    ``wait=True`` blocks until it is free (two chapter runs that need the same missing asset:
    the second waits for the first to build it, then finds it built).
    """

    def __init__(self, root: Path, name: str, what: str, wait: bool = False):
        self.path = root / ".snakemake" / f"compendium-{name}.lock"
        self.what, self.wait = what, wait

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = self.path.open("a")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            self.fh.close()
            raise Refused(f"{self.what} is already running in {self.path.parents[1]} (lock {self.path})") from None
        return self

    def __exit__(self, *exc):
        self.fh.close()


def _call(cmd: list[str]) -> int:
    """Run Snakemake; Ctrl-C lets it clean up, then stops the build (no partial book)."""
    proc = subprocess.Popen(cmd, cwd=paths.ROOT, pass_fds=tuple(_INHERITED))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        raise


def _check_data() -> None:
    """Pre-flight: every dataset in data/manifest.yaml matches its checksum (cached while unchanged)."""
    from .data import DataError, preflight

    try:
        preflight()
    except DataError as err:
        raise Refused(str(err)) from None


def cmd_data(args) -> int:
    """``compendium data verify``: one line per dataset of the manifest; non-zero on any mismatch."""
    from .data import DataError, manifest_path, verify

    try:
        report = verify()
    except DataError as err:
        raise Refused(str(err)) from None
    for name, ok, message in report:
        print(f"{'ok' if ok else 'FAILED':6} {name}: {message}")
    bad = sum(not ok for _, ok, _ in report)
    print(f"{len(report) - bad} of {len(report)} datasets match {manifest_path()}")
    return 1 if bad else 0


def cmd_build(args) -> int:
    plan = _plan(args)
    _profile_dir(args.profile)
    _check_data()
    check_configs(plan, [s for s in plan.params if s in overrides_from_strings(args.set or [], _default_slug(args))])
    if not args.dry_run:
        check_free_space()
    args.snakemake_args = ["--nolock", *(args.snakemake_args or [])]
    with _BuildLock(paths.ROOT):
        config_file = _run_config(args, plan, partial=False)
        try:
            cmd = _snakemake_cmd(args, plan, config_file)
            print("+ snakemake " + " ".join(cmd[3:]), flush=True)
            rc = _call(cmd)
            if rc == 0 and not args.dry_run:
                from .provenance import readers_of_changed_assets

                again = readers_of_changed_assets(plan.registry, plan.scale)
                if again:  # a repaired asset that did not come out the same: its readers now rerun
                    print(f"compendium: an asset was rebuilt with different bytes; rerunning {', '.join(again)}",
                          flush=True)
                    rc = _call(cmd)
            if rc != 0 and args.keep_going and not args.dry_run:
                print("\ncompendium: some jobs failed; building the book from the chapters that finished "
                      "(failed chapters are shown as failed on the dashboard).", file=sys.stderr, flush=True)
                partial_file = _run_config(args, plan, partial=True)
                try:
                    if _call(_snakemake_cmd(args, plan, partial_file, partial=True)):
                        print("compendium: the partial book could not be built either.", file=sys.stderr)
                    else:
                        print(f"compendium: partial book: {paths.ROOT / plan.book_index()}", file=sys.stderr)
                finally:
                    partial_file.unlink(missing_ok=True)
        finally:
            config_file.unlink(missing_ok=True)
    if rc == 0 and not args.dry_run:
        print(f"\nbook: {paths.ROOT / plan.book_index()}")
    return rc


def cmd_stability(args) -> int:
    """Rerun ready chapters at further seeds (and their registry sweeps) as Snakemake jobs.

    The variants are ordinary wildcard jobs (``chapter_variant``: parallel, cached, any profile);
    whatever finished is then aggregated into ``results/<scale>/stability.json`` and the book is
    rebuilt with its Stability page, per-claim agreement and sweep tables. ``--no-book`` stops after
    ``stability.json``: rebuilding the book brings every chapter of the scale up to date, which at
    full scale can mean hours of other chapters' runs and assets.
    """
    import argparse as _argparse

    from . import stability

    plan = _plan(args)
    _profile_dir(args.profile)
    _check_data()
    variants = stability.plan_variants(plan, args.seeds, args.only, sweeps=not args.no_sweeps)
    kept = []
    for v in variants:  # a variant the chapter's Config refuses would only fail in its notebook
        problem = config_problem(plan, v.slug, stability.variant_params(plan, v.slug, v.name))
        if problem:
            print(f"compendium: {v.slug}/{v.name} left out: its Config rejects it at scale {plan.scale!r}: {problem}",
                  file=sys.stderr)
        else:
            kept.append(v)
    variants = kept
    slugs = sorted({v.slug for v in variants})
    if not variants:
        print("compendium: nothing to sweep (no seeds asked for and no sweeps declared)", file=sys.stderr)
        return 0
    targets = [plan.chapter_outputs(s)["claims"] for s in slugs]
    targets += [stability.variant_outputs(plan.scale, v.slug, v.name)["claims"] for v in variants]
    ns = _argparse.Namespace(**{**vars(args), "only": None, "force": None, "keep_going": True, "device": "auto"})
    ns.snakemake_args = ["--nolock", *(args.snakemake_args or [])]
    if not args.dry_run:
        check_free_space()
    with _BuildLock(paths.ROOT):
        config_file = _run_config(ns, plan, partial=False)
        try:
            cmd = _snakemake_cmd(ns, plan, config_file)
            at = cmd.index("--snakefile")
            cmd[at:at] = targets
            print(f"compendium: {len(variants)} variant run(s) of {len(slugs)} chapter(s)", flush=True)
            rc = _call(cmd)
            if args.dry_run:
                return rc
            out = stability.write(plan, variants)
            print(f"stability: {out}")
            data = stability.load(plan.scale)
            for slug, cid, agree, n in stability.flips(data):
                print(f"  flips: {slug}/{cid}: {agree}/{n} seeds agree")
            if args.no_book:
                print("book not rebuilt (--no-book): `compendium build` renders stability.json into it")
                return rc
            partial_file = _run_config(ns, plan, partial=True)
            try:
                book = _snakemake_cmd(ns, plan, partial_file, partial=True)
                book += ["--forcerun", plan.book_index()]
                if _call(book):
                    print("compendium: the book could not be rebuilt", file=sys.stderr)
                    rc = rc or 1
                else:
                    print(f"book: {paths.ROOT / plan.book_index()}")
            finally:
                partial_file.unlink(missing_ok=True)
        finally:
            config_file.unlink(missing_ok=True)
    return rc


def cmd_execute(args) -> int:
    """Execute one chapter notebook directly (no Snakemake, no book): for writing a chapter.

    Runs of different chapters may go on at the same time; a second run of the same chapter, or
    a run while ``compendium build`` holds the project, is refused. ``--seeds K`` then reruns the
    chapter at its seed + 1 .. seed + K into ``results/<scale>/<slug>/variants/seed-<n>/`` (where
    ``compendium stability`` keeps them) and prints, per row, how many seeds agree with the
    chapter's own verdict.
    """
    from .execute import ChapterFailed, execute_chapter
    from . import stability

    args.only = [args.slug]
    plan = _plan(args)
    entry = plan.registry.chapter(args.slug)
    check_configs(plan, [args.slug])
    seeds = getattr(args, "seeds", 0) or 0
    variants = stability.seed_variants(args.slug, plan.params[args.slug]["seed"], seeds)
    for v in variants:
        problem = config_problem(plan, args.slug, stability.variant_params(plan, args.slug, v.name))
        if problem:
            raise RegistryError(f"chapter {args.slug!r}: --seeds {seeds} asks for {v.name}, which its Config "
                                f"rejects at scale {plan.scale!r}: {problem}")
    check_free_space()
    outputs = plan.chapter_outputs(args.slug)
    runs = [(plan.params[args.slug], outputs)]
    runs += [(stability.variant_params(plan, args.slug, v.name),
              stability.variant_outputs(plan.scale, args.slug, v.name)) for v in variants]
    # the build lock, shared: never a build and a chapter run writing the same outputs at once
    with _BuildLock(paths.ROOT, shared=True), \
            _NamedLock(paths.ROOT, f"execute-{plan.scale}-{args.slug}", f"a run of {args.slug} ({plan.scale})"):
        for name in entry.assets:
            _ensure_asset(plan, name)
        for i, (params, out) in enumerate(runs):
            if i:
                print(f"seed {params['seed']} ({i} of {len(variants)}) ...", flush=True)
            try:
                data = execute_chapter(
                    slug=args.slug, scale=plan.scale, notebook=entry.notebook, parameters=params,
                    output_notebook=paths.ROOT / out["notebook"], claims=paths.ROOT / out["claims"],
                    params_file=paths.ROOT / out["params"],
                    figures=paths.ROOT / Path(out["claims"]).parent / "figures", timeout_s=plan.timeout_s(),
                    threads=entry.threads, assets=list(entry.assets),
                )
            except ChapterFailed as err:
                print(f"compendium: {err}", file=sys.stderr)
                return 1
            if i == 0:
                for claim in data["claims"]:
                    print(f"  {claim['verdict']:>13}  {claim['id']}: measured {claim['measured']} "
                          f"(criterion {claim['criterion']})")
                print(f"executed notebook: {paths.ROOT / outputs['notebook']}", flush=True)
    if variants:
        record = stability.aggregate(plan, variants)["chapters"][args.slug]
        seen = ", ".join(str(s) for s in record["seeds"])
        print(f"seed sweep of {args.slug} ({plan.scale}), seeds {plan.params[args.slug]['seed']} (recorded) and {seen}:")
        flipped = 0
        for cid, row in record["claims"].items():
            flips = {s: v for s, v in row["verdicts"].items() if v != row["recorded"]}
            flipped += bool(flips)
            other = "" if not flips else "  flips: " + ", ".join(f"seed {s} {v}" for s, v in flips.items())
            print(f"  {row['agree']}/{row['total']} agree  {row['role']:>14}  {row['recorded']:>13}  {cid}{other}")
        print(f"{flipped} of {len(record['claims'])} rows flip at some seed")
    return 0


def _ensure_asset(plan: Plan, name: str, force: bool = False) -> Path:
    """Build asset ``name`` if it is missing or invalid (always with ``force``), after the assets it
    requires (those only if missing or invalid; the registry has refused cycles). An asset built
    before its files were recorded is adopted instead when it is current."""
    from .assets import AssetMissing, asset_dir, build_asset
    from .provenance import Fingerprinter, asset_state

    for req in plan.registry.assets[name].get("requires", []):
        _ensure_asset(plan, req)
    # one builder of an asset at a time: a second chapter run that needs it waits, then finds it
    with _NamedLock(paths.ROOT, f"asset-{plan.scale}-{name}", f"a build of asset {name!r}", wait=True):
        if not force:
            asset_state(plan.registry, name, plan.scale, Fingerprinter(), adopt=True)
            try:
                return asset_dir(name, plan.scale)
            except AssetMissing as err:
                if (paths.results_root() / plan.scale / "assets" / name).exists():
                    print(f"compendium: {err}", flush=True)
        spec = plan.registry.assets[name]
        print(f"building asset {name!r} ({plan.scale}) ...", flush=True)
        return build_asset(name, spec["builder"], paths.results_root() / plan.scale / "assets" / name,
                           plan.scale, spec.get("seed", 0), requires=spec.get("requires", []))


def _default_slug(args) -> str | None:
    only = getattr(args, "only", None) or []
    return only[0] if len(only) == 1 else None


def cmd_asset(args) -> int:
    plan = _plan(args)
    if args.name not in plan.registry.assets:
        raise RegistryError(f"unknown asset {args.name!r}; allowed: {', '.join(plan.registry.assets) or 'none'}")
    with _BuildLock(paths.ROOT, shared=True):  # never while a build runs (it may be building the same asset)
        print(_ensure_asset(plan, args.name, force=True))
    return 0


def _verified_claims(plan: Plan) -> tuple[dict, list[str]]:
    """``{slug: claims}`` of every finished chapter whose outputs are what was written, and one line
    for each chapter whose ``claims.json`` is not (left out: it is not trusted)."""
    from .provenance import Fingerprinter, read_record, verify_outputs

    fp = Fingerprinter()
    out, problems = {}, []
    for entry in plan.registry.ready:
        claims = paths.ROOT / plan.chapter_outputs(entry.slug)["claims"]
        if not claims.is_file():
            continue
        problem = verify_outputs(claims.parent, read_record(claims.parent), fp.hashes)
        if problem is None:
            try:
                out[entry.slug] = json.loads(claims.read_text(encoding="utf-8"))["claims"]
                continue
            except (OSError, ValueError, KeyError, TypeError) as err:
                problem = f"{claims.relative_to(paths.ROOT)} cannot be read ({type(err).__name__})"
        problems.append(f"{entry.slug}: not used, {problem}: `compendium build` reruns it")
    fp.save()
    return out, problems


def current_verdicts(plan: Plan) -> dict:
    """``{slug: {claim: verdict}}`` from the finished chapters of ``plan.scale`` (volatile ones left out)."""
    claims, _ = _verified_claims(plan)
    return {slug: {c["id"]: c["verdict"] for c in rows if not c.get("volatile")} for slug, rows in claims.items()}


def cmd_status(args) -> int:
    """List each asset and ready chapter as current, stale (naming what changed), invalid (a file is
    not what was written: the next build reruns it) or missing; re-hashes every file, runs nothing."""
    from .provenance import status_report

    from .evidence import status_all

    plan = _plan(args)
    for st in status_report(plan, rehash=True):
        print(st.line())
    records = status_all(plan.registry, rehash=True)
    for st in records:
        print(st.line())
    return 0


def cmd_record(args) -> int:
    """Copy finished, current runs into the evidence store (``evidence/<scale>/<slug>/``).

    Every chapter asked for (all ready chapters without ``--only``) is checked first: a missing,
    failed, stale or partial run, or one at another scale, is refused with one line and nothing is
    written (exit 1). ``--current`` records the chapters that can be recorded and lists the others
    (``make record``).
    """
    from .evidence import record_chapters

    plan = _plan(args)
    slugs = args.only or [c.slug for c in plan.registry.ready]
    done, refused = record_chapters(plan.registry, plan.scale, plan.params, slugs, skip_refused=args.current)
    for err in refused:
        print(f"compendium: {'skipped' if args.current else 'refused'}: {err}", file=sys.stderr)
    if refused and not args.current:
        return 1
    if args.current:
        print(f"{len(done)} recorded, {len(refused)} skipped (no current run at scale {plan.scale})")
    return 0


def cmd_verdicts(args) -> int:
    """Print the verdicts of the last run in the format of expected_verdicts.yaml, or (``--compare``)
    compare them with the recorded ones: exit 1 on a decisive difference. A chapter whose outputs do
    not verify is left out with one line on stderr (exit 1)."""
    import yaml

    plan = _plan(args)
    if args.write:
        return _write_verdicts(plan, args)
    actual, invalid = _verified_claims(plan)
    for line in invalid:
        print(f"compendium: {line}", file=sys.stderr)
    if not args.compare:
        verdicts = {slug: {c["id"]: c["verdict"] for c in rows if not c.get("volatile")} for slug, rows in actual.items()}
        print(yaml.safe_dump({plan.scale: verdicts}, sort_keys=False), end="")
        return 1 if invalid else 0
    from .expected import compare_verdicts, fragile_differences, load_expected

    expected = load_expected(plan.scale)
    if not expected:
        print(f"no verdicts are recorded for scale {plan.scale!r} in {paths.EXPECTED_VERDICTS.name}", file=sys.stderr)
        return 2
    missing = sorted(set(expected) - set(actual))
    problems = compare_verdicts({s: e for s, e in expected.items() if s in actual}, actual)
    compared = sum(1 for s in actual if s in expected for e in expected[s].values() if not e.fragile)
    for line in fragile_differences(expected, actual):
        print(f"fragile  {line}")
    for line in problems:
        print(f"DIFFERS  {line}")
    if missing:
        print(f"not run  {len(missing)} chapter(s): {', '.join(missing)}")
    print(f"{len(actual)} chapter(s) compared with {paths.EXPECTED_VERDICTS.name} ({plan.scale}): "
          f"{compared} decisive verdict(s), {len(problems)} difference(s)")
    return 1 if problems or invalid else 0


def _write_verdicts(plan: Plan, args) -> int:
    """``compendium verdicts --write``: set the chapters' entries of the scale's block in
    expected_verdicts.yaml. At full scale they are the records' verdicts (``evidence/full/``, the
    results of record), otherwise the last verified run's. A fragile entry keeps its reason; with
    ``--sweep K`` the rows that flipped in the chapter's last seed sweep of K further seeds
    (``compendium execute SLUG --seeds K``) become fragile, refused when the sweep's own run is not
    the one being written (a sweep of other code)."""
    import datetime

    from . import evidence, stability
    from .expected import sweep_flips, updated_block, write_block

    if plan.scale == "full":
        slugs = args.only or sorted(p.name for p in (paths.ROOT / "evidence" / "full").iterdir() if p.is_dir())
        source = {}
        for slug in slugs:
            record, problem = evidence.load_record(slug, "full")
            if record is None:
                raise RegistryError(f"chapter {slug!r}: no valid full-scale record ({problem or 'none'}): "
                                    f"`compendium record --scale full --only {slug}` first")
            source[slug] = record["claims"]["claims"]
    else:
        actual, invalid = _verified_claims(plan)
        slugs = args.only or sorted(actual)
        missing = [s for s in slugs if s not in actual]
        if missing or invalid:
            raise RegistryError("no verified run of " + ", ".join(missing or [i.split(":")[0] for i in invalid])
                                + f" at scale {plan.scale!r}: `compendium build --scale {plan.scale}` first")
        source = {s: actual[s] for s in slugs}
    import yaml

    data = yaml.safe_load(paths.EXPECTED_VERDICTS.read_text(encoding="utf-8")) or {}
    old = data.get(plan.scale) or {}
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    chapters = {}
    for slug in slugs:
        flips = {}
        if args.sweep:
            variants = stability.seed_variants(slug, plan.params[slug]["seed"], args.sweep)
            sweep = stability.aggregate(plan, variants)["chapters"][slug]
            own = {c["id"]: c["verdict"] for c in source[slug] if not c.get("volatile")}
            if sweep["failed"] or len(sweep["seeds"]) != args.sweep:
                raise RegistryError(f"chapter {slug!r}: the seed sweep is incomplete ({', '.join(sweep['failed'])}): "
                                    f"`compendium execute {slug} --scale {plan.scale} --seeds {args.sweep}` first")
            if {cid: row["recorded"] for cid, row in sweep["claims"].items()} != own:
                raise RegistryError(f"chapter {slug!r}: the seed sweep's own run is not the one being written "
                                    f"(its verdicts differ): rerun the sweep")
            flips = sweep_flips(sweep, plan.scale, today)
        chapters[slug], changes = updated_block(old.get(slug) or {}, source[slug], flips)
        for line in changes:
            print(f"{slug}/{line}")
        print(f"{slug}: {len(chapters[slug])} entries, {len(changes)} change(s)")
    write_block(plan.scale, chapters)
    print(f"wrote the {plan.scale} block of {paths.EXPECTED_VERDICTS.relative_to(paths.ROOT)}")
    return 0


def cmd_new(args) -> int:
    from .scaffold import scaffold

    for path in scaffold(args.slug):
        print(f"wrote {path.relative_to(paths.ROOT)}")
    print("next: fill the module, the notebook and the tests, then set status: ready in chapters.yaml")
    return 0


def cmd_kernel(args) -> int:
    print(f"export JUPYTER_PATH={paths.ROOT}  # makes kernels/{paths.KERNEL_NAME} visible to Jupyter")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of cores >= 1, got {excerpt(text)}")
    return value


#: The most further seeds ``--seeds`` may ask for (each one is a full run of every chapter asked for).
MAX_SEEDS = 1000


def _seed_count(text: str) -> int:
    try:
        value = int(text, 10) if len(text) <= 10 else -1
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"must be a whole number of further seeds in [0, {MAX_SEEDS}], got {excerpt(text)}")
    return value


def cmd_audit(args) -> int:
    """Check the ledger-v3 rules over results/<scale>/*/claims.json (exit 1 on a finding)."""
    from . import audit

    pending = Path(args.pending) if args.pending else None
    return audit.run(args.scale, allow_pending=args.allow_pending, pending_file=pending)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compendium", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--scale", default="smoke", help="experiment scale (smoke | full)")
        p.add_argument("--set", action="append", metavar="SLUG.KEY=VALUE",
                       help="override a chapter parameter (repeatable); KEY=VALUE when --only names one chapter")

    p = sub.add_parser("validate", help="validate the registry, scale and overrides; print parameters")
    common(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("build", help="run the chapters and build the book with Snakemake")
    common(p)
    p.add_argument("--profile", default="local", help=f"where it runs: {', '.join(PROFILES)}")
    p.add_argument("--cores", type=_positive_int, default=None, help="cores for Snakemake (default: the profile's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device for every chapter")
    p.add_argument("--only", nargs="+", metavar="SLUG", help="run these chapters and rebuild the book from them and the others' results as they are")
    p.add_argument("--force", nargs="+", metavar="SLUG", help="rerun these chapters even if up to date")
    p.add_argument("--no-keep-going", dest="keep_going", action="store_false",
                   help="stop at the first failing chapter")
    p.add_argument("--dry-run", action="store_true", help="show what would run")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="after --: passed to snakemake")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("stability", help="rerun chapters at K further seeds and their declared sweeps; "
                                         "write results/<scale>/stability.json; rebuild the book")
    common(p)
    p.add_argument("--seeds", type=_seed_count, default=3, help="how many further seeds per chapter (default 3)")
    p.add_argument("--only", nargs="+", metavar="SLUG", help="sweep only these chapters")
    p.add_argument("--no-sweeps", action="store_true", help="seeds only: skip the registry's parameter sweeps")
    p.add_argument("--no-book", action="store_true",
                   help="stop after stability.json; do not rebuild the book (which brings every chapter of the "
                        "scale up to date first)")
    p.add_argument("--profile", default="local", help=f"where it runs: {', '.join(PROFILES)}")
    p.add_argument("--cores", type=_positive_int, default=None, help="cores for Snakemake (default: the profile's)")
    p.add_argument("--dry-run", action="store_true", help="show what would run")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="after --: passed to snakemake")
    p.set_defaults(func=cmd_stability)

    p = sub.add_parser("execute", help="execute one chapter notebook now, without Snakemake or the book")
    common(p)
    p.add_argument("slug")
    p.add_argument("--seeds", type=_seed_count, default=0, metavar="K",
                   help="then rerun it at K further seeds (variants, as `stability` keeps them) and print the flips")
    p.set_defaults(func=cmd_execute)

    p = sub.add_parser("asset", help="build one shared asset now (e.g. train a tiny model)")
    common(p)
    p.add_argument("name")
    p.set_defaults(func=cmd_asset)

    p = sub.add_parser("status", help="each chapter: current, stale (and what changed) or missing; runs nothing")
    common(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("record", help="copy finished, current runs into the evidence store evidence/<scale>/")
    common(p)
    p.set_defaults(scale="full")
    p.add_argument("--only", nargs="+", metavar="SLUG", help="record these chapters (default: every ready chapter)")
    p.add_argument("--current", action="store_true",
                   help="record every chapter whose run is current and list the others, instead of refusing")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("verdicts", help="print the last run's verdicts as expected_verdicts.yaml entries")
    common(p)
    p.add_argument("--compare", action="store_true",
                   help="compare them with workflow/config/expected_verdicts.yaml instead (exit 1 on a decisive "
                        "difference; fragile ones are listed); e.g. after a build on another machine")
    p.add_argument("--write", action="store_true",
                   help="write them into the scale's block of expected_verdicts.yaml instead (at full scale, the "
                        "records' verdicts); fragile entries keep their reason")
    p.add_argument("--only", nargs="+", metavar="SLUG", help="with --write: only these chapters")
    p.add_argument("--sweep", type=_positive_int, metavar="K", default=0,
                   help="with --write: mark as fragile the rows that flipped in the chapter's seed sweep of K "
                        "further seeds (compendium execute SLUG --seeds K)")
    p.set_defaults(func=cmd_verdicts)

    p = sub.add_parser("audit", help="check the ledger rules (gates, primary, ids) over every claims.json of a scale")
    p.add_argument("--scale", default="smoke", help="experiment scale (smoke | full)")
    p.add_argument("--allow-pending", action="store_true",
                   help="findings in chapters listed in workflow/config/audit_pending.yaml do not fail the audit")
    p.add_argument("--pending", default=None, help="another pending list file (default: workflow/config/audit_pending.yaml)")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("new", help="scaffold a chapter (notebook, module, tests) from its registry entry")
    p.add_argument("slug")
    p.set_defaults(func=cmd_new)

    p = sub.add_parser("data", help="check every dataset against data/manifest.yaml")
    p.add_argument("action", choices=["verify"])
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("kernel", help="print how to make the project kernel visible to Jupyter")
    p.set_defaults(func=cmd_kernel)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "snakemake_args", None) and args.snakemake_args[0] == "--":
        args.snakemake_args = args.snakemake_args[1:]
    try:
        if hasattr(args, "set"):  # the Makefile's SET, passed as a literal string
            args.set = split_overrides(os.environ.get("COMPENDIUM_SET", "")) + (args.set or [])
        rc = args.func(args)
        sys.stdout.flush()  # a closed pipe (`compendium verdicts | head`) raises here, not at exit
        return rc
    except (RegistryError, FileExistsError, Refused) as err:
        print(f"compendium: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except OSError as err:  # a full disk, a read-only results/: one line naming the path
        if err.filename is None and err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        where = f": {err.filename}" if err.filename else ""
        print(f"compendium: error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("compendium: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
