"""event2vec and its baselines as torch modules.

Shapes: a batch of ``B`` recordings with ``N`` event slots each; ``x, y, p`` (B, N) long,
``t`` (B, N) float, ``mask`` (B, N) bool (valid events first, then padding).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from compendium.kernels.event_tokens import event_tokens

__all__ = ["normalize_coords", "delta_t", "MLPEventEmbedding", "LookupEventEmbedding", "TemporalConvEmbedding",
           "ForgettingAttention", "Event2Vec", "PointNet", "FrameCNN", "masked_mean_pool", "parameter_count"]


MASKED = 1e30      # the logit offset of a padding key: exp(-1e30) is exactly 0 in float32 and float64


def parameter_count(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def normalize_coords(x, y, p, height: int, width: int, polarities: int = 2, dtype=None) -> torch.Tensor:
    """``[2x/(W-1) - 1, 2y/(H-1) - 1, 2p/(P-1) - 1]``: (B, N, 3) in [-1, 1] (a 1-pixel axis gives -1)."""
    sx = 2.0 / max(width - 1, 1)
    sy = 2.0 / max(height - 1, 1)
    sp = 2.0 / max(polarities - 1, 1)
    dtype = dtype or torch.get_default_dtype()
    return torch.stack([x.to(dtype) * sx - 1, y.to(dtype) * sy - 1, p.to(dtype) * sp - 1], -1)


def delta_t(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-recording normalised time differences: ``t <- (t - t_0) / max(t - t_0)``, then
    ``dt_n = t_n - t_{n-1}``, ``dt_0 = 0``, zero at padding. (B, N); invariant to ``t -> a t + c``."""
    t0 = t[:, :1]
    rel = (t - t0).masked_fill(~mask, 0.0)
    span = rel.max(1, keepdim=True).values
    rel = rel / torch.where(span > 0, span, torch.ones_like(span))
    dt = torch.diff(rel, dim=1, prepend=rel[:, :1])
    return dt.masked_fill(~mask, 0.0)


