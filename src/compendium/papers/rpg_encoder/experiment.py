"""The RPG-Encoder experiment: encode, evolve, localize; the statistics every verdict uses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compendium import stats
from compendium.validation import require_int

from . import corpus, graph, issues as issue_set, retrieval


@dataclass(frozen=True)
class Config:
    """One scale of the chapter (registry parameters plus ``seed``)."""

    seed: int = 0
    repositories: tuple = ("email",)
    issue_pairs: int = 300
    num_diffs: int = 4
    changed_fractions: tuple = (0.01, 0.02, 0.05, 0.1)
    branching: int = 3
    bm25_k1: tuple = (0.9, 1.2, 1.5)
    bm25_b: tuple = (0.4, 0.75, 1.0)
    expansion_alphas: tuple = (0.25, 0.5, 1.0)
    expansion_hops: tuple = (1, 2)
    headline_k: int = 5
    k_values: tuple = (1, 3, 5, 10)
    bootstrap_resamples: int = 2000

    def __post_init__(self):
        for name, cast in (("repositories", str), ("changed_fractions", float), ("bm25_k1", float), ("bm25_b", float),
                           ("expansion_alphas", float), ("expansion_hops", int), ("k_values", int)):
            object.__setattr__(self, name, tuple(cast(v) for v in getattr(self, name)))
        require_int("seed", self.seed, 0, 2**31 - 1)
        require_int("issue_pairs", self.issue_pairs, 10, 1000)
        require_int("num_diffs", self.num_diffs, 1, 100)
        require_int("branching", self.branching, 2, 8)
        require_int("headline_k", self.headline_k, 1, 50)
        require_int("bootstrap_resamples", self.bootstrap_resamples, 200, 100000)
        bad = [r for r in self.repositories if r not in corpus.PACKAGES]
        if not self.repositories or bad:
            raise ValueError(f"repositories must be a non-empty subset of {corpus.PACKAGES}, got {self.repositories}")
        if any(not 0 < f <= 0.5 for f in self.changed_fractions):
            raise ValueError(f"changed_fractions must lie in (0, 0.5], got {self.changed_fractions}")
        if any(h not in (1, 2) for h in self.expansion_hops):
            raise ValueError(f"expansion_hops must be 1 or 2, got {self.expansion_hops}")
        if self.headline_k not in self.k_values:
            raise ValueError(f"headline_k {self.headline_k} must be one of k_values {self.k_values}")


@dataclass
class Result:
    config: Config
    encodings: dict  # repo -> summary (sizes, lifter calls, abstract nodes)
    diffs: list  # one dict per (repo, diff)
    retrieval: dict  # retriever -> {"params", "dev_acc", "ranks": per test issue}
    test_issues: list
    unit_checks: dict
    example: dict = field(default_factory=dict)
    two_hop: dict = field(default_factory=dict)  # retriever -> {"params", "dev_acc", "ranks"} on the two-hop split
    two_hop_issues: list = field(default_factory=list)  # its test issues


def _entity_changes(v1: graph.RPG, v2: graph.RPG) -> int:
    a, b = v1.entities, v2.entities
    return len(set(a) ^ set(b)) + sum(a[k].key != b[k].key for k in set(a) & set(b))


def evolve(repo: dict, rpg: graph.RPG, model: graph.HierarchyModel, fraction: float, rng, branching: int,
           seed: int) -> dict:
    """One diff: mutate, update incrementally, rebuild, compare; the costs and the ARI."""
    from sklearn.metrics import adjusted_rand_score

    new, log = corpus.mutate(repo, fraction, rng)
    diff = graph.repo_diff(repo, new)
    inc, full = graph.Lifter(), graph.Lifter()
    updated = graph.rpg_update(rpg, new, diff, model, inc)
    rebuilt, _ = graph.encode(new, model, full)
    stale = graph.rpg_update(rpg, new, diff, model, graph.Lifter(), refresh_dependencies=False, prune=False)
    touched = set(diff.added) | set(diff.modified)
    file_level = sum(len(rebuilt.parsed[p].entities) for p in touched)  # every unit + the summary of a touched file
    refit = graph.fit_hierarchy(list(rebuilt.documents.values()), branching=branching, seed=seed)
    leaves = list(rebuilt.assignment.values())
    ari = adjusted_rand_score([str(x) for x in leaves], [str(x) for x in refit.assign(list(rebuilt.documents.values()))])
    ops = {op: sum(o == op for o, _ in log) for op in corpus.OPERATIONS}
    return {"target_fraction": fraction, "changed_fraction": _entity_changes(rpg, rebuilt) / len(rpg.entities),
            "incremental_calls": inc.calls, "full_calls": full.calls, "file_level_calls": file_level,
            "equal": updated.comparable() == rebuilt.comparable(), "stale_equal": stale.comparable() == rebuilt.comparable(),
            "empty_nodes": graph.empty_abstract_nodes(updated), "ari": float(ari), "operations": ops}


def _tune_and_test(indexes: dict, dev: list, test: list, config: Config) -> dict:
    """Tune every retriever on the pooled dev issues (Acc@headline_k), then rank the test issues."""
    by = {}
    for part, group in (("dev", dev), ("test", test)):
        for repo in config.repositories:
            by[(part, repo)] = [i for i in group if i["repo"] == repo]
    pos = {repo: {f: j for j, f in enumerate(ix.functions)} for repo, ix in indexes.items()}
    gold = {key: [[pos[key[1]].get(g, -1) for g in i["gold"]] for i in group] for key, group in by.items()}
    bases = {}
    for k1 in config.bm25_k1:
        for b in config.bm25_b:
            for (part, repo), group in by.items():
                bases[(k1, b, part, repo)] = retrieval.score_all(indexes[repo], [i["query"] for i in group], k1, b,
                                                                 config.seed + 7919 * config.repositories.index(repo))

    def ranks(name, params, part):
        k1, b, alpha, hops = params
        return np.concatenate([retrieval.rank_of_gold(
            retrieval.retriever_scores(name, indexes[repo], bases[(k1, b, part, repo)], alpha, hops), gold[(part, repo)])
            for repo in config.repositories])

    out = {}
    for name in retrieval.RETRIEVERS:
        if name == "RPG shuffled calls":
            continue
        grid = retrieval.grid(name, config.bm25_k1, config.bm25_b, config.expansion_alphas, config.expansion_hops)
        dev_acc = [retrieval.acc_at_k(ranks(name, p, "dev"), config.headline_k).mean() for p in grid]
        best = grid[int(np.argmax(dev_acc))]  # first best in grid order
        out[name] = {"params": best, "dev_acc": float(max(dev_acc)), "ranks": ranks(name, best, "test")}
    params = out["RPG"]["params"]
    out["RPG shuffled calls"] = {"params": params, "dev_acc": float("nan"), "ranks": ranks("RPG shuffled calls", params, "test")}
    return out


def unit_checks() -> dict:
    """Hand-made inputs for the implementation rows (LCA, alias resolution, inheritance, skeleton)."""
    lca_cases = [(["a/b/c.py", "a/b/d.py"], "a/b"), (["a/b/c.py", "a/e/f.py"], "a"), (["x.py", "a/b.py"], ""),
                 (["pkg/sub/deep/m.py"], "pkg/sub/deep"), (["pkg/ab/x.py", "pkg/abc/y.py"], "pkg")]
    lca_ok = all(graph.lca_directory(paths) == want for paths, want in lca_cases)
    alias_repo = {"a/__init__.py": "", "a/b.py": "def f():\n    return 1\n",
                  "main.py": "import a.b as c\n\ndef g():\n    return c.f()\n",
                  "reexport.py": "from a.b import f as h\n", "user.py": "import reexport\n\ndef k():\n    return reexport.h()\n"}
    parsed = {p: graph.parse_file(p, s) for p, s in alias_repo.items()}
    edges = graph.resolve_edges(parsed)
    alias_ok = ("main.py::g", "a/b.py::f", "call") in edges and ("user.py::k", "a/b.py::f", "call") in edges
    chain = ("class A:\n    def m(self):\n        return 0\n\nclass B(A):\n    pass\n\n"
             "class C(B):\n    def f(self):\n        return self.m()\n\nclass D(C):\n    def m(self):\n        return 1\n")
    parsed = {"k.py": graph.parse_file("k.py", chain)}
    edges = graph.resolve_edges(parsed)
    inherit_ok = (("k.py::C.f", "k.py::A.m", "call") in edges and ("k.py::C", "k.py::B", "inherit") in edges
                  and not any(e[0] == "k.py::C.f" and e[1] == "k.py::D.m" for e in edges))
    return {"lca": lca_ok, "lca_cases": len(lca_cases), "alias": alias_ok, "inheritance": inherit_ok}


def run(config: Config) -> Result:
    """Encode each repository, evolve it through ``num_diffs`` diffs, and run the localization benchmark."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(config.seed)
    encodings, diffs, indexes, repos = {}, [], {}, {}
    with threadpool_limits(1):
        for name in config.repositories:
            repo = corpus.load_repository(name)
            repos[name] = repo
            lifter = graph.Lifter()
            rpg, model = graph.encode(repo, None, lifter, branching=config.branching, seed=config.seed)
            kinds = [e.kind for e in rpg.entities.values()]
            encodings[name] = {"files": kinds.count("file"), "classes": kinds.count("class"),
                               "functions": kinds.count("function"), "lifter_calls": lifter.calls,
                               "edges": {t: sum(e[2] == t for e in rpg.edges) for t in ("import", "inherit", "call")},
                               "abstract_nodes": len(rpg.abstract), "skeleton_coverage": graph.skeleton_coverage(rpg),
                               "rpg": rpg}
            for d in range(config.num_diffs):
                fraction = config.changed_fractions[d % len(config.changed_fractions)]
                diffs.append({"repo": name, **evolve(repo, rpg, model, fraction, rng, config.branching, config.seed)})
            indexes[name] = retrieval.build_index(rpg, repo)
        frozen = issue_set.load_issues(config.repositories)
        chosen = [i for i in frozen if int(i["id"].split("-")[1]) < config.issue_pairs]
        dev = [i for i in chosen if i["split"] == "dev"]
        test = [i for i in chosen if i["split"] == "test"]
        results = _tune_and_test(indexes, dev, test, config)
        # the two-hop split: generated by a fixed rule and seed; every retriever tuned on its own dev issues
        chains = issue_set.generate_all_two_hop({n: repos[n] for n in config.repositories}, config.issue_pairs)
        two_dev = [i for i in chains if i["split"] == "dev"]
        two_test = [i for i in chains if i["split"] == "test"]
        two_hop = _tune_and_test(indexes, two_dev, two_test, config)
    regenerated = issue_set.generate_all({n: repos[n] for n in config.repositories},
                                         max_pairs=issue_set.frozen_header()["max_pairs"])
    checks = unit_checks()
    checks["issues_reproduced"] = bool(frozen) and frozen == regenerated
    return Result(config, encodings, diffs, results, test, checks, two_hop=two_hop, two_hop_issues=two_test)


