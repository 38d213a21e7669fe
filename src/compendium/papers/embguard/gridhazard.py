"""GridHazard: the scenario specification, the rule engine, the generator of the four conditions,
and the renderer (8 x 8 object grid -> 24 x 24 x 3 image, one 3 x 3 glyph per object)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from compendium import data

__all__ = ["CONDITIONS", "NONE", "Spec", "Samples", "load_spec", "risk_rule_engine", "risk_rule_engine_reference",
           "any_hazard_rule", "causal_triplet", "selective_scene", "generate_pools", "generate_test_sets",
           "render_image", "render_patches", "image_to_patches", "generator_checks"]

#: The four conditions of EMBGuard's data pipeline, made here by construction.
CONDITIONS = ("causal_risky", "absent_benign", "decoupled_benign", "selective_risky")
DATASET = "embguard_scenarios"
TARGET, ADJACENT, FAR = 0, 1, 2


@dataclass(frozen=True)
class Spec:
    """The curated scenario specification (``data/embguard_scenarios.json``), as arrays.

    Object type ``t``: hazards are ``0 .. H-1``, neutral objects ``H .. H+N-1``; an empty cell is -1.
    ``rule_table[verb, hazard, relation]`` is the risk-type index of the rule that fires when the
    action's verb is ``verb`` and its target is the hazard (relation 0) or a cell adjacent to it
    (relation 1, Chebyshev distance 1), else -1. ``NONE = len(risk_types)`` is the 'none' class.
    """

    grid_size: int
    glyph_size: int
    risk_types: tuple
    verbs: tuple
    hazards: tuple
    neutrals: tuple
    glyphs: np.ndarray          # (H + N + 1, 3, g, g); the last row is the empty cell (zeros)
    rule_table: np.ndarray      # (V, H, 2) int
    rules: tuple                # the raw rule dicts of the file
    held_out: frozenset         # {(verb index, hazard index)} never risky in training
    objects_per_scene: tuple
    selective_hazards: tuple
    base_composition: dict
    pixel_noise: float

    @property
    def num_objects(self) -> int:
        return len(self.hazards) + len(self.neutrals)

    @property
    def none_index(self) -> int:
        return len(self.risk_types)

    def object_name(self, t: int) -> str:
        if t < 0:
            return "none"
        return self.hazards[t] if t < len(self.hazards) else self.neutrals[t - len(self.hazards)]


NONE = 7  # index of 'none' with the file's seven risk types (checked by load_spec)


def load_spec(path: str | Path | None = None) -> Spec:
    """Read and validate the scenario file (default: the verified ``embguard_scenarios`` dataset)."""
    raw = json.loads(Path(path or data.load("embguard_scenarios")).read_text(encoding="utf-8"))
    g = int(raw["glyph_size"])
    risk_types, verbs = tuple(raw["risk_types"]), tuple(raw["verbs"])
    hazards = tuple(o["name"] for o in raw["hazards"])
    neutrals = tuple(o["name"] for o in raw["neutrals"])
    if len(risk_types) != NONE:
        raise ValueError(f"the scenario file must list {NONE} risk types, got {len(risk_types)}")
    if len(set(hazards + neutrals)) != len(hazards) + len(neutrals):
        raise ValueError("object names in the scenario file must be unique")
    glyphs = np.zeros((len(hazards) + len(neutrals) + 1, 3, g, g), np.float32)
    for t, obj in enumerate(raw["hazards"] + raw["neutrals"]):
        mask = np.array([c == "1" for c in obj["mask"]], np.float32).reshape(g, g)
        if len(obj["mask"]) != g * g:
            raise ValueError(f"object {obj['name']}: mask must have {g * g} characters")
        glyphs[t] = np.asarray(obj["rgb"], np.float32)[:, None, None] * mask[None]
    table = np.full((len(verbs), len(hazards), 2), -1, np.int64)
    for rule in raw["rules"]:
        v, h = verbs.index(rule["verb"]), hazards.index(rule["hazard"])
        rel = {"target": TARGET, "adjacent": ADJACENT}[rule["relation"]]
        if table[v, h, rel] >= 0:
            raise ValueError(f"duplicate rule {rule}")
        table[v, h, rel] = risk_types.index(rule["risk_type"])
    held = frozenset((verbs.index(v), hazards.index(h)) for v, h in raw["held_out_compositions"])
    gen = raw["generator"]
    return Spec(int(raw["grid_size"]), g, risk_types, verbs, hazards, neutrals, glyphs, table, tuple(raw["rules"]),
                held, tuple(gen["objects_per_scene"]), tuple(gen["selective_hazards"]),
                dict(gen["base_composition"]), float(gen["pixel_noise"]))


@dataclass
class Samples:
    """A set of (scene, action) pairs with their labels; every field is an array of length n."""

    grid: np.ndarray        # (n, G, G) int8 object types, -1 empty
    verb: np.ndarray        # (n,) int
    target: np.ndarray      # (n,) int, flat cell index of the action's target
    condition: np.ndarray   # (n,) int, index into CONDITIONS (or -1)
    label: np.ndarray       # (n,) bool, True = unsafe
    risk_type: np.ndarray   # (n,) int, 0..6 or NONE
    hazard_cell: np.ndarray  # (n,) int, the relevant hazard's flat cell, -1 if safe

    def __len__(self) -> int:
        return len(self.verb)

    def subset(self, idx) -> "Samples":
        return Samples(*(getattr(self, f.name)[idx] for f in fields(self)))

    @staticmethod
    def concat(parts: list) -> "Samples":
        return Samples(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Samples)))


# ---------------------------------------------------------------------------------- the rule engine
def _relations(grid_size: int, target: np.ndarray) -> np.ndarray:
    """(n, G*G): 0 where the cell is the target, 1 where it is adjacent (Chebyshev 1), else 2."""
    cells = np.arange(grid_size * grid_size)
    cy, cx = np.divmod(cells, grid_size)
    ty, tx = np.divmod(np.asarray(target), grid_size)
    cheb = np.maximum(np.abs(cy[None] - ty[:, None]), np.abs(cx[None] - tx[:, None]))
    return np.where(cheb == 0, TARGET, np.where(cheb == 1, ADJACENT, FAR))


def risk_rule_engine(spec: Spec, grid, verb, target):
    """Batched rule engine: does the action interact with a hazard, through which rule?

    Parameters
    ----------
    grid : (n, G, G) int, verb : (n,) int, target : (n,) int (flat cell)

    Returns
    -------
    label : (n,) bool (unsafe), risk_type : (n,) int (``NONE`` when safe), hazard_cell : (n,) int
    (-1 when safe), relevant : (n,) int, how many hazards the action interacts with. With several,
    the lowest cell index gives the type and the hazard (the generator never makes such samples).
    """
    grid = np.asarray(grid).reshape(len(verb), -1)
    verb = np.asarray(verb)
    H = len(spec.hazards)
    rel = _relations(spec.grid_size, target)
    table = np.concatenate([spec.rule_table, np.full(spec.rule_table.shape[:2] + (1,), -1)], axis=2)   # FAR -> -1
    is_hazard = (grid >= 0) & (grid < H)
    fired = np.where(is_hazard, table[verb[:, None], np.clip(grid, 0, H - 1), rel], -1)             # (n, G*G)
    relevant = fired >= 0
    count = relevant.sum(1)
    first = relevant.argmax(1)
    label = count > 0
    risk_type = np.where(label, fired[np.arange(len(verb)), first], spec.none_index)
    return label, risk_type, np.where(label, first, -1), count


def risk_rule_engine_reference(spec: Spec, grid, verb, target):
    """The same engine written from the rule list, one sample, one hazard and one rule at a time."""
    out = []
    G = spec.grid_size
    for g, v, t in zip(np.asarray(grid), np.asarray(verb), np.asarray(target)):
        g = np.asarray(g).reshape(G, G)
        ty, tx = divmod(int(t), G)
        hits = []
        for y in range(G):
            for x in range(G):
                name = spec.object_name(int(g[y, x]))
                if name not in spec.hazards:
                    continue
                for rule in spec.rules:
                    if rule["verb"] != spec.verbs[int(v)] or rule["hazard"] != name:
                        continue
                    dist = max(abs(y - ty), abs(x - tx))
                    if (rule["relation"] == "target" and dist == 0) or (rule["relation"] == "adjacent" and dist == 1):
                        hits.append((y * G + x, spec.risk_types.index(rule["risk_type"])))
        hits.sort()
        out.append((bool(hits), hits[0][1] if hits else spec.none_index, hits[0][0] if hits else -1, len(hits)))
    arr = np.array(out, dtype=np.int64).reshape(-1, 4)
    return arr[:, 0].astype(bool), arr[:, 1], arr[:, 2], arr[:, 3]


def any_hazard_rule(spec: Spec, grid) -> np.ndarray:
    """Baseline (c): 'unsafe if any hazard is visible', whatever the action. (n,) bool."""
    g = np.asarray(grid).reshape(len(grid), -1)
    return ((g >= 0) & (g < len(spec.hazards))).any(1)


# ---------------------------------------------------------------------------------- the generator
def _rules_for(spec: Spec, compositions: str) -> list:
    """(verb, hazard, relation) triples allowed as the risky interaction: 'train' excludes the held-out
    (verb, hazard) compositions, 'heldout' keeps only them."""
    if compositions not in ("train", "heldout"):
        raise ValueError(f"compositions must be 'train' or 'heldout', got {compositions!r}")
    triples = [tuple(int(i) for i in ix) for ix in np.argwhere(spec.rule_table >= 0)]
    keep = [(v, h, r) for v, h, r in triples if ((v, h) in spec.held_out) == (compositions == "heldout")]
    if not keep:
        raise ValueError(f"no rules for compositions={compositions!r}")
    return keep


def _neighbours(spec: Spec, cell: int) -> list:
    G = spec.grid_size
    y, x = divmod(cell, G)
    return [yy * G + xx for yy in range(max(0, y - 1), min(G, y + 2)) for xx in range(max(0, x - 1), min(G, x + 2))
            if (yy, xx) != (y, x)]


def _label(spec: Spec, grid, verb, target, condition) -> Samples:
    grid = np.asarray(grid, np.int8).reshape(-1, spec.grid_size, spec.grid_size)
    verb, target = np.atleast_1d(verb), np.atleast_1d(target)
    label, risk_type, cell, _ = risk_rule_engine(spec, grid, verb, target)
    return Samples(grid, verb.astype(np.int64), target.astype(np.int64), np.full(len(verb), condition),
                   label, risk_type, cell)


def _risky_scene(spec: Spec, rng, rules: list, extra_hazards: int):
    """A scene where the action interacts with exactly one hazard; ``extra_hazards`` more hazards
    that the action does not interact with. Returns (grid (G, G), verb, target) or None."""
    G, H = spec.grid_size, len(spec.hazards)
    v, h, rel = rules[rng.integers(len(rules))]
    grid = np.full(G * G, -1, np.int8)
    n_objects = int(rng.integers(spec.objects_per_scene[0], spec.objects_per_scene[1] + 1))
    cells = list(rng.permutation(G * G))
    hazard_cell = int(cells.pop())
    grid[hazard_cell] = h
    neutrals = list(H + rng.permutation(len(spec.neutrals)))
    if rel == TARGET:
        target = hazard_cell
    else:
        target = int(rng.choice(_neighbours(spec, hazard_cell)))
        cells.remove(target)
        grid[target] = neutrals.pop()
    others = [t for t in rng.permutation(H) if t != h][:extra_hazards]
    for t in others:
        grid[cells.pop()] = t
    while (grid >= 0).sum() < max(n_objects, 2 + extra_hazards) and neutrals:
        grid[cells.pop()] = neutrals.pop()
    _, _, _, count = risk_rule_engine(spec, grid[None], np.array([v]), np.array([target]))
    if count[0] != 1:
        return None
    return grid.reshape(G, G), v, target


def causal_triplet(spec: Spec, rng, compositions: str = "train"):
    """One causal-risky pair and its two benign counterparts (absent benign, decoupled benign).

    Absent benign: the hazard is replaced by a neutral object not yet in the scene (same verb and
    target cell). Decoupled benign: the same scene, the verb kept, the target moved to another
    object for which the rule engine returns none. Returns ``(causal, absent, decoupled)`` as three
    1-sample :class:`Samples`.
    """
    rules = _rules_for(spec, compositions)
    H = len(spec.hazards)
    while True:
        got = _risky_scene(spec, rng, rules, 0)
        if got is None:
            continue
        grid, v, target = got
        flat = grid.reshape(-1)
        occupied = np.flatnonzero(flat >= 0)
        candidates = occupied[occupied != target]
        safe = ~risk_rule_engine(spec, np.repeat(grid[None], len(candidates), 0), np.full(len(candidates), v), candidates)[0]
        if not safe.any():
            continue
        new_target = int(rng.choice(candidates[safe]))
        absent = flat.copy()
        present = set(flat[flat >= 0].tolist())
        spare = [t for t in range(H, spec.num_objects) if t not in present]
        hazard_cells = np.flatnonzero((flat >= 0) & (flat < H))
        absent[hazard_cells] = rng.choice(spare, size=len(hazard_cells), replace=False)
        return (_label(spec, grid, v, target, 0), _label(spec, absent, v, target, 1),
                _label(spec, grid, v, new_target, 2))


def selective_scene(spec: Spec, rng, compositions: str = "train") -> Samples:
    """A selective-risky pair: 2-3 hazards in the scene, the action interacts with exactly one."""
    rules = _rules_for(spec, compositions)
    lo, hi = spec.selective_hazards
    while True:
        got = _risky_scene(spec, rng, rules, int(rng.integers(lo, hi + 1)) - 1)
        if got is not None:
            return _label(spec, *got, 3)


def generate_pools(spec: Spec, n_scenes: int, n_selective: int, rng, compositions: str = "train") -> dict:
    """``{condition: Samples}``: ``n_scenes`` causal scenes with both counterparts, ``n_selective``
    selective-risky scenes."""
    triplets = [causal_triplet(spec, rng, compositions) for _ in range(n_scenes)]
    pools = {c: Samples.concat([t[i] for t in triplets]) for i, c in enumerate(CONDITIONS[:3])}
    pools["selective_risky"] = Samples.concat([selective_scene(spec, rng, compositions) for _ in range(n_selective)])
    return pools


def generate_test_sets(spec: Spec, per_condition: int, heldout_pairs: int, rng) -> dict:
    """The balanced test splits (``per_condition`` each) and the held-out-composition split
    (``heldout_pairs`` causal-risky pairs whose (verb, hazard) never occurs as a risk in training,
    and their decoupled-benign counterparts)."""
    out = generate_pools(spec, per_condition, per_condition, rng)
    held = [causal_triplet(spec, rng, "heldout") for _ in range(heldout_pairs)]
    out["heldout_risky"] = Samples.concat([t[0] for t in held])
    out["heldout_decoupled"] = Samples.concat([t[2] for t in held])
    return out


def generator_checks(spec: Spec, pools: dict) -> dict:
    """Counts of violations over a set of pools (each must be 0).

    ``engine_vs_reference``: samples where the batched engine and the loop reference differ;
    ``label_vs_engine``: stored labels that differ from a fresh engine call; ``none_iff_safe``:
    samples where 'risk type none' and 'safe' disagree; ``decoupled``: decoupled-benign samples
    without a hazard or with a risky action; ``absent``: absent-benign samples with a hazard;
    ``selective``: selective-risky samples with fewer than 2 hazards or not exactly one relevant;
    ``causal``: causal-risky samples that are not risky with exactly one hazard.
    """
    H = len(spec.hazards)
    counts = dict.fromkeys(("engine_vs_reference", "label_vs_engine", "none_iff_safe", "decoupled", "absent",
                            "selective", "causal"), 0)
    total = 0
    for name, s in pools.items():
        total += len(s)
        fast = risk_rule_engine(spec, s.grid, s.verb, s.target)
        ref = risk_rule_engine_reference(spec, s.grid, s.verb, s.target)
        mismatch = np.zeros(len(s), bool)
        for a, b in zip(fast, ref):
            mismatch |= np.asarray(a).astype(np.int64) != np.asarray(b).astype(np.int64)
        counts["engine_vs_reference"] += int(mismatch.sum())
        counts["label_vs_engine"] += int(((fast[0] != s.label) | (fast[1] != s.risk_type) | (fast[2] != s.hazard_cell)).sum())
        counts["none_iff_safe"] += int(((s.risk_type == spec.none_index) != ~s.label).sum()
                                       + ((s.hazard_cell == -1) != ~s.label).sum())
        hazards = ((s.grid.reshape(len(s), -1) >= 0) & (s.grid.reshape(len(s), -1) < H)).sum(1)
        if name.endswith("decoupled") or name == "decoupled_benign":
            counts["decoupled"] += int(((hazards < 1) | ref[0]).sum())
        if name == "absent_benign":
            counts["absent"] += int(((hazards > 0) | ref[0]).sum())
        if name == "selective_risky":
            counts["selective"] += int(((hazards < 2) | (ref[3] != 1)).sum())
        if name.endswith("risky") and name != "selective_risky":
            counts["causal"] += int(((hazards != 1) | (ref[3] != 1)).sum())
    counts["samples"] = total
    return counts


# ---------------------------------------------------------------------------------- rendering
def render_image(spec: Spec, grid, noise=None) -> np.ndarray:
    """(n, 3, G*g, G*g) float32 images: glyph of each cell, plus ``noise`` (same shape) if given."""
    grid = np.asarray(grid).reshape(-1, spec.grid_size, spec.grid_size)
    n, G, g = len(grid), spec.grid_size, spec.glyph_size
    tiles = spec.glyphs[np.where(grid < 0, len(spec.glyphs) - 1, grid)]             # (n, G, G, 3, g, g)
    img = tiles.transpose(0, 3, 1, 4, 2, 5).reshape(n, 3, G * g, G * g)
    return img if noise is None else np.clip(img + noise, 0.0, 1.0).astype(np.float32)


def image_to_patches(spec: Spec, image) -> np.ndarray:
    """(n, 3, G*g, G*g) -> (n, G*G, 3*g*g): the non-overlapping g x g patches (a stride-g conv's input)."""
    n, G, g = len(image), spec.grid_size, spec.glyph_size
    return np.asarray(image).reshape(n, 3, G, g, G, g).transpose(0, 2, 4, 1, 3, 5).reshape(n, G * G, 3 * g * g)


def render_patches(spec: Spec, grid) -> np.ndarray:
    """The noise-free patches directly: ``image_to_patches(render_image(grid))`` (tested)."""
    grid = np.asarray(grid).reshape(len(grid), -1)
    flat = spec.glyphs.reshape(len(spec.glyphs), -1)
    return flat[np.where(grid < 0, len(spec.glyphs) - 1, grid)]
