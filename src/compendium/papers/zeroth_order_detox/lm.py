"""The language models (``transformers`` GPT-2 configs, random init, trained here) and the scorer.

Three workflow assets (registry ``assets:``), each built by its own builder:

- :func:`build_lms` (``zeroth_order_detox_lms``): the LMs under study, one per training seed,
  trained on the two-register language;
- :func:`build_reference` (``zeroth_order_detox_reference``): the reference LM that scores
  perplexity, a different seed trained on the same language without the toxic register;
- :func:`build_scorer` (``zeroth_order_detox_scorer``): the toxicity scorer, scikit-learn's
  logistic regression on token counts of a continuation, fit to graded rater flags
  (:func:`.toy.rater_labels`: each toxic word noticed with probability 0.1), so its output is a
  calibrated probability that rises with the number of toxic words rather than a near-hard
  detector (the register label it was first fit to saturated expected max toxicity at 1.000).

Generation runs with a KV cache from ``inputs_embeds`` (:func:`generate`), so a steered prompt
embedding and a token prompt go through the same code path.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import toy

LMS_ASSET = "zeroth_order_detox_lms"
REFERENCE_ASSET = "zeroth_order_detox_reference"
SCORER_ASSET = "zeroth_order_detox_scorer"
TRAIN_THREADS = 1


@dataclass(frozen=True)
class LMSettings:
    """Size and optimisation of one LM (per scale, :func:`lm_settings`)."""

    models: int = 2
    max_steps: int = 500
    batch_size: int = 64
    learning_rate: float = 1e-2
    warmup_steps: int = 30
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    initializer_range: float = 0.1


def lm_settings(scale: str, *, reference: bool = False) -> LMSettings:
    """Smoke: two LMs of 350 steps (reference 200); full: three LMs of 1000 steps (reference 600)."""
    if scale == "smoke":
        return LMSettings(models=1, max_steps=200) if reference else LMSettings(models=2, max_steps=350)
    if scale == "full":
        return LMSettings(models=1, max_steps=600) if reference else LMSettings(models=3, max_steps=1000)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def gpt2_config(settings: LMSettings = LMSettings()):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=toy.VOCAB_SIZE, n_positions=toy.MAX_POSITIONS, n_embd=settings.n_embd,
                      n_layer=settings.n_layer, n_head=settings.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, bos_token_id=toy.BOS, eos_token_id=toy.BOS,
                      initializer_range=settings.initializer_range)


def new_model(config, seed: int):
    """GPT-2 with a seeded random initialisation (the global torch RNG is left as it was)."""
    from transformers import GPT2LMHeadModel

    from compendium.training import seeded_init

    with seeded_init(int(seed)):
        return GPT2LMHeadModel(config)


def continuation_nll(model, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token NLL of the continuation given the prompt, ``(n, T)`` (with gradient)."""
    P = toy.PROMPT_LENGTH
    logits = model(input_ids=tokens[:, :-1]).logits[:, P - 1:]                 # (n, T, V)
    target = tokens[:, P:]
    return -torch.log_softmax(logits, -1).gather(-1, target[..., None])[..., 0]


def train_lm(settings: LMSettings, seed: int, *, reference: bool = False):
    """Train one LM deterministically on fresh batches; ``(model, log dict)``."""
    from compendium.training import TrainSpec, fit, torch_threads

    model = new_model(gpt2_config(settings), seed)
    rng = np.random.default_rng([seed, 7, int(reference)])
    spec = TrainSpec(max_steps=settings.max_steps, learning_rate=settings.learning_rate, schedule="cosine",
                     warmup_steps=settings.warmup_steps, grad_clip=1.0, threads=TRAIN_THREADS, log_every=100)

    def loss_fn(step):
        tok, _ = toy.corpus(settings.batch_size, rng, reference=reference)
        return continuation_nll(model, torch.as_tensor(tok)).mean()

    with torch_threads(TRAIN_THREADS):
        log = fit(model, loss_fn, spec)
    return model.eval(), log.to_dict()


