"""Toy tasks, the base MLP, batched LoRA and merged-LoRA forwards, merging rules, the peft bridge.

Every batched tensor carries leading axes ``(...)`` of independent problems (targets, seeds,
learning rates); a forward broadcasts the base weights against them, so a whole grid of
trainings is one tensor program and AdamW (elementwise) trains each slice as if alone.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import sympy
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MODULES", "ACTIVATIONS", "BaseMLP", "base_weights", "mlp_forward", "orthonormal_basis",
           "unit", "sample_task", "lora_delta", "merge_components", "activate", "merged_delta",
           "ties_merge", "average_merge", "random_like_lora", "lora_cosine", "lora_cosines", "dense_cosine",
           "trace_identity_gap", "ties_hand_example", "peft_pool", "pool_tensors", "load_pool_tensors",
           "peft_forward", "peft_merge_delta", "accuracy_and_loss", "ParameterBank", "init_lora",
           "lorahub_search"]

MODULES = ("fc1", "fc2", "head")
ACTIVATIONS = ("leaky_relu", "linear", "softmax", "squared")
LEAKY_SLOPE = 0.01


# ------------------------------------------------------------------------------ base model and toy
class BaseMLP(nn.Module):
    """``head(gelu(fc2(gelu(fc1(x)))))``: one logit; the three ``nn.Linear`` are the LoRA targets."""

    def __init__(self, input_dim: int = 32, hidden_dim: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.head = nn.Linear(hidden_dim, 1)

    def trunk(self, x):
        return F.gelu(self.fc2(F.gelu(self.fc1(x))))

    def forward(self, x):                                            # (..., d) -> (...)
        return self.head(self.trunk(x)).squeeze(-1)


def base_weights(model: BaseMLP) -> dict:
    """``{module: (W (out, in), b (out,))}``, detached."""
    return {m: (getattr(model, m).weight.detach(), getattr(model, m).bias.detach()) for m in MODULES}


def mlp_forward(weights: dict, x: torch.Tensor, deltas: dict | None = None, factors: dict | None = None) -> torch.Tensor:
    """The base MLP with ``W_m + ΔW_m`` in every module: ``x (..., n, d)`` -> logits ``(..., n)``.

    ``deltas[m]`` has shape ``(..., out, in)`` and broadcasts against ``x``'s leading axes
    (``x (P, 1, n, d)`` with ``ΔW (P, L, out, in)`` gives ``(P, L, n)``). ``factors[m] = (A, B, s)``
    gives ``ΔW = s B A`` in low-rank form (``A (..., r, in)``, ``B (..., out, r)``, ``s (...)``),
    computed as ``s (x A^T) B^T`` without the dense product.
    """
    h = x
    for k, name in enumerate(MODULES):
        W, b = weights[name]
        out = h @ W.T + b
        if deltas is not None and name in deltas:
            out = out + h @ deltas[name].transpose(-1, -2)          # (..., n, in) @ (..., in, out)
        if factors is not None and name in factors:
            A, B, s = factors[name]
            out = out + s[..., None, None] * ((h @ A.transpose(-1, -2)) @ B.transpose(-1, -2))
        h = F.gelu(out) if k < len(MODULES) - 1 else out
    return h.squeeze(-1)


def orthonormal_basis(dim: int, span: int, rng: np.random.Generator) -> np.ndarray:
    """``span`` orthonormal directions in R^dim, rows ``(span, dim)`` (QR of a Gaussian matrix)."""
    if not 1 <= span <= dim:
        raise ValueError(f"span must lie in [1, {dim}], got {span}")
    q, _ = np.linalg.qr(rng.normal(size=(dim, span)))
    return q.T


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def sample_task(teachers: np.ndarray, n: int, rng: np.random.Generator, noise=0.0):
    """Inputs ``x ~ N(0, I)`` and labels ``y = 1[u^T x > 0]`` (flipped w.p. ``noise``) per teacher.

    ``teachers (T, d)`` -> ``x (T, n, d)``, ``y (T, n)`` float32 tensors.
    """
    teachers = np.atleast_2d(teachers)
    x = rng.normal(size=(len(teachers), n, teachers.shape[1]))
    y = np.einsum("tnd,td->tn", x, teachers) > 0
    noise = np.broadcast_to(np.asarray(noise, float), (len(teachers),))
    y ^= rng.random(y.shape) < noise[:, None]
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)


def accuracy_and_loss(logits: torch.Tensor, y: torch.Tensor):
    """Mean accuracy and mean logistic loss over the last axis."""
    acc = ((logits > 0).float() == y).float().mean(-1)
    loss = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits), reduction="none").mean(-1)
    return acc, loss


# ------------------------------------------------------------------------------ LoRA and merging
def lora_delta(A: torch.Tensor, B: torch.Tensor, scale) -> torch.Tensor:
    """``ΔW = s B A``: ``A (..., r, in)``, ``B (..., out, r)``, ``s`` scalar or ``(...)``."""
    scale = torch.as_tensor(scale, dtype=A.dtype)
    return scale[..., None, None] * (B @ A)


def merge_components(A, B, scale, granularity: str = "module") -> torch.Tensor:
    """The directions a merge combines, ``(..., N, out, in)`` per LoRA (``module``) or
    ``(..., N * r, out, in)`` per rank-one piece ``s_i B_i[:, k] A_i[k, :]`` (``rank``)."""
    scale = torch.as_tensor(scale, dtype=A.dtype)
    if granularity == "module":
        return lora_delta(A, B, scale)
    if granularity == "rank":
        pieces = scale[..., None, None, None] * B.transpose(-1, -2)[..., :, :, None] * A[..., :, None, :]
        return pieces.flatten(-4, -3)                                # (..., N, r, out, in) -> (..., N r, out, in)
    raise ValueError(f"granularity must be 'module' or 'rank', got {granularity!r}")


def activate(c: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(c)`` of the merging coefficients (softmax over the last axis, the LoRAs)."""
    if activation == "leaky_relu":
        return F.leaky_relu(c, LEAKY_SLOPE)
    if activation == "linear":
        return c
    if activation == "softmax":
        return torch.softmax(c, -1)
    if activation == "squared":
        return c * c
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def merged_delta(c: torch.Tensor, components: torch.Tensor, activation: str) -> torch.Tensor:
    """``ΔW = Σ_i act(c_i) D_i``: ``c (..., L, N)``, ``D (..., N, out, in)`` -> ``(..., L, out, in)``."""
    return torch.einsum("...ln,...noi->...loi", activate(c, activation), components)


