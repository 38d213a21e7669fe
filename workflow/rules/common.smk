# Helpers for the rules: everything is computed by compendium.workflow.Plan, which validates the
# registry, the parameters and the overrides before any job is scheduled, then brings each job's
# stamp (its content fingerprint) up to date: content, not file times, decides what reruns.
import os
import sys

from compendium.registry import RegistryError
from compendium.workflow import Plan, keep_book, results_base, stamp_path

os.environ["HF_HUB_OFFLINE"] = "1"  # no run touches the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

try:
    PLAN = Plan.from_config(config)
except RegistryError as err:
    sys.stderr.write(f"\ncompendium: invalid configuration, nothing was run:\n  {err}\n\n")
    raise SystemExit(2)
if workflow.is_main_process:  # not again inside a cluster job, while other jobs write their outputs
    PLAN.refresh_stamps()
    keep_book(PLAN.book_index())  # a failed book job puts it back (onerror, rules/book.smk)

SCALE = PLAN.scale
RESULTS = results_base()  # results/, or where COMPENDIUM_RESULTS points: one location for every reader and writer
READY = [c.slug for c in PLAN.registry.ready]


def _inputs(pairs):
    return [ancient(path) if is_ancient else path for path, is_ancient in pairs]


def chapter_stamp(wildcards):
    return stamp_path(wildcards.scale, f"chapter-{wildcards.slug}")


def chapter_notebook(wildcards):
    return ancient(PLAN.chapter_notebook(wildcards.slug))  # its content is in the stamp


def chapter_params(wildcards):
    return PLAN.params_json(wildcards.slug)


def chapter_threads(wildcards):
    return PLAN.registry.chapter(wildcards.slug).threads


def chapter_mem_mb(wildcards):
    return PLAN.registry.chapter(wildcards.slug).mem_mb


def chapter_gpus(wildcards):
    return int(PLAN.registry.chapter(wildcards.slug).gpu)


def chapter_runtime_min(wildcards):
    return max(1, PLAN.timeout_s() // 60 + 1)


def chapter_assets(wildcards):
    return _inputs(PLAN.chapter_assets(wildcards.slug))


def chapter_priority(wildcards):
    return PLAN.priority(f"chapter-{wildcards.slug}")


def _asset(wildcards):
    return PLAN.registry.assets[wildcards.asset]


def asset_stamp(wildcards):
    return stamp_path(wildcards.scale, f"asset-{wildcards.asset}")


def asset_upstream(wildcards):
    return _inputs(PLAN.asset_upstream(wildcards.asset))


def asset_builder(wildcards):
    return _asset(wildcards)["builder"]


def asset_seed(wildcards):
    return _asset(wildcards).get("seed", 0)


def asset_threads(wildcards):
    return _asset(wildcards).get("threads", 1)


def asset_mem_mb(wildcards):
    return _asset(wildcards).get("mem_mb", 2000)


def asset_gpus(wildcards):
    return int(_asset(wildcards).get("gpu", False))


def asset_priority(wildcards):
    return PLAN.priority(f"asset-{wildcards.asset}")


def book_chapter_files(wildcards):
    slugs = PLAN.book_chapters()
    return {
        "notebooks": [PLAN.chapter_outputs(s)["notebook"] for s in slugs],
        "claims": [PLAN.chapter_outputs(s)["claims"] for s in slugs],
        "benchmarks": [PLAN.benchmark(s) for s in slugs],
    }


def book_index():
    return PLAN.book_index()


def claims_csv():
    return PLAN.claims_csv()
