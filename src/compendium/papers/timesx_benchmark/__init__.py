r"""TimesX-mini: a leakage-safe protocol for context-enriched forecasting, and context ensembles.

Paper card
----------
"TimesX: a context-enriched multimodal time-series forecasting benchmark", ICML 2026, seed file
``002_d926b147087f7228.txt``, abstract 4. No paper body or code was available. The chapter
therefore checks the *evaluation protocol* the abstract describes (windows after a training
cutoff, a leakage audit, scaled point and probabilistic metrics, simple ensembles of a unimodal
and a context-adjusted forecast) on a benchmark generated here; it does not check TimesX's
empirical findings.

Equations implemented (``metrics.py``)
--------------------------------------
MASE :math:`\frac{1}{H}\sum_h|y_h-\hat y_h| \,/\, \frac{1}{n-m}\sum_{t>m}|y_t-y_{t-m}|`; CRPS from
quantiles :math:`2\sum_k w_k\rho_{\tau_k}(y-q_{\tau_k})`; Gaussian CRPS
:math:`\sigma[z(2\Phi(z)-1)+2\varphi(z)-1/\sqrt\pi]` (derived by sympy); the context-adjusted
forecast :math:`\hat y^{\rm ctx}_h=\hat y_h\exp(\hat\theta\,\mathbb 1\{h\in\hat S\})`; the mean ensemble
:math:`(\hat y+\hat y^{\rm ctx})/2`, whose MASE is at most the mean of its components' (triangle
inequality, per window).

Modules: ``generator.py`` (series, templated contexts from ``data/timesx_templates.json``, knobs,
the leakage audit), ``forecasters.py`` (seasonal naive, statsmodels Holt-Winters, the global MLP
trained with ``compendium.training``, the scikit-learn bag-of-words context model, the oracle
parser, ensembles), ``real.py`` (three statsmodels series for the manifest), ``experiment.py``
(``Config``, ``run`` and the ledger's statistics).

Small-scale deviations
----------------------
- Synthetic series over four domains plus segments of three real monthly series (statsmodels
  CO2, El Nino SST, euro-area electrical equipment orders) with planted events; no TimesX data.
- Contexts come from a few templates written here, not from an LLM pipeline; "held-out
  paraphrases" are two templates and one synonym per word that training never sees.
- One evaluation window per series, at the global cutoff (no rolling origins), horizon 12.
- The "foundation model" is a two-layer MLP pretrained on event-free synthetic series; the
  "LLM" is a bag-of-words ridge regression with pairwise word interactions and a regex date parser.
- Five replicate benchmarks per run (fresh series, corpora and trained models) stand for the
  issue's five seeds.
"""

from .experiment import (MEMORISER_RECALL, METHODS, QUANTILE_LEVELS, UNIMODAL, Config, Result, crossover, crps_mase_rank_correlation,
                         floor_reduction, shuffled_context_gap, gain_correlation, headroom,
                         leak_reduction, paired, partial_gain_correlation, replicate_mean, run, run_replicate, seeds_excluding_zero, sweep_cells)
from .forecasters import (ContextModel, GlobalMLP, context_adjusted, holt_winters, mean_ensemble, median_ensemble,
                          memorising_forecast, mlp_forecast, seasonal_naive, train_global_mlp, windows_from)
from .generator import (CLEAN, CUTOFF, DEV_ORIGIN, DOMAINS, HORIZON, INPUT, LENGTH, PERIODS, Contexts, Knobs, Window,
                        draw_events, event_sentence, leakage_audit, make_contexts, make_series, parse_dates, planted_leaky_windows,
                        real_series, scheduled_future_items, templates)
from .metrics import (mase_scale_invariance, quantile_crps_max_error, crps_from_quantiles, derive_gaussian_crps, gaussian_crps, gaussian_quantiles, mase, mase_scale,
                      quantile_loss, quantile_weights)

__all__ = [name for name in dir() if not name.startswith("_")]
