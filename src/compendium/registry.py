"""The chapter registry (``workflow/config/chapters.yaml``): load, validate, resolve parameters.

Everything that iterates over chapters (Snakemake targets, the book's table of contents, the
dashboard, the contract tests, the scaffold command) reads the registry through this module, so a
bad entry or a bad parameter fails here, before any notebook runs, with a message that names the
chapter, the key and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from . import paths

COMMON_PARAMETERS = ("scale", "seed", "device")
DEVICES = ("auto", "cpu", "cuda")
_SPEC_VALUE_KEYS = ("default", "smoke", "full", "help")
SLUG_PATTERN = re.compile(r"[a-z][a-z0-9_]*")


class RegistryError(ValueError):
    """A registry entry, a parameter value or an override is invalid."""


# ------------------------------------------------------------------------------------ YAML
class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names the same key twice (YAML would silently keep the last one)."""


class Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 (core schema) numbers and no duplicate keys.

    PyYAML follows YAML 1.1, where ``010`` is the octal 8, ``1:30`` the sexagesimal 90 and
    ``1e1`` a string. Here ``010`` is 10, ``1:30`` stays a string, ``1e1`` is the number 10.0;
    ``0o17`` and ``0x1f`` are the explicit octal and hexadecimal forms. A key given twice in one
    mapping is an error naming the key and both lines.
    """


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


#: The most digits an integer may have (Python refuses to read longer decimal ones; no parameter needs them).
MAX_INT_DIGITS = 4300
#: The most values an alias-expanded registry may hold (``&a [*b, *b, ...]`` multiplies at each level).
MAX_EXPANDED_NODES = 100_000
#: How much of a user's value an error message quotes.
EXCERPT_CHARS = 200


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters (the rest counted), for error messages."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        text = "<an integer too long to print>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _bounded(message: str, limit: int = 4 * EXCERPT_CHARS) -> str:
    """A message that may quote a user's value, cut to ``limit`` characters."""
    return message if len(message) <= limit else f"{message[:limit]}... ({len(message) - limit} more characters)"


def _construct_int(loader, node):
    text = loader.construct_scalar(node)
    digits = len(text.lstrip("+-")) - (2 if text.startswith(("0o", "0x")) else 0)
    if digits > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits (at most {MAX_INT_DIGITS} are read)", node.start_mark)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: let the base constructor report it
            break
        if first is not None:
            raise DuplicateKeyError(
                None, None,
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                f"(first given at line {first.start_mark.line + 1})", key_node.start_mark)
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def _construct_yaml_map(loader, node):
    data = {}
    yield data
    data.update(_construct_mapping(loader, node))


Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
Loader.add_constructor("tag:yaml.org,2002:map", _construct_yaml_map)


