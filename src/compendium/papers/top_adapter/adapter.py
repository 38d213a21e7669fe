"""TopAdapter's trainable modules (inferred, see the package docstring).

- ``GeometricController(d, f)``: embeds tau with phi = MLP(F -> H -> D), last layer zero-initialised,
  and gates it with gamma = sigmoid(W_c [t; phi(tau)] + b): t' = t + gamma * phi(tau) (W_c optionally
  of low rank, ``gate_rank``, to fit the trainable-parameter budget).
- ``TopoTransfer(d, n_layers)``: the topology stream p^{l+1} = p^l + psi(LN(p^l)) (one shared MLP)
  added to layer l's tokens with a per-layer, per-channel scale alpha_l, zero-initialised.
At initialisation both are exactly the identity on the tokens, so a TopAdapter model starts as the
frozen backbone with its head.
"""

from __future__ import annotations

import torch
from torch import nn


class GeometricController(nn.Module):
    def __init__(self, d: int, f: int, gated: bool = True, hidden: int | None = None, gate_rank: int | None = None):
        super().__init__()
        h = d if hidden is None else hidden
        self.phi = nn.Sequential(nn.Linear(f, h), nn.GELU(), nn.Linear(h, d))
        nn.init.zeros_(self.phi[2].weight)
        nn.init.zeros_(self.phi[2].bias)
        if not gated:
            self.gate = None
        elif gate_rank is None:
            self.gate = nn.Linear(2 * d, d)
        else:       # a low-rank gate keeps the trainable budget at a few per cent of the backbone
            self.gate = nn.Sequential(nn.Linear(2 * d, gate_rank), nn.Linear(gate_rank, d))

    def forward(self, tokens: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, G, D), tau (B, G, F) -> (fused tokens (B, G, D), topology embedding (B, G, D))."""
        e = self.phi(tau)
        if self.gate is None:
            return tokens + e, e
        g = torch.sigmoid(self.gate(torch.cat([tokens, e], -1)))
        return tokens + g * e, e


class TopoTransfer(nn.Module):
    def __init__(self, d: int, n_layers: int, hidden: int | None = None):
        super().__init__()
        h = d // 2 if hidden is None else hidden
        self.norm = nn.LayerNorm(d)
        self.psi = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))
        self.alpha = nn.Parameter(torch.zeros(n_layers, d))

    def streams(self, p0: torch.Tensor) -> list[torch.Tensor]:
        """The scaled stream alpha_l * p^l for l = 0..n_layers-1, each (B, G, D)."""
        out, p = [], p0
        for layer in range(self.alpha.shape[0]):
            out.append(self.alpha[layer] * p)
            p = p + self.psi(self.norm(p))
        return out
