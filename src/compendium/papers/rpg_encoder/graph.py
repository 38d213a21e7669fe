"""The repository planning graph: a deterministic lifter, the 3-level hierarchy fitted once and
grounded by LCA directories, full encoding and the incremental update (parsing and dependency
edges live in ``parsing.py`` and are re-exported here).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .parsing import (BUILTIN_METHODS, Entity, ParsedFile, SymbolTable, _sha, lca_directory, module_name,  # noqa: F401
                      parse_file, resolve_edges)

STOPWORDS = frozenset("""a an and are as at be been but by for from has have if in into is it its of on or
that the their then there these this those to was were will with not no do does can may should would
self cls none true false return def class none args kwargs""".split())

#: Words accepted as the verb of a verb-object phrase; any other name gets "handle" in front.
VERBS = frozenset("""add append apply build call check clear close compute convert copy create decode
delete encode ensure find flush format get handle init is load make match open parse pop process put
read register remove render replace reset resolve run save send set split start stop update validate
walk write emit fold get_ iter join quote unquote""".split())


# ------------------------------------------------------------------------------------------------
# The deterministic lifter (stands in for the LLM)
# ------------------------------------------------------------------------------------------------

def split_identifier(name: str) -> list[str]:
    """``"_parseHeader_v2"`` -> ``["parse", "header", "v2"]`` (snake and camel case, lower case)."""
    words = []
    for chunk in re.split(r"[^0-9A-Za-z]+", name):
        words += re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+[a-z]*", chunk)
    return [w.lower() for w in words if w and not w.isdigit()]


def words_of(text: str) -> list[str]:
    """Content words of free text or code: identifiers split, lower case, stop words dropped."""
    return [w for w in split_identifier(text) if w not in STOPWORDS and len(w) > 1]


def verb_object(words: list[str]) -> str:
    """A verb-object phrase from a name's words: keep a leading verb, else prefix "handle"."""
    if not words:
        return ""
    return " ".join(words) if words[0] in VERBS else "handle " + " ".join(words)


class Lifter:
    """Deterministic semantic lifting; ``calls`` counts invocations (the cost an LLM would bill).

    A function's features: its name as a verb-object phrase, the content words of the first
    docstring sentence, ``take <argument>`` per argument, ``call <callee>`` per distinct called
    name. A class's: name phrase, docstring words, ``extend <base>``, ``provide <method>``. A
    file's summary: the module name and the eight most frequent words of its units' features.
    """

    def __init__(self):
        self.calls = 0

    def lift_unit(self, entity: Entity, callees: tuple = ()) -> tuple:
        self.calls += 1
        name = entity.qualname.rsplit(".", 1)[-1]
        feats = [verb_object(split_identifier(name))]
        doc = " ".join(words_of(entity.doc))
        if doc:
            feats.append(doc)
        if entity.kind == "function":
            feats += [f"take {' '.join(split_identifier(a))}" for a in entity.args if split_identifier(a)]
            feats += [f"call {' '.join(split_identifier(c))}" for c in callees if split_identifier(c)]
        else:
            feats += [f"extend {' '.join(split_identifier(b))}" for b in entity.bases if split_identifier(b)]
            methods = entity.code.split("\n", 1)[1].split() if "\n" in entity.code else []
            feats += [f"provide {' '.join(split_identifier(m))}" for m in methods if split_identifier(m)]
        return tuple(dict.fromkeys(f for f in feats if f))

    def summarize_file(self, entity: Entity, unit_features) -> tuple:
        self.calls += 1
        counts = Counter(w for feats in unit_features for f in feats for w in f.split()
                         if w not in ("take", "call", "handle", "extend", "provide"))
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
        head = f"module {' '.join(split_identifier(module_name(entity.path)))}"
        return (head, "about " + " ".join(w for w, _ in top)) if top else (head,)


def callee_names(parsed: ParsedFile) -> dict[str, tuple]:
    """The called names (last component) of each function, from its references."""
    out: dict[str, list] = {}
    for src, kind, target in parsed.refs:
        if kind == "call":
            out.setdefault(src, []).append(target[-1])
    return {k: tuple(sorted(set(v))) for k, v in out.items()}


