"""The task, the fine-grained MoE language model and its training (the shared asset).

Task: 2-digit addition ``a + b`` written as 8 tokens ``a1 a0 b1 b0 = s0 s1 s2`` (operands most
significant digit first, the 3-digit sum least significant digit first, so every answer digit is
a function of what came before). All 10 000 problems are split once, with a fixed seed that does
not depend on the model seed, into test (first 1000), dev (next 500) and train (the rest).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from compendium.kernels.routing import expert_sample_route
from compendium.training import TrainSpec, fit, seeded_init, torch_threads

EQUALS = 10
VOCAB = 11
PROMPT_LEN, ANSWER_LEN = 5, 3
SEQ_LEN = PROMPT_LEN + ANSWER_LEN
SPLIT_SEED = 20260
TEST_SIZE, DEV_SIZE = 1000, 500

# A routing function maps router logits (B, S, E) and the layer index to (idx, weights), both (B, S, k).
Router = Callable[[torch.Tensor, int], "tuple[torch.Tensor, torch.Tensor]"]


def encode(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Token sequences (N, 8) for the problems ``a + b`` (answer included)."""
    s = a + b
    seq = np.stack([a // 10, a % 10, b // 10, b % 10, np.full_like(a, EQUALS),
                    s % 10, (s // 10) % 10, s // 100], axis=1)
    return seq.astype(np.int64)


def answer_code(answer_tokens: np.ndarray) -> np.ndarray:
    """Answer digits ``(s0, s1, s2)`` (..., 3) as the integer they spell (..., )."""
    return answer_tokens[..., 0] + 10 * answer_tokens[..., 1] + 100 * answer_tokens[..., 2]


def splits() -> dict[str, np.ndarray]:
    """The fixed test / dev / train split: token sequences (N, 8) per split."""
    a, b = np.divmod(np.arange(10_000), 100)
    order = np.random.default_rng(SPLIT_SEED).permutation(10_000)
    seq = encode(a[order], b[order])
    return {"test": seq[:TEST_SIZE], "dev": seq[TEST_SIZE:TEST_SIZE + DEV_SIZE], "train": seq[TEST_SIZE + DEV_SIZE:]}


@dataclass(frozen=True)
class MoEConfig:
    """Sizes of :class:`TinyMoELM` (fine-grained: many small experts, several active)."""

    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_experts: int = 32
    experts_per_token: int = 8
    expert_hidden: int = 16


def topk_router(k: int) -> Router:
    """Standard routing: softmax, top-k, renormalised over the k (Qwen3-MoE, norm_topk_prob)."""
    def route(logits, layer):
        return expert_sample_route(logits, torch.zeros_like(logits), k, k, logits.shape[-1] - k, 0.0)
    return route


class MoEFeedForward(nn.Module):
    """A softmax-routed mixture of small GELU experts; the routing function is a hook."""

    def __init__(self, config: MoEConfig):
        super().__init__()
        e, d, h = config.num_experts, config.dim, config.expert_hidden
        self.gate = nn.Linear(d, e, bias=False)
        self.w_in = nn.Parameter(torch.randn(e, d, h) / math.sqrt(d))
        self.w_out = nn.Parameter(torch.randn(e, h, d) / math.sqrt(h))

    def forward(self, x, route: Router, layer: int, capture: list | None = None):
        """x (B, S, d) -> (B, S, d), and the switch load-balance loss of this layer."""
        logits = self.gate(x)                                                # (B, S, E)
        if capture is not None:
            capture.append(logits.detach())
        idx, weights = route(logits, layer)                                  # (B, S, k)
        gates = torch.zeros_like(logits).scatter(-1, idx, weights)           # (B, S, E), k non-zeros
        hidden = F.gelu(torch.einsum("bsd,edh->bseh", x, self.w_in))         # all experts densely (E small)
        hidden = hidden * gates.unsqueeze(-1)                                # unselected experts weigh 0
        y = hidden.flatten(2) @ self.w_out.flatten(0, 1)                     # (B, S, E*h) @ (E*h, d)
        probs = torch.softmax(logits, dim=-1)
        load = torch.zeros_like(logits).scatter(-1, idx, 1.0).mean((0, 1)) / idx.shape[-1]
        balance = logits.shape[-1] * (load * probs.mean((0, 1))).sum()      # E * sum_e f_e P_e
        return y, balance


class Block(nn.Module):
    def __init__(self, config: MoEConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.dim), nn.LayerNorm(config.dim)
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.proj = nn.Linear(config.dim, config.dim)
        self.moe = MoEFeedForward(config)
        self.heads = config.num_heads

    def forward(self, x, route, layer, capture=None):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)      # (B, nh, S, hs)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        y, balance = self.moe(self.ln2(x), route, layer, capture)
        return x + y, balance


class TinyMoELM(nn.Module):
    """A small decoder-only MoE LM; ``forward(tokens, route=...)`` takes the routing hook.

    Parameters
    ----------
    config : MoEConfig
    """

    def __init__(self, config: MoEConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(VOCAB, config.dim)
        self.pos = nn.Parameter(torch.zeros(SEQ_LEN, config.dim))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, VOCAB, bias=False)

    def embeddings(self, tokens):
        return self.embed(tokens) + self.pos[: tokens.shape[1]]

    def forward(self, tokens, route: Router | None = None, *, embed_noise=None, capture: list | None = None):
        """tokens (B, S) -> next-token logits (B, S, V) and the summed load-balance loss.

        ``embed_noise`` (B, S, d) is added to the input embeddings (the perturbation test);
        ``capture`` collects each layer's router logits (B, S, E).
        """
        route = route or topk_router(self.config.experts_per_token)
        x = self.embeddings(tokens)
        if embed_noise is not None:
            x = x + embed_noise
        balance = x.new_zeros(())
        for layer, block in enumerate(self.blocks):
            x, bal = block(x, route, layer, capture)
            balance = balance + bal
        return self.head(self.ln(x)), balance


@dataclass(frozen=True)
class TrainSettings:
    """Training of one model: AdamW, stop at the first dev check with greedy accuracy >= target."""

    max_steps: int = 1500
    batch_size: int = 128
    learning_rate: float = 3e-3
    balance_coefficient: float = 0.01
    target_accuracy: float = 0.5
    eval_every: int = 10
    dev_eval_problems: int = 300


def settings_for(scale: str) -> TrainSettings:
    if scale not in ("smoke", "full"):
        raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")
    return TrainSettings() if scale == "full" else TrainSettings(max_steps=800, dev_eval_problems=200)


@torch.no_grad()
def greedy_accuracy(model: TinyMoELM, seq: np.ndarray) -> float:
    """Exact-match accuracy of greedy decoding with standard routing on sequences (N, 8)."""
    tokens = torch.as_tensor(seq[:, :PROMPT_LEN])
    for _ in range(ANSWER_LEN):
        logits, _ = model(tokens)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return float((tokens[:, PROMPT_LEN:] == torch.as_tensor(seq[:, PROMPT_LEN:])).all(1).float().mean())


def train(config: MoEConfig, settings: TrainSettings, seed: int) -> tuple[TinyMoELM, dict]:
    """Train one model from seed ``seed``; stop at intermediate dev accuracy (headroom for pass@n).

    AdamW at a constant rate through :func:`compendium.training.fit` (one thread), with the load-balance
    loss added; every ``eval_every`` steps the greedy dev accuracy is checked, and training stops at the
    first check reaching ``target_accuracy``. Initialisation forks the global torch RNG (left as it was).
    """
    with seeded_init(seed):  # parameter init only (forked RNG); batches come from their own generator
        model = TinyMoELM(config)
    rng = np.random.default_rng(seed)
    data = splits()
    train_seq, dev_seq = data["train"], data["dev"][: settings.dev_eval_problems]

    def loss_fn(step: int) -> torch.Tensor:
        batch = torch.as_tensor(train_seq[rng.integers(0, len(train_seq), settings.batch_size)])
        logits, balance = model(batch[:, :-1])
        # loss on the answer digits only (positions 4..6 predict tokens 5..7)
        loss = F.cross_entropy(logits[:, PROMPT_LEN - 1:].reshape(-1, VOCAB), batch[:, PROMPT_LEN:].reshape(-1))
        return loss + settings.balance_coefficient * balance

    spec = TrainSpec(max_steps=settings.max_steps, learning_rate=settings.learning_rate, weight_decay=0.01,
                     check_every=settings.eval_every, target=settings.target_accuracy, log_every=settings.max_steps)
    log = fit(model, loss_fn, spec, check=lambda m: greedy_accuracy(m, dev_seq))
    history = [(step, round(acc, 4)) for step, acc in log.checks]
    return model, {"steps": log.steps, "dev_greedy_accuracy": history[-1][1] if history else None, "history": history}


def build_asset(out_dir: Path, scale: str, seed: int, num_models: int = 5) -> None:
    """Workflow builder: train ``num_models`` models (seeds ``seed .. seed+num_models-1``).

    Writes ``model_<i>.pt`` (state dicts) and ``metadata.json`` (sizes, settings, stopping step and
    dev accuracy of each model).
    """
    out_dir = Path(out_dir)
    config, settings = MoEConfig(), settings_for(scale)
    meta = {"scale": scale, "seed": seed, "config": asdict(config), "settings": asdict(settings), "models": []}
    for i in range(num_models):
        with torch_threads(1):  # one thread: on a shared 2-core box more threads thrash badly
            model, metrics = train(config, settings, seed + i)
        torch.save(model.state_dict(), out_dir / f"model_{i}.pt")
        meta["models"].append({"seed": seed + i, **metrics})
        print(f"expert_sample model {i}: steps {metrics['steps']}, dev greedy {metrics['dev_greedy_accuracy']}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_models(path: str | Path) -> tuple[list[TinyMoELM], dict]:
    """Models and metadata saved by :func:`build_asset`."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    models = []
    for i in range(len(meta["models"])):
        model = TinyMoELM(MoEConfig(**meta["config"]))
        model.load_state_dict(torch.load(path / f"model_{i}.pt", weights_only=True))
        models.append(model.eval())
    return models, meta
