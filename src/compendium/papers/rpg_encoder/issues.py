"""The frozen localization benchmark: issues generated once from the v1 repositories.

Each issue names one gold function ``h`` that another function ``f`` calls by an exact call form (a bare name defined in the same module, or ``self.m`` / ``cls.m`` defined in
the same class). The *caller* issue describes the symptom in ``f``'s words (its name, the first
docstring sentence and argument names, about 80 % of them kept, shuffled) with every word of
``h``'s name removed, plus two noise words; the *direct* issue describes ``h`` itself the same
way. The dev/test split is drawn per gold function. The file is written by :func:`freeze` into
``data/rpg_encoder_issues.json`` and read through ``compendium.data`` (checksummed), so no
retriever can be tuned before the set is fixed.
"""

from __future__ import annotations

import json

import numpy as np

from compendium import data

from . import graph

NOISE = ("unexpected", "wrong", "broken", "fails", "sometimes", "odd", "incorrect", "crash", "bug", "strange")
DATASET = "rpg_encoder_issues"
GENERATOR_SEED = 20260101
TWO_HOP_SEED = 20261207


def exact_calls(parsed: dict) -> list[tuple[str, str]]:
    """(caller id, callee id) for the two exact call forms (no aliases, no fuzzy matching)."""
    out = []
    for p in parsed.values():
        ids = {e.id for e in p.entities}
        for src, kind, target in p.refs:
            if kind != "call":
                continue
            if target[0] == "name" and len(target) == 2:
                dst = f"{p.path}::{target[1]}"
            elif target[0] == "self":
                dst = f"{p.path}::{target[1]}.{target[2]}"
            else:
                continue
            if dst in ids and dst != src:
                out.append((src, dst))
    return sorted(set(out))


def _words(entity: graph.Entity) -> list[str]:
    name = entity.qualname.rsplit(".", 1)[-1].split("#")[0]
    words = graph.split_identifier(name) + graph.words_of(entity.doc)
    for a in entity.args:
        words += graph.split_identifier(a)
    return list(dict.fromkeys(w for w in words if w not in graph.STOPWORDS and len(w) > 1))


def _query(words: list[str], rng: np.random.Generator) -> str:
    keep = [w for w in words if rng.random() < 0.8] or words[:2]
    keep = [keep[i] for i in rng.permutation(len(keep))]
    noise = [NOISE[i] for i in rng.choice(len(NOISE), 2, replace=False)]
    return " ".join(keep + noise)


def generate(repo_name: str, repo: dict, max_pairs: int, rng: np.random.Generator) -> list[dict]:
    """Up to ``max_pairs`` (caller, direct) issue pairs for one repository.

    Every exact call ``f -> h`` between two functions qualifies when ``f`` keeps at least three
    words once ``h``'s name words are removed and ``h`` has at least two. A helper called from
    several functions gives several caller issues (one per caller) and as many direct issues
    (fresh word draws); the dev/test split is drawn per gold helper, so no helper is in both.
    """
    parsed = {path: graph.parse_file(path, src) for path, src in sorted(repo.items())}
    entities = {e.id: e for p in parsed.values() for e in p.entities}
    pairs = []
    for f, h in exact_calls(parsed):
        ef, eh = entities[f], entities[h]
        if ef.kind != "function" or eh.kind != "function":
            continue
        banned = set(graph.split_identifier(eh.qualname.rsplit(".", 1)[-1].split("#")[0]))
        caller_words = [w for w in _words(ef) if w not in banned]
        if len(caller_words) >= 3 and len(_words(eh)) >= 2:
            pairs.append((ef, eh, caller_words))
    out, split_of = [], {}
    for n, i in enumerate(rng.permutation(len(pairs))[:max_pairs]):
        ef, eh, caller_words = pairs[i]
        if eh.id not in split_of:
            split_of[eh.id] = "dev" if rng.random() < 0.5 else "test"
        for kind, words in (("caller", caller_words), ("direct", _words(eh))):
            out.append({"id": f"{repo_name}-{n:04d}-{kind}", "repo": repo_name, "kind": kind, "split": split_of[eh.id],
                        "query": _query(words, rng), "gold": [eh.id], "via": ef.id})
    return out