def file_unit_key(parsed: ParsedFile, features: dict) -> str:
    """What a file summary depends on: its units and their features."""
    return _sha(repr([(e.id, features[e.id]) for e in parsed.entities[1:]]))


# ------------------------------------------------------------------------------------------------
# Hierarchy (fitted once) and LCA grounding
# ------------------------------------------------------------------------------------------------

def file_document(file_id: str, features: dict, parsed: ParsedFile) -> str:
    """The text a file is clustered by: its summary and its units' features."""
    return " ".join(f for e in parsed.entities for f in features[e.id])


@dataclass
class HierarchyModel:
    """TF-IDF vocabulary and a tree of k-means centroids (levels x branching), fitted on one version."""

    vectorizer: object
    centroids: dict  # node path tuple -> (children's centroid matrix, children's names)

    def assign(self, documents: list[str]) -> list[tuple]:
        if not documents:
            return []
        X = self.vectorizer.transform(documents).toarray()
        out = []
        for x in X:
            node = ()
            while node in self.centroids:
                C, names = self.centroids[node]
                node = names[int(np.argmin(((C - x) ** 2).sum(1)))]
            out.append(node)
        return out


def fit_hierarchy(documents: list[str], *, levels: int = 3, branching: int = 3, seed: int = 0) -> HierarchyModel:
    """Fit the functional hierarchy: recursive k-means on TF-IDF file vectors (Area/Category/Subcategory)."""
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not documents:
        raise ValueError("fit_hierarchy needs at least one document")
    vec = TfidfVectorizer(token_pattern=r"[a-z][a-z0-9]+", sublinear_tf=True).fit(documents)
    X = vec.transform(documents).toarray()
    centroids: dict = {}
    labels = ("A", "C", "S")

    def split(node: tuple, rows: np.ndarray, depth: int):
        if depth == levels:
            return
        distinct = np.unique(X[rows], axis=0).shape[0]
        k = max(1, min(branching, distinct))
        if k == 1:
            C, assign = X[rows].mean(0, keepdims=True), np.zeros(rows.size, int)
        else:
            km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(X[rows])
            C, assign = km.cluster_centers_, km.labels_
        names = [node + (f"{labels[depth % 3]}{j}",) for j in range(C.shape[0])]
        centroids[node] = (C, names)
        for j, child in enumerate(names):
            split(child, rows[assign == j], depth + 1)

    split((), np.arange(len(documents)), 0)
    return HierarchyModel(vec, centroids)


def abstract_nodes(assignment: dict) -> dict:
    """V_H: every node on a file's path (no empty node), grounded at the LCA directory of its files."""
    members: dict[tuple, list] = {}
    for file_id, leaf in assignment.items():
        for d in range(1, len(leaf) + 1):
            members.setdefault(leaf[:d], []).append(file_id)
    return {node: lca_directory(files) for node, files in sorted(members.items())}


# ------------------------------------------------------------------------------------------------
# Encoding and the incremental update
# ------------------------------------------------------------------------------------------------

@dataclass
class RPG:
    """An encoded repository: metadata, features, dependency edges, file -> hierarchy leaf, V_H."""

    parsed: dict  # path -> ParsedFile
    entities: dict  # id -> Entity (metadata)
    features: dict  # id -> tuple of phrases
    file_keys: dict  # file id -> key of its summary's input
    edges: frozenset
    assignment: dict  # file id -> leaf path
    abstract: dict  # V_H node -> LCA directory
    documents: dict = field(default_factory=dict)  # file id -> clustering text

    def comparable(self) -> dict:
        """Everything the update must reproduce, in plain containers."""
        return {"nodes": {k: (e.kind, e.path, e.qualname, e.lineno, e.end_lineno) for k, e in self.entities.items()},
                "features": dict(self.features), "edges": self.edges, "assignment": dict(self.assignment),
                "abstract": dict(self.abstract)}


