r"""Speculative Coupled Decoding: lossless Jacobi decoding whose drafts are coupled across iterations.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 18: "Speculative Coupled Decoding"
(SCD; an earlier version was called MC-SJD). It builds on Speculative Jacobi Decoding (SJD,
Teng et al., 2024) and the speculative-sampling rule of Leviathan et al. (2023) and Chen et al.
(2023). The paper's claims: training-free and lossless, "a single-line modification" of SJD,
up to 4.2x (image) and 13.6x (video) faster than AR decoding on 7B-scale models.

Equations implemented
---------------------
Speculative verification of a draft ``d ~ q`` against the target ``p``
(:func:`compendium.speculative.acceptance_ratio`, :func:`compendium.speculative.residual_distribution`,
shared with the online_spec chapter)::

    accept d  with probability  min(1, p(d) / q(d));   otherwise draw from  norm(max(0, p - q))

The output is distributed as ``p`` whatever ``q`` is. Read as a map ``d -> d'`` it is the
*maximal coupling* of ``q`` and ``p`` (:func:`compendium.speculative.maximal_coupling`)::

    P(d' = d) = sum_v min(p(v), q(v)) = 1 - TV(p, q),     TV(p, q) = sum_v max(0, p(v) - q(v))

Jacobi decoding (:func:`~.decoding.jacobi_decode`) keeps ``L`` draft tokens; one forward pass
scores them all, the verification commits the accepted prefix plus one residual draw, and the
drafts after the first rejection are renewed from the new ``p_k``. SJD renews them by a fresh
independent draw ``d'_k ~ p_k``; SCD renews them by the maximal coupling of ``(q_k, p_k)`` (the
verification step run on every position, i.e. without its ``break``) or by the shared-noise
Gumbel coupling ``d'_k = argmax_v(log p_k(v) + G_k(v))`` with one Gumbel row ``G_k`` per
position. In both cases the stored draft distribution becomes ``q_k := p_k`` (the marginal of
``d'_k``); keeping the old ``q_k`` for a kept draft breaks losslessness (``scd_stale``, the
negative control). ``scd_redrawn`` redraws every window draft from its stored ``q_k`` before each
pass: SJD's law reached through SCD's code, the control that must not be faster than SJD. Plain AR sampling is :func:`~.decoding.autoregressive_decode`; every sampler
counts forward passes (NFE).

Targets: exact n-gram Markov chains (:class:`compendium.ngram.NGramModel`), whose sequence probabilities
are known in closed form, and a GPT-2 over sklearn digits (:class:`~.digits_lm.DigitsLM`,
trained by :func:`~.digits_lm.build_asset`, the workflow asset ``digits_tokens_lm``).

Small-scale deviations
----------------------
- The targets are tiny: Markov chains with 3 to 64 tokens, and a 2-layer, 48-wide GPT-2 (3 layers,
  64 wide at full scale) over 8x8 digits with 16 grey levels instead of 7B image and video models over thousands
  of VQ tokens. No classifier-free guidance and no top-k: the only logits processor is the
  restriction to pixel tokens, applied identically for every sampler.
- The Jacobi samplers use no KV cache: every pass recomputes the whole sequence. The AR baseline
  on the transformer uses one (:meth:`~.digits_lm.DigitsLM.sample_autoregressive`), which makes
  the wall-clock comparison favour AR. NFE counts passes, not FLOPs.
- New window positions start from uniform random tokens with a one-hot draft distribution (as
  in SJD); the distribution one past the window is not used as a bonus draft.
- ``scd_gumbel`` takes all its randomness (draft Gumbel rows, residual Gumbel rows, acceptance
  uniforms) from a per-position noise table, so a decode is a function of the table.
- Wall-clock speed-ups are measured on a shared 2-core CPU at batch size 1 and reported in the
  prose only; the ledger uses forward-pass counts.
"""

from ...speculative import acceptance_ratio, categorical, maximal_coupling, residual_distribution, total_variation
from .decoding import (
    METHODS,
    Decoded,
    NoiseTable,
    autoregressive_decode,
    decode,
    gumbel_agreement,
    gumbel_argmax,
    gumbel_coupling,
    jacobi_decode,
)
from .digits_lm import PIXEL_LEVELS, DigitsLM, TrainSettings, build_asset, digit_sequences, quantize, settings_for
from .experiment import (
    COUPLING_PAIRS,
    JOINT_LENGTH,
    JOINT_LEVEL,
    JOINT_PROMPTS,
    JOINT_SAMPLERS,
    JOINT_TEMPERATURE,
    PLACEBO_DIGITS_MARGIN,
    PLACEBO_RATIO_MARGIN,
    LM_METHODS,
    LM_TESTED,
    LOSSLESS_LENGTH,
    LOSSLESS_SAMPLERS,
    LOSSLESS_VOCAB,
    LOSSLESS_WINDOW,
    MARKOV_SETTINGS,
    PROMPT_PIXELS,
    SPEED_METHODS,
    Config,
    LMResult,
    Result,
    Tempered,
    simulated_power,
    envelope_estimate,
    exact_continuations,
    joint_prefixes,
    joint_test,
    mean_acceptance,
    placebo_estimates,
    run,
    run_coupling,
    run_joint,
    run_lossless,
    run_markov_speed,
    run_transformer,
    ratio_estimates,
    sequence_score_test,
    smallest_estimate,
    time_decoders,
)
from ...ngram import (
    NGramModel,
    all_sequences,
    holm,
    homogeneity_test,
    pooled_chisquare,
    random_ngram,
    sequence_index,
    sequence_probabilities,
)

ASSET = "digits_tokens_lm"
