r"""PosterAgent: a poster drafted and then refined, trained by stage-aware RL (SARL).

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 8 ("Agentic Poster Generation via
Stage-Aware Reinforcement Learning"). **No paper text and no code were available**: the episode
structure (an initial draft, then iterative refinement, optimised in a draft-specific and a
refinement-specific phase) comes from the abstract; the environment, the reward, the advantages of
both phases and every baseline are this chapter's reconstruction (following the research card's
proposal), not the paper's.

Equations implemented
---------------------
An episode: prompt :math:`c`, draft :math:`L_0 \sim \pi(\cdot\mid c)`, then for :math:`k = 1..K`
an edit :math:`a_k \sim \pi(\cdot\mid c, L_{k-1}, \mathrm{render}(L_{k-1}))`, :math:`L_k = L_{k-1} \oplus a_k`.
Quality :math:`R(L) \in [0, 1]` (``env.reward``), increments :math:`\Delta R_k = R(L_k) - R(L_{k-1})`,
so :math:`\sum_k \Delta R_k = R(L_K) - R(L_0)`. Group advantages are the shared
``compendium.rl.group_advantages``, :math:`A_g = (r_g - \bar r)/(s_r + 10^{-4})`, and every arm's
loss is the shared PPO-clip ``compendium.rl.grpo_loss`` (clip 0.2, :math:`\beta = 0`):

- trajectory GRPO: :math:`r_g = R(L_K^{(g)})` over the ``G`` episodes of a prompt, the same
  :math:`A_g` for the draft and for every edit of episode :math:`g`;
- SARL, draft phase: :math:`r_g = R(L_0^{(g)})` over ``G`` drafts of a prompt;
  refine phase: from one fixed state :math:`L`, ``G`` edits with :math:`\Delta R_g = R(L \oplus a_g) - R(L)`
  and advantage :math:`\Delta R_g / (s_{\Delta R} + 10^{-4})` (``training.refine_advantages``): the
  fixed state's reward is the baseline, the refine group sets the scale (K groups per prompt along
  the chain);
- SARL without group normalisation: :math:`A = R(L_0)` and :math:`A = \Delta R` as they are;
- one-shot: drafts only, :math:`r_g = R(L_0^{(g)})` over a group of :math:`G(K + 1)` drafts.

Every arm produces :math:`P\,G\,(K + 1)` layouts (drafts or executed edits) per update.

Modules: ``env`` (``LayoutEnv``, rendering with the hidden text height, the reward and its
components, the edits), ``policy`` (drafter and refiner MLPs with a model axis), ``training``
(rollouts, the arms, their losses, greedy evaluation, the asset), ``experiment`` (Config, run,
the per-seed estimates and the implementation checks).

What is ours and what is a library's
------------------------------------
GRPO advantages and loss: the library's ``compendium.rl.grpo``; the training loop:
``compendium.training.fit`` (AdamW); intervals: ``compendium.stats``. Ours: the environment, the
reward, the policy and the arms (trl's ``GRPOTrainer`` needs a language model and a tokenizer and
has no notion of two phases with separately normalised groups; it is not installed here).

Small-scale deviations
----------------------
- The policy is two MLPs (drafter, refiner; 2 hidden layers of 64, tanh) over the concatenated
  element tokens of six slots (absent slots masked), not a multimodal LLM; the "render" the refiner
  sees is each text block's rendered height (the only place the hidden typeface factor enters),
  not an image.
- Smoke: 3 elements (title, image, one text block), K = 2, 300 updates; full: 3-6 elements,
  K = 4, 1000 updates (the card's 2k updates do not fit the 10-minute budget with five arms);
  6 training seeds per arm (the unit of every interval), 8 prompts x G = 8 per update, two
  clipped epochs per batch.
- beta = 0 (no reference model; the issue allows beta <= 0.001), one learning rate (1e-3) for
  every arm, no tuning of any arm.
- The SARL refine phase's fixed states are the chain of one sampled draft per prompt (each next
  state reached by the group's first edit), i.e. on-policy states, not a replay buffer.
"""

from .env import COMPONENTS, NUM_BINS, SLOTS, LayoutEnv, Prompts, apply_edit, boxes, render, reward
from .experiment import (
    DEGENERATE_MAX,
    FLOOR_MARGIN,
    PROMPT_UNIT,
    UNIT,
    Config,
    Result,
    advantage_checks,
    component_range,
    determinism_gap,
    k0_gradient_gap,
    measurements,
    per_seed,
    run,
    telescoping_gap,
    weakest,
)
from .policy import LayoutPolicy
from .training import (ARMS, ASSET_NAME, Settings, arm_loss, best_of_drafts, build_asset, collect, evaluate, load_policies,
                       oracle_refine, refine_advantages, settings_for, train_arm)

__all__ = [
    "ARMS", "ASSET_NAME", "COMPONENTS", "DEGENERATE_MAX", "FLOOR_MARGIN", "PROMPT_UNIT", "oracle_refine", "refine_advantages", "NUM_BINS", "SLOTS", "UNIT", "Config", "LayoutEnv", "LayoutPolicy", "Prompts",
    "Result", "Settings", "advantage_checks", "apply_edit", "arm_loss", "best_of_drafts", "boxes", "build_asset",
    "collect", "component_range", "determinism_gap", "evaluate", "k0_gradient_gap", "load_policies", "measurements",
    "per_seed", "render", "reward", "run", "settings_for", "telescoping_gap", "train_arm", "weakest",
]
