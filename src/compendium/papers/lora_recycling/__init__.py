r"""Recycling in-the-wild LoRAs: an adaptive merge of a pool against a fresh LoRA and random LoRAs.

Paper card
----------
"The Appeal and Reality of Recycling LoRAs with Adaptive Merging" (Liu, Je, Ciccone, Xu, YSS,
Raffel; ICML 2026), seed file ``000_f69ae4f9f6fb29da.txt``, abstract 5. The method details follow
the research card's reading of the authors' released code (merging layer, the searched "Ours"
settings, the baselines and the random-LoRA control); no code was copied.

Equations implemented
---------------------
LoRA (``lora.py``): :math:`W' = W + s\,BA`, :math:`s = \alpha / r`, on every linear module of the
base MLP (``fc1``, ``fc2``, ``head``).

Merging layer: per module :math:`W' x = W x + \sum_{i=1}^{K} \mathrm{act}(c_i)\, s_i B_i A_i x`
with one coefficient per LoRA and module (``granularity="module"``) or per rank-one piece
(``"rank"``). "Ours": :math:`\mathrm{act} = \mathrm{LeakyReLU}(0.01)`, :math:`c = 0` at the start
(the base model exactly), AdamW lr 0.05, 100 steps, only :math:`c` trained. AdaMerging: linear
activation, :math:`c = 1/\sqrt{K}` at the start.

Non-adaptive merges (peft ``add_weighted_adapter``): average (``cat`` with weights :math:`1/K`,
exact) and TIES at density 0.4 (``ties_svd`` with a full-rank reduced SVD: TIES on the dense
:math:`\Delta W_i`). Our ``ties_merge`` / ``average_merge`` are checked against them.

Closeness selection (``lora_cosines``): the cosine of two whole updates (all modules concatenated)
by the same identity, summed over modules, with no dense :math:`\Delta W`.

Closeness without the dense product: :math:`\langle B_1A_1, B_2A_2\rangle_F =
\mathrm{tr}((A_1A_2^\top)(B_2^\top B_1))` (sympy-checked, ``trace_identity_gap``).

Random-LoRA control: every selected LoRA's :math:`A, B` replaced by Gaussians with that LoRA's
own standard deviations (std-matched, same rank and scaling).

What is ours and what is a library's
------------------------------------
peft: the adapters (``LoraConfig`` / ``add_adapter`` with each LoRA's rank and alpha, peft's
initialisation of every pool adapter), the average and TIES merges, and the reference forward that
our batched forward is checked against. Ours: the toy, the batched (vectorised) training of many
LoRAs / coefficient sets at once (peft trains one adapter at a time; a batched program lets a
chapter train thousands on two cores), the merging layer (peft has no trainable merge
coefficients), selection, the std-matched random pool. Training: ``compendium.training.fit``;
intervals and TOST: ``compendium.stats``.

Small-scale deviations
----------------------
- Base model: an MLP 16 -> 32 -> 32 -> 1 (GELU) pretrained on 16 linear-teacher tasks over an
  8-dimensional shared basis (one head per task, then the mean head is kept), instead of
  Llama-3.1-8B-Instruct; tasks are binary labels ``1[u^T x > 0]`` instead of text tasks.
- Pool: 60 LoRAs trained here (ranks 2/4/8, lora_alpha drawn from {4, 8, 16, 32}; every fifth on
  25 % flipped labels, every fifth kept at 20 % of its steps), not 958 Hub LoRAs.
- Full-batch training on the 80 examples (the released code uses batch 1-8); learning rates of
  every trained arm, Ours and the target LoRA alike, are picked on the 20 dev examples from the
  released value times the same factors.
- The "rank-matched" target LoRA is rank 1, the smallest LoRA; it still has more trainable
  parameters than Ours' 3 K coefficients (a LoRA cannot be smaller).
- K = 10 LoRAs selected per target (by evaluation, at random, or by closeness to the dev-picked
  target LoRA); pi-Tuning, TSV and Arrow routing are not run.
- LoraHub (``lorahub_search``): CMA-ES from the ``cma`` package stands in for the original's
  nevergrad optimiser; one linear coefficient per LoRA shared by the modules, c = 0 at the start,
  bounds [-1.5, 1.5], L1 0.05 * mean|c|, 100 objective evaluations (start included), step size 0.5.
  These choices are ours, fixed before the first run.
"""

from .experiment import (ARMS, BASE_ACCURACY_MAX, BEATS_BASE_SHARE, EQUIVALENCE_MARGIN, LIMITED_BENEFIT_MARGIN,
                         LORA_ACCURACY_MIN, LORAHUB_BOUNDS, LORAHUB_SIGMA0, NEAR_DUPLICATE_SHARE, REGIMES, TRANSFER_MARGIN, Config, Result,
                         dev_choice, measurements, run, train_lora, train_merge)
from .lora import (ACTIVATIONS, MODULES, BaseMLP, accuracy_and_loss, activate, average_merge, base_weights, dense_cosine, init_lora,
                   load_pool_tensors, lora_cosine, lora_cosines, lora_delta, lorahub_search, merge_components, merged_delta, mlp_forward,
                   orthonormal_basis, peft_forward, peft_merge_delta, peft_pool, pool_tensors, random_like_lora,
                   sample_task, ties_hand_example, ties_merge, trace_identity_gap, unit)
from .pool import ASSET_NAME, AssetSettings, build_asset, load_asset, pretrain_base, settings_for
