r"""The π-Distill objective (our reconstruction), OPSD and the supervised terms.

Notation: a batch of ``N`` episodes of ``T`` turns; ``logp_T`` and ``logp_S`` are the log-probabilities
of the taken actions under the teacher view (PI shown) and the student view (PI masked) of the same
network, ``mask`` marks the turns that happened, ``adv`` one GRPO advantage per episode. Every loss
returns one value per episode (aggregated as GRPO does: a masked mean over the episode's turns); the
caller averages.

Teacher term on teacher rollouts (GRPO, shared :func:`compendium.rl.grpo_loss`, plus a reverse KL to
the stop-gradient student, exact over the five actions):

.. math:: \ell_T = \ell_{GRPO}(\log\pi_T; A) + \beta\,\overline{KL}\big(\pi_T(\cdot|s_t, I)\,\|\,
          \mathrm{sg}\,\pi_S(\cdot|s_t)\big)

Student term on the same teacher rollouts, weighted by the episode's reward :math:`R` (success;
an advantage would vanish on mazes the teacher always solves, where the student has most to learn)
and by clipped per-turn importance weights :math:`w_t = \min(\pi_S(a_t|s_t) / \pi_T(a_t|s_t, I), c)`
(no gradient through ``w``):

.. math:: \ell_S = -\overline{w_t\,R\,\log\pi_S(a_t|s_t)}

π-Distill: :math:`\ell = \alpha\,\ell_T + (1-\alpha)\,\ell_S` (α = 1, β = 0: teacher GRPO; α = 0:
the student's off-policy term). OPSD on student rollouts: GRPO plus β times the KL from the student
to the stop-gradient teacher, :math:`\ell_{GRPO}(\log\pi_S; A) + \beta\,\overline{KL}(\pi_S\|\mathrm{sg}\,\pi_T)`
(β = 0: plain GRPO).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compendium.rl import grpo_loss

__all__ = ["action_kl", "masked_mean", "teacher_loss", "student_offpolicy_loss", "pi_distill_loss",
           "opsd_loss", "bc_loss", "distance_map_loss"]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` (N, T) over each row's unmasked entries, shape (N,) (0 for an empty row)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def action_kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Exact ``KL(p || q)`` over the last axis (the actions) from logits; >= 0, shape without it."""
    logp, logq = F.log_softmax(logits_p, -1), F.log_softmax(logits_q, -1)
    return (logp.exp() * (logp - logq)).sum(-1).clamp(min=0.0)


def _grpo_per_episode(logp, adv, mask):
    return grpo_loss(logp, logp.detach(), adv, mask=mask, reduction="none").loss


def teacher_loss(logp_T, adv, mask, *, kl_T_S=None, beta=0.0) -> torch.Tensor:
    """GRPO on teacher rollouts plus ``beta`` times the mean per-turn KL(teacher || sg student).

    ``kl_T_S`` (N, T) must be computed against a detached student (see :func:`action_kl`); ``beta``
    a float or one value per episode (N,).
    """
    loss = _grpo_per_episode(logp_T, adv, mask)
    if kl_T_S is None:
        return loss
    return loss + torch.as_tensor(beta, dtype=loss.dtype) * masked_mean(kl_T_S, mask)


def student_offpolicy_loss(logp_S, logp_T, reward, mask, *, clip: float = 5.0) -> torch.Tensor:
    """``-mean_t w_t R log pi_S(a_t)`` on teacher rollouts, ``w_t = min(pi_S / pi_T, clip)`` detached;
    ``reward`` (N,) or (N, T)."""
    if not clip > 0:
        raise ValueError(f"clip must be positive, got {clip!r}")
    w = torch.exp(logp_S.detach() - logp_T.detach()).clamp(max=clip)
    reward = torch.as_tensor(reward, dtype=logp_S.dtype)
    if reward.dim() == 1:
        reward = reward[:, None]
    return masked_mean(-w * reward * logp_S, mask)


def pi_distill_loss(logp_T, logp_S, adv, reward, mask, *, kl_T_S, alpha, beta, clip: float = 5.0) -> torch.Tensor:
    """``alpha * teacher_loss + (1 - alpha) * student_offpolicy_loss`` per episode (alpha, beta: float or (N,))."""
    alpha = torch.as_tensor(alpha, dtype=logp_T.dtype)
    return alpha * teacher_loss(logp_T, adv, mask, kl_T_S=kl_T_S, beta=beta) + \
        (1 - alpha) * student_offpolicy_loss(logp_S, logp_T, reward, mask, clip=clip)


def opsd_loss(logp_S, adv, mask, *, kl_S_T, beta) -> torch.Tensor:
    """On-policy self-distillation: GRPO on student rollouts + ``beta`` * mean KL(student || sg teacher)."""
    return _grpo_per_episode(logp_S, adv, mask) + torch.as_tensor(beta, dtype=logp_S.dtype) * masked_mean(kl_S_T, mask)


def bc_loss(logp, mask) -> torch.Tensor:
    """Behaviour cloning: ``-mean_t log pi(a_t)`` over the replayed trace's turns."""
    return -masked_mean(logp, mask)


def distance_map_loss(aux_logits, distance) -> torch.Tensor:
    """Cross-entropy of the auxiliary head against BFS distances (the CoT analogue), per episode.

    ``aux_logits`` (N, T, 4, C); ``distance`` (N, T, 4) with -1 for a blocked move (class C - 1);
    the mean over turns and neighbours (every turn of the replayed expert trace counts).
    """
    classes = aux_logits.shape[-1]
    target = torch.where(distance < 0, torch.full_like(distance, classes - 1), distance)
    ce = F.cross_entropy(aux_logits.reshape(-1, classes), target.reshape(-1), reduction="none")
    return ce.view(distance.shape).mean((-1, -2))
