r"""One transformer policy over [map | PI or NOPI | history], with a leading *model* axis.

Teacher and student are the same module: the teacher reads the PI slot, the student reads the
same slot filled with the ``NOPI`` token. Every weight carries a leading axis of ``num_models``
independent policies that train in lock step (batched matrix products; Adam is elementwise, so
this equals training them one by one, and it amortises the per-operation overhead that dominates
models this small on a CPU). Model ``m`` is initialised from its own seed, so two models with one
training seed start from identical weights.

Sequence of one episode (``P = 1 + H`` prefix tokens, ``H`` history tokens)::

    map:     map_in(flattened wall grid)                                  1 token
    PI:      pi_token(a_k or NOPI) + turn(k)                              H tokens
    history: cell(position_t) + goal(goal cell) + walls(4 neighbours)
             + prev_action(a_{t-1}) + turn(t)                             H tokens

Prefix tokens attend to the prefix only; history token ``t`` attends to the prefix and to history
tokens ``<= t``, so a rollout can cache keys and values (``start`` / ``step``) and the training
pass scores all turns at once (``forward``). PI slot ``k`` and history token ``k`` share the turn
embedding, so that reading "the PI's action for this turn" is one attention match. The action head reads the history tokens; an
auxiliary head on them predicts the BFS distance of the four neighbouring cells (used only by the
"SFT w/ CoT" baseline: the intermediate computation from which the expert's move follows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PISlotPolicy", "NOPI", "BOS", "N_ACTIONS", "parameter_count_per_model"]

N_ACTIONS = 5
NOPI = 6                    # PI vocabulary: 0-3 moves, 4 STOP, 5 PAD, 6 NOPI
BOS = 5                     # previous-action vocabulary: 0-4 actions, 5 = first turn


class _Linear(nn.Module):
    def __init__(self, models: int, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(models, d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(models, d_out))

    def forward(self, x):                                         # (M, ..., d_in)
        m, d_in = x.shape[0], x.shape[-1]
        out = torch.baddbmm(self.bias[:, None, :], x.reshape(m, -1, d_in), self.weight)
        return out.reshape(*x.shape[:-1], self.weight.shape[-1])


class _LayerNorm(nn.Module):
    def __init__(self, models: int, d: int):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(models, d))
        self.bias = nn.Parameter(torch.zeros(models, d))

    def forward(self, x):
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return F.layer_norm(x, x.shape[-1:]) * self.gain.view(shape) + self.bias.view(shape)


class _Block(nn.Module):
    """Pre-LN block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, models: int, d: int, heads: int):
        super().__init__()
        if d % heads:
            raise ValueError(f"width {d} must be a multiple of heads {heads}")
        self.heads = heads
        self.ln1, self.ln2 = _LayerNorm(models, d), _LayerNorm(models, d)
        self.qkv, self.proj = _Linear(models, d, 3 * d), _Linear(models, d, d)
        self.fc1, self.fc2 = _Linear(models, d, 4 * d), _Linear(models, 4 * d, d)

    def _split(self, x):                                          # (M, B, L, d) -> 3 x (M*B, h, L, dh)
        m, b, length, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(m * b, length, 3, self.heads, d // self.heads)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def _finish(self, x, att):                                    # att (M*B, h, L, dh)
        m, b, length, d = x.shape
        x = x + self.proj(att.transpose(1, 2).reshape(m, b, length, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x, mask):
        q, k, v = self._split(x)
        return self._finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), (k, v)

    def step(self, x, cache):
        """One new token ``x`` (M, B, 1, d) attending to the cached keys/values and itself."""
        q, k, v = self._split(x)
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        return self._finish(x, F.scaled_dot_product_attention(q, k, v)), (k, v)


def parameter_count_per_model(policy: "PISlotPolicy") -> int:
    """Parameters of one of the ``num_models`` policies."""
    return sum(p.numel() for p in policy.parameters()) // policy.num_models


class PISlotPolicy(nn.Module):
    """``num_models`` maze policies over [map | PI or NOPI | history] (teacher = student + PI).

    Parameters
    ----------
    num_models : int
        Independent policies stacked on a leading axis.
    size, horizon : int
        Maze side ``n`` and episode length ``H`` (also the PI slot's length).
    width, layers, heads : int
        Transformer width ``d``, depth and attention heads.
    init_seeds : sequence of int, optional
        One initialisation seed per model (default ``0 .. num_models - 1``).
    """

    def __init__(self, num_models: int, size: int, horizon: int, *, width: int = 32, layers: int = 2,
                 heads: int = 2, init_seeds=None):
        super().__init__()
        if num_models < 1 or size < 2 or horizon < 1 or width < 4 or layers < 1:
            raise ValueError("num_models, size, horizon, width and layers must be positive (size >= 2)")
        m, d, cells = num_models, width, size * size
        self.num_models, self.size, self.horizon, self.width = m, size, horizon, width
        self.prefix_length = 1 + horizon
        self.map_in = _Linear(m, cells, d)                      # the wall grid -> one map token
        self.pi_token = nn.Parameter(torch.zeros(m, 7, d))
        self.cell = nn.Parameter(torch.zeros(m, cells, d))
        self.goal = nn.Parameter(torch.zeros(m, cells, d))
        self.walls = nn.Parameter(torch.zeros(m, 16, d))        # which of U, D, L, R is blocked
        self.prev_action = nn.Parameter(torch.zeros(m, 6, d))
        self.turn = nn.Parameter(torch.zeros(m, horizon, d))
        self.blocks = nn.ModuleList(_Block(m, d, heads) for _ in range(layers))
        self.ln_f = _LayerNorm(m, d)
        self.head = _Linear(m, d, N_ACTIONS)
        self.aux_head = _Linear(m, d, 4 * (cells + 1))           # BFS distance of each neighbour, or blocked
        length = self.prefix_length + horizon
        mask = torch.zeros(length, length, dtype=torch.bool)
        mask[:, : self.prefix_length] = True
        mask[self.prefix_length:, self.prefix_length:] = torch.tril(torch.ones(horizon, horizon, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("prefix_mask", mask[: self.prefix_length, : self.prefix_length].clone(), persistent=False)
        seeds = list(range(m)) if init_seeds is None else [int(s) for s in init_seeds]
        if len(seeds) != m:
            raise ValueError(f"init_seeds needs {m} seeds, got {len(seeds)}")
        self.reset_parameters(seeds)

    @torch.no_grad()
    def reset_parameters(self, seeds) -> None:
        """Model ``i`` from ``torch.Generator().manual_seed(seeds[i])``: N(0, 0.02) weights and
        embeddings, zero biases, unit LayerNorm gains (parameters visited in a fixed order)."""
        for i, seed in enumerate(seeds):
            gen = torch.Generator().manual_seed(seed)
            for name, p in self.named_parameters():
                if name.endswith("gain"):
                    p[i].fill_(1.0)
                elif name.endswith("bias"):
                    p[i].zero_()
                else:
                    p[i].normal_(0.0, 0.02, generator=gen)

    def _rows(self):
        return torch.arange(self.num_models, device=self.cell.device).view(-1, 1, 1)

    def prefix(self, walls, pi, show_pi):
        """Prefix embeddings (M, B, P, d) from flat walls (M, B, n^2) bool, PI tokens (M, B, H) or
        None, and ``show_pi`` (M, B) bool (False: the slot holds NOPI)."""
        rows = self._rows()
        if pi is None:
            pi = torch.full(walls.shape[:2] + (self.horizon,), NOPI, dtype=torch.long, device=walls.device)
            show_pi = torch.zeros(walls.shape[:2], dtype=torch.bool, device=walls.device)
        pi = torch.where(show_pi[..., None], pi, torch.full_like(pi, NOPI))
        maps = self.map_in(walls.to(self.cell.dtype))[:, :, None]
        slot = self.pi_token[rows, pi] + self.turn[:, None]        # slot k shares turn k's embedding
        return torch.cat([maps, slot], dim=2)

    def history(self, walls, goal, positions, prev_actions, turns):
        """History embeddings (M, B, T, d): positions, previous actions, turns (M, B, T); goal (M, B)."""
        rows = self._rows()
        n = self.size
        r, c = positions // n, positions % n
        blocked = torch.zeros_like(positions)
        for bit, (dr, dc) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
            rr, cc = r + dr, c + dc
            inside = (rr >= 0) & (rr < n) & (cc >= 0) & (cc < n)
            idx = torch.where(inside, rr * n + cc, positions)
            wall = walls.gather(-1, idx)
            blocked = blocked + ((~inside) | wall).long() * (1 << bit)
        goal = goal[..., None].expand_as(positions)
        return (self.cell[rows, positions] + self.goal[rows, goal] + self.walls[rows, blocked]
                + self.prev_action[rows, prev_actions] + self.turn[rows, turns])

    def forward(self, walls, goal, pi, show_pi, positions, prev_actions):
        """Action logits (M, B, H, 5) at every turn and the auxiliary logits (M, B, H, 4, n^2 + 1)."""
        m, b, h = self.num_models, positions.shape[1], self.horizon
        turns = torch.arange(h, device=positions.device).expand(m, b, h)
        x = torch.cat([self.prefix(walls, pi, show_pi), self.history(walls, goal, positions, prev_actions, turns)], dim=2)
        for block in self.blocks:
            x, _ = block(x, self.mask)
        x = self.ln_f(x[:, :, self.prefix_length:])
        return self.head(x), self.aux_head(x).view(m, b, h, 4, -1)

    def start(self, walls, pi, show_pi):
        """Run the prefix once; return the per-layer key/value cache for :meth:`step`."""
        x, cache = self.prefix(walls, pi, show_pi), []
        for block in self.blocks:
            x, kv = block(x, self.prefix_mask)
            cache.append(kv)
        return cache

    def step(self, cache, walls, goal, positions, prev_actions, turn: int):
        """Logits (M, B, 5) of history token ``turn`` given (M, B) positions and previous actions;
        extends ``cache`` in place."""
        x = self.history(walls, goal, positions[..., None], prev_actions[..., None],
                         torch.full_like(positions, turn)[..., None])
        for i, block in enumerate(self.blocks):
            x, cache[i] = block.step(x, cache[i])
        return self.head(self.ln_f(x))[:, :, 0]
