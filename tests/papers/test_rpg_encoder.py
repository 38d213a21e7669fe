"""Tests for compendium.papers.rpg_encoder: parsing, resolution, lifter, update = rebuild, retrieval, tiny run."""

import json

import numpy as np
import pytest

from compendium import data
from compendium.papers import rpg_encoder as paper
from compendium.papers.rpg_encoder import corpus, graph, issues, retrieval

MINI = {
    "pkg/__init__.py": '"""A tiny package."""\nfrom .core import parse_header as parse\n',
    "pkg/core.py": ('import pkg.util as u\n\n\ndef parse_header(text, strict=False):\n    """Parse a header line."""\n'
                    '    return _split_fields(text) + u.clean(text)\n\n\ndef _split_fields(text):\n'
                    '    """Split fields on colons."""\n    return text.split(":")\n\n\nclass Base:\n'
                    '    def render(self):\n        return "x"\n\n\nclass Message(Base):\n    """A message."""\n\n'
                    '    def as_string(self):\n        """Render the message."""\n        return self.render()\n'),
    "pkg/util.py": 'def clean(text):\n    """Strip blanks."""\n    return [text.strip()]\n\n\ndef unused():\n    return 0\n',
    "pkg/sub/extra.py": 'from pkg import parse\n\n\ndef use(text):\n    return parse(text)\n',
}


@pytest.fixture(scope="module")
def mini():
    lifter = paper.Lifter()
    rpg, model = paper.encode(MINI, None, lifter, branching=2, seed=0)
    return rpg, model, lifter


# ---------------------------------------------------------------- parsing, lifting, resolution (shapes, known values)
def test_entities_and_metadata(mini):
    rpg, _, lifter = mini
    kinds = sorted(e.kind for e in rpg.entities.values())
    assert kinds.count("file") == 4 and kinds.count("class") == 2 and kinds.count("function") == 7
    e = rpg.entities["pkg/core.py::Message.as_string"]
    assert (e.kind, e.path, e.qualname, e.doc) == ("function", "pkg/core.py", "Message.as_string", "Render the message.")
    assert lifter.calls == len(rpg.entities)  # one lift per unit, one summary per file
    assert graph.module_name("a/b/__init__.py") == "a.b" and graph.module_name("a/b.py") == "a.b"


def test_lifter_features_are_verb_object_phrases(mini):
    rpg, _, _ = mini
    f = rpg.features["pkg/core.py::parse_header"]
    assert f[0] == "parse header" and "take text" in f and "take strict" in f and "call split fields" in f
    assert rpg.features["pkg/util.py::unused"][0] == "handle unused"
    assert graph.split_identifier("_parseHTTPHeader_v2") == ["parse", "http", "header", "v"]
    assert graph.split_identifier("getaddrlist") == ["getaddrlist"]


def test_dependency_edges_imports_alias_reexport_inheritance(mini):
    rpg, _, _ = mini
    e = rpg.edges
    assert ("pkg/core.py::parse_header", "pkg/core.py::_split_fields", "call") in e
    assert ("pkg/core.py::parse_header", "pkg/util.py::clean", "call") in e  # import pkg.util as u; u.clean()
    assert ("pkg/sub/extra.py::use", "pkg/core.py::parse_header", "call") in e  # re-export through __init__
    assert ("pkg/core.py::Message.as_string", "pkg/core.py::Base.render", "call") in e  # inheritance chain
    assert ("pkg/core.py::Message", "pkg/core.py::Base", "inherit") in e
    assert ("pkg/core.py", "pkg/util.py", "import") in e
    assert not any(d == "pkg/util.py::unused" for _, d, _ in e)


def test_fuzzy_rule_resolves_unique_methods_but_not_builtin_names():
    repo = {"m.py": ("class Header:\n    def append(self, x):\n        return x\n\n    def encode_all(self):\n        return 1\n\n\n"
                     "def f(items, h):\n    items.append(1)\n    return h.encode_all()\n")}
    edges = graph.resolve_edges({p: graph.parse_file(p, s) for p, s in repo.items()})
    assert ("m.py::f", "m.py::Header.encode_all", "call") in edges
    assert ("m.py::f", "m.py::Header.append", "call") not in edges


def test_fetch_and_explore_tools(mini):
    rpg, _, _ = mini
    node = paper.fetch_node(rpg, "pkg/core.py::parse_header")
    assert "def parse_header(text, strict=False):" in node["source"] and node["features"][0] == "parse header"
    down = paper.explore(rpg, "pkg/core.py::parse_header", edge_types=("call",))
    assert down == {"pkg/core.py::_split_fields", "pkg/util.py::clean"}
    assert paper.explore(rpg, "pkg/util.py::clean", direction="upstream", edge_types=("call",)) == {"pkg/core.py::parse_header"}
    two = paper.explore(rpg, "pkg/sub/extra.py::use", depth=2, edge_types=("call",))
    assert {"pkg/core.py::parse_header", "pkg/util.py::clean"} <= two
    assert "pkg/core.py::Message.as_string" in paper.explore(rpg, "pkg/core.py", depth=2, edge_types=("contains",))
    with pytest.raises(ValueError):
        paper.explore(rpg, "pkg/core.py", direction="sideways")
    with pytest.raises(ValueError):
        paper.fetch_node(rpg, "nope")


