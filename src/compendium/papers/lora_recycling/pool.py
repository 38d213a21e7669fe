"""The shared asset: a base MLP pretrained on mixed teacher tasks and a pool of in-the-wild LoRAs.

The pool's trainings are one batched program (every LoRA its own slice of the stacked ``A``, ``B``
tensors, zero padded to the largest rank: padded rows and columns get zero gradient and stay
zero), started from peft's own initialisation of each adapter.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init

from .lora import (MODULES, BaseMLP, ParameterBank, accuracy_and_loss, base_weights, lora_delta, mlp_forward,
                   orthonormal_basis, peft_pool, pool_tensors, sample_task, unit)

__all__ = ["ASSET_NAME", "AssetSettings", "settings_for", "build_asset", "make_pool", "load_asset", "pretrain_base"]

ASSET_NAME = "lora_recycling_pool"


@dataclass(frozen=True)
class AssetSettings:
    """Sizes of the base model and the pool (chosen per scale)."""

    input_dim: int = 16
    hidden_dim: int = 32
    span_dim: int = 8              # teachers live in span{b_1..b_8}; H_a = first half, H_b = second
    pretrain_tasks: int = 16
    pretrain_steps: int = 400
    pretrain_batch: int = 256
    pool_size: int = 60
    pool_examples: int = 400
    pool_steps: int = 200
    pool_learning_rate: float = 3e-3
    ranks: tuple = (2, 4, 8)
    alphas: tuple = (4.0, 8.0, 16.0, 32.0)
    noisy_label_rate: float = 0.25  # every fifth LoRA (i % 5 == 3) trained on labels flipped at this rate
    undertrained_fraction: float = 0.2  # every fifth LoRA (i % 5 == 4) kept at this fraction of its steps
    eval_examples: int = 2000


def settings_for(scale: str) -> AssetSettings:
    if scale == "smoke":
        return AssetSettings(pretrain_steps=300, pool_examples=300, pool_steps=150)
    if scale == "full":
        return AssetSettings(pretrain_steps=600, pool_examples=600, pool_steps=300)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def pretrain_base(settings: AssetSettings, basis: np.ndarray, rng: np.random.Generator, seed: int):
    """Multi-task pretraining (one head per teacher, trunk shared); the base keeps the trunk and the
    mean head: without a task given, it answers the average of its pretraining tasks."""
    teachers = unit(rng.normal(size=(settings.pretrain_tasks, settings.span_dim)) @ basis)
    with seeded_init(seed):
        base = BaseMLP(settings.input_dim, settings.hidden_dim)
        heads = nn.Linear(settings.hidden_dim, settings.pretrain_tasks)
    both = nn.ModuleList([base, heads])
    data_rng = np.random.default_rng([seed, 1])

    def loss_fn(step):
        x = torch.as_tensor(data_rng.normal(size=(settings.pretrain_batch, settings.input_dim)), dtype=torch.float32)
        y = (x @ torch.as_tensor(teachers.T, dtype=torch.float32) > 0).float()
        return F.binary_cross_entropy_with_logits(heads(base.trunk(x)), y)

    log = fit(both, loss_fn, TrainSpec(max_steps=settings.pretrain_steps, learning_rate=3e-3, weight_decay=0.0,
                                       schedule="cosine", threads=1, log_every=50))
    with torch.no_grad():
        base.head.weight.copy_(heads.weight.mean(0, keepdim=True))
        base.head.bias.copy_(heads.bias.mean().reshape(1))
    return base.eval(), teachers, log


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Pretrain the base, train the pool (batched), save ``base.pt``, ``pool.pt``, ``metadata.json``."""
    out_dir = Path(out_dir)
    asset, meta, metrics = make_pool(settings_for(scale), seed)
    meta["scale"] = scale
    torch.save(asset["base"].state_dict(), out_dir / "base.pt")
    torch.save({k: asset[k] for k in ("A", "B", "scales")} | {"teachers": torch.as_tensor(asset["teachers"]),
                                                             "basis": torch.as_tensor(asset["basis"])}, out_dir / "pool.pt")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(json.dumps(metrics))
    return metrics


