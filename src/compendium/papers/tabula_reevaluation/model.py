"""The miniature tabular LM and the shared asset that trains it.

A small pre-LayerNorm causal transformer over word/digit tokens (:func:`tables.tokenize`). Every
line ends with ``target <answer>``; training uses the cross-entropy of the answer token only, and
prediction is free generation of one token (argmax over the whole vocabulary), scored by exact
match, so a model that does not know an answer format cannot hit it by chance.

Three models share the architecture (per model seed):

* ``base``: trained from scratch on non-tabular instruction lines (yes/no, lettered choices);
  the analogue of an instruction-tuned LM without tabular exposure ("Alpaca").
* ``base_q``: ``base`` trained further on the same lines plus quartile-format questions
  (``q1..q4`` answers about months): format familiarity without tables ("Alpaca+Q").
* ``tlm``: ``base`` trained further on the tabular pretraining pool (the miniature TLM).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...runtime import make_rng, torch_generator
from ...training import TrainSpec, fit, seeded_init, torch_threads
from . import tables

SPECIALS = ("<pad>", "<bos>")
BLOCK_SIZE = 64  # longest line (tokens) the models accept; the same for every model seed
MODEL_KINDS = ("base", "base_q", "tlm")


class Vocabulary:
    """Token <-> id map built from a corpus of lines (ids sorted for reproducibility)."""

    def __init__(self, tokens):
        self.tokens = list(SPECIALS) + sorted(set(tokens) - set(SPECIALS))
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def from_lines(cls, lines) -> "Vocabulary":
        words = {tok for line in lines for tok in tables.tokenize(line)}
        groups = {f"{i:0{w}d}" for w in (1, 2, 3) for i in range(10**w)}  # every digit group
        return cls(words | set(tables.INSTRUCTION_WORDS) | groups | {".", "-"})

    def encode(self, line: str) -> list[int]:
        """Token ids of ``<bos> line``; unknown tokens raise ``ValueError``."""
        try:
            return [1] + [self.index[t] for t in tables.tokenize(line)]
        except KeyError as err:
            raise ValueError(f"token {err.args[0]!r} is not in the vocabulary") from None

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    block_size: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, h):  # h: (B, T, d)
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        h = h + self.proj(att)
        return h + self.mlp(self.ln2(h))


class TinyCausalLM(nn.Module):
    """Token + position embeddings, ``n_layers`` causal blocks, a linear read-out."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, ids, positions=None):
        """Logits (B, T, V) for ids (B, T); with ``positions`` (B,), only those: (B, V)."""
        if ids.shape[1] > self.cfg.block_size:
            raise ValueError(f"sequence of {ids.shape[1]} tokens exceeds block_size {self.cfg.block_size}")
        h = self.embed(ids) + self.position(torch.arange(ids.shape[1]))
        for block in self.blocks:
            h = block(h)
        if positions is not None:
            h = h[torch.arange(ids.shape[0]), positions]  # (B, d): read out the answer slots only
        return self.head(self.ln(h))


