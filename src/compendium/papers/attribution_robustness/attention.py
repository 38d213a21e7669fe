r"""The attention part: softmax versus kernel (elu + 1) attention, CLS-attention attribution.

The paper's limit, as we read it: the robustness that a larger :math:`\eta/B` gives gradient
attributions does not carry over to an attribution read from softmax attention weights, and a
kernel (linear) attention brings it back. The experiment here is ours (the paper's was not read).

Task (``key_token_task``): sequences of ``length`` tokens from a vocabulary of ``classes`` x 2
*key* tokens and ``distractors`` other tokens. A sequence of class ``c`` holds ``keys`` tokens drawn
from class ``c``'s two key tokens, one *decoy* key token of another class, and distractors; the
order is random and there is no positional code (the task is a bag of tokens). The label is the
class with the most key tokens, so the model has to find and count them.

Inputs are fixed feature vectors, as pixels are: each token's embedding is a random vector in
:math:`[0, 1]^d` drawn once from the task seed and never trained, and a CLS vector is prepended. The
attribution attack then perturbs these vectors inside an :math:`\ell_\infty` ball of the same
radii as the digits task (box [0, 1]), which gives :math:`\epsilon` one meaning for every model.

Model (``forward``, a stack of ``M`` models at once, one layer): the CLS query attends over all
tokens with ``heads`` heads,

.. math::

   a_{hj} = \frac{\exp(q_h^\top k_{hj}/\sqrt{d_h})}{\sum_l \exp(q_h^\top k_{hl}/\sqrt{d_h})}
   \quad\text{(softmax)}, \qquad
   a_{hj} = \frac{\phi(q_h)^\top \phi(k_{hj})}{\sum_l \phi(q_h)^\top \phi(k_{hl})},\ \phi = \mathrm{elu} + 1
   \quad\text{(kernel)},

then :math:`h = x_\text{cls} + W_o\,[\sum_j a_{hj} v_{hj}]_h` and a GELU MLP head gives the logits.
Only the CLS row of attention is computed: in one layer no other row reaches the output. The
attribution map is :math:`\bar a_j = \frac1H \sum_h a_{hj}` over the ``length`` sequence tokens.

Training: plain SGD (no momentum, no weight decay) on the cross-entropy, every model of a stack
with its own learning rate, seed-fixed initialisation and batch order (``train_attention_stack``;
autograd on the sum of the models' losses, which is each model's own gradient). The attack
(``attention_attack``) is the digits attack with the attention map in place of the gradient map:
PGD with signed steps :math:`2.5\epsilon/20` lowering the top-k share
:math:`\sum_{j \in T} \bar a_j(x') / \sum_j \bar a_j(x')`, the clean prediction held, the iterate with the
lowest top-k intersection kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from compendium import stats
from compendium.training import torch_threads

from .attribution import random_perturbation, topk_mask, topk_pgd

__all__ = ["ATTENTION_ASSET", "KINDS", "AttentionSettings", "attention_settings_for", "key_token_task",
           "init_attention_stack", "forward", "attention_map", "train_attention_stack", "attention_attack",
           "build_attention_asset", "load_attention_asset", "evaluate_attention", "attention_measurements"]

ATTENTION_ASSET = "attribution_robustness_attention"
KINDS = ("softmax", "kernel")


@dataclass(frozen=True)
class AttentionSettings:
    learning_rates: tuple = (0.05, 0.1, 0.2)
    batch_sizes: tuple = (16, 64)
    num_seeds: int = 3
    epochs: int = 60
    num_train: int = 2000
    num_val: int = 500
    num_test: int = 500
    length: int = 16
    classes: int = 4
    keys: int = 3
    distractors: int = 24
    dim: int = 32
    heads: int = 4
    hidden: int = 64


def attention_settings_for(scale: str) -> AttentionSettings:
    """Full scale: the issue's 3 seeds x 6 configs per attention kind, 60 epochs of 2,000 sequences.
    Smoke: the same grid and seeds on 800 sequences for 20 epochs (the smoke CPU budget)."""
    if scale not in ("smoke", "full"):
        raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")
    if scale == "smoke":
        return AttentionSettings(epochs=20, num_train=800, num_val=300, num_test=300)
    return AttentionSettings()


def key_token_task(settings: AttentionSettings, seed: int) -> dict[str, np.ndarray]:
    """Token ids, labels and the fixed embedding table (row 0 the CLS vector); disjoint draws for
    train, validation and test from one generator."""
    s = settings
    if s.keys < 2 or s.keys + 1 > s.length:
        raise ValueError(f"need 2 <= keys and keys + 1 <= length, got keys={s.keys}, length={s.length}")
    rng = np.random.default_rng([seed, 71])
    vocab = 2 * s.classes + s.distractors
    table = rng.standard_normal((vocab + 1, s.dim)).astype(np.float32)        # row 0: CLS
    out = {"table": table}
    for split, n in (("train", s.num_train), ("val", s.num_val), ("test", s.num_test)):
        y = rng.integers(0, s.classes, n)
        decoy_class = (y + rng.integers(1, s.classes, n)) % s.classes
        keys = 2 * y[:, None] + rng.integers(0, 2, (n, s.keys))
        decoy = 2 * decoy_class[:, None] + rng.integers(0, 2, (n, 1))
        filler = 2 * s.classes + rng.integers(0, s.distractors, (n, s.length - s.keys - 1))
        tokens = np.concatenate([keys, decoy, filler], axis=1)
        tokens = np.take_along_axis(tokens, rng.permuted(np.tile(np.arange(s.length), (n, 1)), axis=1), axis=1)
        out[f"tokens_{split}"] = (tokens + 1).astype(np.int64)                # ids shifted past CLS
        out[f"y_{split}"] = y.astype(np.int64)
    return out


def embed(data: dict, split: str) -> torch.Tensor:
    """``(n, length + 1, dim)`` inputs: the CLS vector, then the tokens' fixed vectors."""
    table = torch.as_tensor(data["table"])
    tokens = torch.as_tensor(data[f"tokens_{split}"])
    cls = torch.zeros((tokens.shape[0], 1), dtype=torch.int64)
    return table[torch.cat([cls, tokens], dim=1)]