def test_unit_checks_hand_made():
    checks = paper.unit_checks()
    assert checks["lca"] and checks["alias"] and checks["inheritance"]


def test_lca_directory_known_values_and_errors():
    assert graph.lca_directory(["a/b/c.py", "a/b/d/e.py"]) == "a/b"
    assert graph.lca_directory(["ab/x.py", "abc/y.py"]) == ""  # components, not characters
    with pytest.raises(ValueError):
        graph.lca_directory([])


def test_hierarchy_has_no_empty_node_and_is_grounded(mini):
    rpg, _, _ = mini
    assert graph.empty_abstract_nodes(rpg) == 0
    assert all(len(leaf) == 3 for leaf in rpg.assignment.values())
    for node, directory in rpg.abstract.items():
        members = [f for f, leaf in rpg.assignment.items() if leaf[:len(node)] == node]
        assert directory == graph.lca_directory(members)


def test_skeleton_covers_every_entity(mini):
    assert graph.skeleton_coverage(mini[0]) == 1.0


# ---------------------------------------------------------------- update == rebuild (property) and its control
def test_update_equals_rebuild_on_random_diffs(mini):
    rpg, model, _ = mini
    rng = np.random.default_rng(3)
    for fraction in (0.2, 0.5):
        new, log = corpus.mutate(MINI, fraction, rng)
        assert log and new != MINI
        diff = graph.repo_diff(MINI, new)
        inc, full = graph.Lifter(), graph.Lifter()
        updated = graph.rpg_update(rpg, new, diff, model, inc)
        rebuilt, _ = graph.encode(new, model, full)
        assert updated.comparable() == rebuilt.comparable()
        assert inc.calls < full.calls and graph.empty_abstract_nodes(updated) == 0


def test_update_relifts_when_a_redefinitions_calls_change():
    # calls inside a property's setter (a second def of one name) are attributed to the getter,
    # whose own text does not change: the update must still lift it again (found at full scale)
    old = {"p.py": ("class A:\n    @property\n    def x(self):\n        return 1\n\n    @x.setter\n    def x(self, v):\n"
                    "        return v\n\n\ndef g():\n    return 0\n")}
    new = {"p.py": old["p.py"].replace("        return v\n", "        g()\n        return v\n")}
    rpg, model = graph.encode(old, None, graph.Lifter(), branching=2)
    updated = graph.rpg_update(rpg, new, graph.repo_diff(old, new), model, graph.Lifter())
    rebuilt, _ = graph.encode(new, model, graph.Lifter())
    assert "call g" in rebuilt.features["p.py::A.x"]
    assert updated.comparable() == rebuilt.comparable()


def test_deleting_a_file_prunes_its_abstract_nodes_and_edges(mini):
    rpg, model, _ = mini
    new = {p: s for p, s in MINI.items() if p != "pkg/sub/extra.py"}
    updated = graph.rpg_update(rpg, new, graph.repo_diff(MINI, new), model, graph.Lifter())
    rebuilt, _ = graph.encode(new, model, graph.Lifter())
    assert updated.comparable() == rebuilt.comparable() and graph.empty_abstract_nodes(updated) == 0


def test_stale_update_differs_when_a_callee_is_deleted_elsewhere(mini):
    rpg, model, _ = mini
    new = dict(MINI)
    new["pkg/util.py"] = 'def unused():\n    return 0\n'  # clean() deleted: core.parse_header's edge must go
    diff = graph.repo_diff(MINI, new)
    stale = graph.rpg_update(rpg, new, diff, model, graph.Lifter(), refresh_dependencies=False)
    rebuilt, _ = graph.encode(new, model, graph.Lifter())
    assert stale.comparable() != rebuilt.comparable()
    assert ("pkg/core.py::parse_header", "pkg/util.py::clean", "call") in stale.edges


def test_mutator_keeps_every_file_parseable_and_is_seeded():
    a, log_a = corpus.mutate(MINI, 0.5, np.random.default_rng(1))
    b, log_b = corpus.mutate(MINI, 0.5, np.random.default_rng(1))
    assert a == b and log_a == log_b
    for path, src in a.items():
        graph.parse_file(path, src)
    with pytest.raises(ValueError):
        corpus.mutate(MINI, 0.0, np.random.default_rng(0))


# ---------------------------------------------------------------- retrieval
def test_propagate_and_group_max_against_brute_force():
    rng = np.random.default_rng(0)
    S = rng.random((3, 6))
    src, dst = np.array([0, 1, 1, 4]), np.array([2, 2, 3, 5])
    P = retrieval.propagate(S, src, dst)
    for v in range(6):
        callers = [u for u, w in zip(src, dst) if w == v]
        np.testing.assert_allclose(P[:, v], S[:, callers].max(1) if callers else 0.0)
    groups = np.array([0, 0, 0, 1, 1, 2])
    G = retrieval.group_max_excluding_self(S, groups)
    for v in range(6):
        others = [u for u in range(6) if groups[u] == groups[v] and u != v]
        np.testing.assert_allclose(G[:, v], S[:, others].max(1) if others else 0.0)


