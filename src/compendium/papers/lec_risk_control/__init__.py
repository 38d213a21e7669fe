r"""LEC: linear expectation constraints for selection-conditioned risk control.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 5 (arXiv 2512.01556). Only the
abstract and secondary summaries were available; the paper's finite-sample condition (its Eq. 5)
was not. Background: conformal risk control (Angelopoulos et al., 2024) and Learn-then-Test
(Angelopoulos et al., 2021).

Equations implemented
---------------------
A prediction is accepted when its uncertainty is small: ``S(lambda) = 1{u <= lambda}``; ``E`` is
its error indicator. The target is the error rate among accepted predictions::

    P(E = 1 | S = 1) <= alpha   <=>   E[S (E - alpha)] <= 0          (linear expectation constraint)

Finite-sample rule (our reading of the paper's sufficient condition; :func:`lec_thresholds`):
the unseen test point contributes at most ``1 - alpha`` to the sum, so::

    lambda_hat = max{ lambda in {u_i} : sum_{i<=n} S_i(lambda) (E_i - alpha) + (1 - alpha) <= 0 }
               = max{ lambda : (errors(lambda) + 1) / (accepted(lambda) + 1) <= alpha }

Baselines: naive plug-in ``errors / accepted <= alpha``; Clopper-Pearson upper bound at level
``1 - delta`` at every calibration threshold (uncorrected, :func:`cp_ucb_thresholds`) and on a fixed
grid with Bonferroni (:func:`cp_bonferroni_thresholds`); Learn-then-Test with fixed-sequence
testing and binomial p-values (:func:`ltt_fixed_sequence_thresholds`).

Two-model routing (:func:`route_thresholds`): ``S = S1 + (1 - S1) S2``,
``E_sys = S1 E1 + (1 - S1) S2 E2``, and ``(lambda1, lambda2)`` maximize the accepted count under the
same condition on the system's ``(S, E_sys)``.

Why the guarantee can fail: ``L(lambda) = S(lambda)(E - alpha)`` is not monotone in ``lambda``,
so the exchangeability argument of conformal risk control does not carry over. With ``F`` the
sum over all ``n + 1`` points and ``lambda* = max{F <= 0}`` (a symmetric function of the data),
``E[L_{n+1}(lambda*)] <= 0`` holds, and ``lambda_hat <= lambda*``; a *correct* test point with
``lambda_hat < u <= lambda*`` is rejected by the rule but would have lowered the risk, so the
rule can overshoot by up to ``alpha P(correct, lambda_hat < u_{n+1} <= lambda*)``.

Small-scale deviations
----------------------
- Scores come from synthetic Gaussians and weak logistic models on sklearn's digits, breast
  cancer and wine data (out-of-fold), not from LLMs or LVLMs on QA and VQA.
- The test risk is exact: a source's population is known (Gaussian) or is the finite pool of
  scored inputs (sklearn), and calibration sets are drawn from it with replacement. This replaces a
  finite test split and removes test noise; it also makes ties real for large n.
- The paper's Eq. 5 is unknown; the slack ``1 - alpha`` is our reading.
- Fixed grids (LTT, Bonferroni) are population quantiles, i.e. chosen without calibration data.
- Validity is judged per cell with a ±3 SE band (``validity.py``), and the exact swap identity
  there says what the rule's excess is; the positive control is the symmetric threshold computed
  with a realised test point.
- Routing searches ``routing_grid_size`` quantiles of ``u1`` (plus model 1's own LEC threshold
  and ``-inf``) instead of every ``u1`` value.
"""

from .experiment import (
    DATASETS,
    METHODS,
    PAC_METHODS,
    Config,
    Result,
    failing_cells,
    pooled_risk,
    run,
    score_sources,
    sign_test,
    unit_checks,
)
from .sources import (
    DATASET_MODELS,
    GaussianSource,
    PairedPoolSource,
    PoolSource,
    accuracy_over_baseline,
    dataset_source,
    majority_share,
    oracle_retention,
    routing_source,
)
from .thresholds import (
    NO_THRESHOLD,
    SortedCalibration,
    counts_on_grid,
    cp_bonferroni_thresholds,
    cp_ucb_thresholds,
    lec_slack,
    lec_threshold,
    lec_threshold_reference,
    lec_thresholds,
    ltt_fixed_sequence_thresholds,
    max_allowed_errors,
    plugin_thresholds,
    route_reference,
    route_thresholds,
    sort_calibration,
)
from .validity import (
    flagged_on_every_source,
    gain_estimate,
    oracle_thresholds,
    risk_estimate,
    swap_sum_direct,
    swap_sum_identity,
    walk_positions,
    worst_cell,
)

__all__ = [
    "flagged_on_every_source", "gain_estimate", "oracle_thresholds", "risk_estimate", "swap_sum_direct",
    "swap_sum_identity", "walk_positions", "worst_cell",
    "DATASETS", "METHODS", "PAC_METHODS", "Config", "Result", "failing_cells", "pooled_risk", "run", "score_sources",
    "sign_test", "unit_checks", "DATASET_MODELS", "GaussianSource", "PairedPoolSource", "PoolSource",
    "accuracy_over_baseline", "dataset_source", "majority_share", "oracle_retention", "routing_source", "NO_THRESHOLD", "SortedCalibration",
    "counts_on_grid", "cp_bonferroni_thresholds", "cp_ucb_thresholds", "lec_slack", "lec_threshold",
    "lec_threshold_reference", "lec_thresholds", "ltt_fixed_sequence_thresholds", "max_allowed_errors",
    "plugin_thresholds", "route_reference", "route_thresholds", "sort_calibration",
]
