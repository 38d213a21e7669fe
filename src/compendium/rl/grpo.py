r"""Group Relative Policy Optimisation (GRPO): group-normalised advantages and the clipped loss.

The shared piece every GRPO-style chapter imports (nothing paper-specific here). A *group* is
the ``G`` completions (rollouts) sampled for one prompt; GRPO replaces PPO's learned value
baseline by the group's own reward statistics (Shao et al. 2024, DeepSeekMath).

Equations implemented
---------------------
Advantages (:func:`group_advantages`), for rewards :math:`r_{i,1..G}` of prompt :math:`i`:

.. math::  A_{i,g} = \frac{r_{i,g} - \bar r_i}{s_i + \epsilon},\qquad
           \bar r_i = \tfrac1G \textstyle\sum_g r_{i,g},

with :math:`s_i` the group's standard deviation (``scale="std"``, unbiased, as trl does) or
:math:`s_i = 1, \epsilon = 0` (``scale="none"``, Dr. GRPO's unscaled variant). A group whose rewards
are all equal gets advantage exactly 0 (never NaN): it carries no learning signal.

Per-token loss (:func:`grpo_loss`), with :math:`\rho = \exp(\log\pi_\theta - \log\pi_{old})`:

.. math::  \ell_{t} = -\min\big(\rho_t A,\ \operatorname{clip}(\rho_t, 1-\varepsilon_{low},
           1+\varepsilon_{high}) A\big) + \beta\, \widehat{KL}_t ,

where the KL to the reference policy is Schulman's *k3* estimator
:math:`\widehat{KL}_t = e^{\log\pi_{ref} - \log\pi_\theta} - (\log\pi_{ref} - \log\pi_\theta) - 1`
(non-negative, unbiased for :math:`KL(\pi_\theta\|\pi_{ref})` on tokens sampled from
:math:`\pi_\theta`; DeepSeekMath's choice and trl's). Tokens are masked by ``mask`` and
aggregated per sequence then averaged over sequences (``aggregation="sequence"``: the original
GRPO, trl's ``loss_type="grpo"``) or over all unmasked tokens at once (``"token"``: DAPO / trl's
``"bnpo"``). A one-step action (a single "token", e.g. a value bin) is a sequence of length 1.

With :math:`\rho = 1` (first update on fresh rollouts) and :math:`\beta = 0` the loss has the
gradient of the vanilla policy-gradient loss :math:`-\tfrac1N\sum A\,\log\pi_\theta` (its value is
:math:`-\tfrac1N\sum A`, since :math:`\nabla\rho = \rho\,\nabla\log\pi_\theta`).

What is ours
------------
All of it, in plain torch: trl's ``GRPOTrainer`` computes the same loss inside a trainer method
that needs a language model and tokenizer, so a chapter with a small policy over a few actions
cannot call it directly. ``tests/test_grpo.py`` checks our loss against the formulas above
(autograd, masking, the policy-gradient limit); ``tests/test_grpo_trl.py`` against trl 1.16's
``GRPOTrainer._compute_loss`` on one shared batch of a config-built GPT-2 (loss and every gradient,
``loss_type`` ``grpo`` = our ``sequence`` and ``bnpo`` = our ``token``). trl's default
``use_bias_correction_kl=True`` also multiplies the KL term by the importance ratio, which this
module does not do; with it off the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["GRPOLoss", "group_advantages", "masked_group_advantages", "kl_k3", "grpo_loss", "AGGREGATIONS"]

AGGREGATIONS = ("sequence", "token")


def _tensor(x, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if not torch.is_floating_point(t):
        t = t.to(torch.get_default_dtype())
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    return t


def group_advantages(rewards, *, eps: float = 1e-4, scale: str = "std") -> torch.Tensor:
    """Group-normalised advantages along the last axis.

    Parameters
    ----------
    rewards : array_like or torch.Tensor, shape (..., G)
        Rewards of the ``G >= 2`` rollouts of each group (the last axis is the group).
    eps : float
        Added to the group's standard deviation (trl uses 1e-4).
    scale : {'std', 'none'}
        Divide by the group's unbiased standard deviation (GRPO) or only centre (Dr. GRPO).

    Returns
    -------
    torch.Tensor, shape (..., G)
        ``(r - mean_g r) / (std_g r + eps)``; exactly 0 for a group of equal rewards. Each group
        sums to zero up to rounding.
    """
    r = _tensor(rewards, "rewards")
    if r.dim() < 1 or r.shape[-1] < 2:
        raise ValueError(f"rewards need a last (group) axis of size >= 2, got shape {tuple(r.shape)}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    centred = r - r.mean(dim=-1, keepdim=True)
    flat = (r.amax(dim=-1, keepdim=True) == r.amin(dim=-1, keepdim=True))    # no signal in the group
    if scale == "std":
        centred = centred / (r.std(dim=-1, keepdim=True) + eps)
    return torch.where(flat, torch.zeros_like(centred), centred)


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of ``KL(pi || pi_ref)`` per token: ``exp(d) - d - 1``, ``d = logp_ref - logp``.

    Parameters
    ----------
    logp, logp_ref : torch.Tensor, same shape
        Log-probabilities of the sampled tokens under the policy and the reference.

    Returns
    -------
    torch.Tensor
        Non-negative, zero where the two agree; same shape as the inputs.
    """
    if logp.shape != logp_ref.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and logp_ref {tuple(logp_ref.shape)} differ in shape")
    d = logp_ref - logp
    return torch.exp(d) - d - 1.0


