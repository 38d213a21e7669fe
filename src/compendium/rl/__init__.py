"""Reinforcement-learning pieces shared by chapters (nothing paper-specific).

``compendium.rl.grpo``: group-normalised advantages, the k3 KL estimate and the PPO-clip GRPO
loss with masking (see its docstring for the equations).
"""

from .grpo import AGGREGATIONS, GRPOLoss, group_advantages, grpo_loss, kl_k3, masked_group_advantages

__all__ = ["AGGREGATIONS", "GRPOLoss", "group_advantages", "grpo_loss", "kl_k3", "masked_group_advantages"]
