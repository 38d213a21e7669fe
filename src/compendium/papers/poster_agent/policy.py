"""The policy: a drafter and a refiner, two small MLPs over the element tokens, with a model axis.

Every training seed of one arm is one slice of the model axis (weights ``(M, in, out)``), so the
arm's seeds train in one program; AdamW is elementwise and nothing couples the slices, so this is
the same as training them one by one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .env import NUM_BINS, NUM_OPS, SLOTS, num_refine_actions

__all__ = ["BatchedMLP", "LayoutPolicy"]

NEG = -1e9


class BatchedMLP(nn.Module):
    """``M`` independent MLPs ``in -> hidden -> hidden -> out`` (tanh), applied as ``(M, N, in) -> (M, N, out)``.

    Parameters
    ----------
    num_models, in_dim, hidden, out_dim : int
    seeds : list of int
        One initialisation seed per model (its own ``torch.Generator``).
    out_scale : float
        The last layer's initial weights are scaled by this (near-uniform first policy).
    """

    def __init__(self, num_models: int, in_dim: int, hidden: int, out_dim: int, seeds, out_scale: float = 0.1):
        super().__init__()
        dims = [in_dim, hidden, hidden, out_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            w = torch.empty(num_models, a, b)
            for m, seed in enumerate(seeds):
                g = torch.Generator().manual_seed(int(seed) * 1009 + i)
                w[m] = torch.randn(a, b, generator=g) / math.sqrt(a)
            if i == len(dims) - 2:
                w *= out_scale
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(num_models, 1, b)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # x: (M, N, in)
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)                                # (M, N, out_i)
            if i < len(self.weights) - 1:
                x = torch.tanh(x)
        return x


class LayoutPolicy(nn.Module):
    """Drafter ``pi(L_0 | c)`` and refiner ``pi(a_k | c, L_{k-1}, render)`` of ``M`` models.

    The drafter reads presence and visible value of each slot and outputs independent logits over
    16 bins for each of ``(x, y, w, h)`` of each slot; the refiner reads the prompt, the current
    bins, the rendered text heights and the step fraction and outputs logits over (element, op)
    and the no-op; edits of absent elements are masked out.
    """

    def __init__(self, num_models: int, hidden: int, seeds):
        super().__init__()
        s = len(SLOTS)
        self.num_models = num_models
        self.drafter = BatchedMLP(num_models, 2 * s, hidden, s * 4 * NUM_BINS, seeds)
        self.refiner = BatchedMLP(num_models, 8 * s + 1, hidden, num_refine_actions(), [x + 7919 for x in seeds])

    def draft_logits(self, features: torch.Tensor) -> torch.Tensor:
        """(M, N, 2 S) -> (M, N, S, 4, 16)."""
        m, n, _ = features.shape
        return self.drafter(features).view(m, n, len(SLOTS), 4, NUM_BINS)

    def refine_logits(self, features: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """(M, N, 8 S + 1), present (M, N, S) -> (M, N, 8 S + 1) with absent elements' edits masked."""
        logits = self.refiner(features)
        allowed = torch.cat([present.repeat_interleave(NUM_OPS, dim=-1),
                             torch.ones_like(present[..., :1])], dim=-1)
        return logits.masked_fill(~allowed, NEG)
