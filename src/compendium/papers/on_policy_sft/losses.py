r"""The DDT statistic and the three fine-tuning losses (CE, DFT, IDFT).

DDT's centred log-likelihood of a token ``y`` after context ``c`` under the policy ``p``::

    phi = log p(y | c) + H(p(. | c)),      E_{y ~ p}[phi] = 0

IDFT: ``gamma_raw = clamp(exp(-phi / beta), gamma_min, gamma_max)``,
``gamma = 1 + lambda (gamma_raw - 1)`` (``gamma`` stopped) and, as in the released trainer
(``fsdp_polylog_trainer.py``), the per-token loss ``-p_y^gamma log p_y`` with the gradient flowing
through ``p_y^gamma``: its logit gradient is ``p_y^gamma (1 + gamma log p_y) (p - e_y)``, which
*lowers* ``p_y`` when ``p_y < exp(-1/gamma)``. The issue and the research card read the weight as
stopped, ``-sg(p_y^gamma) log p_y`` (logit gradient ``p_y^gamma (p - e_y)``); that variant is
``"idft_sg"``. DFT is ``-sg(p_y) log p_y`` and cross-entropy weight 1. All are token means over the
response mask.
"""

from __future__ import annotations

import torch

from compendium.kernels.centered_loglik import centered_loglik

LOSSES = ("ce", "dft", "idft", "idft_sg")


def cll(logits: torch.Tensor, targets: torch.Tensor, *, backend: str = "auto"):
    """``(phi, logp, entropy)`` of each target token, no gradient.

    Parameters
    ----------
    logits : tensor (..., V)
    targets : integer tensor (...)
    """
    shape = targets.shape
    logp, ent = centered_loglik(logits.detach().reshape(-1, logits.shape[-1]), targets.reshape(-1), backend=backend)
    logp, ent = logp.reshape(shape), ent.reshape(shape)
    return logp + ent, logp, ent


def seq_phi_stats(phi: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    """Per-sequence DDT statistics of ``phi (B, T)``: total, mean, positive ratio (``mask`` (B, T) of 0/1)."""
    mask = torch.ones_like(phi) if mask is None else mask.to(phi.dtype)
    count = mask.sum(1).clamp(min=1)
    total = (phi * mask).sum(1)
    return {"total": total, "mean": total / count, "positive_ratio": ((phi > 0) * mask).sum(1) / count,
            "cumsum": torch.cumsum(phi * mask, 1)}


def idft_lambda(progress: float, warmup_ratio: float = 0.0, transition_ratio: float = 0.0) -> float:
    """The released schedule of lambda: 0 during the warm-up, a linear ramp, then 1."""
    if not 0.0 <= progress <= 1.0 or warmup_ratio < 0 or transition_ratio < 0:
        raise ValueError("progress must lie in [0, 1] and the ratios be >= 0")
    if progress < warmup_ratio:
        return 0.0
    if transition_ratio == 0 or progress >= warmup_ratio + transition_ratio:
        return 1.0
    return (progress - warmup_ratio) / transition_ratio


def idft_gamma(phi: torch.Tensor, *, beta: float = 1.0, gamma_min: float = 0.1, gamma_max: float = 2.0,
               lam: float = 1.0) -> torch.Tensor:
    """``gamma = 1 + lam (clamp(exp(-phi/beta), gamma_min, gamma_max) - 1)`` (beta > 0)."""
    if not beta > 0 or not 0 < gamma_min <= gamma_max:
        raise ValueError("need beta > 0 and 0 < gamma_min <= gamma_max")
    raw = torch.clamp(torch.exp(-phi / beta), gamma_min, gamma_max)
    return 1.0 + lam * (raw - 1.0)


def token_weights(logits: torch.Tensor, targets: torch.Tensor, loss: str, **idft) -> torch.Tensor:
    """The stopped per-token weight: 1 (CE), ``p_y`` (DFT) or ``p_y^gamma`` (both IDFT forms)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    with torch.no_grad():
        phi, logp, _ = cll(logits, targets, backend="reference")
        if loss == "ce":
            return torch.ones_like(logp)
        if loss == "dft":
            return logp.exp()
        return torch.exp(idft_gamma(phi, **idft) * logp)


def weighted_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, loss: str = "ce", **idft) -> torch.Tensor:
    """Token mean over ``mask`` of the per-token loss: CE, DFT, IDFT (released) or IDFT with a stopped weight.

    Parameters
    ----------
    logits : tensor (B, T, V)
    targets : integer tensor (B, T)
    mask : tensor (B, T) of 0/1 (the response tokens)
    loss : {'ce', 'dft', 'idft', 'idft_sg'}
    idft : beta, gamma_min, gamma_max, lam (the IDFT forms only)
    """
    if logits.shape[:-1] != targets.shape or targets.shape != mask.shape:
        raise ValueError(f"need logits (B, T, V), targets and mask (B, T); got {tuple(logits.shape)}, "
                         f"{tuple(targets.shape)}, {tuple(mask.shape)}")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    logp = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    mask = mask.to(logp.dtype)
    if loss == "idft":  # released: -p^gamma log p, gamma stopped, the gradient flows through p^gamma
        with torch.no_grad():
            phi, _, _ = cll(logits, targets, backend="reference")
            gamma = idft_gamma(phi, **idft)
        w = torch.exp(gamma * logp)
    else:
        w = token_weights(logits, targets, loss, **idft)
    return -(w * logp * mask).sum() / mask.sum().clamp(min=1)


def ce_loss(logits, targets, mask):
    """Cross-entropy (SFT)."""
    return weighted_nll(logits, targets, mask, "ce")


def dft_loss(logits, targets, mask):
    """DFT: ``-sg(p_y) log p_y``."""
    return weighted_nll(logits, targets, mask, "dft")


def idft_loss(logits, targets, mask, *, beta: float = 1.0, gamma_min: float = 0.1, gamma_max: float = 2.0,
              lam: float = 1.0, stop_weight: bool = False):
    """IDFT with the released defaults; ``stop_weight=True`` gives the stopped-weight reading ``-sg(p^gamma) log p``."""
    return weighted_nll(logits, targets, mask, "idft_sg" if stop_weight else "idft", beta=beta, gamma_min=gamma_min,
                        gamma_max=gamma_max, lam=lam)


def closed_form_logit_gradient(logits: torch.Tensor, target: int, weight: float, gamma: float | None = None) -> torch.Tensor:
    """Logit gradient of one token's loss, ``logits (V,)``.

    ``gamma=None``: ``-w log p_y`` with ``w`` stopped, gradient ``w (softmax(z) - e_y)``.
    ``gamma`` given: the released ``-p_y^gamma log p_y`` (``w = p_y^gamma``), gradient
    ``w (1 + gamma log p_y) (softmax(z) - e_y)``.
    """
    p = torch.softmax(logits, -1)
    scale = weight if gamma is None else weight * (1.0 + gamma * float(torch.log(p[target])))
    g = p * scale
    g[target] -= scale
    return g
