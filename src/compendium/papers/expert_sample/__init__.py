r"""Expert-Sample: keep the certain head of fine-grained MoE routing, sample the uncertain tail.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 1: "Certain Head, Uncertain Tail:
Expert-Sample for Test-Time Scaling in Fine-Grained MoE". Claims: the router scores of
fine-grained MoEs have a few high-confidence experts (the head) and many low-confidence ones
(the tail); with fewer active experts greedy accuracy holds while pass@n falls; Expert-Sample,
training-free, keeps the head and samples the tail, and raises pass@n and Best-of-N accuracy
(Qwen3-30B-A3B, GPQA-Diamond: pass@32 85.4% -> 91.9%, Best-of-N 59.1% -> 62.6%).

Equations implemented
---------------------
Standard routing (:func:`~.model.topk_router`, Qwen3-MoE with ``norm_topk_prob``)::

    z = W_g x,   S = top-k(z),   w_i = exp(z_i) / sum_{j in S} exp(z_j),   y = sum_{i in S} w_i E_i(x)

Expert-Sample (:func:`compendium.kernels.routing.expert_sample_route`): the head
``H = top-h(z)``; the pool ``C`` = ranks ``h+1..h+m``; the tail ``T`` = top-(k-h) of
``z_C + tau g_C``, ``g`` standard Gumbel (ordered draws without replacement from Plackett-Luce with
weights ``exp(z/tau)``); ``S = H u T`` with the *original* ``w``. Noise is drawn once per layer,
sequence and position (as with a KV cache). Unbiased pass@k (:func:`~.sampling.pass_at_k`)::

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k / i)

Small-scale deviations
----------------------
- A 2-layer decoder (d = 64) of our own with a softmax top-k MoE feed-forward (32 experts of
  hidden size 16, 8 active), the Qwen3-MoE routing math, not a ``transformers`` Qwen3-MoE: on this
  shared 2-core machine one training step of the ``transformers`` model at the same sizes took
  0.6-2 s (its expert loop), ours about 0.05 s, and our model takes the routing hook as an
  argument instead of patching library internals. Experts are computed densely and masked.
- The task is 2-digit addition with a reversed 3-digit answer (exactly checkable), not math,
  knowledge or code benchmarks; training stops at the first dev check with greedy accuracy >= 50%
  so pass@n has headroom.
- Routing noise acts on the generated tokens only: the prompt is prefilled once per problem with
  standard routing and shared by its samples (:mod:`.frontier`), as a served system would.
- pass@k comes from teacher-forced success probabilities (exact for standard routing, unbiased
  over routing-noise draws otherwise); Best-of-N uses the model's own answer likelihood under
  standard routing. The MLP verifier an earlier version trained was dropped (see the chapter's
  Limits) and its module removed.
"""

from .experiment import (PASS_K, Config, Result, es_name, kernel_check, ledger_estimates, pass_at_k_error,
                         plackett_luce_check, prefill_equivalence_error, routing_invariants, run)
from .frontier import (answer_loglik_shared, bracket, correct_probability, frontier_gap_estimates, largest_estimate,
                       neighbour_gap, pass_at_k_draws, prefill, sample_answers_shared, suffix_logits, target_logits,
                       target_logits_unshared)
from .model import MoEConfig, TinyMoELM, build_asset, load_models, splits, topk_router, train
from .sampling import (RoutingPolicy, answer_loglik, best_of_n, distinct_rate, majority_vote, pass_at_k,
                       pass_at_k_brute_force, router_profile, sample_answers)

__all__ = [
    "Config", "Result", "run", "build_asset", "load_models", "MoEConfig", "TinyMoELM", "splits", "topk_router",
    "train", "RoutingPolicy", "sample_answers", "pass_at_k", "pass_at_k_brute_force", "best_of_n",
    "majority_vote", "answer_loglik", "distinct_rate", "router_profile", "PASS_K", "es_name", "ledger_estimates",
    "prefill_equivalence_error", "bracket", "correct_probability", "frontier_gap_estimates",
    "largest_estimate", "neighbour_gap", "answer_loglik_shared", "pass_at_k_draws", "prefill", "sample_answers_shared", "suffix_logits",
    "target_logits", "target_logits_unshared",
    "plackett_luce_check", "pass_at_k_error", "routing_invariants", "kernel_check",
]