class MLPEventEmbedding(nn.Module):
    """Spatial embedding ``v_s``: (x, y, p) -> Linear -> LN -> ReLU -> Linear -> LN -> ReLU -> Linear
    -> LN, bias-free linears (widths d/4, d/2, d)."""

    def __init__(self, height: int, width: int, dim: int, polarities: int = 2):
        super().__init__()
        self.height, self.width, self.polarities = height, width, polarities
        self.net = nn.Sequential(nn.Linear(3, dim // 4, bias=False), nn.LayerNorm(dim // 4), nn.ReLU(),
                                 nn.Linear(dim // 4, dim // 2, bias=False), nn.LayerNorm(dim // 2), nn.ReLU(),
                                 nn.Linear(dim // 2, dim, bias=False), nn.LayerNorm(dim))

    def forward(self, x, y, p):                                   # (B, N) -> (B, N, d)
        return self.net(normalize_coords(x, y, p, self.height, self.width, self.polarities, self.net[0].weight.dtype))

    def embedding_matrix(self) -> torch.Tensor:
        """The MLP evaluated at every (p, y, x): a (P*H*W + 1, d) table, row 0 (the pad) zero,
        row ``p*H*W + y*W + x + 1`` the event's embedding (the lookup table's indexing)."""
        P, H, W = self.polarities, self.height, self.width
        p, y, x = torch.meshgrid(torch.arange(P), torch.arange(H), torch.arange(W), indexing="ij")
        rows = self(x.reshape(1, -1), y.reshape(1, -1), p.reshape(1, -1))[0]
        return torch.cat([rows.new_zeros(1, rows.shape[1]), rows])


class LookupEventEmbedding(nn.Module):
    """The word2vec analogue: one learned vector per (p, y, x), ``nn.Embedding(P*H*W + 1, d)``."""

    def __init__(self, height: int, width: int, dim: int, polarities: int = 2):
        super().__init__()
        self.height, self.width, self.polarities = height, width, polarities
        self.table = nn.Embedding(polarities * height * width + 1, dim, padding_idx=0)

    def forward(self, x, y, p):
        return self.table(lookup_rows(x, y, p, self.height, self.width))

    def embedding_matrix(self) -> torch.Tensor:
        return self.table.weight


def lookup_rows(x, y, p, height, width):
    return p.long() * height * width + y.long() * width + x.long() + 1


class TemporalConvEmbedding(nn.Module):
    """Temporal embedding ``v_t``: a kernel-3 conv stack on the dt sequence (1 -> d/4 -> d/2 -> d,
    the last two grouped), LayerNorm after each, ReLU between, re-masked after every layer."""

    def __init__(self, dim: int):
        super().__init__()
        self.conv1 = nn.Conv1d(1, dim // 4, 3, padding=1)
        self.conv2 = nn.Conv1d(dim // 4, dim // 2, 3, padding=1, groups=dim // 4)
        self.conv3 = nn.Conv1d(dim // 2, dim, 3, padding=1, groups=dim // 2)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim // 4), nn.LayerNorm(dim // 2), nn.LayerNorm(dim)

    def hidden(self, dt, mask):
        """The input of the last conv layer: (B, N, d/2), zero at padding."""
        m = mask[..., None].to(dt.dtype)
        h = dt[..., None] * m
        h = F.relu(self.ln1(self.conv1(h.transpose(1, 2)).transpose(1, 2))) * m
        h = F.relu(self.ln2(self.conv2(h.transpose(1, 2)).transpose(1, 2))) * m
        return h

    def forward(self, dt, mask):                                  # (B, N) -> (B, N, d)
        h = self.hidden(dt, mask)
        return self.ln3(self.conv3(h.transpose(1, 2)).transpose(1, 2)) * mask[..., None].to(dt.dtype)


class ForgettingAttention(nn.Module):
    """Bidirectional forgetting attention (FoX-style), in plain torch.

    ``o_i = sum_j softmax_j(q_i . k_j / sqrt(d_h) + D_ij) v_j`` over valid keys, with data-dependent
    forget gates ``f_l = sigmoid(w_f . x_l + b_f)`` (forward) and ``g_l`` (backward) per head:
    ``D_ij = sum_{l=j+1}^{i} log f_l`` for ``j <= i`` and ``D_ij = sum_{l=i}^{j-1} log g_l`` for ``j > i``.
    Attention then decays with the gated distance in event order, which is what lets it see order.
    ``gates=False`` gives plain softmax attention with no positions (a set model).
    """

    def __init__(self, dim: int, heads: int, gates: bool = True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} must be a multiple of heads {heads}")
        self.heads, self.head_dim, self.gates = heads, dim // heads, gates
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        if gates:
            self.gate = nn.Linear(dim, 2 * heads)
            nn.init.constant_(self.gate.bias, 3.0)                 # gates start near 1 (little forgetting)

    def decay(self, h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``D`` (B, heads, N, N) from the tokens ``h`` (B, N, d). With ``mask`` (B, N), the columns
        of padding keys are pushed to ``-1e30`` as well (folded into the key-side cumulative sums,
        so no (N, N) masking pass is needed): they get attention weight exactly 0."""
        logf, logg = F.logsigmoid(self.gate(h)).transpose(1, 2).chunk(2, dim=1)      # (B, heads, N) each
        c = torch.cumsum(logf, -1)                                 # c_i = sum_{l<=i} log f_l
        e = torch.cumsum(logg, -1) - logg                          # e_i = sum_{l<i} log g_l
        neg_ck, ek = -c, e                                         # key-side terms (negated on the (N,) side:
        if mask is not None:                                       # the backward pass then needs no (N, N) negation)
            pad = (~mask)[:, None, :].to(c.dtype) * MASKED         # (B, 1, N)
            neg_ck, ek = neg_ck - pad, e - pad
        fwd = c[..., :, None] + neg_ck[..., None, :]               # sum_{l=j+1}^{i} log f_l
        bwd = ek[..., None, :] + (-e)[..., :, None]                # sum_{l=i}^{j-1} log g_l
        N = h.shape[1]
        lower = torch.ones(N, N, dtype=torch.bool, device=h.device).tril()
        return torch.where(lower, fwd, bwd)

    def forward(self, h, mask):
        B, N, _ = h.shape
        q, k, v = self.qkv(h).view(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)   # (B, h, N, dh)
        q, k = F.layer_norm(q, (self.head_dim,)), F.layer_norm(k, (self.head_dim,))           # qk-norm
        scores = (q / math.sqrt(self.head_dim)) @ k.transpose(-1, -2)                           # (B, h, N, N)
        if self.gates:
            scores = scores + self.decay(h, mask)
        else:
            scores = scores + (~mask)[:, None, None, :].to(scores.dtype) * -MASKED
        attn = torch.softmax(scores, -1)                           # padding keys: weight exactly 0
        return self.out((attn @ v).transpose(1, 2).reshape(B, N, -1))


class Block(nn.Module):
    """Post-norm Transformer layer: ``h <- LN(h + attn(h))``, ``h <- LN(h + FFN(h))``."""

    def __init__(self, dim: int, heads: int, ffn: int, gates: bool):
        super().__init__()
        self.attn = ForgettingAttention(dim, heads, gates)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, h, mask):
        h = self.ln1(h + self.attn(h, mask))
        return self.ln2(h + self.ffn(h))


def masked_mean_pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``h`` (B, N, d) over valid slots: (B, d); zeros for an empty recording."""
    m = mask[..., None].to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp(min=1.0)


class Event2Vec(nn.Module):
    """Tokens ``(v_s + v_t) * mask`` -> Transformer layers -> masked mean pool -> linear head.

    ``embedding``: ``'mlp'`` (parametric, from normalised coordinates) or ``'lookup'`` (one row per
    pixel and polarity); ``attention``: ``'forgetting'`` or ``'softmax'`` (no gates, no positions).
    """

    def __init__(self, height: int = 32, width: int = 32, dim: int = 32, heads: int = 2, layers: int = 2,
                 ffn: int | None = None, classes: int = 8, embedding: str = "mlp", attention: str = "forgetting",
                 polarities: int = 2):
        super().__init__()
        if embedding not in ("mlp", "lookup") or attention not in ("forgetting", "softmax"):
            raise ValueError(f"embedding must be 'mlp' or 'lookup' and attention 'forgetting' or 'softmax', got {embedding!r}, {attention!r}")
        if dim % 4:
            raise ValueError(f"dim must be a multiple of 4, got {dim}")
        self.height, self.width, self.polarities = height, width, polarities
        emb = MLPEventEmbedding if embedding == "mlp" else LookupEventEmbedding
        self.spatial = emb(height, width, dim, polarities)
        self.temporal = TemporalConvEmbedding(dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn or 2 * dim, attention == "forgetting") for _ in range(layers))
        self.head = nn.Linear(dim, classes)

    def tokens(self, x, y, p, t, mask, *, fused: bool = False, backend: str = "auto"):
        """Event tokens (B, N, d). ``fused``: gather the spatial table and run the last temporal
        conv + LayerNorm + add + mask in one kernel (:mod:`compendium.kernels.event_tokens`)."""
        dt = delta_t(t.to(self.head.weight.dtype), mask)
        if not fused:
            return (self.spatial(x, y, p) + self.temporal(dt, mask)) * mask[..., None].to(dt.dtype)
        conv, ln = self.temporal.conv3, self.temporal.ln3
        index = lookup_rows(x, y, p, self.height, self.width).masked_fill(~mask, 0)
        return event_tokens(self.spatial.embedding_matrix(), index, self.temporal.hidden(dt, mask), conv.weight,
                            conv.bias, ln.weight, ln.bias, mask, eps=ln.eps, backend=backend)

    def forward(self, x, y, p, t, mask, *, fused: bool = False, backend: str = "auto"):
        h = self.tokens(x, y, p, t, mask, fused=fused, backend=backend)
        for block in self.blocks:
            h = block(h, mask)
        return self.head(masked_mean_pool(h, mask))


class PointNet(nn.Module):
    """Shared per-event MLP -> masked max pool -> MLP head, on (x, y, t, p) or time-blind (x, y, p).

    Time enters, when it does, as the per-recording normalised time in [-1, 1]: an unordered set.
    """

    def __init__(self, height: int = 32, width: int = 32, use_time: bool = True, classes: int = 8,
                 width_hidden: int = 64, polarities: int = 2):
        super().__init__()
        self.height, self.width, self.use_time, self.polarities = height, width, use_time, polarities
        c = width_hidden
        self.point = nn.Sequential(nn.Linear(4 if use_time else 3, c // 2), nn.ReLU(), nn.Linear(c // 2, c), nn.ReLU(),
                                   nn.Linear(c, 2 * c))
        self.head = nn.Sequential(nn.Linear(2 * c, c), nn.ReLU(), nn.Linear(c, classes))

    def forward(self, x, y, p, t, mask):
        dtype = self.point[0].weight.dtype
        feats = normalize_coords(x, y, p, self.height, self.width, self.polarities, dtype)
        if self.use_time:
            rel = torch.cumsum(delta_t(t.to(dtype), mask), 1) * 2 - 1     # (t - t0) / span, scaled to [-1, 1]
            feats = torch.cat([feats, rel[..., None]], -1)
        h = self.point(feats).masked_fill(~mask[..., None], float("-inf")).max(1).values
        return self.head(torch.where(torch.isfinite(h), h, torch.zeros_like(h)))


class FrameCNN(nn.Module):
    """The frame baseline: event counts in ``bins`` time bins x 2 polarities -> 3 conv layers
    (widths c, 2c, 2c, two 2x2 max pools) -> max pool to 4 x 4 -> linear head (keeps coarse position)."""

    def __init__(self, height: int = 32, width: int = 32, bins: int = 8, channels: int = 16, classes: int = 8,
                 polarities: int = 2):
        super().__init__()
        self.bins, self.polarities = bins, polarities
        c = channels
        self.net = nn.Sequential(nn.Conv2d(polarities * bins, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(4), nn.Flatten(),
                                 nn.Linear(2 * c * 16, classes))

    def forward(self, frames):                                    # (B, P*bins, H, W) -> (B, classes)
        return self.net(frames)
