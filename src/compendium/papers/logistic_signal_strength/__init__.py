r"""Signal-strength estimation in high-dimensional logistic regression via data splitting.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 17 ("Signal Strength Estimation in
Logistic Regression Using Data Splitting"). Only the abstract was available. The classical pieces
follow Sur and Candès (2019, the MLE system), Candès and Sur (2020, the existence frontier) and
Yadlowsky et al. (2021, SLOE). The data-splitting estimator, its regularised system and the
statistic it inverts are our reconstruction (research card ``logistic_signal_strength``).

Equations implemented
---------------------
Model: ``x ~ N(0, Sigma)``, ``P(y = 1 | x) = rho'(x^T beta)``, ``gamma^2 = beta^T Sigma beta``,
``p/n -> kappa``. With ``Q1 = gamma Z1``, ``Q2 = alpha gamma Z1 + sigma Z2`` (``theory.py``)::

    E[(Q2 - t)^2] = kappa sigma^2,   E[Z2 t] = sigma (1 - kappa),   E[Z1 t] = alpha gamma,
    t = prox_{lambda L}(Q2)   (L: logistic loss for label y, or the penalty row mu t^2 / 2),

averaged over a mixture of rows: all logistic for the MLE (Sur-Candès); half logistic and half
penalty rows (``mu = lambda_0 n1/n2``) for the split estimator below. Frontier::

    kappa_h(gamma) = min_t 2 E[rho'(gamma V) (Z - t V)_+^2]   (MLE exists iff kappa < kappa_h).

Estimators of ``gamma^2`` (``estimators.py``): oracle ``mean (x_i^T beta)^2``; naive plug-in
``mean (x_i^T b_MLE)^2``; SLOE (variance ``eta^2`` of leave-one-out predictors, inverted through
the MLE system); ProbeFrontier (subsample until separable, invert ``kappa_h``); and the split
estimator::

    b = argmin (1/n1) sum_{D1} [rho(x^T b) - y x^T b] + (lambda_0/2) b^T Sigma_2 b,  Sigma_2 = X2^T X2/n2

then the 1-D logistic slope of every label on its own row's out-of-sample prediction (held out on
``D2``, leave-one-out on ``D1``), inverted through the regularised system. The penalty is a sum of
squares over ``D2``'s rows, non-decomposable and adapted to ``Sigma`` (the estimator is affine
equivariant). Null-coefficient inference: ``b_j ~ N(alpha beta_j, sigma^2 (Sigma^-1)_jj / p)``.

Small-scale deviations
----------------------
- The paper's estimator, regulariser weight and theorem are unknown; the split estimator, the
  choice ``lambda_0 = 0.03`` and the link-slope statistic are ours, fixed from the theory
  (largest worst-case sensitivity ``d log b / d log gamma^2`` over four cells) before any run.
- ``n`` is 500 (smoke) or 1000 (full) in the comparison instead of thousands; the
  simulation-versus-theory runs use ``n`` = 2000 (smoke) or 4000 (full).
- The comparison fits the split objective by Newton; cvxpy (exponential cone, Clarabel) and
  L-BFGS fit the same objective once per run as a cross-check (cvxpy is too slow for every rep).
- ProbeFrontier runs on a few repetitions only (tens of LPs each).
- The frontier integral uses the closed form of the inner Gaussian expectation, so 1-D
  Gauss-Hermite quadrature is exact to ~1e-12 and no adaptive quadrature is needed.
"""

from . import estimators
from .estimators import (
    RidgeCalibration,
    ar1_covariance,
    classical_null_cover,
    debiased_null_cover,
    decide_separable,
    existence_certificate,
    fit_link_slope,
    fit_logistic,
    fit_split,
    is_separable,
    loo_predictors,
    make_coefficients,
    mle_statistics,
    probe_frontier,
    sample_covariates,
    simulate,
    solve_cvxpy,
    solve_cvxpy_retrying,
    split_halves,
    split_objective,
    split_statistics,
)
from . import evaluation
from .experiment import (
    CI_LEVEL,
    ESTIMATORS,
    FRONTIER_MARGIN,
    PUBLISHED_POINT,
    PUBLISHED_VALUES,
    Config,
    Result,
    cell_region,
    plan_checks,
    run,
    summarize,
)
from .theory import (
    Mixture,
    SystemSolution,
    TheoryCurve,
    gauss_hermite_grid,
    link_slope,
    mle_frontier_gamma,
    mle_frontier_kappa,
    prox_logistic,
    solve_system,
    split_mixture,
    system_residuals,
    theory_curve,
)