def _save_models(out_dir: Path, settings: LMSettings, seeds: list[int], reference: bool, scale: str) -> dict:
    logs = []
    for i, s in enumerate(seeds):
        model, log = train_lm(settings, s, reference=reference)
        torch.save(model.state_dict(), out_dir / f"model_{i}.pt")
        logs.append({"seed": s, **log})
    gpt2_config(settings).to_json_file(out_dir / "config.json")
    meta = {"scale": scale, "settings": asdict(settings), "reference": reference, "logs": logs}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {"models": len(seeds), "final_loss": [g.get("final_loss") for g in logs]}


def build_lms(out_dir: Path, scale: str, seed: int) -> dict:
    """Builder of ``zeroth_order_detox_lms``: LM training seeds ``seed .. seed + models - 1``."""
    settings = lm_settings(scale)
    return _save_models(Path(out_dir), settings, [seed + i for i in range(settings.models)], False, scale)


def build_reference(out_dir: Path, scale: str, seed: int) -> dict:
    """Builder of ``zeroth_order_detox_reference``: one LM (seed ``seed + 1000``), no toxic register."""
    return _save_models(Path(out_dir), lm_settings(scale, reference=True), [seed + 1000], True, scale)


def load_models(path: str | Path) -> tuple[list, dict]:
    """The LMs saved by a builder (eval mode, gradients off) and their metadata."""
    from transformers import GPT2Config

    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    config = GPT2Config.from_json_file(path / "config.json")
    models = []
    for i in range(len(meta["logs"])):
        model = new_model(config, 0)
        model.load_state_dict(torch.load(path / f"model_{i}.pt", map_location="cpu", weights_only=True))
        models.append(model.eval().requires_grad_(False))
    return models, meta


# ------------------------------------------------------------------------------------------ scorer
@dataclass(frozen=True)
class ToxicityScorer:
    """Logistic regression on token counts: ``tox(y) = sigmoid(b + sum_t w[y_t])``."""

    weights: np.ndarray      # (V,)
    bias: float

    def score(self, tokens) -> np.ndarray:
        """Scores in (0, 1) of continuations ``(..., T)``."""
        z = self.bias + self.weights[np.asarray(tokens)].sum(-1)
        return 1.0 / (1.0 + np.exp(-z))

    def token_scores(self) -> np.ndarray:
        """``tox`` of every one-token continuation, ``(V,)``: the table the surrogate uses."""
        return self.score(np.arange(toy.VOCAB_SIZE)[:, None])


def fit_scorer(n: int, seed: int) -> tuple[ToxicityScorer, dict]:
    """Fit the scorer on ``n`` continuations of fresh prompts labelled by :func:`.toy.rater_labels`.

    Returns the scorer and held-out diagnostics on the second half: accuracy, mean predicted score
    against the flag rate (calibration in the large), and the Brier score.
    """
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng([seed, 11])
    _, rate = toy.prompts(n, rng)
    cont, _ = toy.continuations(rate, rng)
    label = toy.rater_labels(cont, rng)
    counts = np.zeros((n, toy.VOCAB_SIZE))
    np.add.at(counts, (np.repeat(np.arange(n), cont.shape[1]), cont.ravel()), 1.0)
    h = n // 2
    clf = LogisticRegression(C=1.0, max_iter=500).fit(counts[:h], label[:h])
    scorer = ToxicityScorer(clf.coef_[0].astype(float), float(clf.intercept_[0]))
    p = scorer.score(cont[h:])
    info = {"held_out_accuracy": float(clf.score(counts[h:], label[h:])), "held_out_flag_rate": float(label[h:].mean()),
            "held_out_mean_score": float(p.mean()), "held_out_brier": float(((p - label[h:]) ** 2).mean())}
    return scorer, info


def build_scorer(out_dir: Path, scale: str, seed: int) -> dict:
    """Builder of ``zeroth_order_detox_scorer`` (4000 continuations at both scales)."""
    if scale not in ("smoke", "full"):
        raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")
    scorer, info = fit_scorer(4000, seed)
    # float64 tensors, like the other assets' torch files (exact round trip)
    torch.save({"weights": torch.as_tensor(np.asarray(scorer.weights, dtype=np.float64)),
                "bias": torch.tensor(float(scorer.bias), dtype=torch.float64)}, Path(out_dir) / "scorer.pt")
    (Path(out_dir) / "metadata.json").write_text(json.dumps({"scale": scale, "seed": seed, **info}, indent=1) + "\n")
    return info


