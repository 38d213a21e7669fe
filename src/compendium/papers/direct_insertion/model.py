"""The in-context transformer: diffusers ``BasicTransformerBlock``s with a typed-adapter attention
processor (ours) that adds per-token-type rank-r updates to Q, K and V."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers.models.attention import BasicTransformerBlock
from torch import nn

PATCH = 8
GRID = 4  # 32 / 8
TOKENS = GRID * GRID
IN_DIM = 4 * PATCH * PATCH  # every condition image padded to 4 channels
OUT_DIM = 4 * PATCH * PATCH  # rgb + silhouette
TYPES = ("target", "appearance", "geometry", "context")


TIME_FREQS = 8


def time_features(sigma: torch.Tensor) -> torch.Tensor:
    """Sinusoidal features of the noise level sigma in [0, 1]: (B,) -> (B, 2 * TIME_FREQS)."""
    f = torch.pi * 2.0 ** torch.arange(TIME_FREQS, dtype=torch.float32) / 2
    a = sigma.float().reshape(-1, 1) * f
    return torch.cat([torch.sin(a), torch.cos(a)], -1)


def patchify(img: torch.Tensor) -> torch.Tensor:
    """(B, S, S, C) -> (B, 64, 16 C), C padded to 4."""
    b, s, _, c = img.shape
    if c < 4:
        img = F.pad(img, (0, 4 - c))
    x = img.reshape(b, GRID, PATCH, GRID, PATCH, 4).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, TOKENS, IN_DIM)


def unpatchify(tok: torch.Tensor) -> torch.Tensor:
    b = tok.shape[0]
    x = tok.reshape(b, GRID, GRID, PATCH, PATCH, 4).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, GRID * PATCH, GRID * PATCH, 4)


class TypedAdapterProcessor(nn.Module):
    """Attention processor for diffusers' ``Attention``: ``q = W_q x + B_t A_t x`` (same for K, V),
    with ``t`` the token's type. ``shared=True`` uses one adapter for every token; rank 0 adds
    nothing. ``B`` starts at zero (LoRA's initialisation)."""

    def __init__(self, dim: int, n_types: int, rank: int, shared: bool):
        super().__init__()
        self.rank, self.shared = rank, shared
        t = 1 if shared else n_types
        self.a = nn.Parameter(torch.randn(3, t, dim, rank) / dim**0.5) if rank else None
        self.b = nn.Parameter(torch.zeros(3, t, rank, dim)) if rank else None
        self.type_index: torch.Tensor | None = None

    def _delta(self, x: torch.Tensor, j: int) -> torch.Tensor:
        if not self.rank:
            return 0.0
        if self.shared:
            return x @ self.a[j, 0] @ self.b[j, 0]
        a, b = self.a[j][self.type_index], self.b[j][self.type_index]  # (N, d, r), (N, r, d)
        return torch.einsum("bnr,nrd->bnd", torch.einsum("bnd,ndr->bnr", x, a), b)

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, **kwargs):
        x = hidden_states
        q = attn.to_q(x) + self._delta(x, 0)
        k = attn.to_k(x) + self._delta(x, 1)
        v = attn.to_v(x) + self._delta(x, 2)
        bsz, n, _ = x.shape
        h = attn.heads
        q, k, v = (z.view(bsz, n, h, -1).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(bsz, n, -1)
        return attn.to_out[1](attn.to_out[0](o))


class InContextTransformer(nn.Module):
    """Target query tokens attend jointly with condition tokens.

    Parameters
    ----------
    conditions : tuple of str
        Which of ('appearance', 'geometry', 'context') enter (N drops geometry).
    dim, layers, heads : int
    rank : int
        Adapter rank (per type, or of the one shared adapter).
    tied : bool
        One input projection for every condition type (E) instead of one per type (D).
    positions : {'decomposed', 'shared'}
        'decomposed': type embeddings, geometry and context share the target's 2-D positions,
        appearance has its own table (offset). 'shared': one table for every token, no type
        embedding.
    shared_adapter : bool
        One adapter for all tokens (E) instead of one per type (D).
    flow : bool
        Rectified-flow velocity model: the target tokens carry the noisy target ``batch['x_t']``
        (its own input projection) plus an embedding of the noise level ``batch['sigma']``, and
        the model returns the velocity ``noise - x0``. The head predicts ``x0`` and the velocity is
        ``(x_t - x0_hat) / sigma``: a 32-wide token cannot carry a patch's 256 noise values, so a
        head that output the velocity directly could not reproduce its noise part. False: the target tokens are learned
        queries and the head regresses the target.
    """

    def __init__(self, conditions=("appearance", "geometry", "context"), dim: int = 48, layers: int = 2, heads: int = 4,
                 rank: int = 8, tied: bool = False, positions: str = "decomposed", shared_adapter: bool = False,
                 flow: bool = False):
        super().__init__()
        self.flow = bool(flow)
        if positions not in ("decomposed", "shared"):
            raise ValueError("positions must be 'decomposed' or 'shared'")
        self.conditions, self.positions, self.tied = tuple(conditions), positions, tied
        self.query = nn.Parameter(torch.zeros(1, TOKENS, dim))
        n_proj = 1 if tied else len(self.conditions)
        self.proj = nn.ModuleList([nn.Linear(IN_DIM, dim) for _ in range(n_proj)])
        self.pos = nn.Parameter(torch.randn(TOKENS, dim) * 0.5)
        if self.flow:
            self.proj_target = nn.Linear(IN_DIM, dim)
            self.time = nn.Sequential(nn.Linear(2 * TIME_FREQS, dim), nn.SiLU(), nn.Linear(dim, dim))
        if positions == "decomposed":
            self.pos_app = nn.Parameter(torch.randn(TOKENS, dim) * 0.5)
            self.type_emb = nn.Parameter(torch.randn(len(TYPES), dim) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            blk = BasicTransformerBlock(dim, heads, dim // heads, activation_fn="gelu", norm_type="layer_norm")
            blk.attn1.set_processor(TypedAdapterProcessor(dim, len(TYPES), rank, shared_adapter))
            self.blocks.append(blk)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, OUT_DIM)
        types = [0] * TOKENS + [i for c in self.conditions for i in [TYPES.index(c)] * TOKENS]
        self.register_buffer("type_index", torch.tensor(types), persistent=False)

    def forward(self, batch: dict) -> torch.Tensor:
        """``batch`` holds (B, S, S, C) tensors per condition; returns (B, S, S, 4) (rgb, silhouette logit)."""
        b = next(iter(batch.values())).shape[0]
        toks = [self.query.expand(b, -1, -1) + self.pos]
        if self.flow:
            toks[0] = toks[0] + self.proj_target(patchify(batch["x_t"])) + self.time(time_features(batch["sigma"]))[:, None]
        for i, c in enumerate(self.conditions):
            x = self.proj[0 if self.tied else i](patchify(batch[c]))
            if self.positions == "decomposed":
                x = x + (self.pos_app if c == "appearance" else self.pos) + self.type_emb[TYPES.index(c)]
            else:
                x = x + self.pos
            toks.append(x)
        if self.positions == "decomposed":
            toks[0] = toks[0] + self.type_emb[0]
        x = torch.cat(toks, 1)
        for blk in self.blocks:
            blk.attn1.processor.type_index = self.type_index
            x = blk(x)
        out = unpatchify(self.head(self.norm(x[:, :TOKENS])))
        if self.flow:  # the head predicts x0; the velocity of the straight path through x_t
            return (batch["x_t"] - out) / batch["sigma"].clamp_min(1e-3)[:, None, None, None]
        return out


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def variant(name: str, dim: int = 48, layers: int = 2, heads: int = 4, rank: int = 8,
            flow: bool = False) -> InContextTransformer:
    """D, E, N, O and D-noctx. E gets the shared adapter rank that brings its parameter count
    closest to D's (D's extra input projections, position table and type embeddings)."""
    kw = dict(dim=dim, layers=layers, heads=heads, flow=flow)
    if name in ("D", "O"):
        return InContextTransformer(rank=rank, **kw)
    if name == "N":
        return InContextTransformer(("appearance", "context"), rank=rank, **kw)
    if name == "D-noctx":
        return InContextTransformer(("appearance", "geometry"), rank=rank, **kw)
    if name == "E":
        target = parameter_count(InContextTransformer(rank=rank, **kw))
        base = parameter_count(InContextTransformer(rank=0, tied=True, positions="shared", shared_adapter=True, **kw))
        r = max(1, round((target - base) / (layers * 3 * 2 * dim)))
        return InContextTransformer(rank=r, tied=True, positions="shared", shared_adapter=True, **kw)
    raise ValueError(f"unknown variant {name!r}")