@dataclass(frozen=True)
class GRPOLoss:
    """What :func:`grpo_loss` returns.

    Attributes
    ----------
    loss : torch.Tensor
        The scalar to minimise (``reduction="mean"``) or one value per sequence (``"none"``).
    clip_fraction : float
        Share of unmasked tokens where the clipped term is the active one (zero gradient).
    mean_kl : float
        Mean k3 KL over unmasked tokens.
    mean_ratio : float
        Mean importance ratio over unmasked tokens.
    """

    loss: torch.Tensor
    clip_fraction: float
    mean_kl: float
    mean_ratio: float


def grpo_loss(logp, logp_old, advantages, *, logp_ref=None, mask=None, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_coef: float = 0.0, aggregation: str = "sequence",
              reduction: str = "mean") -> GRPOLoss:
    """The PPO-clip surrogate with a k3 KL-to-reference term, masked and aggregated.

    Parameters
    ----------
    logp : torch.Tensor, shape (N, T) or (N,)
        Log-probabilities of the sampled tokens under the current policy (with gradient). A 1-D
        input is N one-token sequences.
    logp_old : torch.Tensor, same shape
        The same under the policy that sampled them (detached inside).
    advantages : torch.Tensor, shape (N,) or (N, T)
        One advantage per sequence (broadcast over its tokens) or per token.
    logp_ref : torch.Tensor, same shape as ``logp``, optional
        Under the frozen reference policy; needed when ``kl_coef > 0``.
    mask : torch.Tensor, shape (N, T), optional
        1 for tokens that count, 0 for padding (default: all count). Masked tokens get no
        gradient and do not enter any mean.
    clip_eps, clip_eps_high : float
        The ratio is clipped to ``[1 - clip_eps, 1 + clip_eps_high]`` (``clip_eps_high`` defaults
        to ``clip_eps``).
    kl_coef : float
        beta, the weight of the KL penalty.
    aggregation : {'sequence', 'token'}
        Mean over each sequence's tokens, then over sequences (GRPO), or one mean over all
        unmasked tokens (DAPO / trl 'bnpo').
    reduction : {'mean', 'none'}
        A scalar, or the per-sequence losses (masked token mean of each sequence; for
        ``aggregation='token'`` each sequence's token sum divided by the batch's token count, so
        that their sum is the scalar loss).

    Returns
    -------
    GRPOLoss
    """
    logp = _tensor(logp, "logp")
    logp_old = _tensor(logp_old, "logp_old").detach()
    if logp.dim() == 1:
        logp, logp_old = logp[:, None], logp_old[:, None]
        logp_ref = None if logp_ref is None else torch.as_tensor(logp_ref)[:, None]
        mask = None if mask is None else torch.as_tensor(mask)[:, None]
    if logp.dim() != 2 or logp_old.shape != logp.shape:
        raise ValueError(f"logp and logp_old must share a shape (N, T) or (N,), got {tuple(logp.shape)} "
                         f"and {tuple(logp_old.shape)}")
    n, t = logp.shape
    adv = _tensor(advantages, "advantages").detach().to(logp.dtype)
    if adv.shape == (n,):
        adv = adv[:, None]
    elif adv.shape != (n, t):
        raise ValueError(f"advantages must have shape ({n},) or ({n}, {t}), got {tuple(adv.shape)}")
    if mask is None:
        mask = torch.ones_like(logp)
    mask = torch.as_tensor(mask).to(logp.dtype)
    if mask.shape != logp.shape:
        raise ValueError(f"mask must have shape {tuple(logp.shape)}, got {tuple(mask.shape)}")
    if not (clip_eps > 0 and (clip_eps_high is None or clip_eps_high > 0)):
        raise ValueError("clip_eps and clip_eps_high must be positive")
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    high = clip_eps if clip_eps_high is None else clip_eps_high

    ratio = torch.exp(logp - logp_old)                                         # (N, T)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if kl_coef > 0:
        if logp_ref is None:
            raise ValueError("kl_coef > 0 needs logp_ref")
        logp_ref = _tensor(logp_ref, "logp_ref").detach().to(logp.dtype)
        if logp_ref.shape != logp.shape:
            raise ValueError(f"logp_ref must have shape {tuple(logp.shape)}, got {tuple(logp_ref.shape)}")
        kl = kl_k3(logp, logp_ref)
        per_token = per_token + kl_coef * kl
    # masking by multiplication keeps the graph; a masked token's gradient is exactly 0
    per_token = per_token * mask
    tokens_per_seq = mask.sum(dim=1).clamp(min=1.0)
    total_tokens = mask.sum().clamp(min=1.0)
    if aggregation == "sequence":
        per_seq = per_token.sum(dim=1) / tokens_per_seq
        loss = per_seq.mean() if reduction == "mean" else per_seq
    else:
        per_seq = per_token.sum(dim=1) / total_tokens
        loss = per_seq.sum() if reduction == "mean" else per_seq
    with torch.no_grad():
        active_clip = (clipped < unclipped).to(logp.dtype) * mask              # the min picked the clip
        stats = dict(clip_fraction=float(active_clip.sum() / total_tokens),
                     mean_kl=float((kl * mask).sum() / total_tokens),
                     mean_ratio=float((ratio * mask).sum() / total_tokens))
    return GRPOLoss(loss=loss, **stats)


