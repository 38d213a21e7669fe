"""The tiny decoder LM of the chapter and its synthetic long-context retrieval language.

Language (all positions 0..T-1; vocabulary of 306 tokens):

* position 0 is ``BOS``; positions 1..8 are a *header* of 8 key/value pair tokens ``(k_i, v_i)``
  (8 distinct keys out of 16, values drawn from 16; one token per pair, so that a single
  attention hop can answer a lookup and the model learns it in seconds);
* the rest is a first-order Markov "filler" over 16 symbols (a fixed random transition matrix,
  the same for every sequence), cut into slots of 16 positions; each slot holds one *recall
  event* ``Q k v`` at a random offset, with ``k`` a header key and ``v`` its header value.

Answering an event (predicting ``v`` at the position of ``k``) needs a lookup far back in the
context: the header, or an earlier event with the same key. Accuracy on these positions is the
chapter's task accuracy.

The model is a pre-LayerNorm decoder with learned positions and grouped-query attention
(``num_heads`` query heads share ``num_kv_heads`` key/value heads). ``forward`` accepts a
callable that returns a boolean attention mask per layer, so a sparse decode loop can be run
teacher-forced and in parallel (see ``sparse.masked_forward``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...runtime import make_rng
from ...training import TrainSpec, fit, seeded_init, torch_threads

BOS, QUERY = 0, 1
KEY0, VALUE0, FILLER0, PAIR0 = 2, 18, 34, 50
NUM_SYMBOLS = 16
VOCAB = PAIR0 + NUM_SYMBOLS * NUM_SYMBOLS
HEADER_PAIRS = 8
SLOT = 16


def filler_transitions(seed: int = 1234) -> np.ndarray:
    """The filler's 16x16 transition matrix (rows from a Dirichlet(0.3); fixed by ``seed``)."""
    return make_rng(seed).dirichlet(np.full(NUM_SYMBOLS, 0.3), size=NUM_SYMBOLS)


def make_sequences(num: int, length: int, rng: np.random.Generator):
    """Draw ``num`` sequences of the retrieval language.

    Returns
    -------
    tokens : int64 array (num, length)
    answer_mask : bool array (num, length), True at the value position of every recall event
        (the model must predict it from the previous position).
    """
    header = 1 + HEADER_PAIRS
    if length < header + SLOT:
        raise ValueError(f"length must be at least {header + SLOT}, got {length}")
    keys = np.argsort(rng.random((num, NUM_SYMBOLS)), axis=1)[:, :HEADER_PAIRS]     # distinct keys
    values = rng.integers(0, NUM_SYMBOLS, size=(num, HEADER_PAIRS))
    tokens = np.empty((num, length), dtype=np.int64)
    tokens[:, 0] = BOS
    tokens[:, 1:header] = PAIR0 + NUM_SYMBOLS * keys + values          # one token per (key, value) pair
    # Markov filler, vectorised over sequences (inverse-CDF sampling per step)
    cdf = np.cumsum(filler_transitions(), axis=1)
    state = rng.integers(0, NUM_SYMBOLS, size=num)
    uniforms = rng.random((num, length - header))
    for j in range(length - header):
        state = np.minimum((uniforms[:, j, None] > cdf[state]).sum(1), NUM_SYMBOLS - 1)
        tokens[:, header + j] = FILLER0 + state
    answer = np.zeros((num, length), dtype=bool)
    slots = (length - header) // SLOT
    offsets = rng.integers(0, SLOT - 2, size=(num, slots))
    which = rng.integers(0, HEADER_PAIRS, size=(num, slots))
    rows = np.arange(num)[:, None]
    start = header + SLOT * np.arange(slots)[None, :] + offsets
    tokens[rows, start] = QUERY
    tokens[rows, start + 1] = KEY0 + keys[rows, which]
    tokens[rows, start + 2] = VALUE0 + values[rows, which]
    answer[rows, start + 2] = True
    return tokens, answer


@dataclass(frozen=True)
class ModelSettings:
    """Sizes of the decoder and its training run (see :func:`train_model`)."""

    context: int = 256
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    short_context: int = 64         # phase 1 trains on short sequences
    short_batch_size: int | None = None  # phase-1 sequences per step (None: same tokens per step as phase 2)
    max_short_steps: int = 1500     # phase 1 ends when the lookup is learned, at the latest here
    check_every: int = 50           # phase 1 checks the answer accuracy this often
    target_accuracy: float = 0.98   # ... on a fixed batch of short held-out sequences
    long_steps: int = 100           # phase 2: full-context steps with a cosine-decayed rate
    batch_size: int = 8             # sequences per step at the full context
    learning_rate: float = 1e-2
    filler_weight: float = 0.1      # loss weight of the filler positions (answers weigh 1)
    num_models: int = 5


