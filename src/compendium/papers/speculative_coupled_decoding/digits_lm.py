"""A tiny autoregressive "image" model: GPT-2 over sklearn's 8x8 digits as 64 grey-level tokens.

Sequence layout (65 tokens): a class token ``PIXEL_LEVELS + label`` followed by the 64 pixels in
raster order, each quantised to ``PIXEL_LEVELS`` grey levels. The model is a ``transformers``
GPT-2 built from a config with random initialisation and trained here (no hub weights). At
sampling time only the pixel tokens are allowed (one fixed logits restriction, the same for every
sampler), so the target of every decoder is the same distribution.

:func:`build_asset` is the workflow rule's builder (registry asset ``digits_tokens_lm``).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

PIXEL_LEVELS = 16  # grey levels = pixel vocabulary
NUM_CLASSES = 10
VOCAB_SIZE = PIXEL_LEVELS + NUM_CLASSES
IMAGE_TOKENS = 64
SPLIT_SEED = 0  # the train/test split is fixed, whatever the training seed
TEST_IMAGES = 297  # held-out digits (the last 297 of a fixed permutation of 1797)
TRAIN_THREADS = 1  # fixed, so the weights do not depend on the core count (and tiny ops gain nothing)
GROUP_TOKENS = 8  # a forward pass batches the rows whose last position falls in the same 8-token bucket


@dataclass(frozen=True)
class TrainSettings:
    """Model size and optimisation of the digits LM (chosen per scale by :func:`settings_for`)."""

    n_embd: int = 48
    n_layer: int = 2
    n_head: int = 4
    steps: int = 600
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head or min(self.n_embd, self.n_layer, self.n_head, self.steps, self.batch_size) < 1:
            raise ValueError(f"invalid train settings {self}")


def settings_for(scale: str) -> TrainSettings:
    """Smoke: 2 layers, 48 wide, 600 steps (~30 s); full: 3 layers, 64 wide, 1200 steps (~5 min)."""
    if scale == "smoke":
        return TrainSettings()
    if scale == "full":
        return TrainSettings(n_embd=64, n_layer=3, n_head=4, steps=1200, learning_rate=2e-3)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def quantize(images: np.ndarray) -> np.ndarray:
    """sklearn digit intensities 0..16 -> grey levels 0..PIXEL_LEVELS-1."""
    return np.minimum((np.asarray(images) * PIXEL_LEVELS) // 17, PIXEL_LEVELS - 1).astype(np.int64)


def digit_sequences() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All 1797 digits as token sequences ``(N, 65)``, with the train and test row indices."""
    from compendium import data

    digits = data.load("digits")  # sklearn's digits, checked against data/manifest.yaml
    pixels = quantize(digits.data)  # (N, 64), raster order
    seqs = np.concatenate([PIXEL_LEVELS + digits.target[:, None], pixels], axis=1).astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(seqs))
    return seqs, np.sort(order[:-TEST_IMAGES]), np.sort(order[-TEST_IMAGES:])


def _gpt2_config(settings: TrainSettings):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=VOCAB_SIZE, n_positions=IMAGE_TOKENS + 1, n_embd=settings.n_embd,
                      n_layer=settings.n_layer, n_head=settings.n_head, resid_pdrop=settings.dropout,
                      embd_pdrop=settings.dropout, attn_pdrop=settings.dropout, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)


def _new_model(config, seed: int):
    """GPT-2 with a seeded random initialisation; the global torch RNG is left as it was."""
    from transformers import GPT2LMHeadModel

    from compendium.training import seeded_init

    with seeded_init(int(seed)):
        return GPT2LMHeadModel(config)