def ties_merge(deltas: torch.Tensor, density: float, weights=None) -> torch.Tensor:
    """TIES on task tensors ``(N, ...)``: keep each tensor's top ``int(density * numel)`` entries by
    magnitude, elect each entry's sign by the summed mass, average the entries that agree with it."""
    if not 0 < density <= 1:
        raise ValueError(f"density must lie in (0, 1], got {density}")
    flat = deltas.reshape(len(deltas), -1)
    k = int(density * flat.shape[1])
    keep = torch.zeros_like(flat)
    keep.scatter_(1, flat.abs().topk(k, dim=1).indices, 1.0)
    pruned = flat * keep
    sign = torch.where(pruned.sum(0) >= 0, 1.0, -1.0)
    agree = pruned.sign() == sign
    w = torch.ones(len(flat), dtype=flat.dtype) if weights is None else torch.as_tensor(weights, dtype=flat.dtype)
    merged = (pruned * w[:, None] * agree).sum(0) / agree.sum(0).clamp(min=1)
    return merged.reshape(deltas.shape[1:])


def average_merge(deltas: torch.Tensor) -> torch.Tensor:
    """Task-arithmetic mean of ``(N, ...)`` task tensors."""
    return deltas.mean(0)


def random_like_lora(A: torch.Tensor, B: torch.Tensor, ranks, generator: torch.Generator):
    """Std-matched random LoRAs: ``A' ~ N(0, std(A))``, ``B' ~ N(0, std(B))``, each std taken over
    that LoRA's real (unpadded) entries: the first ``rank`` rows of ``A (..., r_max, in)`` and
    columns of ``B (..., out, r_max)``; padding stays zero."""
    ranks = torch.as_tensor(ranks)
    r_max = A.shape[-2]
    live = (torch.arange(r_max) < ranks[..., None]).to(A.dtype)              # (..., r_max)
    mask_a, mask_b = live[..., :, None].expand_as(A), live[..., None, :].expand_as(B)

    def masked_std(t, mask):
        n = mask.sum((-1, -2))
        mean = (t * mask).sum((-1, -2)) / n
        return torch.sqrt((((t - mean[..., None, None]) * mask) ** 2).sum((-1, -2)) / (n - 1))

    sa, sb = masked_std(A, mask_a), masked_std(B, mask_b)
    A2 = torch.randn(A.shape, generator=generator, dtype=A.dtype) * sa[..., None, None] * mask_a
    B2 = torch.randn(B.shape, generator=generator, dtype=B.dtype) * sb[..., None, None] * mask_b
    return A2, B2


