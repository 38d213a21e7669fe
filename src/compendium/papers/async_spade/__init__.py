"""AsyncSpade: asynchronous sparse decoding with next-query prediction.

Paper: *AsyncSpade: Efficient Test-Time Scaling with Asynchronous Sparse Decoding* (ICML 2026),
seed file ``002_d926b147087f7228.txt``, abstract 1.

Implemented (our reading; the paper's predictor is not public in detail):

* KV selection for a decode step ``t``: sinks + local window + ``B`` candidates chosen by
  - token-level top-B of the GQA-group-summed ``softmax(q_hat . k / sqrt(d))`` (``sparse.py``);
  - Quest pages: ``U(q, page) = sum_i max(q_i m_i, q_i M_i)`` from per-page min ``m`` / max ``M``
    keys, top ``B/P`` pages (``kernels/quest_pages.py``, ``sparse.quest_selection``);
* next-query predictors from a sliding window: last query, window mean, and the
  temporal-regressive ridge AR(p) module shared over the heads of a layer (``sparse.py``);
* sparse decode attention over an index set (``kernels/sparse_decode.py``: PyTorch reference and
  a Triton split-K kernel), and a threaded asynchronous selector (``decode.py``);
* the tiny GQA decoder and the retrieval language (``lm.py``), trained by the asset rule;
* two controls: a *drift language* of synthetic slowly drifting queries where the premise holds
  (``experiment.drift_language``), and a degraded ``random`` selector (``sparse.random_scores``).

Small-scale deviations:

* a 2-layer, d=64 decoder trained for seconds on a synthetic key/value retrieval language, not
  Qwen3-8B/32B on reasoning traces; the lookup's query jumps at the answer steps, which no
  window of past queries can predict;
* recall and attention mass are measured on teacher-forced dense passes; in-loop accuracy uses
  the selection in every layer, teacher-forced (equivalent to a decode loop for these answers);
* the "cache rank" is a worker thread on the same CPU, not a separate GPU; TPOT is wall-clock on
  a shared 2-core machine and only reported; a deterministic cache-read cost model stands in for
  the paper's TPOT ratios in the ledger.
"""

from .decode import run_on_side_stream, select_indices, select_quest, timed_decode
from .experiment import (DRIFT_AR, MIN_RECALL_EFFECT, Config, Result, cost_model, cost_model_curve, crossover_context,
                         drift_control, drift_language, kernel_exactness, model_level_differences,
                         models_for_resolution, quest_bound_slack, run)
from .lm import ModelSettings, TinyDecoder, build_asset, load_models, make_sequences, settings_for, train_model
from .sparse import (predict_queries, prediction_cosine, quest_selection, query_cosine_by_lag, random_scores,
                     true_attention, recall_and_mass, select, token_selection)

__all__ = [
    "Config", "Result", "run", "cost_model", "kernel_exactness", "quest_bound_slack",
    "ModelSettings", "TinyDecoder", "build_asset", "load_models", "make_sequences", "settings_for", "train_model",
    "predict_queries", "token_selection", "quest_selection", "select", "recall_and_mass", "run_on_side_stream", "select_quest",
    "MIN_RECALL_EFFECT", "cost_model_curve", "crossover_context", "model_level_differences", "models_for_resolution",
    "query_cosine_by_lag", "prediction_cosine", "select_indices", "timed_decode",
    "DRIFT_AR", "drift_language", "drift_control", "random_scores",
]