def accuracy_table(result: Result) -> dict:
    """Acc@k on the test split: ``{retriever: {(kind, k): accuracy}}``."""
    kinds = np.array([i["kind"] for i in result.test_issues])
    return {name: {(kind, k): float(retrieval.acc_at_k(r["ranks"][kinds == kind], k).mean())
                   for kind in ("caller", "direct") for k in result.config.k_values}
            for name, r in result.retrieval.items()}


def per_repository(result: Result) -> dict:
    """Caller-split Acc@headline_k per repository: ``{repo: {retriever: accuracy, "issues": n}}``."""
    k = result.config.headline_k
    repos = np.array([i["repo"] for i in result.test_issues])
    caller = np.array([i["kind"] == "caller" for i in result.test_issues])
    out = {}
    for repo in result.config.repositories:
        mask = caller & (repos == repo)
        out[repo] = {name: float(retrieval.acc_at_k(r["ranks"][mask], k).mean()) for name, r in result.retrieval.items()}
        out[repo]["issues"] = int(mask.sum())
    return out


def measurements(result: Result) -> dict:
    """Every number a verdict uses (estimates over test issues or over diffs)."""
    c, k = result.config, result.config.headline_k
    kinds = np.array([i["kind"] for i in result.test_issues])
    caller, direct = kinds == "caller", kinds == "direct"
    hits = {n: retrieval.acc_at_k(r["ranks"], k) for n, r in result.retrieval.items()}
    best = max(retrieval.BASELINES, key=lambda n: hits[n][caller].mean())  # first of the tied best

    gold = np.array([i["repo"] + ":" + i["gold"][0] for i in result.test_issues])

    def paired(a, b, mask, unit):  # issues sharing a gold function are one cluster
        return stats.cluster_bootstrap(hits[a][mask] - hits[b][mask], clusters=gold[mask], unit=unit,
                                       rng=np.random.default_rng(c.seed), resamples=c.bootstrap_resamples)

    caller_unit, direct_unit = "gold functions (caller split)", "gold functions (direct split)"
    d = result.diffs
    ratio = np.array([x["incremental_calls"] / x["full_calls"] for x in d])
    changed = np.array([x["changed_fraction"] for x in d])
    file_level = np.array([x["file_level_calls"] / x["full_calls"] for x in d])
    small = changed <= 0.05
    return {
        "best_baseline": best,
        "headline": paired("RPG", best, caller, caller_unit),
        "direct_vs_features": paired("RPG", "BM25 features", direct, direct_unit),
        "shuffled_vs_best": paired("RPG shuffled calls", best, caller, caller_unit),
        "minus_features": paired("RPG", "RPG -features", caller, caller_unit),
        "minus_deps": paired("RPG", "RPG -deps", caller, caller_unit),
        "headroom": stats.cluster_bootstrap(hits[best][caller], clusters=gold[caller], unit=caller_unit,
                                         rng=np.random.default_rng(c.seed), resamples=c.bootstrap_resamples),
        "direct_acc1": stats.cluster_bootstrap(
            retrieval.acc_at_k(result.retrieval["RPG"]["ranks"][direct], 1)
            - retrieval.acc_at_k(result.retrieval["BM25 features"]["ranks"][direct], 1),
            clusters=gold[direct], unit=direct_unit, rng=np.random.default_rng(c.seed), resamples=c.bootstrap_resamples),
        "direct_acc1_features": float(retrieval.acc_at_k(result.retrieval["BM25 features"]["ranks"][direct], 1).mean()),
        "direct_acc1_rpg": float(retrieval.acc_at_k(result.retrieval["RPG"]["ranks"][direct], 1).mean()),
        **two_hop_measurements(result),
        "rpg_caller": float(hits["RPG"][caller].mean()), "best_caller": float(hits[best][caller].mean()),
        "n_caller": int(caller.sum()), "n_direct": int(direct.sum()),
        "n_gold_caller": int(np.unique(gold[caller]).size),
        "equal_fraction": float(np.mean([x["equal"] for x in d])),
        "stale_equal_fraction": float(np.mean([x["stale_equal"] for x in d])),
        "empty_nodes": int(sum(x["empty_nodes"] for x in d)),
        "cost_excess": float(np.max(ratio - changed)),
        "saving_small": float(np.min(1 - ratio[small])) if small.any() else float("nan"),
        "file_level_saving_small": float(np.min(1 - file_level[small])) if small.any() else float("nan"),
        "n_small": int(small.sum()), "n_diffs": len(d),
        "ari_mean": float(np.mean([x["ari"] for x in d])), "ari_min": float(np.min([x["ari"] for x in d])),
        "skeleton_coverage": float(min(e["skeleton_coverage"] for e in result.encodings.values())),
    }


