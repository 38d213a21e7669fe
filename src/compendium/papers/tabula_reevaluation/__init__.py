r"""Re-evaluating a tabular language model: lift, contamination and format familiarity.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 19 (a re-evaluation of Tabula-8B on
the 165 UniPredict datasets). Only the abstract and a research card were available. The paper's
three findings: (1) on binary and categorical tasks the median lift over the majority class is
near zero, and aggregate strength comes from quartile tasks; (2) the best datasets are
contaminated (train-test overlap, task-level leakage that row deduplication misses); (3) an
instruction-tuned model without tabular training recovers 92.2% of standard-classification
accuracy, and answer-format familiarity closes 71.3% of the quartile gap.

Equations implemented
---------------------
:mod:`.metrics`::

    lift_d          = acc_model,d - acc_majority,d          (majority class of the test split)
    corrected lift  = acc_model,d - acc_d(majority class of the train split)    (no test-label selection)
    median lift     = median_d lift_d over the tasks d of one type
    type contrast   median(lift | quartile) - median(lift | binary, categorical), two-sample bootstrap
    lift share      sum_{d quartile} lift_d / sum_d lift_d                      (total lift > 0)
    recovery ratio  R = acc(no tabular training) / acc(TLM)                      (standard tasks)
    lift recovery   mean lift(no tabular) - 0.5 mean lift(TLM) > 0  <=>  lift ratio > 0.5 (TLM lift > 0)
    gap closure     G = (acc(+format) - acc(no tabular)) / (acc(TLM) - acc(no tabular))  (quartile)
    top decile      P(X >= hits), X ~ Hypergeom(N tasks, K contaminated, n = ceil(N/10))

:mod:`.audit`: canonical row hash (sorted normalized names, numbers at ``round_digits``
significant digits, answer kept); near-duplicate distance
``d(q) = min_r sqrt(mean_j (z_qj - z_rj)^2)`` with every column z-scored within its own table;
single-column leakage ``max_j acc(tree_j)``, a 1-D tree with as many leaves as classes.

:mod:`.tables` builds the tasks (quartile edges fitted on the train split only), serializes rows
(``opts yes no ; name value , ... ; target yes``), injects contamination and builds the pool;
:mod:`.model` trains the miniature TLM and its comparators (the shared asset
``tabular_lm_miniature``); :mod:`.experiment` evaluates and scores the audit.

Small-scale deviations
----------------------
- No Tabula-8B, Llama or Alpaca weights and no UniPredict: 60 tasks (90 at full scale) from real
  tables (sklearn's bundled breast cancer, wine, iris and diabetes; statsmodels' anes96, randhie,
  modechoice and grunfeld, adapters in :mod:`.real`; 29 tasks at either scale) plus sklearn's
  synthetic generators. The findings are also checked on the real-table tasks alone.
- The "TLM" is a 2-layer, 64-wide causal transformer trained for seconds on a pool of about two
  thousand serialized rows; "Alpaca" is the same network trained on synthetic yes/no and lettered
  questions (sentences that use the column names as words, never tables), "Alpaca+Q" adds
  month-to-quarter questions answered ``q1..q4``. Zero-shot, one answer token, exact match.
- Contamination is injected, at known places: 25% of tasks (per type) have their test rows copied
  into the pool (half verbatim or reformatted, half jittered with one column in other units), 10%
  get a leak column. The model memorizes far more readily than an 8B model sees one table, so the
  toy shows the *signature* of contamination, not its prevalence.
- Three model seeds at both scales (accuracies averaged over seeds); the benchmark and pool come
  from the asset's seed alone, so the chapter's ``seed`` does not redraw them.
"""

from .audit import (
    canonical_row_hash,
    exact_overlap,
    near_duplicate_distance,
    single_feature_leakage,
    zscore_columns,
)
from .experiment import ASSET_NAME, Config, Result, classical_accuracies, run
from .metrics import (
    bootstrap_ci,
    gap_closure,
    lift,
    lift_share,
    majority_baseline,
    median_difference_ci,
    median_lift_by_type,
    recovery_ratio,
    top_fraction_enrichment,
)
from .model import ASSET_SCALES, AssetConfig, build_asset, build_asset_with, load_asset
from .tables import parse_serialized_row, quartile_edges, quartile_labels, serialize_row, tokenize

__all__ = [
    "ASSET_NAME", "ASSET_SCALES", "AssetConfig", "Config", "Result", "bootstrap_ci", "build_asset",
    "build_asset_with", "canonical_row_hash", "classical_accuracies", "exact_overlap", "gap_closure",
    "lift", "lift_share", "load_asset", "majority_baseline", "median_difference_ci", "median_lift_by_type", "near_duplicate_distance",
    "parse_serialized_row", "quartile_edges", "quartile_labels", "recovery_ratio", "run",
    "serialize_row", "single_feature_leakage", "tokenize", "top_fraction_enrichment", "zscore_columns",
]
