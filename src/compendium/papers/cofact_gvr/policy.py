"""The grounded-answer policy: a CNN global path, a per-cell encoder, an evidence head over the nine
cells and an answer head on [global features, features of the chosen cell, question].

``M`` independent policies (one per arm and training seed) live in one module with a leading
model axis, so every arm trains in lock step with batched products; the parameters of different
models never mix (no shared tensor entry, no global-norm clipping), so this is ``M`` separate
networks trained at once.

Shapes: images (M, B, 3, 24, 24); the global encoder is a 4x4, stride-4 convolution (a patch
projection, 36 patches) with ReLU and mean pooling; the cell encoder is an 8x8, stride-8
convolution (one linear map per cell) with ReLU, so a masked cell is the encoder applied to zeros.
The evidence logit of cell k is the bilinear score f_k^T W_e u_q; the answer head is a two-layer
MLP. The global path sees the tint (the shortcut); the colour of the asked shape is only readable
from the cell that holds it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .reward import MASKED
from .scenes import CELL, NUM_CELLS, NUM_COLOURS, NUM_SHAPES, cell_crops

__all__ = ["GroundedPolicy"]

PATCH = 4


class GroundedPolicy(nn.Module):
    """``num_models`` grounded-answer policies with a leading model axis.

    Parameters
    ----------
    num_models : int
    init_seeds : sequence of int, length num_models
        Seed of each model's initialisation (models of one training seed start equal across arms).
    global_width, cell_width, question_width, hidden_width : int
    """

    def __init__(self, num_models: int, init_seeds, *, global_width: int = 8, cell_width: int = 32,
                 question_width: int = 16, hidden_width: int = 32):
        super().__init__()
        init_seeds = list(init_seeds)
        if len(init_seeds) != num_models:
            raise ValueError(f"need one init seed per model ({num_models}), got {len(init_seeds)}")
        self.num_models = num_models
        self.widths = dict(global_width=global_width, cell_width=cell_width, question_width=question_width,
                           hidden_width=hidden_width)
        patch_in, cell_in = 3 * PATCH * PATCH, 3 * CELL * CELL
        answer_in = global_width + cell_width + question_width
        per_model = []
        for s in init_seeds:
            g = torch.Generator().manual_seed(int(s))
            per_model.append({
                "w_global": torch.randn(patch_in, global_width, generator=g) / math.sqrt(patch_in),
                "w_cell": torch.randn(cell_in, cell_width, generator=g) / math.sqrt(cell_in),
                "question": torch.randn(NUM_SHAPES, question_width, generator=g),
                "w_evidence": torch.randn(cell_width, question_width, generator=g) / math.sqrt(cell_width * question_width),
                "w_hidden": torch.randn(answer_in, hidden_width, generator=g) / math.sqrt(answer_in),
                "w_answer": torch.randn(hidden_width, NUM_COLOURS, generator=g) / math.sqrt(hidden_width),
            })
        for name in per_model[0]:
            self.register_parameter(name, nn.Parameter(torch.stack([p[name] for p in per_model])))
        self.b_global = nn.Parameter(torch.zeros(num_models, global_width))
        self.b_cell = nn.Parameter(torch.zeros(num_models, cell_width))
        self.b_hidden = nn.Parameter(torch.zeros(num_models, hidden_width))
        self.b_answer = nn.Parameter(torch.zeros(num_models, NUM_COLOURS))

    # ------------------------------------------------------------------ encoders
    def encode(self, images: torch.Tensor, questions: torch.Tensor) -> dict:
        """Global features (M, B, Cg), cell features (M, B, 9, Cc), the masked-cell feature (M, 1, Cc),
        question embedding (M, B, Dq) and evidence logits (M, B, 9)."""
        m, b = images.shape[:2]
        p = images.reshape(m, b, 3, 6, PATCH, 6, PATCH).permute(0, 1, 3, 5, 2, 4, 6).reshape(m, b, 36, -1)
        g = torch.relu(torch.einsum("mbpi,mio->mbpo", p, self.w_global) + self.b_global[:, None, None]).mean(2)
        crops = cell_crops(images).reshape(m, b, NUM_CELLS, -1)
        f = torch.relu(torch.einsum("mbki,mio->mbko", crops, self.w_cell) + self.b_cell[:, None, None])
        f_mask = torch.relu(self.b_cell)[:, None]                                      # encoder of a zero cell
        u = self.question[torch.arange(m)[:, None], questions]                          # (M, B, Dq)
        evidence = torch.einsum("mbkc,mcd,mbd->mbk", f, self.w_evidence, u)
        return {"global": g, "cells": f, "masked": f_mask, "question": u, "evidence": evidence}

    def answer_logits(self, enc: dict, cells: torch.Tensor) -> torch.Tensor:
        """Answer logits (M, B, *S, 6) for cells (M, B, *S) (``MASKED`` = the masked cell)."""
        m, b = cells.shape[:2]
        extra = cells.shape[2:]
        flat = cells.reshape(m, b, -1)
        f = enc["cells"].gather(2, flat.clamp(min=0)[..., None].expand(-1, -1, -1, enc["cells"].shape[-1]))
        f = torch.where((flat == MASKED)[..., None], enc["masked"][:, :, None], f)     # (M, B, S, Cc)
        s = f.shape[2]
        x = torch.cat([enc["global"][:, :, None].expand(-1, -1, s, -1), f,
                       enc["question"][:, :, None].expand(-1, -1, s, -1)], -1)
        h = torch.relu(torch.einsum("mbsi,mio->mbso", x, self.w_hidden) + self.b_hidden[:, None, None])
        out = torch.einsum("mbsh,mho->mbso", h, self.w_answer) + self.b_answer[:, None, None]
        return out.reshape(m, b, *extra, NUM_COLOURS)

    @torch.no_grad()
    def greedy(self, images: torch.Tensor, questions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy evidence cell and answer, each (M, B)."""
        enc = self.encode(images, questions)
        cell = enc["evidence"].argmax(-1)
        return cell, self.answer_logits(enc, cell).argmax(-1)