def generate_two_hop(repo_name: str, repo: dict, max_pairs: int, rng: np.random.Generator) -> list[dict]:
    """Up to ``max_pairs`` *two-hop* issues for one repository (a split where the gold is not one
    call from the described function).

    Every chain of exact calls ``f -> g -> h`` between three distinct functions, where ``f`` does
    not call ``h`` itself, qualifies when ``f`` keeps at least three words once the words of
    ``g``'s and ``h``'s names are removed and ``h`` has at least two. The issue describes ``f``
    (the same word draw as a caller issue); the gold is ``h``, two calls away, and competes with
    every other callee of ``f`` and of its callees. One issue per chain; the dev/test split is
    drawn per gold function.
    """
    parsed = {path: graph.parse_file(path, src) for path, src in sorted(repo.items())}
    entities = {e.id: e for p in parsed.values() for e in p.entities}
    calls = exact_calls(parsed)
    direct = set(calls)
    out_of: dict = {}
    for f, g in calls:
        out_of.setdefault(f, []).append(g)
    name_words = lambda e: set(graph.split_identifier(e.qualname.rsplit(".", 1)[-1].split("#")[0]))  # noqa: E731
    chains = []
    for f, g in calls:
        for h in out_of.get(g, ()):
            if h == f or (f, h) in direct:
                continue
            ef, eg, eh = entities[f], entities[g], entities[h]
            if {ef.kind, eg.kind, eh.kind} != {"function"}:
                continue
            banned = name_words(eg) | name_words(eh)
            words = [w for w in _words(ef) if w not in banned]
            if len(words) >= 3 and len(_words(eh)) >= 2:
                chains.append((ef, eg, eh, words))
    out, split_of = [], {}
    for n, i in enumerate(rng.permutation(len(chains))[:max_pairs]):
        ef, eg, eh, words = chains[i]
        if eh.id not in split_of:
            split_of[eh.id] = "dev" if rng.random() < 0.5 else "test"
        out.append({"id": f"{repo_name}-{n:04d}-two_hop", "repo": repo_name, "kind": "two_hop", "split": split_of[eh.id],
                    "query": _query(words, rng), "gold": [eh.id], "via": ef.id, "middle": eg.id})
    return out


def generate_all_two_hop(repos: dict, max_pairs: int) -> list[dict]:
    """The two-hop split of every repository (its own seed stream, fixed before any retriever ran on it)."""
    from .corpus import PACKAGES

    return [issue for name, repo in repos.items()
            for issue in generate_two_hop(name, repo, max_pairs,
                                          np.random.default_rng([TWO_HOP_SEED, PACKAGES.index(name)]))]


def generate_all(repos: dict, max_pairs: int) -> list[dict]:
    """The whole benchmark; each repository has its own stream (seeded by its place in PACKAGES)."""
    from .corpus import PACKAGES

    return [issue for name, repo in repos.items()
            for issue in generate(name, repo, max_pairs, np.random.default_rng([GENERATOR_SEED, PACKAGES.index(name)]))]


def to_json(issues: list[dict], max_pairs: int) -> str:
    """The frozen file's text (one issue a line)."""
    head = json.dumps({"generator_seed": GENERATOR_SEED, "max_pairs": max_pairs})[:-1]
    body = ",\n".join(json.dumps(i, sort_keys=True) for i in issues)
    return f'{head}, "issues": [\n{body}\n]}}\n'


def frozen_header() -> dict:
    """``generator_seed`` and ``max_pairs`` of the frozen file."""
    raw = json.loads(data.load(DATASET).read_text(encoding="utf-8"))
    return {k: raw[k] for k in ("generator_seed", "max_pairs")}


def load_issues(repos=None) -> list[dict]:
    """The frozen issues (checksum-verified), optionally only those of ``repos``."""
    issues = json.loads(data.load(DATASET).read_text(encoding="utf-8"))["issues"]
    return [i for i in issues if repos is None or i["repo"] in repos]
