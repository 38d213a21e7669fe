r"""RPG-Encoder: a repository planning graph of lifted features and code dependencies.

Paper card
----------
"RPG-Encoder: Repository Planning Graph as a unified code representation" (ICML 2026), seed file
``002_d926b147087f7228.txt``, abstract 18. The paper body and code were not read here: the
method follows the abstract and the project's research card (which summarises the authors'
public repository); where a formula is ours it says so.

What is implemented
-------------------
- The graph :math:`G = (V_H \cup V_L, E_{feature} \cup E_{dep})`: :math:`V_L` = files, classes and
  functions with features :math:`f` and metadata :math:`m` (kind, path, name, line range);
  :math:`V_H` = a 3-level hierarchy (area / category / subcategory) of k-means centroids on
  TF-IDF file vectors, **fitted once** on the first version, every file assigned by its own
  features; each :math:`V_H` node grounded at the LCA directory of its files (``graph.py``).
- :math:`E_{dep}` from ``ast`` (``parsing.py``): imports with alias propagation (``import a.b as c; c.f()``,
  re-exports through a module's own imports), inheritance, and calls resolved exactly (bare
  names, ``self.m`` along the inheritance chain, dotted aliases) or fuzzily (``var.m`` when one
  method in the repository has that name and no built-in type has a method of that name).
- A deterministic lifter in place of the LLM (``graph.Lifter``): name as a verb-object phrase,
  the first docstring sentence's content words, ``take <arg>``, ``call <callee>``; file
  summaries from the units' features. Its ``calls`` counter is the cost the paper measures.
- ``rpg_update``: only changed units are lifted, edges re-resolved from stored per-file
  references, changed files reassigned by the fitted model, empty :math:`V_H` nodes pruned
  recursively. ``encode(v2)`` with the same fitted model is the reference it must equal.
- Tools and retrievers (``retrieval.py``): BM25 search from ``bm25s`` over file code, function
  code and features; RPG = feature search plus 1-2-hop downstream expansion along call edges,
  :math:`s(v) + \alpha\max(P_1(v), \beta P_2(v))` (our scoring rule, :math:`\beta = 0.5`);
  ablations without features, without dependency edges, and with shuffled call edges.
- The benchmark (``issues.py``): a generator frozen into ``data/rpg_encoder_issues.json``
  (checksummed in the manifest) before any retriever was run; ``corpus.py`` reads the
  standard-library packages through ``compendium.data`` and mutates them (add / delete /
  modify / move functions).

Ours versus libraries: BM25 is ``bm25s``; k-means, TF-IDF and the adjusted Rand index are
scikit-learn; parsing is ``ast``. The graph, resolution rules, lifter, update and scoring are
ours because they are what the paper adds.

Small-scale deviations
----------------------
- Repositories are five standard-library packages, not SWE-bench repositories; versions come
  from a seeded mutator, not from commits.
- The lifter is a bag of identifiers: claims about LLM semantics (lifting quality, RepoCraft
  reconstruction) stay out. File summaries are counted as lifter calls.
- Issues are generated, not written by people; the caller split encodes the paper's premise
  (the symptom is described where it shows, the fault lies one call away); the two-hop split
  (``issues.generate_all_two_hop``, generated from the checksummed corpus by a fixed rule and seed)
  puts the fault two calls away, where it competes with everything below the described function.
- No agent loop: the retriever applies SearchNode and one ExploreRPG expansion in one pass.
"""

from . import corpus, graph, issues, parsing, retrieval
from .corpus import PACKAGES, load_repository, mutate
from .experiment import (Config, Result, accuracy_table, evolve, measurements, per_repository, run, two_hop_measurements,
                         two_hop_table, unit_checks)
from .graph import (RPG, Entity, HierarchyModel, Lifter, abstract_nodes, containment_edges, empty_abstract_nodes, encode,
                    explore, fetch_node, fit_hierarchy,
                    lca_directory, parse_file, repo_diff, resolve_edges, rpg_update, skeleton, skeleton_coverage,
                    split_identifier)
from .retrieval import BASELINES, RETRIEVERS, acc_at_k, bm25_scores, build_index, rank_of_gold

__all__ = [name for name in dir() if not name.startswith("_")]