def mean_nll(model, seqs: np.ndarray, batch_size: int = 256) -> float:
    """Mean negative log-likelihood per pixel token (nats), pixels restricted as at sampling."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(seqs), batch_size):
            ids = torch.from_numpy(seqs[i:i + batch_size])
            logits = model(input_ids=ids[:, :-1]).logits[..., :PIXEL_LEVELS].double()
            logp = torch.log_softmax(logits, dim=-1)
            total -= logp.gather(-1, ids[:, 1:, None]).sum().item()
            count += ids[:, 1:].numel()
    return total / count


def train(settings: TrainSettings, seed: int, log=print):
    """Train the digits LM deterministically; return ``(model, metrics)``.

    AdamW with torch's ``OneCycleLR``, run by :func:`compendium.training.fit` on ``TRAIN_THREADS``
    threads (the NLL evaluation runs on them too); batches come from a generator seeded with
    ``seed``, dropout masks from the torch stream seeded with ``seed + 1`` inside a fork.
    """
    import torch

    from compendium.training import TrainSpec, fit, seeded_init, torch_threads

    seqs, train_idx, test_idx = digit_sequences()
    config = _gpt2_config(settings)
    model = _new_model(config, seed)
    data = torch.from_numpy(seqs[train_idx])
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.learning_rate, total_steps=settings.steps,
                                                pct_start=0.1)
    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate,
                     weight_decay=settings.weight_decay, threads=TRAIN_THREADS, log_every=100)

    def loss_fn(step):
        batch = data[torch.randint(len(data), (settings.batch_size,), generator=gen)]
        loss = model(input_ids=batch, labels=batch).loss
        if step % 100 == 0 or step == settings.steps - 1:
            log(f"step {step:5d}  loss {loss.item():.4f}")
        return loss

    with torch_threads(TRAIN_THREADS):
        with seeded_init(int(seed) + 1):  # dropout masks: their own seeded stream, the global one left alone
            fit(model, loss_fn, spec, optimizer=opt, scheduler=sched)
        metrics = {"train_nll": mean_nll(model, seqs[train_idx]), "test_nll": mean_nll(model, seqs[test_idx]),
                   "uniform_nll": float(np.log(PIXEL_LEVELS)),
                   "parameters": int(sum(p.numel() for p in model.parameters()))}
    return model, metrics


def build_asset(out_dir: Path, scale: str, seed: int, settings: TrainSettings | None = None) -> None:
    """The workflow builder: train the digits LM for ``scale`` and save it into ``out_dir``.

    Writes ``model.pt`` (state dict), ``config.json`` (the GPT-2 config) and ``metadata.json``
    (settings, vocabulary layout, test indices, train/test NLL).
    """
    import torch

    out_dir = Path(out_dir)
    settings = settings or settings_for(scale)
    model, metrics = train(settings, seed)
    torch.save(model.state_dict(), out_dir / "model.pt")
    model.config.to_json_file(out_dir / "config.json")
    _, _, test_idx = digit_sequences()
    meta = {"scale": scale, "seed": seed, "settings": asdict(settings), "metrics": metrics,
            "pixel_levels": PIXEL_LEVELS, "num_classes": NUM_CLASSES, "test_indices": test_idx.tolist()}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"digits LM: {metrics}")


def _cache_key(model) -> str:
    """The KV cache's keyword: transformers 5 calls it ``cache``, 4.x ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _sample_on(model, key: str, last_logits, cache, length: int, rng: np.random.Generator):
    """AR sampling of ``length`` tokens from ``last_logits`` (B, vocab) and the KV ``cache`` of the
    rows' prefixes: one token per forward pass. Returns a :class:`~.decoding.Decoded`."""
    import torch

    from ...speculative import categorical
    from .decoding import Decoded

    B = last_logits.shape[0]
    out_tokens = np.zeros((B, length), dtype=np.int64)
    for t in range(length):
        probs = torch.softmax(last_logits[:, :PIXEL_LEVELS].double(), dim=-1).numpy()
        out_tokens[:, t] = categorical(probs, rng)
        if t + 1 < length:
            out = model(input_ids=torch.from_numpy(out_tokens[:, t:t + 1]), use_cache=True, **{key: cache})
            last_logits, cache = out.logits[:, -1], getattr(out, key)
    return Decoded(out_tokens, np.full(B, length), np.ones((B, length), dtype=np.int64))