SMOKE_MODELS, FULL_MODELS = 3, 16   # full: the power analysis (models_for_resolution) on the 5-model smoke
# version's spread at B=64, seed 0; smoke: 3, a CI-budget choice that cannot decide ridge-vs-last (see the chapter)


def settings_for(scale: str) -> ModelSettings:
    """One recipe at both scales (T=256, two layers, the recipe of the 5-model version), so model
    ``i`` has the same seed and bitwise the same weights at both; the scales differ in the number of
    models only: smoke 3 (about 26 s of CPU each; the CI budget), full 16 (the power analysis of
    the ridge-vs-last question). The earlier full recipe (T=512, three layers, 20 models, about
    20 minutes of CPU) was over the 10-minute full budget and never ran."""
    if scale == "smoke":
        return ModelSettings(num_models=SMOKE_MODELS)
    if scale == "full":
        return ModelSettings(num_models=FULL_MODELS)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


class Attention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError("d_model must divide into num_heads, and num_heads into num_kv_heads")
        self.h, self.hkv, self.dh = num_heads, num_kv_heads, d_model // num_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * num_kv_heads * self.dh, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask_fn=None, layer=0, capture=None):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.dh).transpose(1, 2)                 # (B, H, T, dh)
        k, v = self.kv(x).view(b, t, 2, self.hkv, self.dh).permute(2, 0, 3, 1, 4)  # (B, Hkv, T, dh)
        if capture is not None:
            capture.append((q.detach(), k.detach(), v.detach()))
        group = self.h // self.hkv
        kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        if mask_fn is None:                                   # dense causal attention (training)
            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        else:                                                 # a selected key set per step
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            mask = (mask_fn(layer, q.detach(), k.detach()) & causal).repeat_interleave(group, 1)
            att = (q @ kk.transpose(-1, -2)) / math.sqrt(self.dh)
            out = att.masked_fill(~mask, float("-inf")).softmax(-1) @ vv
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, num_heads, num_kv_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, mask_fn=None, layer=0, capture=None):
        x = x + self.attn(self.ln1(x), mask_fn, layer, capture)
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    """A small GQA decoder: ``forward(tokens (B, T)) -> logits (B, T, VOCAB)``."""

    def __init__(self, s: ModelSettings):
        super().__init__()
        self.settings = s
        self.tok = nn.Embedding(VOCAB, s.d_model)
        self.pos = nn.Embedding(s.context, s.d_model)
        self.blocks = nn.ModuleList(Block(s.d_model, s.num_heads, s.num_kv_heads) for _ in range(s.num_layers))
        self.ln = nn.LayerNorm(s.d_model)
        self.head = nn.Linear(s.d_model, VOCAB, bias=False)

    def embed(self, tokens):
        """Token embeddings; a header pair token is embedded as key + value embedding (factorised),
        so that a key in a recall event can find its pair with one attention hop."""
        pair = tokens >= PAIR0
        rel = (tokens - PAIR0).clamp_min(0)
        factorised = self.tok(KEY0 + rel // NUM_SYMBOLS) + self.tok(VALUE0 + rel % NUM_SYMBOLS)
        return torch.where(pair[..., None], factorised, self.tok(tokens))

    def forward(self, tokens, mask_fn=None, capture=None):
        """``mask_fn(layer, q (B,H,T,dh), k (B,Hkv,T,dh)) -> bool (B,Hkv,T,T)`` restricts attention;
        ``capture`` (a list) receives each layer's (q, k, v)."""
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for i, block in enumerate(self.blocks):
            x = block(x, mask_fn, i, capture)
        return self.head(self.ln(x))


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """GPT-2 style initialisation: N(0, std) for embeddings and linear maps, zero biases.

    PyTorch's default N(0, 1) embeddings make the random position vectors as large as the token
    vectors, and the lookup is then not learned in a few hundred steps."""
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.Linear)):
            nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def answer_accuracy(model: TinyDecoder, tokens: np.ndarray, answer: np.ndarray) -> float:
    """Share of recall events whose value the model predicts (argmax), teacher-forced."""
    with torch.no_grad():
        pred = model(torch.from_numpy(tokens)).argmax(-1)[:, :-1].numpy()
    return float((pred == tokens[:, 1:])[answer[:, 1:]].mean())


