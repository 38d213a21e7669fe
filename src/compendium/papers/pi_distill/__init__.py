r"""π-Distill: a teacher that reads privileged information and its student, in one network.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 16 (π-Distill, privileged-information
distillation; arXiv 2602.04942). The authors' repository holds only a README, so **the loss below is
our reconstruction** from the abstract and public summaries, not the paper's code.

Equations implemented
---------------------
One policy :math:`\pi_\theta` reads [map | PI slot | history]; the teacher
:math:`\pi_T = \pi_\theta(\cdot \mid x, I)` sees the privileged information :math:`I` (an action
trace), the student :math:`\pi_S = \pi_\theta(\cdot \mid x)` the same slot filled with ``NOPI``.
Rewards are success (0/1); advantages are GRPO's group-normalised ones (shared
``compendium.rl.group_advantages``, a group = G rollouts of one maze). On teacher rollouts

.. math:: \mathcal L = \alpha\big[\mathcal L_{GRPO}(\pi_T) + \beta\,\overline{KL}(\pi_T \,\|\, \mathrm{sg}\,\pi_S)\big]
          + (1-\alpha)\big[-\overline{\min(\pi_S/\pi_T, c)\,R\,\log\pi_S}\big],

with :math:`\mathcal L_{GRPO}` the shared ``compendium.rl.grpo_loss`` (one update per batch, so the
ratio is 1), the KL exact over the five actions and averaged over the turns of an episode, and the
importance weight clipped at :math:`c = 5` and detached; the student term is weighted by the
episode's reward :math:`R` (success), as in the research card's form, not by the advantage, which is
0 on every maze the teacher always solves. OPSD on student rollouts:
:math:`\mathcal L_{GRPO}(\pi_S) + \beta\,\overline{KL}(\pi_S \,\|\, \mathrm{sg}\,\pi_T)`.

Modules: ``maze`` (environment, BFS expert, PI of four kinds), ``policy`` (the transformer with a
model axis and a KV cache), ``losses`` (the objective's terms), ``training`` (rollouts, every
method as a recipe, the lock-step trainer, evaluation, the asset), ``experiment`` (Config, run,
the grid selection on validation mazes, the ledger's statistics and implementation checks),
``transfer`` (the student term with w = 1, trained in the chapter's run; not read by the asset).

What is ours and what is a library's
-----------------------------------
GRPO advantages and loss: the library's ``compendium.rl.grpo`` (its tests compare it with the
formulas, and ``tests/test_grpo_trl.py`` with trl's ``GRPOTrainer`` loss and gradients on one
shared batch). Training loop:
``compendium.training.fit``; intervals: ``compendium.stats``; shortest-path reference:
``networkx``. Ours: the maze, the PI, the policy, the π-Distill/OPSD terms and the baselines.

Small-scale deviations
----------------------
- Full scale trains the issue's network (d = 96, 3 layers, 6 heads) at a rate of 1e-3 (the
  width-32 rate of 3e-3 times 32 / 96), from a base pretrained for 200 steps (the fewest of
  {60, 200, 400} after which every seed's base follows a shown expert trace on at least 90% of
  held-out mazes). Smoke keeps width 32, one layer, rate 3e-3 and a 60-step base, so that its 90
  policies train within its budget: the machine does about 2 GFLOP/s per core on these small batched
  products. At full scale the d = 96 asset takes about half an hour of CPU on one thread (built once
  and cached; the chapter's own run is minutes). Built first at the width-32 settings (60-step base,
  rate 3e-3), that network did not learn to read its PI slot (the chapter's Limits has the record).
- The map enters as one token (a linear map of the wall grid) rather than one token per cell,
  and each history token carries the walls around the agent and the goal cell; the PI slot is
  ``H`` tokens and the history ``H`` tokens, as in the issue.
- Smoke uses 4 x 4 mazes, horizon 8, PI kinds full / noisy / random, alpha = 0.5 only (beta in
  {0, 0.1}), BC on the full and noisy traces and the sequential and OPSD baselines on the noisy one;
  full uses the issue's 6 x 6 mazes, horizon 14, all four PI kinds, the whole (alpha, beta) grid and
  every baseline on every kind.
- A few thousand episodes per policy (the card's full scale suggests 60k).
- "Sequential" is one shared network trained first as a teacher (GRPO with PI) and then, for the
  second half, by the student's off-policy term on its own teacher rollouts; "SFT w/ CoT + RL" is
  BC on the clean expert trace plus a head that predicts the BFS distance of the four neighbouring
  cells, then GRPO.
- Success is measured greedily (argmax actions) on held-out mazes.
"""

from .experiment import (
    Config,
    Result,
    bfs_expert_gap,
    degeneracy_gaps,
    kl_checks,
    kv_cache_gap,
    measurements,
    run,
    curve_runs,
    seed_values,
    select_grid_point,
    select_init,
    shared_parameter_check,
)
from .losses import action_kl, opsd_loss, pi_distill_loss, student_offpolicy_loss, teacher_loss
from .maze import PI_KINDS, Mazes, bfs_distance, generate_mazes, make_pi
from .policy import PISlotPolicy
from .training import (
    ASSET_NAME,
    METHODS,
    Recipe,
    build_asset,
    load_policies,
    recipes_for,
    rollout,
    settings_for,
    train_chunk,
)

__all__ = [
    "ASSET_NAME", "METHODS", "PI_KINDS", "Config", "Mazes", "PISlotPolicy", "Recipe", "Result",
    "action_kl", "bfs_distance", "bfs_expert_gap", "build_asset", "degeneracy_gaps", "generate_mazes",
    "kl_checks", "kv_cache_gap", "load_policies", "make_pi", "measurements", "opsd_loss",
    "pi_distill_loss", "recipes_for", "rollout", "run", "seed_values", "select_grid_point", "select_init", "curve_runs",
    "settings_for", "shared_parameter_check", "student_offpolicy_loss", "teacher_loss", "train_chunk",
]