def two_hop_measurements(result: Result) -> dict:
    """The two-hop split's estimates: RPG and its shuffled-call control against the best BM25 baseline
    (Acc@headline_k, cluster bootstrap over gold functions), the baseline's headroom, the tuned settings."""
    c, k = result.config, result.config.headline_k
    if not result.two_hop_issues:
        return {"n_two_hop": 0}
    hits = {n: retrieval.acc_at_k(r["ranks"], k) for n, r in result.two_hop.items()}
    best = max(retrieval.BASELINES, key=lambda n: hits[n].mean())
    gold = np.array([i["repo"] + ":" + i["gold"][0] for i in result.two_hop_issues])
    unit = "gold functions (two-hop split)"

    def boot(values):
        return stats.cluster_bootstrap(values, clusters=gold, unit=unit, rng=np.random.default_rng(c.seed),
                                       resamples=c.bootstrap_resamples)

    return {"best_baseline_two_hop": best, "two_hop_headline": boot(hits["RPG"] - hits[best]),
            "two_hop_shuffled": boot(hits["RPG shuffled calls"] - hits[best]), "two_hop_headroom": boot(hits[best]),
            "two_hop_minus_deps": boot(hits["RPG"] - hits["RPG -deps"]),
            "rpg_two_hop": float(hits["RPG"].mean()), "best_two_hop": float(hits[best].mean()),
            "n_two_hop": len(gold), "n_gold_two_hop": int(np.unique(gold).size),
            "two_hop_params": result.two_hop["RPG"]["params"]}


def two_hop_table(result: Result) -> dict:
    """Acc@k of every retriever on the two-hop test issues, with its tuned setting."""
    return {name: {**{f"two-hop Acc@{k}": float(retrieval.acc_at_k(r["ranks"], k).mean()) for k in result.config.k_values},
                   "k1, b, alpha, hops (two-hop dev)": r["params"], "dev Acc@5": r["dev_acc"]}
            for name, r in result.two_hop.items()}