def lora_cosine(A1, B1, A2, B2) -> float:
    r"""Cosine of ``B_1A_1`` and ``B_2A_2`` without the dense product:
    :math:`\langle B_1A_1, B_2A_2\rangle_F = \mathrm{tr}((A_1A_2^\top)(B_2^\top B_1))`."""
    def inner(a1, b1, a2, b2):
        return torch.trace((a1 @ a2.T) @ (b2.T @ b1))
    return float(inner(A1, B1, A2, B2) / torch.sqrt(inner(A1, B1, A1, B1) * inner(A2, B2, A2, B2)))


def lora_cosines(pool: dict, target: dict) -> torch.Tensor:
    r"""Cosine between every pool LoRA's and every target LoRA's whole update (all modules
    concatenated), by the trace identity: no dense :math:`\Delta W` is formed.

    ``pool[m] = (A (N, r, in), B (N, out, r), s (N,))`` and ``target[m] = (A (P, q, in),
    B (P, out, q), s (P,))`` (zero-padded ranks are harmless) -> ``(P, N)``. The inner product of two
    updates is :math:`\sum_m s_c s_t\,\mathrm{tr}((A_cA_t^\top)(B_t^\top B_c))`; a LoRA's own
    scaling cancels in its cosine, so only the directions count (the released code's "cosine" closeness).
    """
    def inner(A1, B1, s1, A2, B2, s2, pairwise: bool):
        if pairwise:                                                 # (N, ...) x (P, ...) -> (P, N)
            ga = torch.einsum("nri,psi->pnrs", A1, A2)
            gb = torch.einsum("nor,pos->pnrs", B1, B2)
            return s2[:, None] * s1[None, :] * (ga * gb).sum((-1, -2))
        ga = A1 @ A1.transpose(-1, -2)                               # self inner products (M,)
        gb = B1.transpose(-1, -2) @ B1
        return s1 * s1 * (ga * gb.transpose(-1, -2)).sum((-1, -2))
    cross = sum(inner(*pool[m], *target[m], True) for m in pool)
    own_pool = sum(inner(*pool[m], None, None, None, False) for m in pool)
    own_target = sum(inner(*target[m], None, None, None, False) for m in pool)
    return cross / torch.sqrt(own_target[:, None] * own_pool[None, :])


def dense_cosine(W1, W2) -> float:
    return float((W1 * W2).sum() / (W1.norm() * W2.norm()))


def trace_identity_gap(out_dim: int = 3, in_dim: int = 2, rank_1: int = 2, rank_2: int = 1):
    """sympy: ``<B_1A_1, B_2A_2>_F - tr((A_1A_2^T)(B_2^T B_1))`` for symbolic matrices (expands to 0)."""
    A1 = sympy.Matrix(rank_1, in_dim, lambda i, j: sympy.Symbol(f"a{i}{j}"))
    B1 = sympy.Matrix(out_dim, rank_1, lambda i, j: sympy.Symbol(f"b{i}{j}"))
    A2 = sympy.Matrix(rank_2, in_dim, lambda i, j: sympy.Symbol(f"c{i}{j}"))
    B2 = sympy.Matrix(out_dim, rank_2, lambda i, j: sympy.Symbol(f"d{i}{j}"))
    W1, W2 = B1 * A1, B2 * A2
    frobenius = sum(W1[i, j] * W2[i, j] for i in range(out_dim) for j in range(in_dim))
    return sympy.expand(frobenius - ((A1 * A2.T) * (B2.T * B1)).trace())


