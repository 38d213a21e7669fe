"""Localization: BM25 baselines (``bm25s``), the RPG retriever and its ablations, Acc@k, dev tuning.

Every retriever scores the functions (methods included) of one encoded repository for a batch
of queries. Scores of a BM25 ranking are divided by their per-query maximum, so the expansion
weight ``alpha`` means the same thing for every query:

- B1 ``file code``: BM25 over whole files; a function gets its file's score, ties inside a file
  broken by function-code BM25 (weight 1e-3).
- B2 ``function code``: BM25 over each function's source.
- B3 ``features``: BM25 over the lifted features.
- RPG: ``s(v) + alpha * max(P1(v), beta * P2(v))`` on feature scores ``s``, where ``P1(v)`` is
  the best score of a function that calls ``v`` and ``P2`` the same one hop further (ExploreRPG
  downstream along call edges), ``beta = 0.5``; ``hops`` is 1 or 2.
- ``-features``: the same expansion on function-code scores; ``-deps``: the same expansion on
  feature scores along the containment tree instead of calls (hop 1: functions with the same
  parent class or file; hop 2: the same file); ``shuffled calls``: RPG with every call edge
  pointed at a random function (a control).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from . import graph

BETA = 0.5
RETRIEVERS = ("BM25 file code", "BM25 function code", "BM25 features", "RPG", "RPG -features", "RPG -deps",
              "RPG shuffled calls")
BASELINES = RETRIEVERS[:3]


def tokenize(text: str) -> list[str]:
    """The one tokenizer of every retriever and query: identifiers split, stop words dropped."""
    return graph.words_of(text)


def bm25_scores(documents: list[list[str]], queries: list[list[str]], *, k1: float, b: float) -> np.ndarray:
    """BM25 (Lucene variant, ``bm25s``) scores, shape (queries, documents)."""
    import bm25s

    index = bm25s.BM25(k1=k1, b=b)
    index.index([d if d else [""] for d in documents], show_progress=False)
    out = np.zeros((len(queries), len(documents)))
    for i, q in enumerate(queries):
        known = [t for t in q if t in index.vocab_dict]
        if known:
            out[i] = index.get_scores(known)
    return out


def normalize(scores: np.ndarray) -> np.ndarray:
    top = scores.max(axis=1, keepdims=True)
    return np.divide(scores, top, out=np.zeros_like(scores), where=top > 0)


def propagate(scores: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``out[:, v] = max over edges u -> v of scores[:, u]`` (0 where ``v`` has no in-edge)."""
    out = np.zeros_like(scores)
    if src.size:
        np.maximum.at(out.T, dst, scores.T[src])
    return out