def test_rank_is_pessimistic_on_ties_and_acc_at_k():
    scores = np.array([[0.5, 0.5, 0.1], [0.9, 0.2, 0.3]])
    ranks = retrieval.rank_of_gold(scores, [[0], [1, 2]])
    assert ranks.tolist() == [2, 3]
    assert retrieval.acc_at_k(ranks, 2).tolist() == [1.0, 0.0]


def test_bm25_prefers_the_matching_document():
    docs = [["parse", "header", "line"], ["render", "message"], ["split", "fields", "colon"]]
    s = retrieval.bm25_scores(docs, [["render", "message"], ["nothing"]], k1=1.2, b=0.75)
    assert s.shape == (2, 3) and s[0].argmax() == 1 and np.all(s[1] == 0)


# ---------------------------------------------------------------- data: corpus and frozen issues
def test_corpus_roundtrip_and_checksum():
    repo = corpus.load_repository("email")
    assert "email/message.py" in repo and all(p.startswith("email/") for p in repo)
    packed = corpus.stdlib_package("email")
    assert corpus.unpack(packed.data, packed.target) == repo
    assert data.read_manifest()["stdlib_email_source"]["sha256"] == data.canonical_sha256(packed.data, packed.target)


def test_frozen_issues_are_reproduced_by_the_generator():
    header = issues.frozen_header()
    frozen = issues.load_issues(["email"])
    again = issues.generate_all({"email": corpus.load_repository("email")}, header["max_pairs"])
    assert frozen == again and len(frozen) >= 2 * 50
    caller = [i for i in frozen if i["kind"] == "caller"]
    for i in caller[:50]:  # the helper's name words never appear in its caller issue
        hname = i["gold"][0].split("::")[1].rsplit(".", 1)[-1]
        assert not set(graph.split_identifier(hname)) & set(i["query"].split())


def test_two_hop_issues_are_two_calls_away_and_name_neither_callee():
    repo = {"m.py": ('def report_status(path, verbose):\n    """Report the status of a path."""\n    return gather_items(path)\n\n\n'
                     'def gather_items(path):\n    """Gather items."""\n    return parse_entry(path)\n\n\n'
                     'def parse_entry(path):\n    """Parse one entry."""\n    return path\n\n\n'
                     'def shortcut(path, verbose, level):\n    """Direct shortcut."""\n    return gather_items(path) or parse_entry(path)\n')}
    out = issues.generate_two_hop("email", repo, 10, np.random.default_rng(0))
    assert [(i["via"], i["middle"], i["gold"]) for i in out] == [("m.py::report_status", "m.py::gather_items", ["m.py::parse_entry"])]
    words = set(out[0]["query"].split())
    assert not words & {"gather", "items", "parse", "entry"} and out[0]["kind"] == "two_hop"
    # shortcut calls parse_entry directly as well: no two-hop issue from it
    email = corpus.load_repository("email")
    again = issues.generate_all_two_hop({"email": email}, 30)
    assert again == issues.generate_all_two_hop({"email": email}, 30) and len(again) == 30
    parsed = {p: graph.parse_file(p, src) for p, src in email.items()}
    calls = set(issues.exact_calls(parsed))
    for i in again:
        assert (i["via"], i["middle"]) in calls and (i["middle"], i["gold"][0]) in calls
        assert (i["via"], i["gold"][0]) not in calls


# ---------------------------------------------------------------- tiny run
def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        paper.Config(repositories=("nope",))
    with pytest.raises(ValueError):
        paper.Config(headline_k=7)
    with pytest.raises(ValueError):
        paper.Config(expansion_hops=(3,))


def test_tiny_run(tmp_path):
    config = paper.Config(issue_pairs=20, num_diffs=1, changed_fractions=(0.02,), bm25_k1=(1.2,), bm25_b=(0.75,),
                          expansion_alphas=(0.5,), expansion_hops=(1,), bootstrap_resamples=200)
    result = paper.run(config)
    m = paper.measurements(result)
    assert m["equal_fraction"] == 1.0 and m["empty_nodes"] == 0 and m["skeleton_coverage"] == 1.0
    assert result.unit_checks["issues_reproduced"]
    assert set(result.retrieval) == set(paper.RETRIEVERS)
    assert m["n_caller"] == m["n_direct"] > 0
    assert m["n_two_hop"] > 0 and set(result.two_hop) == set(paper.RETRIEVERS)
    assert all(i["kind"] == "two_hop" and i["split"] == "test" for i in result.two_hop_issues)
    assert -1 <= m["direct_acc1"].point <= 1
    table = paper.accuracy_table(result)
    for name in paper.RETRIEVERS:
        accs = [table[name][("caller", k)] for k in config.k_values]
        assert accs == sorted(accs)  # Acc@k grows with k
