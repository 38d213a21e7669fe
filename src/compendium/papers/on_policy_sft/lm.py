"""The base LM: a ``transformers`` GPT-2 config (2 layers, d = 64, random init) pretrained here.

Pretraining mixture (:data:`MIXTURE`): style A addition with 2-4 operands over all residues,
plain and hinted (the hint is the answer, so the model learns to turn it into its own chain of
thought, as an instruction-tuned LLM would), and subtraction (the forgetting probe). Each step
draws one kind of sequence, so a batch never pads. Training stops at the first dev check whose
greedy 3-operand in-domain accuracy reaches ``target_accuracy`` (headroom for fine-tuning).

:func:`build_asset` is the workflow rule's builder (registry asset ``on_policy_sft_lms``): one
model per training seed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import task
from .decoding import generate

ASSET_NAME = "on_policy_sft_lms"
TRAIN_THREADS = 1
# GPT-2's tanh-approximate GELU through torch's fused kernel: the same function as transformers'
# default "gelu_new" (equal to float rounding), which builds it from five elementwise ops and cost
# 2.6x the forward time at the chapter's 2000-row batches (491 vs 187 ms, one thread)
ACTIVATION = "gelu_pytorch_tanh"
# (kind, operands, weight): plain / hinted style-A addition and subtraction
MIXTURE = (("plain", 2, 0.10), ("plain", 3, 0.20), ("plain", 4, 0.15),
           ("hinted", 2, 0.05), ("hinted", 3, 0.15), ("hinted", 4, 0.05), ("sub", 2, 0.30))


@dataclass(frozen=True)
class PretrainSettings:
    """Size and optimisation of the base LMs (per scale, :func:`settings_for`)."""

    models: int = 3
    max_steps: int = 800
    batch_size: int = 64
    learning_rate: float = 3e-3
    target_accuracy: float = 0.6
    check_every: int = 50
    dev_problems: int = 300
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    initializer_range: float = 0.1


def settings_for(scale: str) -> PretrainSettings:
    """Smoke: three models, at most 600 steps; full: five, at most 2000 (the same stopping rule).

    Smoke stopped at 800 steps until the asset had to fit 45 s of CPU: its models 0 and 1 stop at
    the 60 % target before 600 steps either way, and model 2 was still on the plateau at 800 (0.13)."""
    if scale == "smoke":
        return PretrainSettings(models=3, max_steps=600)
    if scale == "full":
        return PretrainSettings(models=5, max_steps=2000)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def gpt2_config(settings: PretrainSettings = PretrainSettings()):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=task.VOCAB_SIZE, n_positions=task.MAX_POSITIONS, n_embd=settings.n_embd,
                      n_layer=settings.n_layer, n_head=settings.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, bos_token_id=task.BOS, eos_token_id=task.EOS, pad_token_id=task.PAD,
                      initializer_range=settings.initializer_range, activation_function=ACTIVATION)


def new_model(config, seed: int):
    """GPT-2 with a seeded random initialisation (the global torch RNG is left as it was)."""
    from transformers import GPT2LMHeadModel

    from compendium.training import seeded_init

    with seeded_init(int(seed)):
        return GPT2LMHeadModel(config)


def response_logits(model, prompts: np.ndarray, responses: np.ndarray) -> torch.Tensor:
    """Teacher-forced logits predicting each response token, ``(B, R, V)`` (with gradient)."""
    ids = torch.as_tensor(np.concatenate([prompts, responses], 1))
    P = prompts.shape[1]
    return model(input_ids=ids[:, :-1]).logits[:, P - 1:]


def pretraining_batch(kind: str, n: int, batch: int, rng: np.random.Generator):
    """``(prompts, responses)`` of one kind of pretraining sequence."""
    if kind == "sub":
        return task.subtraction(batch, rng)
    ops = task.problems(batch, n, rng)
    prompt = task.plain_prompt(ops) if kind == "plain" else task.hinted_prompt(ops)
    return prompt, task.response_a(ops, rng)


@torch.no_grad()
def greedy_accuracy(model, ops: np.ndarray, batch: int = 1000) -> float:
    """Share of problems whose greedy answer (after the first ``#``) is right."""
    correct = 0
    for i in range(0, len(ops), batch):
        o = ops[i:i + batch]
        out = generate(model, task.plain_prompt(o), 2 * o.shape[1], temperature=0.0)
        correct += int((task.parse_answer(out) == task.answers(o)).sum())
    return correct / max(len(ops), 1)


def pretrain(settings: PretrainSettings, seed: int):
    """Train one base LM deterministically; ``(model, log dict)``."""
    from compendium.training import TrainSpec, fit, torch_threads

    model = new_model(gpt2_config(settings), seed)
    rng = np.random.default_rng([seed, 1])
    dev = task.problems(settings.dev_problems, 3, np.random.default_rng([seed, 2]), task.IN_RANGE)
    kinds = [(k, n) for k, n, _ in MIXTURE]
    weights = np.array([w for *_, w in MIXTURE])
    spec = TrainSpec(max_steps=settings.max_steps, learning_rate=settings.learning_rate, warmup_steps=50,
                     grad_clip=1.0, threads=TRAIN_THREADS, check_every=settings.check_every,
                     target=settings.target_accuracy, log_every=100)

    def loss_fn(step):
        kind, n = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
        prompt, resp = pretraining_batch(kind, n, settings.batch_size, rng)
        logits = response_logits(model, prompt, resp)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(resp).reshape(-1))

    with torch_threads(TRAIN_THREADS):
        log = fit(model, loss_fn, spec, check=lambda m: greedy_accuracy(m, dev))
    return model, log.to_dict()


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """The workflow builder: ``settings.models`` base LMs (training seeds ``seed .. seed+models-1``)."""
    out_dir = Path(out_dir)
    settings = settings_for(scale)
    logs = []
    for i in range(settings.models):
        model, log = pretrain(settings, seed + i)
        torch.save(model.state_dict(), out_dir / f"model_{i}.pt")
        logs.append({"seed": seed + i, **log})
        print(f"base LM {i}: {log['steps']} steps, dev accuracy {log['last_check']}")
    gpt2_config(settings).to_json_file(out_dir / "config.json")
    meta = {"scale": scale, "seed": seed, "settings": asdict(settings), "logs": logs}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {"models": settings.models, "steps": [g["steps"] for g in logs], "dev_accuracy": [g["last_check"] for g in logs]}


def load_models(path: str | Path) -> tuple[list, dict]:
    """The base LMs and metadata saved by :func:`build_asset` (eval mode)."""
    from transformers import GPT2Config

    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    config = GPT2Config.from_json_file(path / "config.json")
    models = []
    for i in range(meta["settings"]["models"]):
        model = new_model(config, 0)
        model.load_state_dict(torch.load(path / f"model_{i}.pt", map_location="cpu", weights_only=True))
        models.append(model.eval())
    return models, meta