def group_max_excluding_self(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """For each function, the best score of another member of its group (0 if it is alone)."""
    out = np.zeros_like(scores)
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        if members.size < 2:
            continue
        block = scores[:, members]
        order = np.argsort(-block, axis=1, kind="stable")
        first = np.take_along_axis(block, order[:, :1], 1)
        second = np.take_along_axis(block, order[:, 1:2], 1)
        is_top = order[:, :1] == np.arange(members.size)[None, :]
        out[:, members] = np.where(is_top, second, first)
    return out


@dataclass
class RepoIndex:
    """What the retrievers see of one encoded repository."""

    functions: list  # function ids
    code: list  # tokens per function
    features: list  # tokens per function
    file_code: list  # tokens per file
    file_of: np.ndarray  # function -> file index
    parent_of: np.ndarray  # function -> parent (class or file) group id
    call_src: np.ndarray
    call_dst: np.ndarray


def build_index(rpg: graph.RPG, repo: dict) -> RepoIndex:
    funcs = sorted(k for k, e in rpg.entities.items() if e.kind == "function")
    files = sorted(rpg.parsed)
    fidx = {f: i for i, f in enumerate(files)}
    pos = {f: i for i, f in enumerate(funcs)}
    parents = {}
    parent_of = np.array([parents.setdefault(f.rsplit(".", 1)[0] if "." in f.split("::")[1] else f.split("::")[0],
                                             len(parents)) for f in funcs])
    calls = sorted((pos[s], pos[d]) for s, d, t in rpg.edges if t == "call" and s in pos and d in pos)
    src, dst = (np.array(x, dtype=int) for x in zip(*calls)) if calls else (np.zeros(0, int), np.zeros(0, int))
    return RepoIndex(funcs, [tokenize(rpg.entities[f].code) for f in funcs],
                     [tokenize(" ".join(rpg.features[f])) for f in funcs],
                     [tokenize(repo[p]) for p in files], np.array([fidx[f.split("::")[0]] for f in funcs]),
                     parent_of, src, dst)


def shuffled_calls(index: RepoIndex, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Call edges with the same callers and out-degrees, every target drawn at random (no self-loops)."""
    n = len(index.functions)
    dst = rng.integers(0, n - 1, index.call_src.size)
    dst = dst + (dst >= index.call_src)
    return index.call_src, dst


def expand(scores, alpha, hops, *, src=None, dst=None, groups=None, file_of=None):
    """``s + alpha * max(P1, beta * P2)`` along call edges (src/dst) or the containment tree (groups)."""
    if groups is not None:
        p1 = group_max_excluding_self(scores, groups)
        p2 = group_max_excluding_self(scores, file_of) if hops == 2 else 0 * p1
    else:
        p1 = propagate(scores, src, dst)
        p2 = propagate(p1, src, dst) if hops == 2 else 0 * p1
    return scores + alpha * np.maximum(p1, BETA * p2)


def rank_of_gold(scores: np.ndarray, gold: list[list[int]]) -> np.ndarray:
    """Pessimistic rank of the worst gold item (ties count against it); ``inf`` if gold is missing."""
    ranks = np.empty(len(gold))
    for i, g in enumerate(gold):
        if not g or min(g) < 0:
            ranks[i] = np.inf
            continue
        ranks[i] = max(int((scores[i] >= scores[i, j]).sum()) for j in g)
    return ranks


def acc_at_k(ranks: np.ndarray, k: int) -> np.ndarray:
    """Per-issue hit (all gold in the top ``k``), as 0/1 floats."""
    return (np.asarray(ranks) <= k).astype(float)


def score_all(index: RepoIndex, queries: list[str], k1: float, b: float, rng_seed: int) -> dict:
    """Per-retriever base score matrices for one (k1, b): the expensive part, shared by the grid."""
    q = [tokenize(t) for t in queries]
    code = normalize(bm25_scores(index.code, q, k1=k1, b=b))
    feats = normalize(bm25_scores(index.features, q, k1=k1, b=b))
    files = normalize(bm25_scores(index.file_code, q, k1=k1, b=b))
    src, dst = shuffled_calls(index, np.random.default_rng(rng_seed))
    return {"code": code, "features": feats, "file": files[:, index.file_of] + 1e-3 * code,
            "shuffled": (src, dst)}


def retriever_scores(name: str, index: RepoIndex, base: dict, alpha: float, hops: int) -> np.ndarray:
    calls = dict(src=index.call_src, dst=index.call_dst)
    if name == "BM25 file code":
        return base["file"]
    if name == "BM25 function code":
        return base["code"]
    if name == "BM25 features":
        return base["features"]
    if name == "RPG":
        return expand(base["features"], alpha, hops, **calls)
    if name == "RPG -features":
        return expand(base["code"], alpha, hops, **calls)
    if name == "RPG -deps":
        return expand(base["features"], alpha, hops, groups=index.parent_of, file_of=index.file_of)
    if name == "RPG shuffled calls":
        src, dst = base["shuffled"]
        return expand(base["features"], alpha, hops, src=src, dst=dst)
    raise ValueError(f"unknown retriever {name!r}; choose from {', '.join(RETRIEVERS)}")


def grid(name: str, k1s, bs, alphas, hops) -> list[tuple]:
    """The tuning grid of one retriever: (k1, b) for BM25, times (alpha, hops) for the graph ones."""
    if name in BASELINES:
        return [(k1, b, 0.0, 1) for k1, b in itertools.product(k1s, bs)]
    return [(k1, b, a, h) for k1, b, a, h in itertools.product(k1s, bs, alphas, hops)]