def _broadcast_cache(layers, rows: int, config):
    """A fresh KV cache holding one prefix's keys and values ``layers`` as views for ``rows`` rows
    (a forward pass concatenates new keys, so the views are never written to)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for i, (k, v) in enumerate(layers):
        cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
    return cache


def _grouped_probs(model, tokens: np.ndarray, positions: np.ndarray, *, shared: int = 0, layers=None) -> np.ndarray:
    """Next-pixel distributions ``(R, W, 16)`` at ``positions`` (R, W) of ``tokens`` (R, S).

    Rows are grouped by how far they reach (buckets of GROUP_TOKENS positions), and each group's
    pass stops at its own last position: a causal model's logits at a position do not depend on
    the tokens after it, so no row pays for the longest row of the batch. With ``layers`` (the
    keys and values of the rows' common first ``shared`` tokens) only the rest of each row runs.
    """
    import torch

    if positions.min() < 1:
        raise ValueError("position 0 holds the class token: nothing predicts it")
    key = _cache_key(model)
    ends = positions.max(axis=1)  # logits at index i predict token i + 1
    buckets = (ends - 1) // GROUP_TOKENS
    out = np.empty(positions.shape + (PIXEL_LEVELS,))
    for bucket in np.unique(buckets):
        rows = np.flatnonzero(buckets == bucket)
        end = int(ends[rows].max())
        ids = torch.from_numpy(np.ascontiguousarray(tokens[rows, shared:end]))
        past = {} if layers is None else {key: _broadcast_cache(layers, len(rows), model.config), "use_cache": True}
        logits = model(input_ids=ids, **past).logits[..., :PIXEL_LEVELS].double()
        idx = torch.from_numpy(positions[rows] - 1 - shared)[..., None].expand(-1, -1, PIXEL_LEVELS)
        out[rows] = torch.softmax(logits.gather(1, idx), dim=-1).numpy()
    return out


class DigitsLM:
    """A trained digits LM wrapped as a target model for the samplers.

    Calling it is one forward pass: ``lm(tokens (R, S), positions (R, W)) -> (R, W, 16)``, the
    distribution of the pixel at each position given everything before it.
    """

    def __init__(self, model, metadata: dict):
        self.model = model.eval()
        self.metadata = metadata
        self.vocab = PIXEL_LEVELS

    @classmethod
    def load(cls, path: str | Path) -> "DigitsLM":
        """Load a model saved by :func:`build_asset`."""
        import torch
        from transformers import GPT2Config

        path = Path(path)
        config = GPT2Config.from_json_file(path / "config.json")
        model = _new_model(config, 0)
        model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
        return cls(model, json.loads((path / "metadata.json").read_text()))

    def __call__(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return _grouped_probs(self.model, tokens, np.asarray(positions))

    def sample_autoregressive(self, prefix: np.ndarray, length: int, rng: np.random.Generator):
        """Plain AR sampling with a KV cache (one token per forward pass, NFE = ``length``).

        Same law as ``autoregressive_decode(self, ...)``, only cheaper: each pass feeds one new token.
        Returns a :class:`~.decoding.Decoded`.
        """
        import torch

        prefix = np.asarray(prefix, dtype=np.int64)
        key = _cache_key(self.model)
        with torch.no_grad():
            out = self.model(input_ids=torch.from_numpy(prefix), use_cache=True)
            return _sample_on(self.model, key, out.logits[:, -1], getattr(out, key), length, rng)

    def prompts(self, count: int, prompt_pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``count`` held-out digits: prompts ``(count, 1 + prompt_pixels)`` and full sequences."""
        seqs, _, _ = digit_sequences()
        test = np.asarray(self.metadata["test_indices"])[:count]
        if len(test) < count:
            raise ValueError(f"only {len(test)} held-out digits, asked for {count}")
        return seqs[test, : 1 + prompt_pixels], seqs[test]


class SharedPrefixLM:
    """A :class:`DigitsLM` for batches whose rows all start with one long prefix (same calling convention).

    The exact joint test draws thousands of continuations of one prefix; a Jacobi decoder without
    a KV cache re-encodes that prefix for every row at every iteration. Here the longest prefix
    common to all rows (and before every queried position) is encoded once, its keys and values
    are broadcast to the rows, and only the rest of each row runs through the model. The
    distributions equal those of the plain call up to float rounding (tested). Batches of one row,
    or whose common prefix is shorter than ``minimum`` tokens, take the plain call, so a
    wall-clock comparison of decoders (one prompt at a time) is unaffected.
    """

    def __init__(self, lm: DigitsLM, minimum: int = 1):
        self.lm, self.vocab, self.minimum = lm, lm.vocab, int(minimum)

    def sample_autoregressive(self, prefix: np.ndarray, length: int, rng: np.random.Generator):
        """AR sampling as :meth:`DigitsLM.sample_autoregressive` (same law, same generator stream);
        when every row has the same prefix, that prefix is encoded once."""
        import torch

        prefix = np.asarray(prefix, dtype=np.int64)
        if len(prefix) < 2 or prefix.shape[1] < self.minimum or (prefix != prefix[:1]).any():
            return self.lm.sample_autoregressive(prefix, length, rng)
        model = self.lm.model
        key = _cache_key(model)
        with torch.no_grad():
            head = model(input_ids=torch.from_numpy(prefix[:1]), use_cache=True)
            layers = [(layer.keys, layer.values) for layer in getattr(head, key).layers]
            return _sample_on(model, key, head.logits[:, -1].expand(len(prefix), -1),
                              _broadcast_cache(layers, len(prefix), model.config), length, rng)

    def __call__(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        import torch

        tokens, positions = np.asarray(tokens), np.asarray(positions)
        if positions.min() < 1:
            raise ValueError("position 0 holds the class token: nothing predicts it")
        differs = (tokens != tokens[:1]).any(axis=0)
        common = int(np.argmax(differs)) if differs.any() else tokens.shape[1]
        shared = min(common, int(positions.min()) - 1)  # every queried position lies after the prefix
        if len(tokens) < 2 or shared < self.minimum:
            return self.lm(tokens, positions)
        model = self.lm.model
        key = _cache_key(model)
        with torch.no_grad():
            head = model(input_ids=torch.from_numpy(np.ascontiguousarray(tokens[:1, :shared])), use_cache=True)
            return _grouped_probs(model, tokens, positions, shared=shared, layers=[
                (layer.keys, layer.values) for layer in getattr(head, key).layers])
