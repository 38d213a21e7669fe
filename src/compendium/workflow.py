"""What the Snakefile needs, as plain tested Python (no logic in rule lambdas).

:class:`Plan` turns the workflow config (scale, overrides, device, partial) and the registry
into targets, per-chapter inputs, parameters and resources. Building a plan validates
everything, so a bad registry entry, parameter or override stops the run before any notebook
starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .provenance import DATA_MANIFEST, builder_sources, notebook_sources, optional_inputs
from .registry import DEVICES, Registry, RegistryError, load_registry

CONFIG_KEYS = {"scale", "registry", "overrides", "device", "partial", "profile"}
PROFILES = ("local", "gpu", "slurm")


def results_dir(scale: str) -> str:
    """Relative to the workflow's working directory (the repository root)."""
    return f"results/{scale}"


def rule_extra_inputs() -> list[str]:
    """Inputs of every chapter and asset besides its code: the data manifest, where it exists.

    The lock file is recorded in provenance (``compendium status`` reports a change) but is not a
    Snakemake input: reinstalling rewrites it, and Snakemake would then rerun everything on mtime.
    """
    return [p for p in optional_inputs() if p == DATA_MANIFEST]


@dataclass(frozen=True)
class Plan:
    registry: Registry
    scale: str
    params: dict  # slug -> resolved notebook parameters
    device: str
    partial: bool
    profile: str

    @classmethod
    def from_config(cls, config: dict) -> "Plan":
        """Validate the workflow config and the registry; raise RegistryError on any fault."""
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
        return cls(registry, scale, params, device, partial, profile)

    # ---------------------------------------------------------------- chapter paths
    def out(self, slug: str, name: str) -> str:
        return f"{results_dir(self.scale)}/{slug}/{name}"

    def chapter_outputs(self, slug: str) -> dict[str, str]:
        return {
            "notebook": self.out(slug, f"{slug}.ipynb"),
            "claims": self.out(slug, "claims.json"),
            "params": self.out(slug, "params.yaml"),
        }

    def chapter_inputs(self, slug: str) -> dict[str, object]:
        entry = self.registry.chapter(slug)
        return {
            "notebook": str(entry.notebook.relative_to(paths.ROOT)),
            "sources": notebook_sources(entry.notebook) + rule_extra_inputs(),
            "kernel": "kernels/compendium/kernel.json",
        }

    def asset_sources(self, name: str) -> list[str]:
        """The library files the builder imports: a change to one of them rebuilds the asset."""
        return builder_sources(self.registry.assets[name]["builder"]) + rule_extra_inputs()

    def asset_upstream(self, name: str) -> list[str]:
        """The folders of the assets ``name`` requires (built first; a rebuilt one rebuilds it)."""
        return [f"{results_dir(self.scale)}/assets/{req}" for req in self.registry.assets[name].get("requires", [])]

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
        """Chapters the book waits for; with ``partial`` only those that already finished."""
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