class NoAliasLoader(Loader):
    """:class:`Loader` refusing anchors and aliases (``--set`` values need none)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not allowed here", event.start_mark)
        return super().compose_node(parent, index)


def _expanded_size(value: Any, limit: int) -> int:
    """How many values ``value`` holds once its aliases are expanded (counting stops past ``limit``)."""
    memo: dict[int, int] = {}

    def size(obj) -> int:
        if not isinstance(obj, (list, dict)):
            return 1
        key = id(obj)
        if key not in memo:
            memo[key] = 0  # a recursive alias counts once
            children = obj.values() if isinstance(obj, dict) else obj
            total = 1
            for child in children:
                total += size(child)
                if total > limit:
                    break
            memo[key] = total
        return memo[key]

    return size(value)


def load_yaml(text: str, *, aliases: bool = True):
    """Parse YAML the way the registry (``aliases=True``) and ``--set`` values (no aliases) are read.

    See :class:`Loader`. Integers longer than :data:`MAX_INT_DIGITS` digits and documents whose
    aliases expand to more than :data:`MAX_EXPANDED_NODES` values are refused (a YAMLError)."""
    value = yaml.load(text, Loader=Loader if aliases else NoAliasLoader)  # noqa: S506 - a SafeLoader
    if aliases and _expanded_size(value, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
        raise yaml.YAMLError(f"its aliases expand to more than {MAX_EXPANDED_NODES} values")
    return value


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


def _type_problem(value: Any, spec: dict) -> str | None:
    """What is wrong with the *type* of ``value`` (recursing into list items), or None.

    Checked here rather than by jsonschema, which counts ``2.0`` as an integer and lets NaN
    through every bound: an integer must be a Python int (not a bool, not a whole float), a
    number an int or a finite float.
    """
    kind = spec.get("type")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return "has the wrong type"
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "has the wrong type"
        if isinstance(value, float) and not math.isfinite(value):
            return "is not a finite number"
    if kind == "array" and isinstance(value, list) and isinstance(spec.get("items"), dict):
        for item in value:
            problem = _type_problem(item, spec["items"])
            if problem:
                return problem + " (in the list)"
    return None


def _check_value(chapter: str, name: str, value: Any, spec: dict, where: str) -> None:
    problem = _type_problem(value, spec)
    if problem:
        raise RegistryError(
            f"chapter {chapter!r}: parameter {name!r} = {excerpt(value)} ({where}) {problem}: "
            f"allowed is {describe_allowed(spec)}"
        )
    import jsonschema  # here, not at the top: a plan read from its cache (compendium.workflow) needs none

    try:
        jsonschema.validate(value, _value_schema(spec))
    except jsonschema.ValidationError as err:
        problem = "has the wrong type" if err.validator == "type" else "is out of range"
        if err.validator == "enum":
            problem = "is not an allowed value"
        raise RegistryError(
            f"chapter {chapter!r}: parameter {name!r} = {excerpt(value)} ({where}) {problem}: "
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
    sweeps: dict = field(default_factory=dict)  # name -> {parameter, values, caption}: run by `make stability`

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
                    f"chapter {self.slug!r}: unknown parameter {excerpt(name)}{_suggest(name, values)}; "
                    f"allowed: {', '.join(self.parameter_names()[1:])}"
                )
            values[name] = value
        seed = values["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise RegistryError(
                f"chapter {self.slug!r}: parameter 'seed' = {excerpt(seed)} is invalid: allowed is an integer in [0, 4294967295]"
            )
        if values["device"] not in DEVICES:
            raise RegistryError(
                f"chapter {self.slug!r}: parameter 'device' = {excerpt(values['device'])} is not an allowed value: "
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
        check_slug(slug)
        try:
            return self.by_slug[slug]
        except KeyError:
            raise RegistryError(f"unknown chapter {excerpt(slug)}{_suggest(slug, self.by_slug)}") from None

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
            raise RegistryError(f"unknown scale {excerpt(scale)}{_suggest(scale, self.scales)}; allowed: {', '.join(self.scales)}")

    def resolve_all(self, scale: str, overrides: dict | None = None) -> dict[str, dict]:
        """Parameters of every ready chapter at ``scale``; validates ``overrides`` first.

        ``overrides`` maps a slug to ``{parameter: value}``. Overrides of a planned chapter are
        rejected: nothing would run them.
        """
        self.check_scale(scale)
        overrides = overrides or {}
        if not isinstance(overrides, dict):
            raise RegistryError(f"overrides must map a chapter slug to {{parameter: value}}, got {excerpt(overrides)}")
        for slug, values in overrides.items():
            entry = self.chapter(slug)
            if not entry.ready:
                raise RegistryError(f"chapter {slug!r} is planned, not ready: it has no parameters to override")
            if not isinstance(values, dict):
                raise RegistryError(f"chapter {slug!r}: overrides must be {{parameter: value}}, got {excerpt(values)}")
        return {c.slug: c.resolve(scale, overrides.get(c.slug)) for c in self.ready}


def _check_spec(chapter: str, name: str, spec: dict) -> None:
    """A parameter spec whose bounds leave no value (or are not finite numbers) is refused."""
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in spec and isinstance(spec[key], float) and not math.isfinite(spec[key]):
            raise RegistryError(f"chapter {chapter!r}: parameter {name!r}: {key} = {excerpt(spec[key])} is not a finite number")
    lows = [(spec[k], k) for k in ("minimum", "exclusiveMinimum") if k in spec]
    highs = [(spec[k], k) for k in ("maximum", "exclusiveMaximum") if k in spec]
    for lo, lo_key in lows:
        for hi, hi_key in highs:
            exclusive = lo_key.startswith("exclusive") or hi_key.startswith("exclusive")
            if lo > hi or (lo == hi and exclusive):
                raise RegistryError(
                    f"chapter {chapter!r}: parameter {name!r}: {lo_key} = {excerpt(lo)} and {hi_key} = {excerpt(hi)} "
                    "leave no allowed value"
                )
    if spec.get("minItems", 0) > spec.get("maxItems", math.inf):
        raise RegistryError(
            f"chapter {chapter!r}: parameter {name!r}: minItems = {spec['minItems']} is above maxItems = {spec['maxItems']}"
        )
    if isinstance(spec.get("items"), dict) and "type" in spec["items"]:
        _check_spec(chapter, f"{name} (list items)", spec["items"])



def _check_asset_requires(path: Path, assets: dict) -> None:
    """Every asset an asset ``requires`` is declared, and no asset requires itself, even through others."""
    for name, spec in assets.items():
        for req in spec.get("requires", []):
            if req not in assets:
                raise RegistryError(
                    f"{path.name}: asset {name!r}: key 'requires': unknown asset {req!r}{_suggest(req, list(assets))}; "
                    f"allowed: {', '.join(a for a in assets if a != name) or 'none'}"
                )
    done: set = set()

    def visit(name: str, trail: list) -> None:         # depth first; ``trail`` is the path from the start
        if name in trail:
            cycle = trail[trail.index(name):] + [name]
            raise RegistryError(f"{path.name}: asset {cycle[0]!r}: key 'requires': a cycle, {' -> '.join(cycle)}")
        if name not in done:
            for req in assets[name].get("requires", []):
                visit(req, trail + [name])
            done.add(name)

    for name in assets:
        visit(name, [])


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
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise RegistryError(f"{path} is not UTF-8: byte 0x{data[err.start]:02x} at line {line} "
                            f"(offset {err.start}); save it as UTF-8") from None
    try:
        raw = load_yaml(text)
    except DuplicateKeyError as err:
        raise RegistryError(f"{path.name}: {err.problem}") from None
    except yaml.YAMLError as err:
        raise RegistryError(f"{path.name} is not valid YAML: {_bounded(str(err))}") from None
    import jsonschema

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
        raise RegistryError(f"{path.name}: {label}: key {key!r}: {_bounded(err.message)}")

    parts = tuple(Part(**p) for p in raw["parts"])
    part_ids = [p.id for p in parts]
    if len(set(part_ids)) != len(part_ids):
        raise RegistryError(f"{path.name}: duplicate part ids in {part_ids}")
    assets = raw.get("assets") or {}
    _check_asset_requires(path, assets)
    chapters, seen, abstracts = [], set(), {}
    for item in raw["chapters"]:
        slug = item["slug"]
        if slug in seen:
            raise RegistryError(f"{path.name}: chapter {slug!r} is registered twice")
        seen.add(slug)
        if item["part"] not in part_ids:
            raise RegistryError(
                f"{path.name}: chapter {slug!r}: key 'part' = {excerpt(item['part'])}{_suggest(item['part'], part_ids)}; "
                f"allowed: {', '.join(part_ids)}"
            )
        # seed_file and abstract are provenance metadata (where the paper came from); the schema checks
        # their form, nothing outside the repository is read to check them further.
        ref = (item["seed_file"], item["abstract"])
        if ref in abstracts:
            raise RegistryError(f"{path.name}: chapter {slug!r}: abstract {ref} is already chapter {abstracts[ref]!r}")
        abstracts[ref] = slug
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
            sweeps=dict(item.get("sweeps") or {}),
        )
        for name, sweep in entry.sweeps.items():
            if sweep["parameter"] not in entry.parameters:
                raise RegistryError(
                    f"{path.name}: chapter {slug!r}: sweep {name!r}: key 'parameter' = {excerpt(sweep['parameter'])} is not a "
                    f"parameter of this chapter; allowed: {', '.join(entry.parameters) or 'none'}"
                )
            for value in sweep["values"]:
                _check_value(slug, sweep["parameter"], value, entry.parameters[sweep["parameter"]],
                             f"sweep {name!r} in {path.name}")
        for name, spec in entry.parameters.items():
            _check_spec(slug, name, spec)
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


def check_slug(slug: str) -> str:
    """``slug`` if it is spelled like a chapter slug (``[a-z][a-z0-9_]*``), else a RegistryError."""
    if not isinstance(slug, str) or not SLUG_PATTERN.fullmatch(slug):
        raise RegistryError(f"invalid chapter slug {excerpt(slug)}: slugs are lower-case letters, digits and '_' ([a-z][a-z0-9_]*)")
    return slug


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``slug.key=value`` (value read as YAML 1.2: ``3``, ``0.5``, ``true``, ``[16, 64]``)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise RegistryError(f"an override looks like 'chapter.parameter=value', got {excerpt(text)}")
    target, raw_value = text.split("=", 1)
    slug, key = (part.strip() for part in target.rsplit(".", 1))
    check_slug(slug)
    if not SLUG_PATTERN.fullmatch(key):
        raise RegistryError(f"override {excerpt(text)}: invalid parameter name {excerpt(key)}")
    try:
        value = load_yaml(raw_value, aliases=False)
    except yaml.YAMLError as err:
        ours = isinstance(err, (yaml.constructor.ConstructorError, yaml.composer.ComposerError))
        reason = f"is refused: {err.problem}" if ours and err.problem else "is not valid YAML"
        raise RegistryError(f"override {slug}.{key}: value {excerpt(raw_value)} {reason}") from None
    return slug, key, value


def split_overrides(text: str) -> list[str]:
    """Split ``SET``-style text into overrides: at whitespace outside brackets and quotes.

    ``'seed=3 orders=[64, 128]'`` → ``['seed=3', 'orders=[64, 128]']``. This is how the
    Makefile's ``SET`` reaches the CLI (through ``COMPENDIUM_SET``, never through a shell).
    """
    items, current, depth, quote = [], [], 0, None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char.isspace() and depth <= 0:
            if current:
                items.append("".join(current))
            current, depth = [], 0
            continue
        current.append(char)
    if quote or depth > 0:
        raise RegistryError(f"overrides {excerpt(text)}: unbalanced {'quote' if quote else 'bracket'}")
    if current:
        items.append("".join(current))
    return items


def overrides_from_strings(items: list[str], default_slug: str | None = None) -> dict[str, dict]:
    """``['hippo.seed=3', 'seed=4']`` → ``{'hippo': {'seed': 3}, default_slug: {'seed': 4}}``."""
    out: dict[str, dict] = {}
    for text in items:
        if default_slug and "=" in text and "." not in text.split("=", 1)[0]:
            text = f"{default_slug}.{text}"
        slug, key, value = parse_override(text)
        if key in out.get(slug, {}):
            raise RegistryError(f"override {slug}.{key} is given twice; give each parameter once")
        out.setdefault(slug, {})[key] = value
    return out