def train_model(s: ModelSettings, seed: int):
    """Train one decoder (deterministic for ``seed``); returns the model and its metrics.

    Two phases. Phase 1 trains on sequences of ``short_context`` tokens
    (``context / short_context`` times as many per batch, so the same tokens per step, unless
    ``short_batch_size`` sets the count) at a
    constant rate after a warm-up: recall events are as frequent as at full length, attention is
    cheaper and has fewer distractors. Every ``check_every`` steps it measures the answer accuracy
    on a fixed held-out batch and stops once it reaches ``target_accuracy`` (or after
    ``max_short_steps``). Learning the lookup is a sudden transition whose step varies from seed
    to seed (200 to 500 steps here), so a fixed step count either wastes time or leaves some seeds
    at chance. Phase 2 trains ``long_steps`` at the full context with a cosine-decayed rate, so
    that every position embedding is trained. Answers weigh 1 in the loss, filler positions
    ``filler_weight``. Both phases are :func:`compendium.training.fit` calls (AdamW, gradient
    norm clipped to 1, one thread) sharing one optimiser; batches come from the seed's own stream.
    """
    with seeded_init(seed):                           # parameter init only, inside a forked RNG
        model = TinyDecoder(s)
        init_weights(model)
    opt = torch.optim.AdamW(model.parameters(), lr=s.learning_rate, weight_decay=0.01)
    rng = make_rng(seed, 1)
    short = min(s.short_context, s.context)
    check_tokens, check_answer = make_sequences(32, short, make_rng(seed, 3))

    def batch_at(length: int) -> int:
        if length < s.context and s.short_batch_size is not None:
            return s.short_batch_size
        return s.batch_size * (s.context // length)

    def loss_at(length: int):
        def loss_fn(step: int) -> torch.Tensor:
            tokens, answer = make_sequences(batch_at(length), length, rng)
            x = torch.from_numpy(tokens)
            logits = model(x[:, :-1])
            weight = s.filler_weight + torch.from_numpy(answer[:, 1:]).float()
            return (F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none") * weight).sum() / weight.sum()
        return loss_fn

    start = time.perf_counter()
    # phase 1: warm-up over 30 steps, then constant; stop at the first check reaching the target
    phase1 = fit(model, loss_at(short), TrainSpec(
        max_steps=s.max_short_steps, learning_rate=s.learning_rate, weight_decay=0.01, grad_clip=1.0,
        warmup_steps=30, check_every=s.check_every, target=s.target_accuracy, log_every=s.max_short_steps),
        check=lambda m: answer_accuracy(m, check_tokens, check_answer), optimizer=opt)
    short_steps, check, loss = phase1.steps, phase1.last_check or 0.0, phase1.final_loss
    if s.long_steps:  # phase 2: the same optimiser at the full context, cosine-decayed
        phase2 = fit(model, loss_at(s.context), TrainSpec(
            max_steps=s.long_steps, learning_rate=s.learning_rate, weight_decay=0.01, grad_clip=1.0,
            schedule="cosine", log_every=s.long_steps), optimizer=opt)
        loss = phase2.final_loss
    model.eval()
    tokens, answer = make_sequences(64, s.context, make_rng(seed, 2))
    return model, {"recall_accuracy": answer_accuracy(model, tokens, answer), "final_loss": loss,
                   "short_steps": short_steps, "short_check_accuracy": check,
                   "train_seconds": time.perf_counter() - start}


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Workflow builder: train ``num_models`` decoders (seeds ``1000*seed + i``) into ``out_dir``."""
    out_dir = Path(out_dir)
    s = settings_for(scale)
    metrics = []
    for i in range(s.num_models):
        with torch_threads(1):              # one thread: faster for this size, and reproducible
            model, m = train_model(s, 1000 * seed + i)
        torch.save(model.state_dict(), out_dir / f"model_{i}.pt")
        metrics.append({k: v for k, v in m.items() if k != "train_seconds"})
        print(f"async_spade LM {i}: {m}", flush=True)
    meta = {"scale": scale, "seed": seed, "settings": asdict(s), "metrics": metrics}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_models(path: str | Path, count: int | None = None) -> list[TinyDecoder]:
    """Load the decoders saved by :func:`build_asset` (the first ``count`` of them)."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    s = ModelSettings(**meta["settings"])
    count = s.num_models if count is None else count
    if not 1 <= count <= s.num_models:
        raise ValueError(f"count must be in [1, {s.num_models}], got {count}")
    models = []
    for i in range(count):
        model = TinyDecoder(s)
        model.load_state_dict(torch.load(path / f"model_{i}.pt", weights_only=True))
        models.append(model.eval())
    return models