def init_attention_stack(seeds, settings: AttentionSettings) -> list[torch.Tensor]:
    """Weights ``[Wq, Wk, Wv, Wo, W1, b1, W2, b2]``, each with a leading model axis; model ``m``
    initialised from ``seeds[m]`` alone (uniform +-1/sqrt(fan_in), as torch's Linear)."""
    d, h, c = settings.dim, settings.hidden, settings.classes
    shapes = [(d, d), (d, d), (d, d), (d, d), (d, h), (h,), (h, c), (c,)]
    fans = [d, d, d, d, d, d, h, h]
    stacks = [[] for _ in shapes]
    for s in seeds:
        g = torch.Generator().manual_seed(int(s) * 7919 + 13)
        for i, (shape, fan) in enumerate(zip(shapes, fans)):
            stacks[i].append((torch.rand(shape, generator=g) * 2 - 1) / math.sqrt(fan))
    return [torch.stack(p) for p in stacks]


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    return t.reshape(*t.shape[:-1], heads, t.shape[-1] // heads)


def attention_weights(params, x: torch.Tensor, kind: str, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CLS attention ``(M, n, H, T + 1)`` over CLS and the tokens, and the values ``(M, n, T + 1, H, dh)``;
    ``x`` is ``(M, n, T + 1, d)``."""
    Wq, Wk, Wv = params[0], params[1], params[2]
    q = _split_heads(torch.einsum("mnd,mde->mne", x[:, :, 0], Wq), heads)          # (M, n, H, dh)
    k = _split_heads(torch.einsum("mntd,mde->mnte", x, Wk), heads)                 # (M, n, T+1, H, dh)
    v = _split_heads(torch.einsum("mntd,mde->mnte", x, Wv), heads)
    if kind == "softmax":
        scores = torch.einsum("mnhe,mnthe->mnht", q, k) / math.sqrt(q.shape[-1])
        a = torch.softmax(scores, dim=-1)
    elif kind == "kernel":
        fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
        w = torch.einsum("mnhe,mnthe->mnht", fq, fk)
        a = w / w.sum(-1, keepdim=True)
    else:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return a, v


def forward(params, x: torch.Tensor, kind: str, heads: int) -> torch.Tensor:
    """Logits ``(M, n, C)`` for inputs ``(M, n, T + 1, d)`` (or ``(n, T + 1, d)``, shared by all models)."""
    if x.dim() == 3:
        x = x.unsqueeze(0).expand(params[0].shape[0], *x.shape)
    a, v = attention_weights(params, x, kind, heads)
    mixed = torch.einsum("mnht,mnthe->mnhe", a, v).flatten(-2)                      # (M, n, d)
    h = x[:, :, 0] + torch.einsum("mnd,mde->mne", mixed, params[3])
    z = torch.nn.functional.gelu(torch.einsum("mnd,mdh->mnh", h, params[4]) + params[5][:, None])
    return torch.einsum("mnh,mhc->mnc", z, params[6]) + params[7][:, None]


def attention_map(params, x: torch.Tensor, kind: str, heads: int) -> torch.Tensor:
    """The attribution: head-mean CLS attention over the sequence tokens, ``(M, n, T)``."""
    if x.dim() == 3:
        x = x.unsqueeze(0).expand(params[0].shape[0], *x.shape)
    a, _ = attention_weights(params, x, kind, heads)
    return a.mean(2)[..., 1:]


def train_attention_stack(x: torch.Tensor, y: torch.Tensor, learning_rates, seeds, batch_size: int, epochs: int,
                          kind: str, settings: AttentionSettings) -> tuple[list[torch.Tensor], np.ndarray]:
    """Plain SGD for every model of a stack at once: model ``m`` uses ``learning_rates[m]`` and the
    batch order of ``seeds[m]``; the last batch of an epoch is dropped when short. Returns the
    weights and each model's mean training loss over the last epoch."""
    lrs = torch.as_tensor(np.asarray(learning_rates, dtype=np.float32))
    if len(lrs) != len(seeds) or batch_size < 1 or epochs < 1:
        raise ValueError("need one learning rate per seed, batch_size >= 1 and epochs >= 1")
    params = [p.requires_grad_() for p in init_attention_stack(seeds, settings)]
    n, M = x.shape[0], len(seeds)
    steps = n // batch_size
    orders = [np.random.default_rng([int(s), 5]) for s in seeds]
    last = torch.zeros(M)
    for epoch in range(epochs):
        perm = torch.as_tensor(np.stack([g.permutation(n) for g in orders]))    # (M, n)
        total = torch.zeros(M)
        for b in range(steps):
            idx = perm[:, b * batch_size:(b + 1) * batch_size]
            logits = forward(params, x[idx], kind, settings.heads)            # (M, B, C)
            losses = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[idx].reshape(-1),
                                                       reduction="none").view(M, -1).mean(1)
            grads = torch.autograd.grad(losses.sum(), params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(lrs.view(-1, *([1] * (p.dim() - 1))) * g)
                total += losses.detach()
        last = total / steps
    return [p.detach() for p in params], last.numpy()


def _grid(settings: AttentionSettings):
    return [(eta, B, s) for B in settings.batch_sizes for eta in settings.learning_rates
            for s in range(settings.num_seeds)]


def build_attention_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Train the grid (learning rate x batch size x seeds) for each attention kind; writes
    ``attention.pt`` (the task and both stacks) and ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = attention_settings_for(scale)
    data = key_token_task(settings, seed)
    x, y = embed(data, "train"), torch.as_tensor(data["y_train"])
    blob, rows = {"data": {k: torch.from_numpy(v) for k, v in data.items()}}, []
    with torch_threads(1):
        for kind in KINDS:
            parts = []
            for B in settings.batch_sizes:
                cells = [(eta, s) for (eta, b, s) in _grid(settings) if b == B]
                params, loss = train_attention_stack(x, y, [e for e, _ in cells], [1000 * seed + s for _, s in cells],
                                                     B, settings.epochs, kind, settings)
                parts.append(params)
                rows += [{"kind": kind, "eta": e, "batch_size": B, "seed": s, "final_loss": float(l)}
                         for (e, s), l in zip(cells, loss)]
            blob[kind] = [torch.cat([p[i] for p in parts]) for i in range(len(parts[0]))]
            print(f"{kind}: {sum(r['kind'] == kind for r in rows)} models, "
                  f"final loss {np.mean([r['final_loss'] for r in rows if r['kind'] == kind]):.3f}")
    torch.save(blob, out_dir / "attention.pt")
    meta = {"name": ATTENTION_ASSET, "scale": scale, "seed": int(seed), "settings": asdict(settings), "models": rows}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_attention_asset(path: str | Path) -> dict:
    """``{"data", "softmax", "kernel", "models", "settings"}`` from an asset folder."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    blob = torch.load(path / "attention.pt", map_location="cpu", weights_only=True)
    out = {"data": {k: v.numpy() for k, v in blob["data"].items()}, "models": meta["models"],
           "settings": AttentionSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()}),
           "_meta": meta}
    for kind in KINDS:
        out[kind] = blob[kind]
    return out


def attention_attack(params, x: torch.Tensor, y: torch.Tensor, kind: str, heads: int, *, k: int, eps: float,
                     steps: int = 20, box=None) -> dict:
    """PGD on the attention map of inputs ``(M, n, T + 1, d)``: lowers the clean top-k share, the
    CLS vector untouched, the clean prediction held (the digits attack's loop, ``topk_pgd``).
    Returns ``delta``, ``intersection`` ``(M, n)`` and the clean and attacked maps."""
    x = x.detach()
    mask = torch.ones_like(x)
    mask[:, :, 0] = 0.0                                                          # never perturb CLS
    with torch.no_grad():
        label = forward(params, x, kind, heads).argmax(-1)
        a0 = attention_map(params, x, kind, heads)

    def map_fn(xa, last):
        a_all, _ = attention_weights(params, xa, kind, heads)
        with torch.no_grad():
            logits = forward(params, xa, kind, heads)
        return a_all.mean(2)[..., 1:], logits

    best_delta, best = topk_pgd(map_fn, x, a0, label, k=k, eps=eps, steps=steps, box=box, mask=mask)
    with torch.no_grad():
        attacked = attention_map(params, x + best_delta, kind, heads)
    return {"delta": best_delta, "intersection": best, "clean_map": a0, "attacked_map": attacked}


def evaluate_attention(asset: dict, *, test_points: int, epsilons, top_k: int, attack_steps: int,
                       generator: torch.Generator) -> pd.DataFrame:
    """One row per trained model: validation and test accuracy, and per radius the mean attacked and
    random-perturbation top-k intersection over the correctly classified test points, of
    ``test_points`` test sequences drawn by ``generator`` (which then draws the random perturbations)."""
    s, data = asset["settings"], asset["data"]
    xv, yv = embed(data, "val"), torch.as_tensor(data["y_val"])
    pick = torch.randperm(len(data["y_test"]), generator=generator)[:test_points]    # the chapter seed's draw
    xt, yt = embed(data, "test")[pick], torch.as_tensor(data["y_test"])[pick]
    rows = []
    with torch_threads(1):
        for kind in KINDS:
            params = asset[kind]
            M = params[0].shape[0]
            meta = [r for r in asset["models"] if r["kind"] == kind]
            with torch.no_grad():
                val = (forward(params, xv, kind, s.heads).argmax(-1) == yv).float().mean(1).numpy()
                pred = forward(params, xt, kind, s.heads).argmax(-1)
            correct = pred == yt
            test = correct.float().mean(1).numpy()
            X = xt.unsqueeze(0).expand(M, *xt.shape).contiguous()
            Y = yt.unsqueeze(0).expand(M, -1)
            per_eps = {}
            for eps in epsilons:
                att = attention_attack(params, X, Y, kind, s.heads, k=top_k, eps=eps, steps=attack_steps)
                with torch.no_grad():
                    rand = X + random_perturbation(X, eps, generator, box=None) * (torch.arange(X.shape[2]) > 0).view(1, 1, -1, 1)
                    a0 = att["clean_map"]
                    ar = attention_map(params, rand, kind, s.heads)
                    rand_inter = (topk_mask(ar, top_k) & topk_mask(a0, top_k)).sum(-1).float() / top_k
                per_eps[eps] = (att["intersection"], rand_inter)
            with torch.no_grad():
                a0 = attention_map(params, xt, kind, s.heads)
                top_share = a0.topk(top_k, dim=-1).values.sum(-1)
            for m in range(M):
                c = correct[m]
                row = {**meta[m], "eta_over_b": meta[m]["eta"] / meta[m]["batch_size"], "val_accuracy": float(val[m]),
                       "test_accuracy": float(test[m]), "points": int(c.sum()),
                       "clean_top_share": float(top_share[m][c].mean()) if c.any() else float("nan")}
                for eps, (pgd, rnd) in per_eps.items():
                    row[f"pgd_{eps:g}"] = float(pgd[m][c].mean()) if c.any() else float("nan")
                    row[f"random_{eps:g}"] = float(rnd[m][c].mean()) if c.any() else float("nan")
                rows.append(row)
    return pd.DataFrame(rows)


def attention_measurements(table: pd.DataFrame, *, eps: float, margin: float, mlp_rho: float, rng,
                           resamples: int = 2000) -> dict:
    """Per kind: the accuracy-matched models (configs within ``margin`` of the kind's best mean
    validation accuracy), Spearman(eta/B, attacked top-k intersection) with its 90 % Fisher-z
    interval and two-sided p, the headroom and the attack sanity check; then the softmax null
    (two-sided p > 0.1 or |rho| < |rho_MLP| / 2), and the bootstrap interval of
    rho_kernel - rho_softmax (models resampled within each kind)."""
    from .experiment import rank_test

    out = {}
    col = f"pgd_{eps:g}"
    for kind in KINDS:
        t = table[(table["kind"] == kind) & np.isfinite(table[col])]
        by = t.groupby(["eta", "batch_size"])["val_accuracy"].mean()
        keep = by[by >= by.max() - margin].index
        matched = t.set_index(["eta", "batch_size"]).loc[keep].reset_index()
        rho, p_greater = rank_test(matched["eta_over_b"], matched[col], "greater")
        _, p_two = rank_test(matched["eta_over_b"], matched[col], "two-sided")
        per = {}
        for (eta, B), g in t.groupby(["eta", "batch_size"]):
            g = g.sort_values("seed")
            per[f"eta={eta:g}, B={B}"] = stats.paired_difference(g[f"random_{eps:g}"], g[col], level=0.98,
                                                                 unit="trained models (paired by seed)")
        key = min(per, key=lambda k: per[k].low)
        out[kind] = {"matched": matched, "configs": int(len(keep)), "models": int(len(matched)),
                     "rho": rho, "p_greater": p_greater, "p_two_sided": p_two,
                     "headroom": stats.mean_interval(matched[col], unit="trained models"),
                     "pooled_sanity": stats.paired_difference(matched[f"random_{eps:g}"], matched[col], level=0.98,
                                                              unit="trained models"),
                     "sanity": (per[key], key, per),
                     "best_accuracy": float(t.groupby(["eta", "batch_size"])["test_accuracy"].mean().max())}
    soft = out["softmax"]
    out["softmax_null"] = bool(soft["p_two_sided"] > 0.1 or abs(soft["rho"].point) < abs(mlp_rho) / 2)
    ms, mk = out["softmax"]["matched"], out["kernel"]["matched"]
    out["difference"] = stats.spearman_difference(mk["eta_over_b"], mk[col], ms["eta_over_b"], ms[col],
                                                  level=0.90, unit="trained models (resampled within each kind)",
                                                  rng=rng, resamples=resamples)
    return out
