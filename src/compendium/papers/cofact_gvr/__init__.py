r"""CofactGVR: a counterfactual reward gap makes grounded answers use their evidence.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 14 (CofactGVR: grounded visual
reasoning as evidence generation followed by answer reasoning, with the evidence a causal mediator;
a factual-counterfactual reward gap as a selective intermediate bonus; Q-PAS, quantile-filtered
prioritised advantage sampling). **Neither the paper's text nor its code was available.** The
reward gap, the selective bonus and Q-PAS below are the research card's *inferred reading* of the
abstract, fixed before any run; they are not the authors' formulas.

Equations implemented (``reward.py``)
-------------------------------------
A rollout is :math:`\tau = (e, y)`: an evidence cell :math:`e \sim \pi(\cdot \mid I, q)` and an
answer :math:`y \sim \pi(\cdot \mid I, q, \mathrm{crop}(I, e))`. With M = 2 matched counterfactuals
:math:`e'_m` (the same-size cell moved to another, non-overlapping cell; the cell's content masked),
the image and question kept fixed,

.. math::  \Delta = \pi(y^\ast \mid I, q, e) - \tfrac1M \textstyle\sum_m \pi(y^\ast \mid I, q, e'_m),\qquad
           r = \mathbb 1[y = y^\ast] + \lambda \max(\Delta, 0)\,\mathbb 1[y = y^\ast],

:math:`\lambda = 1` (fixed before any run). GRPO (shared ``compendium.rl``): group-normalised
advantages over G = 8 rollouts of a question, the PPO-clip loss with :math:`\varepsilon = 0.2` over
the two tokens (e, y). Q-PAS: drop the :math:`\lfloor 0.3 N \rfloor` rollouts of smallest
:math:`|A|` in the buffer, then draw the minibatch with :math:`p_i \propto |A_i|`.

Modules: ``scenes`` (GroundedShapesVQA), ``policy`` (the CNN policy with a model axis), ``reward``
(counterfactuals, gap, bonus, Q-PAS), ``training`` (the arms, the lock-step trainer, the asset),
``experiment`` (Config, run, implementation checks, the ledger's statistics).

What is ours and what is a library's
------------------------------------
GRPO advantages and loss: the library's shared ``compendium.rl.grpo`` (trl's GRPO lives inside an
LLM trainer and cannot drive a two-token image policy). Training loop: ``compendium.training.fit``;
intervals: ``compendium.stats``; chi-square: scipy. Ours: the task, the policy, the counterfactual
gap, the bonus and Q-PAS (no library implements them).

Small-scale deviations
----------------------
- A multimodal LLM that writes a box and then a chain of thought is replaced by a 9-way evidence
  head over grid cells and a 6-way answer head; boxes are grid cells, so the GT-IoU reward of the
  privileged arm is 1[e = target cell] and every shifted counterfactual has IoU 0.
- There is no format reward (every output is well formed).
- Scores of counterfactuals use the behaviour policy's probability of y*, not sampled answers.
- Smoke: 512 training questions, 8 per update, 200 updates; full: 4096, 16 per update, 600 updates
  (the card suggested 8k questions); five training seeds at both scales.
"""

from .experiment import (Config, Result, counterfactual_cell_check, crop_blind_gap, crop_reader_gap, measurements,
                         q_pas_checks, run, updates_to_target)
from .policy import GroundedPolicy
from .reward import (MASKED, chi_square_frequencies, counterfactual_cells, mediator_gap, q_pas_probabilities,
                     q_pas_select, selective_bonus, shaped_reward)
from .scenes import (COLOUR_NAMES, SHAPE_MASKS, SHAPE_NAMES, TEST_CUE, Scenes, box_iou, cell_box, cell_crops,
                     make_scenes, mask_cells)
from .training import (ARM_NAMES, ARMS, ASSET_NAME, Arm, AssetSettings, build_asset, checkpoint_rounds, evaluate,
                       load_policies, prob_of, settings_for, train_arms)

__all__ = [
    "ARMS", "ARM_NAMES", "ASSET_NAME", "Arm", "AssetSettings", "COLOUR_NAMES", "Config", "GroundedPolicy", "MASKED",
    "Result", "SHAPE_MASKS", "SHAPE_NAMES", "Scenes", "TEST_CUE", "box_iou", "build_asset", "cell_box", "cell_crops",
    "checkpoint_rounds", "chi_square_frequencies", "counterfactual_cell_check", "counterfactual_cells",
    "crop_blind_gap", "crop_reader_gap", "evaluate", "load_policies", "make_scenes", "mask_cells", "measurements",
    "mediator_gap", "prob_of", "q_pas_checks", "q_pas_probabilities", "q_pas_select", "run", "selective_bonus",
    "settings_for", "shaped_reward", "train_arms", "updates_to_target",
]