def ties_hand_example():
    """Three 3x3 task tensors, TIES at density 0.4 (3 of 9 entries kept each), and the answer
    worked by hand: kept entries, elected signs (+, +, -, -, +), means of the agreeing entries."""
    T = torch.tensor([[[3.0, -1.0, 0.5], [2.0, 0.1, -4.0], [0.2, 0.3, 1.0]],
                      [[-1.0, 2.0, 0.1], [5.0, -0.2, 3.0], [0.4, -6.0, 0.3]],
                      [[2.0, 0.5, -0.3], [-1.0, 0.2, -2.0], [4.0, 0.1, -0.6]]], dtype=torch.float64)
    expected = torch.tensor([[2.5, 0.0, 0.0], [3.5, 0.0, -3.0], [4.0, -6.0, 0.0]], dtype=torch.float64)
    return T, expected


class ParameterBank(nn.Module):
    """A container of batched trainable tensors (one per learning rate) for ``compendium.training.fit``."""

    def __init__(self, tensors):
        super().__init__()
        self.items = nn.ParameterList([nn.Parameter(t) for t in tensors])


# ------------------------------------------------------------------------------ the peft bridge
def peft_pool(base: BaseMLP, ranks, alphas, names):
    """A peft ``PeftModel`` over a copy of ``base`` with one LoRA adapter per name (its own rank
    and ``lora_alpha``) on ``fc1``, ``fc2`` and ``head``; adapters start at peft's initialisation
    (A Kaiming-uniform, B zero), drawn from torch's global generator (wrap in ``seeded_init``)."""
    from peft import LoraConfig, get_peft_model

    def config(r, a):
        return LoraConfig(r=int(r), lora_alpha=float(a), target_modules=list(MODULES), lora_dropout=0.0)

    model = get_peft_model(copy.deepcopy(base), config(ranks[0], alphas[0]), adapter_name=names[0])
    for name, r, a in zip(names[1:], ranks[1:], alphas[1:]):
        model.add_adapter(name, config(r, a))
    return model.eval()


def _layer(model, module: str):
    return getattr(model.base_model.model, module)


def pool_tensors(model, names, r_max: int) -> tuple[dict, dict, np.ndarray]:
    """Adapters' ``A (N, r_max, in)``, ``B (N, out, r_max)`` per module (zero padded) and scalings."""
    A, B = {}, {}
    for m in MODULES:
        layer = _layer(model, m)
        a = torch.zeros(len(names), r_max, layer.in_features)
        b = torch.zeros(len(names), layer.out_features, r_max)
        for i, n in enumerate(names):
            wa, wb = layer.lora_A[n].weight.detach(), layer.lora_B[n].weight.detach()
            a[i, : wa.shape[0]], b[i, :, : wb.shape[1]] = wa, wb
        A[m], B[m] = a, b
    scales = np.array([_layer(model, MODULES[0]).scaling[n] for n in names])
    return A, B, scales


def load_pool_tensors(model, names, A: dict, B: dict) -> None:
    """Write padded ``A``, ``B`` stacks into the peft adapters (each keeps its own rank)."""
    with torch.no_grad():
        for m in MODULES:
            layer = _layer(model, m)
            for i, n in enumerate(names):
                r = layer.lora_A[n].weight.shape[0]
                layer.lora_A[n].weight.copy_(A[m][i, :r])
                layer.lora_B[n].weight.copy_(B[m][i, :, :r])


def peft_forward(model, name: str, x: torch.Tensor) -> torch.Tensor:
    """The peft model's logits with adapter ``name`` active (eval mode, no grad)."""
    model.set_adapter(name)
    model.eval()
    with torch.no_grad():
        return model(x)


