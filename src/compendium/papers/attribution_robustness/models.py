"""Many small MLPs trained at once with plain SGD (batched weights), their data, and the asset.

A *stack* of ``M`` MLPs with identical shapes is a list of tensors ``W_l (M, d_in, d_out)``,
``b_l (M, 1, d_out)``; :func:`stack_forward` maps inputs ``(M, N, d)`` to logits ``(M, N, C)``
with one ``bmm`` per layer. Because the models share no weights, the gradient of the *sum* of
their losses with respect to a stacked tensor is each model's own gradient, so one backward pass
trains all of them, each with its own learning rate, batch order and initialisation.
:func:`train_stack` writes that backward pass out by hand and applies each update as one in-place
batched product ``W -= lr * A^T D`` (no autograd graph, no stored gradient);
:func:`train_stack_reference` is the autograd version, kept as the tests' reference.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from compendium.training import torch_threads

from .cnn import cnn_forward, train_cnn_stack

__all__ = ["ASSET_NAME", "AssetSettings", "settings_for", "digits_split", "gaussian_task", "init_stack",
           "stack_forward", "stack_accuracy", "train_stack", "train_stack_reference", "build_asset", "load_asset", "select"]

ASSET_NAME = "attribution_robustness_mlps"
TRAIN_THREADS = 1


@dataclass(frozen=True)
class AssetSettings:
    learning_rates: tuple = (0.01, 0.05, 0.1, 0.2)
    batch_sizes: tuple = (8, 32, 128)
    num_seeds: int = 5
    epochs: int = 60
    hidden: int = 128
    gaussian_dim: int = 256
    gaussian_classes: int = 10
    gaussian_train: int = 1200
    gaussian_separation: float = 0.2
    penalty_strengths: tuple = (0.01, 0.1, 1.0)   # input-gradient penalty references (and power control)
    sam_rho: float = 0.05
    reference_learning_rate: float = 0.05          # the (eta, B) of the explicit references
    reference_batch_size: int = 32
    cnn: bool = True                               # the tiny CNN grid on digits (full scale only)


SMOKE_EPOCHS = 20    # smoke only: the 45 s CPU budget of a smoke asset (the full grid's 60 epochs cost 95 s)


def settings_for(scale: str) -> AssetSettings:
    """Full scale trains the issue's design: 12 configs x 5 seeds, 60 epochs (95 s of CPU).
    Smoke keeps the 12 configs, the 5 seeds (the paired tests' unit) and the references but trains
    20 epochs (a third of the steps), to fit the 45 s CPU budget of a smoke asset. The tiny CNN grid
    on digits (same configs and seeds, 60 epochs, about 150 s of CPU) is trained at full scale only."""
    if scale not in ("smoke", "full"):
        raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")
    if scale == "smoke":
        return AssetSettings(epochs=SMOKE_EPOCHS, cnn=False)
    return AssetSettings()


# ------------------------------------------------------------------------------------------- data
def digits_split(seed: int = 0) -> dict[str, np.ndarray]:
    """sklearn digits (through ``compendium.data``) scaled to [0, 1], split 60 / 10 / 30 % into
    train / validation / test by a generator seeded with ``seed``."""
    from compendium.data import load

    ds = load("digits")
    x = (np.asarray(ds.data, dtype=np.float32) / 16.0)
    y = np.asarray(ds.target, dtype=np.int64)
    order = np.random.default_rng([seed, 11]).permutation(len(y))
    n_tr, n_va = int(0.6 * len(y)), int(0.1 * len(y))
    parts = {"train": order[:n_tr], "val": order[n_tr:n_tr + n_va], "test": order[n_tr + n_va:]}
    out = {}
    for k, idx in parts.items():
        out[f"x_{k}"], out[f"y_{k}"] = x[idx], y[idx]
    return out


def gaussian_task(num_train: int, dim: int, classes: int, separation: float, seed: int = 0,
                  num_val: int = 300, num_test: int = 600) -> dict[str, np.ndarray]:
    """A Gaussian mixture in ``dim`` dimensions: class means ``separation * N(0, I)``, unit noise.

    The pairwise mean distance is about ``separation * sqrt(2 dim)`` (4.5 standard deviations at
    the defaults), so a linear rule is good but not perfect and a 2x128 MLP has headroom.
    """
    if dim < 2 or classes < 2:
        raise ValueError(f"need dim >= 2 and classes >= 2, got {dim}, {classes}")
    rng = np.random.default_rng([seed, 13])
    means = separation * rng.standard_normal((classes, dim))
    out = {}
    for k, n in (("train", num_train), ("val", num_val), ("test", num_test)):
        y = rng.integers(0, classes, n)
        out[f"x_{k}"] = (means[y] + rng.standard_normal((n, dim))).astype(np.float32)
        out[f"y_{k}"] = y.astype(np.int64)
    return out


# ------------------------------------------------------------------------------------------ stacks
def init_stack(seeds, sizes, dtype=torch.float32) -> list[torch.Tensor]:
    """PyTorch ``nn.Linear``'s default init, one independent model per entry of ``seeds``:
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases. Model ``m`` depends only on
    ``seeds[m]``, so models with one seed start equal whatever their learning rate or batch size."""
    params: list[list[torch.Tensor]] = [[] for _ in range(2 * (len(sizes) - 1))]
    for s in seeds:
        g = torch.Generator().manual_seed(int(s))
        for layer, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            bound = 1.0 / np.sqrt(d_in)
            params[2 * layer].append((torch.rand(d_in, d_out, generator=g, dtype=dtype) * 2 - 1) * bound)
            params[2 * layer + 1].append((torch.rand(1, d_out, generator=g, dtype=dtype) * 2 - 1) * bound)
    return [torch.stack(p) for p in params]


def stack_forward(params, x: torch.Tensor) -> torch.Tensor:
    """Logits ``(M, N, C)`` of a stack on inputs ``(M, N, d)`` (GELU between layers); a CNN stack
    (first weight 5-dimensional, ``cnn.py``) goes to ``cnn.cnn_forward``."""
    if params[0].dim() == 5:
        return cnn_forward(params, x)
    h = x
    last = len(params) // 2 - 1
    for layer in range(last + 1):
        h = torch.baddbmm(params[2 * layer + 1], h, params[2 * layer])
        if layer < last:
            h = F.gelu(h)
    return h


def stack_cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-model mean cross-entropy ``(M,)`` for logits ``(M, N, C)`` and labels ``(M, N)``."""
    M, N, C = logits.shape
    return F.cross_entropy(logits.reshape(M * N, C), y.reshape(M * N), reduction="none").view(M, N).mean(1)


@torch.no_grad()
def stack_accuracy(params, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Accuracy of every model of the stack on one data set: ``(M,)``."""
    M = params[0].shape[0]
    X = torch.from_numpy(x).expand(M, *x.shape)
    pred = stack_forward(params, X).argmax(-1)
    return (pred == torch.from_numpy(y)).float().mean(1).numpy()


def _check_inputs(x, y, learning_rates, seeds, batch_size):
    lr = torch.as_tensor(np.asarray(learning_rates, dtype=np.float32))
    seeds = [int(s) for s in seeds]
    M, n = len(seeds), len(y)
    if lr.shape != (M,):
        raise ValueError(f"need one learning rate per model, got {tuple(lr.shape)} for {M} models")
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must lie in [1, {n}], got {batch_size}")
    return lr, seeds, M, n


_INV_SQRT_2PI = 0.3989422804014327


def _factors(params, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | None = None):
    """Hand-written backward pass of the stacked GELU MLP (no autograd graph).

    Returns the per-model loss ``(M,)`` (mean cross-entropy over the batch, plus
    ``lam * mean_i ||grad_x l_i||^2`` when ``lam`` is given) and, per layer ``l``, a list of factor
    pairs ``(A, D)`` with ``grad W_l = sum A^T D`` (batched over models) and the bias gradient
    ``grad b_l = sum over rows of D`` of the first pair. Plain SGD has one pair per layer
    ``(a_{l-1}, d_l)``. The penalty adds the second-order terms of double backprop, derived by hand:
    with ``e = p - onehot``, ``u_{l-1} = delta_l W_l^T``, ``delta_{l-1} = u_{l-1} * s'(h_{l-1})``
    and ``g = delta_1 W_1^T`` (the per-sample input gradient), the adjoint ``gbar = 2 lam g / B``
    is carried back through that chain (``s''(h) = phi(h) (2 - h^2)`` for the exact GELU), and
    its softmax and curvature terms enter the ordinary backward pass. Checked against autograd
    (``train_stack_reference``) in the tests.
    """
    Ws, bs = params[0::2], params[1::2]
    L = len(Ws)
    hs, acts = [], [x]
    for layer in range(L - 1):
        h = torch.baddbmm(bs[layer], acts[-1], Ws[layer])
        hs.append(h)
        acts.append(F.gelu(h))
    z = torch.baddbmm(bs[-1], acts[-1], Ws[-1])
    M, B, _ = z.shape
    logp = F.log_softmax(z, -1)
    loss = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).mean(1)
    p = logp.exp()
    e = p.scatter_add(-1, y.unsqueeze(-1), torch.full((M, B, 1), -1.0, dtype=z.dtype))   # p - onehot
    slopes = [torch.ops.aten.gelu_backward(torch.ones_like(h), h) for h in hs] if lam is not None else None
    pairs = [[] for _ in range(L)]
    extra = [None] * (L - 1)                       # second-order injections into dL/dh_l
    top = e / B
    if lam is not None:
        deltas = [None] * L                        # delta_l (per-sample backward of the loss), l = 0..L-1
        us = [None] * (L - 1)
        deltas[L - 1] = e
        for layer in range(L - 1, 0, -1):
            us[layer - 1] = torch.bmm(deltas[layer], Ws[layer].transpose(1, 2))
            deltas[layer - 1] = us[layer - 1] * slopes[layer - 1]
        g = torch.bmm(deltas[0], Ws[0].transpose(1, 2))                                  # (M, B, d)
        loss = loss + lam * g.pow(2).sum(-1).mean(1)
        gbar = (2.0 / B) * lam.view(M, 1, 1) * g
        dbar = torch.bmm(gbar, Ws[0])                                                    # adjoint of delta_0
        second = [(gbar, deltas[0])]
        for layer in range(L - 1):
            h = hs[layer]
            pdf = torch.exp(-0.5 * h * h) * _INV_SQRT_2PI
            extra[layer] = dbar * us[layer] * pdf * (2.0 - h * h)
            ubar = dbar * slopes[layer]
            second.append((ubar, deltas[layer + 1]))
            dbar = torch.bmm(ubar, Ws[layer + 1])                                        # adjoint of delta_{l+1}
        top = top + p * (dbar - (dbar * p).sum(-1, keepdim=True))                       # softmax Jacobian
    d = top
    for layer in range(L - 1, -1, -1):
        pairs[layer].append((acts[layer], d))
        if layer > 0:
            d = torch.ops.aten.gelu_backward(torch.bmm(d, Ws[layer].transpose(1, 2)), hs[layer - 1])
            if extra[layer - 1] is not None:
                d = d + extra[layer - 1]
    if lam is not None:
        for layer, pair in enumerate(second):
            pairs[layer].append(pair)
    return loss, pairs


def _apply(targets, pairs, scale: torch.Tensor) -> None:
    """In place ``W_l -= scale * sum A^T D`` and ``b_l -= scale * sum_rows D`` (``scale`` per model)."""
    for layer, layer_pairs in enumerate(pairs):
        W, b = targets[2 * layer], targets[2 * layer + 1]
        for i, (A, D) in enumerate(layer_pairs):
            Ds = D * scale
            W.baddbmm_(A.transpose(1, 2), Ds, alpha=-1.0)
            if i == 0:
                b.sub_(Ds.sum(1, keepdim=True))


def _gradients(params, pairs) -> list[torch.Tensor]:
    out = []
    for layer_pairs in pairs:
        gW = sum(torch.bmm(A.transpose(1, 2), D) for A, D in layer_pairs)
        out += [gW, layer_pairs[0][1].sum(1, keepdim=True)]
    return out


@torch.no_grad()
def train_stack(x: np.ndarray, y: np.ndarray, learning_rates, seeds, batch_size: int, epochs: int, hidden: int,
                *, penalty=None, sam_rho: float = 0.0, order_seed: int = 0) -> tuple[list[torch.Tensor], np.ndarray]:
    """Plain SGD (no momentum, no weight decay) for ``M = len(seeds)`` MLPs ``d -> hidden -> hidden -> C``.

    The same models as :func:`train_stack_reference` (same initialisation, batch orders and
    updates; equal up to float rounding, tested), about twice as fast: the backward pass is
    written out by hand (:func:`_factors`) and each weight update is one in-place batched
    matrix product ``W -= lr * A^T D``, so no gradient tensor of the stack's size is stored
    and no autograd graph is built.

    Parameters
    ----------
    x, y : training inputs ``(n, d)`` and labels ``(n,)``.
    learning_rates : ``(M,)`` step sizes, one per model.
    seeds : ``(M,)`` training seeds: the initialisation and the per-epoch batch order (reshuffled
        each epoch, last incomplete batch dropped) of model ``m`` depend only on ``seeds[m]``.
    batch_size, epochs, hidden : int
    penalty : ``(M,)`` strengths ``lambda`` of the explicit input-gradient penalty
        ``lambda * mean_i ||grad_x l_i||^2`` (double backprop, by hand), or None.
    sam_rho : float
        If positive, SAM: the gradient is taken at ``theta + rho g / ||g||`` (per model).

    Returns
    -------
    params : the trained stack; losses : ``(epochs, M)`` mean training loss per epoch.
    """
    lr, seeds, M, n = _check_inputs(x, y, learning_rates, seeds, batch_size)
    sizes = (x.shape[1], hidden, hidden, int(y.max()) + 1)
    params = init_stack(seeds, sizes)
    lam = None if penalty is None else torch.as_tensor(np.asarray(penalty, dtype=np.float32))
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    gens = [np.random.default_rng([s, order_seed, 5]) for s in seeds]
    steps = n // batch_size
    losses = np.zeros((epochs, M))
    scale = lr.view(M, 1, 1)
    shape = lambda t: (M,) + (1,) * (t.dim() - 1)  # noqa: E731 - per-model broadcast of a (M,) vector
    for epoch in range(epochs):
        orders = torch.from_numpy(np.stack([g.permutation(n) for g in gens])[:, :steps * batch_size])
        xs = X.index_select(0, orders.flatten()).view(M, steps, batch_size, -1)
        ys = Y.index_select(0, orders.flatten()).view(M, steps, batch_size)
        total = torch.zeros(M, dtype=torch.float64)
        for step in range(steps):
            xb, yb = xs[:, step], ys[:, step]
            loss, pairs = _factors(params, xb, yb, lam)
            if sam_rho > 0:
                grads = _gradients(params, pairs)
                norm = torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads)) + 1e-12
                shifted = [p + sam_rho * g / norm.view(shape(g)) for p, g in zip(params, grads)]
                _, pairs = _factors(shifted, xb, yb, lam)
            _apply(params, pairs, scale)
            total += loss.double()
        losses[epoch] = total.numpy() / steps
    return params, losses


def train_stack_reference(x: np.ndarray, y: np.ndarray, learning_rates, seeds, batch_size: int, epochs: int, hidden: int,
                *, penalty=None, sam_rho: float = 0.0, order_seed: int = 0) -> tuple[list[torch.Tensor], np.ndarray]:
    """The autograd reference of :func:`train_stack` (the asset's first trainer, kept for the tests):
    plain SGD (no momentum, no weight decay) for ``M = len(seeds)`` MLPs ``d -> hidden -> hidden -> C``.

    Parameters
    ----------
    x, y : training inputs ``(n, d)`` and labels ``(n,)``.
    learning_rates : ``(M,)`` step sizes, one per model.
    seeds : ``(M,)`` training seeds: the initialisation and the per-epoch batch order (reshuffled
        each epoch, last incomplete batch dropped) of model ``m`` depend only on ``seeds[m]``.
    batch_size, epochs, hidden : int
    penalty : ``(M,)`` strengths ``lambda`` of the explicit input-gradient penalty
        ``lambda * mean_i ||grad_x l_i||^2`` (double backprop), or None.
    sam_rho : float
        If positive, SAM: the gradient is taken at ``theta + rho g / ||g||`` (per model).

    Returns
    -------
    params : the trained stack; losses : ``(epochs, M)`` mean training loss per epoch.
    """
    lr = torch.as_tensor(np.asarray(learning_rates, dtype=np.float32))
    seeds = [int(s) for s in seeds]
    M, n = len(seeds), len(y)
    if lr.shape != (M,):
        raise ValueError(f"need one learning rate per model, got {tuple(lr.shape)} for {M} models")
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must lie in [1, {n}], got {batch_size}")
    sizes = (x.shape[1], hidden, hidden, int(y.max()) + 1)
    params = [p.requires_grad_() for p in init_stack(seeds, sizes)]
    lam = None if penalty is None else torch.as_tensor(np.asarray(penalty, dtype=np.float32))
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    gens = [np.random.default_rng([s, order_seed, 5]) for s in seeds]
    steps = n // batch_size
    losses = np.zeros((epochs, M))
    shape = lambda t: (M,) + (1,) * (t.dim() - 1)  # noqa: E731 - per-model broadcast of a (M,) vector

    def loss_of(ps, xb, yb):
        if lam is None:
            return stack_cross_entropy(stack_forward(ps, xb), yb)
        xb = xb.clone().requires_grad_()
        ce = stack_cross_entropy(stack_forward(ps, xb), yb)
        (gx,) = torch.autograd.grad(ce.sum(), xb, create_graph=True)      # (M, B, d); = grad l_i / B
        return ce + lam * (gx * batch_size).pow(2).sum(-1).mean(1)

    for epoch in range(epochs):
        orders = np.stack([g.permutation(n) for g in gens])                # (M, n)
        for step in range(steps):
            idx = torch.from_numpy(orders[:, step * batch_size:(step + 1) * batch_size])
            xb, yb = X[idx], Y[idx]                                         # (M, B, d), (M, B)
            loss = loss_of(params, xb, yb)
            grads = torch.autograd.grad(loss.sum(), params)
            if sam_rho > 0:
                norm = torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads)) + 1e-12   # (M,)
                shifted = [p + sam_rho * g / norm.view(shape(g)) for p, g in zip(params, grads)]
                grads = torch.autograd.grad(loss_of(shifted, xb, yb).sum(), params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p -= lr.view(shape(p)) * g
            losses[epoch] += loss.detach().numpy() / steps
    return [p.detach() for p in params], losses


# ------------------------------------------------------------------------------------------- asset
def _grid(settings: AssetSettings):
    return [(eta, B, k) for B in settings.batch_sizes for eta in settings.learning_rates for k in range(settings.num_seeds)]


def _train_family(data, settings: AssetSettings, seed: int, family: str, arch: str = "mlp") -> tuple[dict, dict]:
    """Train one family of models on ``data``; returns tensors and per-model metadata."""
    rows, tensors = [], []
    if arch == "cnn" and family != "sgd":
        raise ValueError("the CNN is trained as plain SGD only")
    if family == "sgd":
        for B in settings.batch_sizes:
            cfg = [(eta, k) for eta in settings.learning_rates for k in range(settings.num_seeds)]
            if arch == "cnn":
                params, losses = train_cnn_stack(data["x_train"], data["y_train"], [c[0] for c in cfg],
                                                 [seed * 100 + c[1] for c in cfg], B, settings.epochs)
            else:
                params, losses = train_stack(data["x_train"], data["y_train"], [c[0] for c in cfg],
                                             [seed * 100 + c[1] for c in cfg], B, settings.epochs, settings.hidden)
            tensors.append(params)
            rows += [{"family": "sgd", "eta": eta, "batch_size": B, "seed": k, "penalty": 0.0,
                      "final_loss": float(losses[-1, m])} for m, (eta, k) in enumerate(cfg)]
    else:
        eta, B = settings.reference_learning_rate, settings.reference_batch_size
        if family == "penalty":
            cfg = [(lam, k) for lam in settings.penalty_strengths for k in range(settings.num_seeds)]
            params, losses = train_stack(data["x_train"], data["y_train"], [eta] * len(cfg),
                                         [seed * 100 + c[1] for c in cfg], B, settings.epochs, settings.hidden,
                                         penalty=[c[0] for c in cfg])
        elif family == "sam":
            cfg = [(0.0, k) for k in range(settings.num_seeds)]
            params, losses = train_stack(data["x_train"], data["y_train"], [eta] * len(cfg),
                                         [seed * 100 + c[1] for c in cfg], B, settings.epochs, settings.hidden,
                                         sam_rho=settings.sam_rho)
        else:
            raise ValueError(f"family must be 'sgd', 'penalty' or 'sam', got {family!r}")
        tensors.append(params)
        rows += [{"family": family, "eta": eta, "batch_size": B, "seed": k, "penalty": lam,
                  "final_loss": float(losses[-1, m])} for m, (lam, k) in enumerate(cfg)]
    stacked = [torch.cat([t[i] for t in tensors]) for i in range(len(tensors[0]))]
    return stacked, rows


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Train, on digits and on the 256-dim Gaussian task, the plain-SGD grid (learning rate x batch
    size x 5 seeds); on digits also the explicit references at (0.05, 32): input-gradient penalty
    (three strengths) and SAM; at full scale the same plain-SGD grid of tiny CNNs on digits
    (task ``digits_cnn``). Writes ``<task>.pt`` (stacked weights), ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_for(scale)
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(settings), "tasks": {}}
    tasks = {"digits": digits_split(seed),
             "gauss256": gaussian_task(settings.gaussian_train, settings.gaussian_dim, settings.gaussian_classes,
                                       settings.gaussian_separation, seed)}
    families = {"digits": ("sgd", "penalty", "sam"), "gauss256": ("sgd",), "digits_cnn": ("sgd",)}
    if settings.cnn:
        tasks["digits_cnn"] = tasks["digits"]
    with torch_threads(TRAIN_THREADS):
        for task, data in tasks.items():
            parts, rows = [], []
            for family in families[task]:
                params, r = _train_family(data, settings, seed, family, "cnn" if task == "digits_cnn" else "mlp")
                parts.append(params)
                rows += r
                print(f"{task}/{family}: {len(r)} models, final loss {np.mean([x['final_loss'] for x in r]):.3f}")
            params = [torch.cat([p[i] for p in parts]) for i in range(len(parts[0]))]
            torch.save({"params": params, "data": {k: torch.from_numpy(v) for k, v in data.items()}},
                       out_dir / f"{task}.pt")
            acc = stack_accuracy(params, data["x_test"], data["y_test"])
            for row, a in zip(rows, acc):
                row["test_accuracy"] = float(a)
            meta["tasks"][task] = rows
    meta["metrics"] = {t: {"models": len(r), "mean_test_accuracy": float(np.mean([x["test_accuracy"] for x in r]))}
                       for t, r in meta["tasks"].items()}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_asset(path: str | Path) -> dict:
    """``{task: {"params", "data" (numpy), "models" (metadata rows)}}`` from an asset folder."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    out = {}
    for task, rows in meta["tasks"].items():
        blob = torch.load(path / f"{task}.pt", map_location="cpu", weights_only=True)
        out[task] = {"params": blob["params"], "data": {k: v.numpy() for k, v in blob["data"].items()}, "models": rows}
    out["_meta"] = meta
    return out


def select(params, index) -> list[torch.Tensor]:
    """The sub-stack of models ``index`` (an int array or a boolean mask)."""
    index = torch.as_tensor(np.asarray(index))
    if index.dtype == torch.bool:
        index = torch.nonzero(index).flatten()
    return [p[index] for p in params]
