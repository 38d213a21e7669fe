r"""OnlineSPEC: draft models that keep learning from verification feedback.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 6: "When Drafts Evolve: Speculative
Decoding Meets Online Learning" (Yu-Yang Qian, Hao-Cong Wu, Yichao Fu, Hao Zhang, Peng Zhao).
The paper treats the draft model of speculative decoding as an online learner: every
verification reveals the target's distribution on the drafted positions, and the draft is
updated on it chunk by chunk while the prompt distribution drifts. It links the acceleration to
the draft's online-learning performance (dynamic regret), and proposes optimistic updates that
reuse past gradients as hints and online ensembles over several drafts. Headline: up to 24 %
faster decoding than fixed drafts across benchmarks and foundation models.

Equations implemented
---------------------
Speculative sampling, the acceptance ``alpha = 1 - TV(p, q)``, the expected tokens per target
call ``(1 - alpha^(gamma+1)) / (1 - alpha)`` and the modeled speed-up ``E[tokens] / (gamma c + 1)``
come from :mod:`compendium.speculative` (one copy for the book, shared with the
speculative_coupled_decoding chapter). Here:

- the target: an order-2 n-gram table with closed domain blocks (:func:`~.model.block_target`),
  exact conditionals; the second target: a random-init two-layer ``transformers`` GPT-2 at
  temperature 0.7 read through a two-token window, whose ``(V+1)^2`` conditionals one batched
  forward pass enumerates, with the same domain blocks (:func:`~.model.transformer_target`); the
  draft: ``softmax((E1[a] + E2[b]) U^T + bias)`` with rank-``d``
  embeddings of the last two tokens (:mod:`.model`);
- the online loss of chunk ``t``: ``l_t(theta) = mean KL(p || q_theta)`` over the verified
  positions, with the gradient through the logits ``q - p`` (:func:`~.model.kl_loss_and_grad`);
- learners (:mod:`.online`): OGD ``theta - eta g_t``; optimistic OGD ``theta - eta (2 g_t -
  g_{t-1})`` (hint = last gradient); carried heavy-ball momentum (Opt-Hydra); Hedge with fixed
  share over three step sizes, as a parameter average of proposals from shared parameters
  (Ens-EAGLE) and as a prediction mixture of independent OGD learners; the per-segment hindsight
  oracle;
- the link between acceleration and online loss, our derivation (not the paper's proof): by
  Pinsker ``1 - alpha <= sqrt(KL / 2)`` per context, by Jensen per chunk, and by Cauchy-Schwarz
  over chunks ``sum_t (1 - alpha_t) <= sqrt(T / 2 * sum_t l_t(theta_t))``; the right side is
  ``sqrt(T / 2 * (sum_t l_t(u_t) + DynReg_T(u_{1:T})))`` for any comparator sequence ``u``.

What is ours and why: no library provides online learners over a draft model, so the learners,
the n-gram target and the draft are small NumPy code with analytic gradients (fast enough to run
ten learners over five replicates in the smoke budget); the second target is ``transformers``'
``GPT2LMHeadModel`` built from a ``GPT2Config`` (random init under
``compendium.training.seeded_init``, no hub weights, no training); the offline fits use
``scipy.optimize`` (L-BFGS) and the statistics ``compendium.stats``.

Small-scale deviations
----------------------
- The targets are a 64-token n-gram table and a random-init two-layer GPT-2 of width 32, not a
  7B LLM; the drafts are rank-3 (n-gram) and rank-1 (GPT-2) bigram-embedding models, not EAGLE/Hydra heads.
- The GPT-2 target sees only the last two tokens (``n_positions = 2``), so its conditionals are
  exact and enumerable and the draft sees the same context; its init scale (``initializer_range``
  0.3 instead of GPT-2's 0.02, at which the logits are nearly flat and every draft is accepted)
  and the draft rank against it were fixed from the offline acceptance on A before any online
  run. Only Offline, OGD and the oracle run on it (piecewise and stationary streams).
- Domains are token blocks that overlap through a shared quarter of the vocabulary
  (:data:`~.experiment.SHARED_SHARE`): a draft trained on domain A keeps a small acceptance on B
  and C (a precondition row checks it is non-zero); the drift is abrupt and still larger than
  between real prompt sets.
- One gradient step per chunk, full batch over its verified positions; the paper's pipelines
  take 1-3 epochs of minibatch steps on hidden states.
- Acceptance is measured exactly (``sum_v min(p, q)`` at every verified context) beside the
  measured tokens per call; the speed-up is modeled from it with ``c = 0.1``, not timed.
- Step sizes come from a grid of three fixed in advance; OGD, optimistic OGD and momentum use its
  middle one. (A first version picked each method's step on one dev replicate; the seed sweep
  showed that this picked a step that diverges on most test replicates at one seed, see the
  chapter's Verification.)
"""

from .experiment import (
    CHECK_VOCAB,
    DOMAINS,
    DRIFT_MARGIN,
    LOSSLESS_POWER,
    SHARED_SHARE,
    FLOOR_MARGIN,
    SINGLE,
    TARGETS,
    TRANSFORMER_STREAMS,
    UNIT,
    Config,
    Replicate,
    Result,
    context_lossless_p,
    control_p_values,
    cumulative_bound_ratio,
    cumulative_pinsker,
    dynamic_regret,
    ensemble_comparison,
    every_replicate_difference,
    geometric_identity,
    kernel_checks,
    lossless_power,
    make_target,
    offline_alpha_estimate,
    offline_drift_alpha,
    shared_tokens,
    pinsker_check,
    pooled_context_lossless_p,
    run,
    run_formula_checks,
    run_replicate,
    speedups,
    uniform_floor,
)
from .model import (
    BlockTarget,
    DraftShape,
    block_law,
    block_target,
    domain_split,
    domain_prompts,
    draft_logits,
    draft_probs,
    draft_table,
    entropy_term,
    expected_acceptance,
    fit_offline,
    kl_loss_and_grad,
    sample_contexts,
    transformer_target,
    unique_contexts,
)
from .online import (
    OGD,
    STREAMS,
    Chunk,
    Fixed,
    HedgeAverage,
    HedgeMixture,
    Learner,
    Momentum,
    Optimistic,
    StackedDraft,
    StreamRun,
    decode_chunk,
    hedge_step,
    run_streams,
    segment_domains,
    stream_weights,
    uniform_acceptance,
)
