r"""Towards On-Policy SFT: measure how off-policy SFT data is, then re-weight (IDFT) or rewrite it (Hinted Decoding).

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 3 (arXiv 2602.12222). Claims: the
generalisation gap between SFT and RL comes mainly from RL's on-policy data; Distribution
Discriminant Theory (DDT) measures how well data fits the model's own distribution; IDFT
re-weights the SFT loss token by token with that measure, and Hinted Decoding rewrites the SFT
corpus into the model's own distribution; together they are said to generalise on par with DPO and
SimPO at the cost of SFT.

Equations implemented
---------------------
DDT (:func:`~.losses.cll`, fused in :mod:`compendium.kernels.centered_loglik`)::

    phi_t = log p(y_t | ctx) + H(p(. | ctx)),     E_{y ~ p}[phi_t] = 0

IDFT (:func:`~.losses.idft_loss`, as released: beta = 1, gamma in [0.1, 2], lambda = 1)::

    gamma_t = 1 + lambda (clamp(exp(-phi_t / beta), 0.1, 2) - 1),   loss_t = -sg(p_t^gamma_t) log p_t

DFT is gamma = 1, cross-entropy (SFT) weight 1. Hinted Decoding (:func:`~.decoding.hinted_generate`,
beta = 3, T = 0.3, top-p 0.95)::

    lambda = clamp(beta H(p) / log|V|, 0, 1),   logits = (1 - lambda) log p + lambda log q

``p`` the hinted stream, ``q`` the plain one; the first token from ``p``, after the answer marker
only ``q``.

Ours and the libraries'
-----------------------
The LM is ``transformers``' GPT-2 built from a config (random init) and trained here; ROC AUC is
scikit-learn's; the trainer is :mod:`compendium.training`. DFT is in ``trl`` (``SFTConfig(loss_type="dft")``,
inlined in ``SFTTrainer.compute_loss``); we keep our own DFT because it shares one token-weighted
cross-entropy with IDFT, and a unit test checks our DFT, and IDFT where it coincides with DFT
(``lam = 0`` with the stopped weight), against trl's ``compute_loss`` in value and in every parameter
gradient. IDFT, the DDT statistics, the samplers, Hinted Decoding, the toy language and the Triton
kernel are ours (we found no library that implements them; the authors' code was read but not
copied).

Small-scale deviations
----------------------
- The "LLM" is a 2-layer, d = 64 GPT-2 over an 18-token language: 3-operand addition mod 7 with a
  partial-sum chain of thought. Its weights start from a wider random init (std 0.1 instead of
  GPT-2's 0.02), which shortened the plateau before the addition table is learnt in our probes. Style A (left to right, ``,`` separators 90 % of the time) is the
  pretraining style; style B (right to left, always ``;``) is the off-policy SFT corpus.
- The hinted stream's prompt carries the answer as a token (``H h``) that pretraining taught the
  model to use, instead of a natural-language instruction.
- Responses are 6 tokens; AUROC at longer lengths pools consecutive responses of one set into a
  document.
- Forgetting is the NLL change of a subtraction task that was part of pretraining; the OOD set is
  4-operand addition over all residues, while fine-tuning uses 3 operands from 0..4 only (5 and 6
  never occur). DPO/SimPO are not run.
"""

from .checks import gradient_check, hinted_limits, kernel_check, loss_limits, symbolic_phi_moments
from .decoding import generate, hinted_generate, hinted_lambda, hinted_mix, sample_token
from .experiment import ARMS, CHANCE, LABELS, UNIT, Config, Result, auroc, doc_means, finetune, measurements, run, token_phi
from .lm import ASSET_NAME, PretrainSettings, build_asset, load_models, pretrain, settings_for
from .losses import (ce_loss, cll, closed_form_logit_gradient, dft_loss, idft_gamma, idft_lambda, idft_loss,
                     seq_phi_stats, token_weights, weighted_nll)

__all__ = [
    "ARMS", "CHANCE", "LABELS", "UNIT", "Config", "Result", "run", "measurements", "auroc", "doc_means", "finetune", "token_phi",
    "ASSET_NAME", "PretrainSettings", "build_asset", "load_models", "pretrain", "settings_for",
    "generate", "hinted_generate", "hinted_lambda", "hinted_mix", "sample_token",
    "ce_loss", "cll", "closed_form_logit_gradient", "dft_loss", "idft_gamma", "idft_lambda", "idft_loss",
    "seq_phi_stats", "token_weights", "weighted_nll",
    "gradient_check", "hinted_limits", "kernel_check", "loss_limits", "symbolic_phi_moments",
]