def peft_merge_delta(model, names, weights, combination_type: str, density: float | None = None,
                     keep: str | None = None) -> dict:
    """``ΔW`` per module of peft's ``add_weighted_adapter`` merge (``cat`` is exact; ``ties_svd`` with a
    full-rank, reduced SVD is TIES on the dense ``ΔW``). The merged adapter is deleted afterwards
    unless ``keep`` names it (then the caller can run it and delete it)."""
    tmp = keep or "_merged"
    full = max(max(_layer(model, m).in_features, _layer(model, m).out_features) for m in MODULES)
    model.add_weighted_adapter(list(names), [float(w) for w in weights], tmp, combination_type=combination_type,
                               density=density, svd_rank=full, svd_full_matrices=False)
    out = {m: _layer(model, m).get_delta_weight(tmp).detach().clone() for m in MODULES}
    if keep is None:
        model.delete_adapter(tmp)
    return out


def init_lora(shape_a, shape_b, generator: torch.Generator):
    """peft's default LoRA start: ``A ~ U(-1/sqrt(in), 1/sqrt(in))`` (Kaiming-uniform, a = sqrt 5), ``B = 0``."""
    bound = 1.0 / math.sqrt(shape_a[-1])
    A = (torch.rand(shape_a, generator=generator) * 2 - 1) * bound
    return A, torch.zeros(shape_b)


# ------------------------------------------------------------------------------ LoraHub's search
def lorahub_search(objective, num_problems: int, dims: int, budget: int, *, l1: float = 0.05,
                   bounds: tuple = (-1.5, 1.5), sigma0: float = 0.5, popsize: int | None = None, seed: int = 0):
    """LoraHub's gradient-free search of merging coefficients: one CMA-ES (the ``cma`` package) per
    problem, all run in lockstep so that each generation's candidates of every problem are scored
    in one batched ``objective`` call.

    ``objective(c)`` takes ``c (P, n, dims)`` (float64 numpy) and returns the losses ``(P, n)``; the
    search minimises ``loss + l1 * mean|c|`` (LoraHub's L1 penalty) inside ``bounds``. Every
    search starts at ``c = 0`` (the base model), which is scored first and counts towards
    ``budget`` (objective evaluations per problem, start included); the best point seen is
    returned, as LoraHub returns its optimiser's recommendation. Each problem draws its
    samples from its own generator, so a problem's search does not depend on the others.

    Returns ``(best_c (P, dims), best_value (P,), start_value (P,), evaluations)``.
    """
    import cma

    if budget < 2:
        raise ValueError(f"budget must be at least 2 evaluations (the start and one candidate), got {budget}")
    lam = int(popsize or 4 + int(3 * np.log(dims)))
    generations = (budget - 1) // lam
    if generations < 1:
        raise ValueError(f"budget {budget} leaves no full generation of {lam} candidates after the start")
    start = np.zeros((num_problems, 1, dims))
    start_value = np.asarray(objective(start), float)[:, 0]               # |c| = 0: no penalty
    best_c, best_value = start[:, 0].copy(), start_value.copy()
    searches = []
    for p in range(num_problems):
        rng = np.random.default_rng([seed, p])
        opts = {"bounds": [bounds[0], bounds[1]], "popsize": lam, "verbose": -9, "seed": float("nan"),
                "randn": lambda *shape, rng=rng: rng.standard_normal(shape)}
        searches.append(cma.CMAEvolutionStrategy(np.zeros(dims), sigma0, opts))
    for _ in range(generations):
        asked = [np.asarray(es.ask(), float) for es in searches]       # P x (lam, dims)
        c = np.stack(asked)
        values = np.asarray(objective(c), float) + l1 * np.abs(c).mean(-1)
        for p, es in enumerate(searches):
            es.tell(list(asked[p]), values[p].tolist())
        k = values.argmin(1)
        better = values[np.arange(num_problems), k] < best_value
        best_value[better] = values[better, k[better]]
        best_c[better] = c[better, k[better]]
    return best_c, best_value, start_value, 1 + generations * lam
