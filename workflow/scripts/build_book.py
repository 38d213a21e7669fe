"""Snakemake script for `book`: stage the book sources from the registry and results, then build."""

import json
import sys

from compendium.book import BookBuildFailed, build_book
from compendium import locks
from compendium.workflow import Plan

sm = snakemake  # noqa: F821 - injected by Snakemake
locks.hold_work()  # held while this job runs, even when the build that started it was killed
with open(sm.log[0], "w", encoding="utf-8") as log:
    try:
        build_book(Plan.from_config(sm.config).registry, sm.wildcards.scale, profile=sm.params.profile, log=log,
                   parameters=json.loads(sm.params.values))
    except BookBuildFailed as err:
        print(f"\nERROR {err}\n  see {sm.log[0]}\n", file=sys.stderr)
        sys.exit(1)
