r"""Implicit attribution robustness from plain SGD: learning rate over batch size as the knob.

Paper card
----------
"Improving Adversarial Robustness of Attribution via Implicit Regularization" (Mehrpanah, Gamba,
Azizpour), ICML 2026; seed file ``002_d926b147087f7228.txt``, abstract 9. Only the abstract and a
research card were read: the paper's theorems, its mechanism and its code were **not** read. The
curvature chain below and the reading of the softmax "entropy constraints" are ours.

Equations implemented
---------------------
- Knob (backward-error analysis of SGD, Barrett & Dherin 2021; Smith et al. 2021, our reading):
  SGD with step :math:`\eta` and batch :math:`B` follows
  :math:`L + \frac{\eta}{4}\|\nabla L\|^2 + \frac{\eta}{4B}\,\mathbb{E}\|\nabla \ell_i - \nabla L\|^2`,
  so a larger :math:`\eta/B` should favour flatter minima.
- Chain tested link by link with Spearman correlations over trained models:
  :math:`\eta/B \uparrow \Rightarrow \lambda_{\max}(\nabla^2_\theta L),\ \mathrm{tr}\,\nabla^2_\theta L \downarrow
  \Rightarrow \|\nabla^2_x \ell\|_F \downarrow \Rightarrow` top-k intersection under attack :math:`\uparrow`;
  for a first layer :math:`h = Wx`, :math:`\nabla^2_x \ell = W^\top \nabla^2_h \ell\, W`, and
  :math:`\|\nabla_x f(x+\delta) - \nabla_x f(x)\| \le \sup\|\nabla^2_x f\|\,\|\delta\|`.
- Input curvature is read after temperature scaling (``T`` minimises the validation NLL of
  ``logits / T``), because smaller logits alone lower it.
- Attack (Ghorbani et al. 2019, top-k attack): PGD with signed steps of size :math:`2.5\epsilon/20`
  on :math:`D = \sum_{i\in T}|a_i| / \sum_i |a_i|`, :math:`\|\delta\|_\infty \le \epsilon`, box
  [0, 1] on digits, the clean prediction held; metrics: top-k intersection (k = 8), Spearman
  correlation of the maps.
- Power control (ours): a trained MLP against its twin with the same weights and hidden activations
  :math:`(1-\alpha)\,\mathrm{GELU}(h) + \alpha h/2` (``attribution.blended_forward``,
  :math:`\alpha = 0.5`), whose gradient map varies less with the input by construction; the
  attack and metric must find the twin more robust. Training progress is held fixed by a partial
  Spearman correlation on the final training loss (``experiment.partial_spearman``).
- Softmax attention Jacobian :math:`J = \mathrm{diag}(a) - aa^\top`: :math:`J \succeq 0`,
  :math:`\lambda_{\max} \le 1/2`, :math:`\mathrm{tr} J = 1 - \sum a_i^2 = 1 - e^{-H_2(a)}`.

What is ours and what is a library's
------------------------------------
Attribution maps for measurement: captum (``Saliency``, ``InputXGradient``,
``IntegratedGradients``, ``NoiseTunnel``). The attack needs a differentiable gradient map
(double backprop through every model of a stack at once), which captum's ``attribute`` does not
return, so the gradient map, the attack, Hutchinson and power iteration are ours, checked against
captum, finite differences and exact Hessians (implementation rows). Training is a batched plain-SGD
loop of ours (``models.train_stack``): ``compendium.training.fit`` trains one module with AdamW,
whereas here up to sixty models with their own step sizes train together, with a hand-written
backward pass and in-place batched updates (about twice as fast as autograd at batch size 8, the
asset's costliest part); ``models.train_stack_reference`` is the autograd version it is tested
against, model by model, and ``torch.optim.SGD`` on an ``nn.Sequential`` is the one-at-a-time check. Statistics:
``compendium.stats`` (``spearman``, ``paired_difference``, ``mean_interval``).

Small-scale deviations
----------------------
- MLPs 2 x 128 with GELU (smooth, so the gradient map has a non-zero input derivative; ReLU nets
  are piecewise linear and the attack's gradient would vanish). No CNN: the tiny CNN was not
  written (its measured training cost is in the chapter's Limits).
- The attention part (``attention.py``) is a one-layer CLS-attention classifier on key-token
  sequences with fixed random token vectors (not a pretrained or multi-layer transformer), 6 configs
  x 3 seeds per attention kind; the attention map is the head-mean CLS attention.
- sklearn digits (8 x 8) and a 256-dimensional, 10-class Gaussian mixture; 60 epochs at full
  scale (the issue's), 20 at smoke (``models.SMOKE_EPOCHS``: the smoke asset's CPU budget); the
  same 12 configs x 5 seeds and references at both; the scales also differ in evaluation sizes.
- Other attribution methods (gradient x input, SmoothGrad, IG) are measured at the points the
  gradient attack found (a transfer attack), not attacked one by one.
- SAM and the input-gradient penalty are trained only at (eta, B) = (0.05, 32), on digits.
"""

from .attention import (
    ATTENTION_ASSET,
    KINDS,
    AttentionSettings,
    attention_attack,
    attention_map,
    attention_measurements,
    attention_settings_for,
    build_attention_asset,
    evaluate_attention,
    key_token_task,
    load_attention_asset,
    train_attention_stack,
)
from .attribution import (
    attribution_attack,
    blended_attack,
    blended_forward,
    captum_maps,
    fit_temperature,
    gradient_map,
    hutchinson,
    input_hessian_norm,
    input_hvp,
    integrated_gradients_ours,
    kendall_tau,
    parameter_curvature,
    parameter_hvp,
    random_perturbation,
    rank_correlation,
    single_model,
    softmax_jacobian_numeric,
    softmax_jacobian_symbolic,
    topk_intersection,
    topk_pgd,
    topk_mask,
)
from .experiment import (
    CHAIN,
    METHODS,
    SMOOTH_ALPHA,
    Config,
    Result,
    accuracy_matched,
    attack_sanity,
    chain_correlations,
    direction,
    evaluate_task,
    headroom,
    implementation_checks,
    measurements,
    penalty_control,
    smoothing_power,
    partial_spearman,
    rank_test,
    run,
    run_attention,
)
from .models import (
    ASSET_NAME,
    AssetSettings,
    build_asset,
    digits_split,
    gaussian_task,
    init_stack,
    load_asset,
    select,
    settings_for,
    stack_accuracy,
    stack_cross_entropy,
    stack_forward,
    train_stack,
    train_stack_reference,
)
