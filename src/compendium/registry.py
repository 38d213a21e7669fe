"""The chapter registry (``workflow/config/chapters.yaml``): load, validate, resolve parameters.

Everything that iterates over chapters (Snakemake targets, the book's table of contents, the
dashboard, the contract tests, the scaffold command) reads the registry through this module, so a
bad entry or a bad parameter fails here, before any notebook runs, with a message that names the
chapter, the key and what is allowed.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import paths

COMMON_PARAMETERS = ("scale", "seed", "device")
DEVICES = ("auto", "cpu", "cuda")
_SPEC_VALUE_KEYS = ("default", "smoke", "full", "help")


class RegistryError(ValueError):
    """A registry entry, a parameter value or an override is invalid."""


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_allowed(spec: dict) -> str:
    """Human text for what a parameter spec allows, e.g. 'an integer in [8, 4096]'."""
    kind = spec["type"]
    article = "an" if kind[0] in "aeiou" else "a"
    if "enum" in spec:
        return "one of " + ", ".join(repr(v) for v in spec["enum"])
    lo = spec.get("minimum", spec.get("exclusiveMinimum"))
    hi = spec.get("maximum", spec.get("exclusiveMaximum"))
    left = "(" if "exclusiveMinimum" in spec else "["
    right = ")" if "exclusiveMaximum" in spec else "]"
    text = f"{article} {kind}"
    if kind == "array":
        item = spec.get("items", {})
        inner = describe_allowed(item) if "type" in item else "values"
        text = f"a list of {inner.removeprefix('an ').removeprefix('a ')}"
        n_lo, n_hi = spec.get("minItems"), spec.get("maxItems")
        if n_lo is not None or n_hi is not None:
            text += f" with {n_lo if n_lo is not None else 0}..{n_hi if n_hi is not None else '∞'} items"
        return text
    if lo is not None or hi is not None:
        text += f" in {left}{lo if lo is not None else '-∞'}, {hi if hi is not None else '∞'}{right}"
    return text


def _value_schema(spec: dict) -> dict:
    schema = {k: v for k, v in spec.items() if k not in _SPEC_VALUE_KEYS}
    if schema.get("type") == "number":
        # YAML and the CLI give 3 for 3.0: accept integers where numbers are asked for
        schema["type"] = ["number", "integer"]
    return schema


def _check_value(chapter: str, name: str, value: Any, spec: dict, where: str) -> None:
    if isinstance(value, bool) and spec["type"] in ("integer", "number"):
        raise RegistryError(
            f"chapter {chapter!r}: parameter {name!r} = {value!r} ({where}) has the wrong type: "
            f"allowed is {describe_allowed(spec)}"
        )
    try:
        jsonschema.validate(value, _value_schema(spec))
    except jsonschema.ValidationError as err:
        problem = "has the wrong type" if err.validator == "type" else "is out of range"
        if err.validator == "enum":
            problem = "is not an allowed value"
        raise RegistryError(
            f"chapter {chapter!r}: parameter {name!r} = {value!r} ({where}) {problem}: "
            f"allowed is {describe_allowed(spec)}"
        ) from None


@dataclass(frozen=True)
class Part:
    id: str
    title: str
    summary: str


@dataclass(frozen=True)
class ChapterEntry:
    """One registered chapter."""

    slug: str
    title: str
    part: str
    seed_file: str
    abstract: int
    status: str
    summary: str = ""
    seed: int = 0
    threads: int = 1
    mem_mb: int = 2000
    gpu: bool = False
    assets: tuple[str, ...] = ()
    parameters: dict = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @property
    def notebook(self) -> Path:
        return paths.notebook_path(self.part, self.slug)

    @property
    def module(self) -> str:
        return f"compendium.papers.{self.slug}"

    def parameter_names(self) -> list[str]:
        return list(COMMON_PARAMETERS) + list(self.parameters)

    def default_value(self, name: str, scale: str) -> Any:
        spec = self.parameters[name]
        return spec[scale] if scale in spec else spec["default"]

    def resolve(self, scale: str, overrides: dict | None = None) -> dict:
        """The notebook parameters for ``scale`` with ``overrides`` applied, validated.

        Raises
        ------
        RegistryError
            Unknown key, wrong type or out-of-range value, naming the chapter and the key.
        """
        values: dict[str, Any] = {"scale": scale, "seed": self.seed, "device": "auto"}
        for name in self.parameters:
            values[name] = self.default_value(name, scale)
        for name, value in (overrides or {}).items():
            if name == "scale":
                raise RegistryError(
                    f"chapter {self.slug!r}: 'scale' is chosen for the whole run (SCALE=...), not per chapter"
                )
            if name not in values:
                raise RegistryError(
                    f"chapter {self.slug!r}: unknown parameter {name!r}{_suggest(name, values)}; "
                    f"allowed: {', '.join(self.parameter_names()[1:])}"
                )
            values[name] = value
        seed = values["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise RegistryError(
                f"chapter {self.slug!r}: parameter 'seed' = {seed!r} is invalid: allowed is an integer in [0, 4294967295]"
            )
        if values["device"] not in DEVICES:
            raise RegistryError(
                f"chapter {self.slug!r}: parameter 'device' = {values['device']!r} is not an allowed value: "
                f"allowed is one of {', '.join(map(repr, DEVICES))}"
            )
        for name, spec in self.parameters.items():
            where = "override" if name in (overrides or {}) else f"scale {scale!r}"
            _check_value(self.slug, name, values[name], spec, where)
        return values


@dataclass(frozen=True)
class Registry:
    """The validated registry."""

    path: Path
    scales: dict
    parts: tuple[Part, ...]
    chapters: tuple[ChapterEntry, ...]
    assets: dict = field(default_factory=dict)

    @cached_property
    def by_slug(self) -> dict[str, ChapterEntry]:
        return {c.slug: c for c in self.chapters}

    def chapter(self, slug: str) -> ChapterEntry:
        try:
            return self.by_slug[slug]
        except KeyError:
            raise RegistryError(f"unknown chapter {slug!r}{_suggest(slug, self.by_slug)}") from None

    def part(self, part_id: str) -> Part:
        for p in self.parts:
            if p.id == part_id:
                return p
        raise RegistryError(f"unknown part {part_id!r}")

    @property
    def ready(self) -> list[ChapterEntry]:
        return [c for c in self.chapters if c.ready]

    def check_scale(self, scale: str) -> None:
        if scale not in self.scales:
            raise RegistryError(f"unknown scale {scale!r}{_suggest(scale, self.scales)}; allowed: {', '.join(self.scales)}")

    def resolve_all(self, scale: str, overrides: dict | None = None) -> dict[str, dict]:
        """Parameters of every ready chapter at ``scale``; validates ``overrides`` first.

        ``overrides`` maps a slug to ``{parameter: value}``. Overrides of a planned chapter are
        rejected: nothing would run them.
        """
        self.check_scale(scale)
        overrides = overrides or {}
        if not isinstance(overrides, dict):
            raise RegistryError(f"overrides must map a chapter slug to {{parameter: value}}, got {overrides!r}")
        for slug, values in overrides.items():
            entry = self.chapter(slug)
            if not entry.ready:
                raise RegistryError(f"chapter {slug!r} is planned, not ready: it has no parameters to override")
            if not isinstance(values, dict):
                raise RegistryError(f"chapter {slug!r}: overrides must be {{parameter: value}}, got {values!r}")
        return {c.slug: c.resolve(scale, overrides.get(c.slug)) for c in self.ready}


def _seed_file_counts() -> dict[str, int]:
    counts = {}
    if paths.SEEDS.is_dir():
        for f in sorted(paths.SEEDS.glob("*.txt")):
            lines = [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
            counts[f.name] = max(len(lines) - 1, 0)  # the first line is the file's title
    return counts


def load_registry(path: str | Path | None = None, *, check_files: bool = True) -> Registry:
    """Load and validate the registry.

    Parameters
    ----------
    path : path, optional
        Defaults to ``workflow/config/chapters.yaml``.
    check_files : bool
        Also check that each ready chapter's notebook exists.

    Raises
    ------
    RegistryError
        With a message naming the chapter and the key at fault.
    """
    path = Path(path or paths.REGISTRY)
    if not path.is_file():
        raise RegistryError(f"registry not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise RegistryError(f"{path.name} is not valid YAML: {err}") from None
    schema = json.loads(paths.REGISTRY_SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = list(err.absolute_path)
        label = "top level"
        if len(where) >= 2 and where[0] == "chapters" and isinstance(raw, dict):
            try:
                label = f"chapter {raw['chapters'][where[1]].get('slug', '#' + str(where[1]))!r}"
            except (KeyError, IndexError, TypeError, AttributeError):
                label = f"chapter #{where[1]}"
            where = where[2:]
        key = ".".join(map(str, where)) or "(entry)"
        raise RegistryError(f"{path.name}: {label}: key {key!r}: {err.message}")

    parts = tuple(Part(**p) for p in raw["parts"])
    part_ids = [p.id for p in parts]
    if len(set(part_ids)) != len(part_ids):
        raise RegistryError(f"{path.name}: duplicate part ids in {part_ids}")
    assets = raw.get("assets") or {}
    counts = _seed_file_counts()
    chapters, seen, abstracts = [], set(), {}
    for item in raw["chapters"]:
        slug = item["slug"]
        if slug in seen:
            raise RegistryError(f"{path.name}: chapter {slug!r} is registered twice")
        seen.add(slug)
        if item["part"] not in part_ids:
            raise RegistryError(
                f"{path.name}: chapter {slug!r}: key 'part' = {item['part']!r}{_suggest(item['part'], part_ids)}; "
                f"allowed: {', '.join(part_ids)}"
            )
        ref = (item["seed_file"], item["abstract"])
        if ref in abstracts:
            raise RegistryError(f"{path.name}: chapter {slug!r}: abstract {ref} is already chapter {abstracts[ref]!r}")
        abstracts[ref] = slug
        if counts:
            if item["seed_file"] not in counts:
                raise RegistryError(
                    f"{path.name}: chapter {slug!r}: key 'seed_file' = {item['seed_file']!r} is not in {paths.SEEDS}"
                )
            if item["abstract"] > counts[item["seed_file"]]:
                raise RegistryError(
                    f"{path.name}: chapter {slug!r}: key 'abstract' = {item['abstract']} is out of range: "
                    f"{item['seed_file']} holds {counts[item['seed_file']]} abstracts"
                )
        for asset in item.get("assets", []):
            if asset not in assets:
                raise RegistryError(
                    f"{path.name}: chapter {slug!r}: key 'assets': unknown asset {asset!r}; allowed: {', '.join(assets) or 'none'}"
                )
        res = item.get("resources", {})
        entry = ChapterEntry(
            slug=slug,
            title=item["title"],
            part=item["part"],
            seed_file=item["seed_file"],
            abstract=item["abstract"],
            status=item["status"],
            summary=item.get("summary", ""),
            seed=item.get("seed", 0),
            threads=res.get("threads", 1),
            mem_mb=res.get("mem_mb", 2000),
            gpu=res.get("gpu", False),
            assets=tuple(item.get("assets", [])),
            parameters=dict(item.get("parameters") or {}),
        )
        for name, spec in entry.parameters.items():
            for scale in raw["scales"]:
                if scale not in spec and "default" not in spec:
                    raise RegistryError(
                        f"{path.name}: chapter {slug!r}: parameter {name!r} has no value for scale {scale!r} "
                        "(give 'default' or one value per scale)"
                    )
                _check_value(slug, name, entry.default_value(name, scale), spec, f"scale {scale!r} in {path.name}")
        if entry.ready and check_files and not entry.notebook.is_file():
            raise RegistryError(
                f"{path.name}: chapter {slug!r} is ready but its notebook is missing: "
                f"{entry.notebook.relative_to(paths.ROOT) if entry.notebook.is_relative_to(paths.ROOT) else entry.notebook}"
            )
        chapters.append(entry)
    return Registry(path=path, scales=raw["scales"], parts=parts, chapters=tuple(chapters), assets=assets)


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``slug.key=value`` (value read as YAML: ``3``, ``0.5``, ``true``, ``[16, 64]``)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise RegistryError(f"an override looks like 'chapter.parameter=value', got {text!r}")
    target, raw_value = text.split("=", 1)
    slug, key = target.split(".", 1)
    try:
        value = yaml.safe_load(raw_value)
    except yaml.YAMLError:
        raise RegistryError(f"override {text!r}: value {raw_value!r} is not valid YAML") from None
    return slug.strip(), key.strip(), value


def overrides_from_strings(items: list[str], default_slug: str | None = None) -> dict[str, dict]:
    """``['hippo.seed=3', 'seed=4']`` → ``{'hippo': {'seed': 3}, default_slug: {'seed': 4}}``."""
    out: dict[str, dict] = {}
    for text in items:
        if default_slug and "=" in text and "." not in text.split("=", 1)[0]:
            text = f"{default_slug}.{text}"
        slug, key, value = parse_override(text)
        out.setdefault(slug, {})[key] = value
    return out
