r"""Zeroth-order test-time detoxification: steer generation by descending on the prompt's input embeddings.

Paper card
----------
"Test-Time Detoxification without Training or Learning Anything", Baturay Saglam and Dionysis
Kalogerias, ICML 2026 (arXiv 2602.02498); seed file ``000_f69ae4f9f6fb29da.txt``, abstract 6.
Claims (abstract): estimate the gradient of completion toxicity with respect to the *input
embeddings* from forward evaluations only (zeroth order), take a few descent steps, then
generate; robust toxicity reductions across models and prompts, and in most settings the best
toxicity-quality trade-off. **The full text was not found**: the estimator family, the number
of directions ``q``, the smoothing radius ``delta``, the step size ``eta`` and the step count
``K`` below are inferred (standard two-point Gaussian smoothing), not read.

Equations implemented (:mod:`.zo`)
----------------------------------
Objective, the exact surrogate over enumerated one-token continuations
(:func:`.lm.surrogate_toxicity`)::

    J~(E) = sum_v p_theta(v | E) tox(v)

Estimators (Gaussian / Rademacher / sphere directions u_j with E[u u^T] = I)::

    symmetric  g = 1/q sum_j [J~(E + delta u_j) - J~(E - delta u_j)] / (2 delta) u_j
    forward    g = 1/q sum_j [J~(E + delta u_j) - J~(E)] / delta u_j

Descent (normalised steps, optional ball)::

    E_{k+1} = Proj_{||E - E_0|| <= rho ||E_0||}( E_k - eta ||E_0|| g_k / ||g_k|| ),   k < K

Exact facts checked: for linear f and Gaussian u, E||g||^2 = (1 + (D + 1)/q) ||grad f||^2; on a
quadratic the symmetric estimate is unbiased for every delta and the forward difference's bias
(delta / 2) E[(u^T Q u) u] vanishes.

Ours and the libraries'
-----------------------
The LMs are ``transformers``' GPT-2 built from a config (random init) and trained here with
:mod:`compendium.training`; the scorer is scikit-learn's ``LogisticRegression``; symbolic
checks use sympy; intervals come from :mod:`compendium.stats`. The toy language, the
estimators, the descent and the compute accounting are ours (no library implements ZO descent
on input embeddings; the authors' code was not available).

Small-scale deviations
----------------------
- A 200-token two-register language (:mod:`.toy`) instead of RealToxicityPrompts / AttaQ /
  BOLD; a 2-layer, d = 64 GPT-2 instead of real LLMs; a logistic-regression scorer instead of the
  Perspective API; a reference LM trained without the toxic register instead of a larger LM.
- The search objective is the exact expected score of the next token (one forward pass per
  evaluation), not sampled completions scored by an API; best-of-N is matched to the token
  positions this search runs through the LM.
"""

from .experiment import Config, Result, distinct_n, implementation_checks, per_prompt_metrics, run, tune
from .lm import (LMS_ASSET, REFERENCE_ASSET, SCORER_ASSET, LMSettings, ToxicityScorer, build_lms, build_reference,
                 build_scorer, embed, fit_scorer, generate, generate_from_tokens, gpt2_config, lm_settings, load_models,
                 load_scorer, log_perplexity, surrogate_toxicity, train_lm)
from .measure import (CROSSED_UNIT, RESAMPLES, cosine_slope, count_not_dominated, dominance, dominated, measurements, reduction, table)
from .zo import (DISTRIBUTIONS, common_random_numbers, cosine, cosine_law, descent, directions, expected_sq_norm_factor,
                 generation_positions, matched_best_of_n, project_ball, random_of_norm, symbolic_forward_bias,
                 symbolic_norm_law, symbolic_symmetric_unbiased, zo_gradient, zo_positions)

__all__ = [
    "Config", "Result", "run", "tune", "distinct_n", "implementation_checks", "per_prompt_metrics",
    "LMS_ASSET", "REFERENCE_ASSET", "SCORER_ASSET", "LMSettings", "ToxicityScorer", "build_lms", "build_reference",
    "build_scorer", "embed", "fit_scorer", "generate", "generate_from_tokens", "gpt2_config", "lm_settings",
    "load_models", "load_scorer", "log_perplexity", "surrogate_toxicity", "train_lm",
    "CROSSED_UNIT", "RESAMPLES", "cosine_slope", "count_not_dominated", "dominance", "dominated", "measurements", "reduction", "table",
    "DISTRIBUTIONS", "common_random_numbers", "cosine", "cosine_law", "descent", "directions",
    "expected_sq_norm_factor", "generation_positions", "matched_best_of_n", "project_ball", "random_of_norm",
    "symbolic_forward_bias", "symbolic_norm_law", "symbolic_symmetric_unbiased", "zo_gradient", "zo_positions",
]