def encode_examples(vocab: Vocabulary, lines) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lines ending in ``target <answer>`` -> (prompts (N, T) right-padded, lengths (N,), answers (N,))."""
    ids = [vocab.encode(line) for line in lines]
    lengths = torch.tensor([len(x) - 1 for x in ids])  # the prompt stops at 'target'
    prompts = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for i, x in enumerate(ids):
        prompts[i, : len(x) - 1] = torch.tensor(x[:-1])
    return prompts, lengths, torch.tensor([x[-1] for x in ids])


def answer_logits(model: TinyCausalLM, prompts, lengths) -> torch.Tensor:
    """Logits (B, V) of the token after each prompt (right padding does not leak: causal mask)."""
    width = int(lengths.max())
    return model(prompts[:, :width], positions=lengths - 1)


def train_answers(model, prompts, lengths, answers, *, steps: int, batch_size: int, learning_rate: float,
                  generator: torch.Generator) -> list[float]:
    """Minimise the answer-token cross-entropy with AdamW (:func:`compendium.training.fit`: a 50-step
    warm-up, then linear decay to a tenth); return the loss at step 0, every 50 steps and the last.

    Batches come from ``generator`` (the caller's stream), drawn inside the loss closure.
    """
    spec = TrainSpec(max_steps=steps, learning_rate=learning_rate, weight_decay=0.01, warmup_steps=50,
                     schedule="linear_decay", final_fraction=0.1, log_every=max(steps, 1))
    losses = []

    def loss_fn(step):
        idx = torch.randint(0, len(answers), (batch_size,), generator=generator)
        loss = F.cross_entropy(answer_logits(model, prompts[idx], lengths[idx]), answers[idx])
        if step % 50 == 0 or step == steps - 1:
            losses.append(round(float(loss.detach()), 4))
        return loss

    fit(model, loss_fn, spec)
    return losses


@torch.no_grad()
def predict(model: TinyCausalLM, vocab: Vocabulary, prompts_text, batch_size: int = 512) -> list[str]:
    """Free generation of one answer token per prompt (argmax over the whole vocabulary)."""
    model.eval()
    out = []
    for start in range(0, len(prompts_text), batch_size):
        chunk = [p + " <pad>" for p in prompts_text[start:start + batch_size]]  # dummy answer slot
        prompts, lengths, _ = encode_examples(vocab, chunk)
        out += [vocab.tokens[i] for i in answer_logits(model, prompts, lengths).argmax(dim=1).tolist()]
    return out


# ----------------------------------------------------------------------------- the asset
@dataclass(frozen=True)
class AssetConfig:
    """Sizes of the benchmark, the pool and the training runs (chosen per scale by the builder)."""

    n_tasks: int = 60
    n_train: int = 48
    n_test: int = 24
    overlap_fraction: float = 0.25
    leak_fraction: float = 0.10
    copies: int = 4
    pool_tables: int = 24
    pool_rows: int = 30
    instruction_examples: int = 20000
    model_seeds: int = 3
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    base_steps: int = 250
    quartile_steps: int = 150
    tlm_steps: int = 700
    batch_size: int = 32
    learning_rate: float = 3e-3

    def __post_init__(self):
        if self.n_tasks < 6 or self.n_test < 4 or self.n_train < 8 or self.copies < 1 or self.model_seeds < 1:
            raise ValueError("AssetConfig needs n_tasks >= 6, n_test >= 4, n_train >= 8, copies >= 1, model_seeds >= 1")
        if not (0 < self.overlap_fraction and 0 <= self.leak_fraction and self.overlap_fraction + self.leak_fraction < 1):
            raise ValueError("overlap_fraction > 0, leak_fraction >= 0 and their sum < 1 are required")


ASSET_SCALES = {
    "smoke": AssetConfig(),
    "full": AssetConfig(n_tasks=90, n_train=64, n_test=32, pool_tables=36, pool_rows=40, model_seeds=3,
                        base_steps=600, quartile_steps=300, tlm_steps=1200),
}


def make_benchmark(config: AssetConfig, seed: int) -> dict:
    """Tasks, pool documents (shuffled) and the hidden contamination key, all from ``seed``."""
    rng = make_rng(seed, 0)
    types = [tables.TASK_TYPES[i % 3] for i in range(config.n_tasks)]
    key = tables.assign_contamination(rng, types, config.overlap_fraction, config.leak_fraction)
    tasks = tables.make_tasks(rng, config.n_tasks, config.n_train, config.n_test, key["leak"])
    docs = tables.pool_table_documents(rng, config.pool_tables, config.pool_rows)
    for i, mode in sorted(key["overlap"].items()):
        docs += tables.contamination_documents(rng, tasks[i], mode, config.copies)
    docs = [docs[j] for j in rng.permutation(len(docs))]
    return {"tasks": tasks, "pool": docs, "key": key}


def build_models(config: AssetConfig, benchmark: dict, model_seed: int) -> tuple[Vocabulary, dict, dict]:
    """Train ``base``, ``base_q`` and ``tlm`` for one model seed; return vocab, state dicts, losses."""
    rng = make_rng(model_seed, 1)
    pool_lines = [line for doc in benchmark["pool"] for line in doc]
    task_lines = [p + " " + a for t in benchmark["tasks"] for p, a in zip(t.prompts(), t.y_test)]
    words = sorted({name for line in pool_lines + task_lines for name in tables.parse_serialized_row(line)[1]})
    plain = tables.instruction_examples(rng, config.instruction_examples, quartile_format=False, words=words)
    with_q = tables.instruction_examples(rng, config.instruction_examples, quartile_format=True, words=words)
    vocab = Vocabulary.from_lines(plain + with_q + pool_lines + task_lines)
    cfg = ModelConfig(len(vocab), BLOCK_SIZE, config.d_model, config.n_layers, config.n_heads)
    longest = max(len(vocab.encode(line)) for line in pool_lines + task_lines + plain + with_q)
    if longest > BLOCK_SIZE:  # pragma: no cover - five features of three digit groups fit easily
        raise ValueError(f"a training line of {longest} tokens exceeds the block size {BLOCK_SIZE}")
    with seeded_init(model_seed):  # parameter init draws from a local, seeded stream
        base = TinyCausalLM(cfg)
    gen = torch_generator(model_seed)
    train = dict(batch_size=config.batch_size, learning_rate=config.learning_rate, generator=gen)
    losses = {"base": train_answers(base, *encode_examples(vocab, plain), steps=config.base_steps, **train)}
    base_q, tlm = copy.deepcopy(base), copy.deepcopy(base)
    losses["base_q"] = train_answers(base_q, *encode_examples(vocab, with_q), steps=config.quartile_steps, **train)
    losses["tlm"] = train_answers(tlm, *encode_examples(vocab, pool_lines), steps=config.tlm_steps, **train)
    return vocab, {"base": base, "base_q": base_q, "tlm": tlm}, losses


def build_asset_with(out_dir: Path, config: AssetConfig, seed: int) -> None:
    """Write the benchmark, the key, the vocabulary and the trained models into ``out_dir``."""
    out_dir = Path(out_dir)
    with torch_threads(1):  # bitwise-reproducible training whatever the machine's core count
        benchmark = make_benchmark(config, seed)
        (out_dir / "benchmark.json").write_text(json.dumps(
            {"tasks": [tables.task_to_dict(t) for t in benchmark["tasks"]], "pool": benchmark["pool"]}))
        key = {"overlap": {benchmark["tasks"][i].name: m for i, m in benchmark["key"]["overlap"].items()},
               "leak": sorted(benchmark["tasks"][i].name for i in benchmark["key"]["leak"])}
        (out_dir / "contamination_key.json").write_text(json.dumps(key, indent=1, sort_keys=True))
        metrics = {"asset_config": asdict(config), "seed": seed, "losses": {}}
        for s in range(config.model_seeds):
            vocab, models, losses = build_models(config, benchmark, seed * 1000 + s)
            for kind, model in models.items():
                torch.save(model.state_dict(), out_dir / f"{kind}_{s}.pt")
            metrics["losses"][str(s)] = losses
        (out_dir / "vocab.json").write_text(json.dumps(vocab.tokens))
        (out_dir / "model_config.json").write_text(json.dumps(asdict(models["tlm"].cfg)))
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Asset builder (registry ``tabular_lm_miniature``): sizes from :data:`ASSET_SCALES`."""
    if scale not in ASSET_SCALES:
        raise ValueError(f"scale must be one of {tuple(ASSET_SCALES)}, got {scale!r}")
    build_asset_with(Path(out_dir), ASSET_SCALES[scale], seed)


def load_asset(directory: Path) -> dict:
    """Benchmark tasks, pool, key, vocabulary and models ``{kind: [model per seed]}`` from an asset."""
    directory = Path(directory)
    bench = json.loads((directory / "benchmark.json").read_text())
    vocab = Vocabulary(json.loads((directory / "vocab.json").read_text()))
    cfg = ModelConfig(**json.loads((directory / "model_config.json").read_text()))
    metrics = json.loads((directory / "metrics.json").read_text())
    models = {kind: [] for kind in MODEL_KINDS}
    for s in range(len(metrics["losses"])):
        for kind in MODEL_KINDS:
            with torch.random.fork_rng(devices=[]):  # construction must not move the global stream
                model = TinyCausalLM(cfg)
            model.load_state_dict(torch.load(directory / f"{kind}_{s}.pt", weights_only=True))
            models[kind].append(model.eval())
    return {"tasks": [tables.task_from_dict(t) for t in bench["tasks"]], "pool": bench["pool"],
            "key": json.loads((directory / "contamination_key.json").read_text()),
            "vocab": vocab, "models": models, "metrics": metrics}