def masked_group_advantages(rewards, mask, *, eps: float = 1e-4, scale: str = "std") -> torch.Tensor:
    """Group-normalised advantages over the members of each group that have a reward.

    Rollouts whose reward is missing (``mask`` False: an unlabelled trajectory whose sparse
    feedback was never given) are dropped: they get advantage 0 and do not enter their group's
    mean or standard deviation. With every entry valid this equals :func:`group_advantages`.

    Parameters
    ----------
    rewards : array_like or torch.Tensor, shape (..., G)
        Rewards (any finite value where ``mask`` is False; it is ignored).
    mask : array_like of bool, same shape
        Which rewards exist.
    eps, scale :
        As in :func:`group_advantages`.

    Returns
    -------
    torch.Tensor, shape (..., G)
        0 for dropped rollouts and for every member of a group with fewer than two valid rewards
        or with equal valid rewards; otherwise ``(r - mean_valid) / (std_valid + eps)``.
    """
    r = _tensor(rewards, "rewards")
    m = torch.as_tensor(mask).to(torch.bool)
    if m.shape != r.shape:
        raise ValueError(f"mask must have the shape of rewards {tuple(r.shape)}, got {tuple(m.shape)}")
    if r.dim() < 1 or r.shape[-1] < 2:
        raise ValueError(f"rewards need a last (group) axis of size >= 2, got shape {tuple(r.shape)}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    mf = m.to(r.dtype)
    count = mf.sum(dim=-1, keepdim=True)
    centred = (r - (r * mf).sum(dim=-1, keepdim=True) / count.clamp(min=1.0)) * mf
    high = torch.where(m, r, torch.full_like(r, -torch.inf)).amax(dim=-1, keepdim=True)
    low = torch.where(m, r, torch.full_like(r, torch.inf)).amin(dim=-1, keepdim=True)
    flat = (count < 2) | (high == low)                                          # no signal in the group
    if scale == "std":
        std = torch.sqrt((centred ** 2).sum(dim=-1, keepdim=True) / (count - 1).clamp(min=1.0))
        centred = centred / (std + eps)
    return torch.where(m & ~flat, centred, torch.zeros_like(centred))