def encode(repo: dict, model: HierarchyModel | None, lifter: Lifter, *, levels: int = 3, branching: int = 3,
           seed: int = 0) -> tuple[RPG, HierarchyModel]:
    """Encode a repository from scratch (lift every unit and file); fit the hierarchy if ``model`` is None."""
    parsed = {path: parse_file(path, src) for path, src in sorted(repo.items())}
    entities, features, file_keys = {}, {}, {}
    for p in parsed.values():
        calls = callee_names(p)
        for e in p.entities[1:]:
            entities[e.id] = e
            features[e.id] = lifter.lift_unit(e, calls.get(e.id, ()))
        f = p.entities[0]
        entities[f.id] = f
        features[f.id] = lifter.summarize_file(f, [features[e.id] for e in p.entities[1:]])
        file_keys[f.id] = file_unit_key(p, features)
    docs = {path: file_document(path, features, p) for path, p in parsed.items()}
    if model is None:
        model = fit_hierarchy(list(docs.values()), levels=levels, branching=branching, seed=seed)
    assignment = dict(zip(docs, model.assign(list(docs.values()))))
    rpg = RPG(parsed, entities, features, file_keys, resolve_edges(parsed), assignment, abstract_nodes(assignment), docs)
    return rpg, model


@dataclass(frozen=True)
class RepoDiff:
    added: tuple
    deleted: tuple
    modified: tuple


def repo_diff(old: dict, new: dict) -> RepoDiff:
    """Files added, deleted and modified (text differs) between two versions."""
    return RepoDiff(tuple(sorted(set(new) - set(old))), tuple(sorted(set(old) - set(new))),
                    tuple(sorted(p for p in set(old) & set(new) if old[p] != new[p])))


def rpg_update(rpg: RPG, new_repo: dict, diff: RepoDiff, model: HierarchyModel, lifter: Lifter, *,
               refresh_dependencies: bool = True, prune: bool = True) -> RPG:
    """Evolve an encoding with a diff: lift only what changed, refresh edges, reassign and prune.

    Only added and modified files are parsed. A unit is lifted again only if its key changed (its
    source for functions, its header for classes); a file summary only if its units or their
    features changed. Dependency edges are re-resolved from the stored per-file references (a
    dictionary pass, no parsing of untouched files), since a deletion or a move elsewhere can
    retarget an untouched file's call. A file whose features changed is reassigned by the fitted
    model, and V_H nodes that lose their last file are removed, recursively up the tree.
    ``refresh_dependencies=False`` / ``prune=False`` give the broken variants used as a control.
    """
    parsed = dict(rpg.parsed)
    entities, features, file_keys = dict(rpg.entities), dict(rpg.features), dict(rpg.file_keys)
    assignment, documents = dict(rpg.assignment), dict(rpg.documents)
    abstract = dict(rpg.abstract)
    touched = set()
    for path in diff.deleted:
        for e in parsed.pop(path).entities:
            entities.pop(e.id, None)
            features.pop(e.id, None)
        file_keys.pop(path, None)
        documents.pop(path, None)
        touched.add(assignment.pop(path))
    for path in (*diff.added, *diff.modified):
        old = parsed.get(path)
        p = parse_file(path, new_repo[path])
        parsed[path] = p
        new_ids = {e.id for e in p.entities}
        if old is not None:
            for e in old.entities:
                if e.id not in new_ids:
                    entities.pop(e.id, None)
                    features.pop(e.id, None)
        calls = callee_names(p)
        old_calls = callee_names(old) if old is not None else {}
        for e in p.entities[1:]:
            before = entities.get(e.id)
            # lift again when anything the lifter reads changed: the unit's own text, or the callee
            # names attributed to it (a redefinition's calls are attributed to the first definition)
            if (before is None or before.key != e.key or features.get(e.id) is None
                    or old_calls.get(e.id, ()) != calls.get(e.id, ())):
                features[e.id] = lifter.lift_unit(e, calls.get(e.id, ()))
            entities[e.id] = e
        f = p.entities[0]
        entities[f.id] = f
        key = file_unit_key(p, features)
        if file_keys.get(f.id) != key:
            features[f.id] = lifter.summarize_file(f, [features[e.id] for e in p.entities[1:]])
            file_keys[f.id] = key
        documents[path] = file_document(path, features, p)
        leaf = model.assign([documents[path]])[0]
        if assignment.get(path) != leaf:
            if path in assignment:
                touched.add(assignment[path])
            assignment[path] = leaf
        touched.add(leaf)
    if refresh_dependencies:
        edges = resolve_edges(parsed)
    else:  # broken: keep untouched files' old edges, resolve only the touched files' references
        changed = set(diff.added) | set(diff.modified) | set(diff.deleted)
        kept = {e for e in rpg.edges if e[0].split("::")[0] not in changed}
        edges = frozenset(kept | {e for e in resolve_edges(parsed) if e[0].split("::")[0] in changed})
    # V_H maintenance: recompute members only along the touched paths, prune the empty ones upward
    for leaf in touched:
        for d in range(len(leaf), 0, -1):
            node = leaf[:d]
            members = [fid for fid, lf in assignment.items() if lf[:d] == node]
            if members:
                abstract[node] = lca_directory(members)
            elif prune:
                abstract.pop(node, None)
    abstract = dict(sorted(abstract.items()))
    return RPG(parsed, entities, features, file_keys, edges, assignment, abstract, documents)


