"""Snakemake script for `claims_table`: every chapter's claims.json -> results/<scale>/claims.csv."""

from compendium.book import claims_frame
from compendium.registry import load_registry

sm = snakemake  # noqa: F821 - injected by Snakemake
registry = load_registry(sm.input.registry)
claims_frame(registry, sm.wildcards.scale).to_csv(sm.output[0], index=False)