def make_pool(s: AssetSettings, seed: int):
    """The base and the trained pool in memory: ``(asset dict as load_asset returns it, metadata, metrics)``."""
    rng = np.random.default_rng([seed, 2027])
    basis = orthonormal_basis(s.input_dim, s.span_dim, rng)
    base, pre_teachers, pre_log = pretrain_base(s, basis, rng, seed)
    weights = base_weights(base)
    N, half = s.pool_size, s.span_dim // 2
    # pool tasks: even LoRAs' teachers in H_a (first half of the basis), odd ones anywhere in the span
    coeffs = rng.normal(size=(N, s.span_dim))
    coeffs[0::2, half:] = 0.0
    teachers = unit(coeffs @ basis)
    group = np.where(np.arange(N) % 2 == 0, "a", "span")
    kind = np.array(["noisy" if i % 5 == 3 else "undertrained" if i % 5 == 4 else "clean" for i in range(N)])
    ranks = np.array([s.ranks[i % len(s.ranks)] for i in range(N)])
    alphas = rng.choice(s.alphas, size=N)
    names = [f"lora{i}" for i in range(N)]
    with seeded_init(seed + 1):
        peft_model = peft_pool(base, ranks, alphas, names)
    A0, B0, scales = pool_tensors(peft_model, names, max(s.ranks))
    noise = np.where(kind == "noisy", s.noisy_label_rate, 0.0)
    x, y = sample_task(teachers, s.pool_examples, rng, noise)
    bank = ParameterBank([A0[m].clone() for m in MODULES] + [B0[m].clone() for m in MODULES])
    sc = torch.as_tensor(scales, dtype=torch.float32)

    def deltas():
        return {m: lora_delta(bank.items[k], bank.items[3 + k], sc) for k, m in enumerate(MODULES)}

    def loss_fn(step):
        return F.binary_cross_entropy_with_logits(mlp_forward(weights, x, deltas()), y, reduction="none").mean(1).sum()

    early = max(1, int(round(s.undertrained_fraction * s.pool_steps)))
    opt = torch.optim.AdamW(bank.parameters(), lr=s.pool_learning_rate, weight_decay=0.0)
    log1 = fit(bank, loss_fn, TrainSpec(max_steps=early, learning_rate=s.pool_learning_rate, weight_decay=0.0,
                                        threads=1, log_every=early), optimizer=opt)
    snapshot = [p.detach().clone() for p in bank.items]
    log2 = fit(bank, loss_fn, TrainSpec(max_steps=s.pool_steps - early, learning_rate=s.pool_learning_rate,
                                        weight_decay=0.0, threads=1, log_every=50), optimizer=opt)
    under = torch.as_tensor(kind == "undertrained")
    final = [torch.where(under.view(-1, 1, 1), snap, p.detach()) for snap, p in zip(snapshot, bank.items)]
    A = {m: final[k] for k, m in enumerate(MODULES)}
    B = {m: final[3 + k] for k, m in enumerate(MODULES)}
    # own-task accuracy of every LoRA and of the base, on fresh clean samples
    xe, ye = sample_task(teachers, s.eval_examples, rng)
    with torch.no_grad():
        acc, _ = accuracy_and_loss(mlp_forward(weights, xe, {m: lora_delta(A[m], B[m], sc) for m in MODULES}), ye)
        base_acc, _ = accuracy_and_loss(mlp_forward(weights, xe), ye)
    meta = {"name": ASSET_NAME, "seed": int(seed), "settings": asdict(s), "names": names,
            "ranks": ranks.tolist(), "alphas": alphas.tolist(), "group": group.tolist(), "kind": kind.tolist(),
            "own_task_accuracy": [round(float(a), 4) for a in acc], "base_accuracy": [round(float(a), 4) for a in base_acc],
            "pretrain_log": pre_log.to_dict(), "pool_log": {"first": log1.to_dict(), "rest": log2.to_dict()}}
    metrics = {"pool_size": N, "mean_own_task_accuracy": float(acc.mean()), "mean_base_accuracy": float(base_acc.mean()),
               "pretrain_final_loss": pre_log.final_loss, "pool_final_loss": log2.final_loss}
    asset = dict(meta)
    asset.update(settings=s, base=base, weights=weights, A=A, B=B, scales=sc, teachers=teachers, basis=basis,
                 ranks=ranks, alphas=alphas, group=group, kind=kind)
    return asset, meta, metrics


def load_asset(path: str | Path) -> dict:
    """The asset as a dict: ``base`` (eval mode), ``weights``, pool ``A``/``B``/``scales``, ``teachers``,
    ``basis`` and the metadata lists (``ranks``, ``alphas``, ``group``, ``kind``, ``names``)."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    s = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    base = BaseMLP(s.input_dim, s.hidden_dim)
    base.load_state_dict(torch.load(path / "base.pt", map_location="cpu", weights_only=True))
    pool = torch.load(path / "pool.pt", map_location="cpu", weights_only=True)
    out = dict(meta)
    out.update(settings=s, base=base.eval(), weights=base_weights(base), A=pool["A"], B=pool["B"],
               scales=pool["scales"], teachers=pool["teachers"].numpy(), basis=pool["basis"].numpy(),
               ranks=np.array(meta["ranks"]), alphas=np.array(meta["alphas"]), group=np.array(meta["group"]),
               kind=np.array(meta["kind"]))
    return out