def empty_abstract_nodes(rpg: RPG) -> int:
    """V_H nodes with no file below them (must be 0)."""
    used = {leaf[:d] for leaf in rpg.assignment.values() for d in range(1, len(leaf) + 1)}
    return sum(node not in used for node in rpg.abstract)


def skeleton(rpg: RPG) -> dict:
    """Regenerate each file's skeleton (classes, signatures, nesting) from metadata alone."""
    out = {}
    for path, p in rpg.parsed.items():
        units = sorted((e for e in p.entities[1:]), key=lambda e: (e.lineno, e.qualname.count(".")))
        lines = []
        for e in units:
            depth = e.qualname.count(".")
            name = e.qualname.rsplit(".", 1)[-1].split("#")[0]
            pad = "    " * depth
            if e.kind == "class":
                lines.append(f"{pad}class {name}({', '.join(e.bases)}):")
            else:
                lines.append(f"{pad}def {name}({', '.join(e.args)}):")
            lines.append(f"{pad}    ...")
        out[path] = "\n".join(lines) + "\n"
    return out


def skeleton_coverage(rpg: RPG) -> float:
    """Share of the encoding's classes and functions that the skeleton, parsed again, contains."""
    want = {e.id for e in rpg.entities.values() if e.kind != "file"}
    got = set()
    for path, text in skeleton(rpg).items():
        got |= {e.id for e in parse_file(path, text).entities[1:]}
    return len(want & got) / max(1, len(want))


# ------------------------------------------------------------------------------------------------
# Operation tools: FetchNode and ExploreRPG (SearchNode is BM25 in retrieval.py)
# ------------------------------------------------------------------------------------------------

def fetch_node(rpg: RPG, node_id: str) -> dict:
    """FetchNode: a node's features, metadata and source (the unit's lines; a file's whole text)."""
    if node_id not in rpg.entities:
        raise ValueError(f"unknown node {node_id!r}")
    e = rpg.entities[node_id]
    return {"features": rpg.features[node_id], "kind": e.kind, "path": e.path, "qualname": e.qualname,
            "lines": (e.lineno, e.end_lineno), "source": e.code if e.kind == "function" else None}


def containment_edges(rpg: RPG) -> set:
    """(parent, child, "contains"): file -> top-level unit, class -> method, function -> nested def."""
    out = set()
    for eid, e in rpg.entities.items():
        if e.kind == "file":
            continue
        parent = f"{e.path}::{e.qualname.rsplit('.', 1)[0]}" if "." in e.qualname else e.path
        out.add((parent if parent in rpg.entities else e.path, eid, "contains"))
    return out


def explore(rpg: RPG, node_id: str, *, direction: str = "downstream", depth: int = 1,
            edge_types=("call", "inherit", "import", "contains")) -> set:
    """ExploreRPG: nodes within ``depth`` steps along the chosen edge types, not counting the start."""
    if direction not in ("downstream", "upstream", "both"):
        raise ValueError(f"direction must be 'downstream', 'upstream' or 'both', got {direction!r}")
    edges = [e for e in (*rpg.edges, *containment_edges(rpg)) if e[2] in edge_types]
    step = {}
    for s, d, _ in edges:
        if direction in ("downstream", "both"):
            step.setdefault(s, set()).add(d)
        if direction in ("upstream", "both"):
            step.setdefault(d, set()).add(s)
    seen, frontier = {node_id}, {node_id}
    for _ in range(depth):
        frontier = {n for f in frontier for n in step.get(f, ())} - seen
        seen |= frontier
    return seen - {node_id}