def load_scorer(path: str | Path) -> tuple[ToxicityScorer, dict]:
    path = Path(path)
    data = torch.load(path / "scorer.pt", map_location="cpu", weights_only=True)
    return (ToxicityScorer(data["weights"].numpy(), float(data["bias"])),
            json.loads((path / "metadata.json").read_text()))


# ------------------------------------------------------------------------------------- generation
def _sample_loop(model, out, length, generator, banned, temperature, repeats):
    past, logits = out.past_key_values, out.logits[:, -1]
    if repeats > 1:
        past.batch_repeat_interleave(repeats)            # one prompt pass, shared by its samples
        logits = logits.repeat_interleave(repeats, 0)
    tokens = []
    for t in range(length):
        logits = logits / temperature
        if banned is not None:
            logits = logits.index_fill(-1, banned, float("-inf"))
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)      # (B r, 1)
        tokens.append(nxt)
        if t + 1 < length:
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]
    return torch.cat(tokens, 1)


@torch.no_grad()
def generate(model, prompt_embeds: torch.Tensor, length: int, generator: torch.Generator,
             banned: torch.Tensor | None = None, temperature: float = 1.0, repeats: int = 1) -> torch.Tensor:
    """Sample ``length`` tokens after prompt embeddings ``(B, L, d)`` with a KV cache.

    Returns ``(B * repeats, length)``, the ``repeats`` samples of a prompt in consecutive rows.
    ``banned``: token ids whose logits are set to ``-inf`` at every step (bad-word masking).
    """
    out = model(inputs_embeds=prompt_embeds, use_cache=True)
    return _sample_loop(model, out, length, generator, banned, temperature, int(repeats))


@torch.no_grad()
def generate_from_tokens(model, prompt_ids: torch.Tensor, length: int, generator: torch.Generator,
                         banned: torch.Tensor | None = None, temperature: float = 1.0, repeats: int = 1) -> torch.Tensor:
    """The token-prompt path (``input_ids``), the same sampler otherwise (for the bit-exact check)."""
    out = model(input_ids=prompt_ids, use_cache=True)
    return _sample_loop(model, out, length, generator, banned, temperature, int(repeats))


def embed(model, prompt_ids: torch.Tensor) -> torch.Tensor:
    """Input embeddings ``E_0 = W_te[tokens]``, ``(B, L, d)`` (GPT-2 adds positions itself)."""
    return model.transformer.wte(prompt_ids).detach()


def surrogate_toxicity(model, embeds: torch.Tensor, token_scores: torch.Tensor) -> torch.Tensor:
    r"""The exact surrogate :math:`\tilde J(E) = \sum_v p_\theta(v \mid E)\, \mathrm{tox}(v)`, ``(B,)``.

    The expected score of the enumerated one-token continuations: one forward pass per prompt,
    differentiable in ``embeds`` ``(B, L, d)`` (autograd gives the white-box gradient).
    """
    logits = model(inputs_embeds=embeds).logits[:, -1]
    return torch.softmax(logits, -1) @ token_scores


@torch.no_grad()
def log_perplexity(reference, prompt_ids: torch.Tensor, continuation: torch.Tensor, max_rows: int = 8192) -> torch.Tensor:
    """Mean NLL per continuation token under the reference LM, given the *original* prompt.

    ``prompt_ids`` ``(B, L)``; ``continuation`` ``(B * r, T)`` with the ``r`` continuations of a
    prompt in consecutive rows. Returns ``(B * r,)``.
    """
    B, (R, T) = len(prompt_ids), continuation.shape
    if R % B:
        raise ValueError(f"{R} continuations do not split evenly over {B} prompts")
    r = R // B
    step = max(1, max_rows // r)
    out = []
    for i in range(0, B, step):
        res = reference(input_ids=prompt_ids[i:i + step], use_cache=True)
        past, first = res.past_key_values, res.logits[:, -1:]
        past.batch_repeat_interleave(r)
        cont = continuation[i * r:(i + step) * r]
        rest = reference(input_ids=cont[:, :-1], past_key_values=past).logits if T > 1 else first[:0]
        logits = torch.cat([first.repeat_interleave(r, 0), rest], 1)                       # (rows, T, V)
        out.append(-torch.log_softmax(logits, -1).gather(-1, cont[..., None])[..., 0].mean(1))
    return torch.cat(out)
