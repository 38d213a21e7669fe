r"""Attributions, the attribution attack, map similarity, curvature read-outs, softmax Jacobian.

Everything here acts on a *stack* of models (``models.stack_forward``) and inputs ``(M, N, d)``:
one autograd call serves every model and point at once, because no two share a weight or an input.

- ``gradient_map``: :math:`a(x) = \nabla_x f_y(x)` (optionally ``create_graph`` for the attack);
  captum's ``Saliency`` (``abs=True``) is its absolute value, ``InputXGradient`` is ``x * a``.
- ``attribution_attack``: PGD on :math:`D(x') = \sum_{i \in T} |a_i(x')| / \sum_i |a_i(x')|`
  (``T`` = clean top-k), signed steps, :math:`\|x' - x\|_\infty \le \epsilon`, box clip, and the
  label held (the kept iterate is the one with the lowest top-k intersection among those that keep
  the clean prediction).
- Curvature: Hutchinson :math:`\mathrm{tr} H \approx E[v^\top H v]`, :math:`\|H\|_F^2 = E\|Hv\|^2`
  (Rademacher ``v``), power iteration for :math:`\lambda_{\max}`.
- Softmax Jacobian :math:`J = \mathrm{diag}(a) - a a^\top`: :math:`v^\top J v = \sum_i a_i (v_i - \bar v)^2`
  with :math:`\bar v = \sum_j a_j v_j`, so :math:`J \succeq 0`; :math:`\mathrm{tr} J = 1 - \sum a_i^2`.
"""

from __future__ import annotations

import numpy as np
import sympy
import torch

from .models import stack_cross_entropy, stack_forward

__all__ = ["gradient_map", "topk_mask", "topk_intersection", "rank_correlation", "kendall_tau", "attribution_attack", "topk_pgd",
           "random_perturbation", "blended_forward", "blended_attack", "input_hvp", "hutchinson", "input_hessian_norm", "parameter_hvp",
           "parameter_curvature", "fit_temperature", "single_model", "captum_maps",
           "softmax_jacobian_symbolic", "softmax_jacobian_numeric", "integrated_gradients_ours"]


def _target_logit(params, x, y):
    logits = stack_forward(params, x)
    return logits.gather(-1, y.unsqueeze(-1)).squeeze(-1), logits


def gradient_map(params, x: torch.Tensor, y: torch.Tensor, *, create_graph: bool = False) -> torch.Tensor:
    """``grad_x f_y(x)`` for every model and point: inputs ``(M, N, d)``, labels ``(M, N)`` -> ``(M, N, d)``."""
    with torch.enable_grad():
        if not x.requires_grad:
            x = x.detach().clone().requires_grad_()
        f, _ = _target_logit(params, x, y)
        (g,) = torch.autograd.grad(f.sum(), x, create_graph=create_graph)
    return g


def topk_mask(a: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the ``k`` largest ``|a|`` along the last axis."""
    if not 1 <= k <= a.shape[-1]:
        raise ValueError(f"k must lie in [1, {a.shape[-1]}], got {k}")
    idx = a.abs().topk(k, dim=-1).indices
    return torch.zeros_like(a, dtype=torch.bool).scatter_(-1, idx, True)


def topk_intersection(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """Fraction of the top-``k`` features (by magnitude) that two maps share: ``(...,)`` in [0, 1]."""
    return (topk_mask(a, k) & topk_mask(b, k)).sum(-1).float() / k


def _ranks(a: torch.Tensor) -> torch.Tensor:
    return a.argsort(-1).argsort(-1).to(torch.float64)


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman correlation of ``|a|`` and ``|b|`` along the last axis (ties broken by order)."""
    ra, rb = _ranks(a.abs()), _ranks(b.abs())
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return (ra * rb).sum(-1) / torch.sqrt((ra ** 2).sum(-1) * (rb ** 2).sum(-1))


def kendall_tau(a: torch.Tensor, b: torch.Tensor, max_elements: int = 1 << 22) -> torch.Tensor:
    """Kendall's tau-b of ``|a|`` and ``|b|`` along the last axis, for every leading index at once
    (all pairs compared; rows taken in chunks of at most ``max_elements`` pair entries)."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    d = a.shape[-1]
    A, Bm = a.abs().reshape(-1, d).double(), b.abs().reshape(-1, d).double()
    rows = max(1, max_elements // (d * d))
    out = []
    for start in range(0, A.shape[0], rows):
        u, w = A[start:start + rows], Bm[start:start + rows]
        su = torch.sign(u[:, :, None] - u[:, None, :])
        sw = torch.sign(w[:, :, None] - w[:, None, :])
        num = (su * sw).sum((-1, -2))
        den = torch.sqrt((su != 0).sum((-1, -2)).double() * (sw != 0).sum((-1, -2)).double())
        out.append(num / den)
    return torch.cat(out).view(a.shape[:-1]) if out else torch.empty(a.shape[:-1], dtype=torch.float64)


def _clip(x0, delta, eps, box):
    delta = delta.clamp(-eps, eps)
    if box is not None:
        delta = (x0 + delta).clamp(*box) - x0
    return delta


def topk_pgd(map_fn, x: torch.Tensor, clean_map: torch.Tensor, label: torch.Tensor, *, k: int, eps: float,
             steps: int, step_size: float | None = None, box=None, mask: torch.Tensor | None = None):
    """Keep-best signed PGD that lowers the clean top-k share of a saliency map, label held.

    The one loop behind both attacks of this chapter (gradient maps, attention maps).

    Parameters
    ----------
    map_fn : ``map_fn(xa, last) -> (map, logits)``: the map ``(..., F)`` of the input ``xa``
        (``requires_grad``) as a differentiable function of it, and the logits at ``xa``; ``last``
        is True at the final scoring pass (no graph through the map is needed there).
    x : clean inputs; clean_map : their map ``(..., F)``; label : the clean predictions ``(...)``.
    k : top-k size; eps : l-infinity radius; steps : PGD steps; step_size : default ``2.5 eps / steps``.
    box : ``(low, high)`` input range kept, or None; mask : 0/1 tensor like ``x``, the coordinates
        the attack may move (None: all).

    Returns
    -------
    ``(delta, intersection)``: the kept perturbation (like ``x``), and per input the smallest top-k
    intersection with the clean map reached at an iterate that kept the label (1 where none did).
    """
    if eps <= 0 or steps < 1:
        raise ValueError(f"need eps > 0 and steps >= 1, got {eps}, {steps}")
    alpha = 2.5 * eps / steps if step_size is None else step_size
    top = topk_mask(clean_map, k)
    best = torch.ones(label.shape)
    best_delta = torch.zeros_like(x)
    delta = torch.zeros_like(x)
    widen = (1,) * (x.dim() - label.dim())
    for step in range(steps + 1):
        xa = (x + delta).requires_grad_()
        a, logits = map_fn(xa, step == steps)
        with torch.no_grad():                   # score the current iterate from the same pass
            if step > 0:
                keep = logits.argmax(-1) == label
                inter = (topk_mask(a, k) & top).sum(-1).float() / k
                better = keep & (inter < best)
                best = torch.where(better, inter, best)
                best_delta = torch.where(better.view(*better.shape, *widen), delta, best_delta)
        if step == steps:
            break
        mass = a.abs()
        objective = (mass * top).sum(-1) / (mass.sum(-1) + 1e-12)       # top-k share, to lower
        (g,) = torch.autograd.grad(objective.sum(), xa)
        with torch.no_grad():
            move = g.sign() if mask is None else g.sign() * mask
            delta = _clip(x, delta - alpha * move, eps, box)
            if mask is not None:
                delta = delta * mask
    return best_delta, best


def attribution_attack(params, x: torch.Tensor, y: torch.Tensor, *, k: int, eps: float, steps: int = 20,
                       step_size: float | None = None, box=(0.0, 1.0)) -> dict:
    """PGD attack on the gradient map, label held (Ghorbani et al.'s top-k attack, signed steps).

    Parameters
    ----------
    params : a model stack; x ``(M, N, d)``; y ``(M, N)`` the labels whose logit is attributed.
    k : top-k size; eps : l-infinity radius; steps : PGD steps; step_size : default ``2.5 eps / steps``.
    box : ``(low, high)`` input range kept, or None.

    Returns
    -------
    dict with ``delta`` ``(M, N, d)`` (the kept perturbation), ``intersection`` ``(M, N)`` (top-k
    intersection of the clean and attacked maps), ``clean_map`` and ``attacked_map``.
    """
    x = x.detach()
    with torch.no_grad():
        label = stack_forward(params, x).argmax(-1)
    a0 = gradient_map(params, x, y).detach()

    def map_fn(xa, last):
        f, logits = _target_logit(params, xa, y)
        (a,) = torch.autograd.grad(f.sum(), xa, create_graph=not last)
        return a, logits

    best_delta, best = topk_pgd(map_fn, x, a0, label, k=k, eps=eps, steps=steps, step_size=step_size, box=box)
    attacked = gradient_map(params, x + best_delta, y).detach()
    return {"delta": best_delta, "intersection": best, "clean_map": a0, "attacked_map": attacked}


def random_perturbation(x: torch.Tensor, eps: float, generator: torch.Generator, box=(0.0, 1.0)) -> torch.Tensor:
    """A random corner of the l-infinity ball (``eps * sign``), clipped to the box: the same-budget
    baseline the attack must beat."""
    s = torch.randint(0, 2, x.shape, generator=generator).to(x.dtype) * 2 - 1
    return _clip(x, eps * s, eps, box)


def blended_forward(params, x: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""Logits of an MLP stack whose hidden activation is :math:`(1-\alpha)\,\mathrm{GELU}(h) + \alpha h/2`.

    The power control's by-construction smoother twin of a trained model: the same weights, with
    every activation blended towards its linearisation at 0 (GELU'(0) = 1/2). The input-dependent
    part of each layer's Jacobian :math:`\mathrm{diag}(\sigma'(h))` shrinks by ``1 - alpha``, so the
    logit-gradient map :math:`\nabla_x f_y` varies less with ``x``; at ``alpha = 1`` the model is
    linear and its gradient map is constant. ``alpha = 0`` is ``models.stack_forward``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if params[0].dim() != 3:
        raise ValueError("blended_forward is defined for MLP stacks only")
    h = x
    last = len(params) // 2 - 1
    for layer in range(last + 1):
        h = torch.baddbmm(params[2 * layer + 1], h, params[2 * layer])
        if layer < last:
            h = (1.0 - alpha) * torch.nn.functional.gelu(h) + alpha * 0.5 * h
    return h


def blended_attack(params, x: torch.Tensor, y: torch.Tensor, alpha: float, *, k: int, eps: float, steps: int = 20,
                   box=(0.0, 1.0)) -> dict:
    """``attribution_attack`` on the ``blended_forward`` twin (same PGD loop, same top-k metric).

    Returns ``intersection`` ``(M, N)`` and ``correct`` ``(M, N)`` (the twin classifies the point
    correctly; only those points count)."""
    x = x.detach()
    with torch.no_grad():
        logits0 = blended_forward(params, x, alpha)
    label = logits0.argmax(-1)

    def map_fn(xa, last):
        logits = blended_forward(params, xa, alpha)
        f = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        (a,) = torch.autograd.grad(f.sum(), xa, create_graph=not last)
        return a, logits

    with torch.enable_grad():
        xg = x.clone().requires_grad_()
        a0, _ = map_fn(xg, True)
    _, best = topk_pgd(map_fn, x, a0.detach(), label, k=k, eps=eps, steps=steps, box=box)
    return {"intersection": best, "correct": label == y}


# ---------------------------------------------------------------------------------- curvature
def input_hvp(params, x: torch.Tensor, y: torch.Tensor, v: torch.Tensor, temperature=None) -> torch.Tensor:
    """``(grad_x^2 l) v`` for every model and point, ``l`` the cross-entropy of ``logits / T``."""
    x = x.detach().requires_grad_()
    logits = stack_forward(params, x)
    if temperature is not None:
        logits = logits / temperature.view(-1, 1, 1)
    M, N, C = logits.shape
    loss = torch.nn.functional.cross_entropy(logits.reshape(M * N, C), y.reshape(-1), reduction="sum")
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), x)
    return hv


def hutchinson(hvp, shape, num_probes: int, generator: torch.Generator, dtype=torch.float32):
    """Hutchinson estimates from Rademacher probes ``v`` of ``shape`` (last axis = the Hessian's).

    Returns ``(trace_samples, frobenius_sq_samples)``, each ``(num_probes, *shape[:-1])``: the
    per-probe values ``v^T H v`` and ``||H v||^2`` (their means estimate ``tr H`` and ``||H||_F^2``).
    """
    if num_probes < 1:
        raise ValueError(f"num_probes must be >= 1, got {num_probes}")
    tr, fro = [], []
    for _ in range(num_probes):
        v = (torch.randint(0, 2, shape, generator=generator) * 2 - 1).to(dtype)
        hv = hvp(v)
        tr.append((v * hv).sum(-1))
        fro.append((hv * hv).sum(-1))
    return torch.stack(tr), torch.stack(fro)


def input_hessian_norm(params, x, y, temperature, num_probes: int, generator) -> np.ndarray:
    """Mean over points of the Hutchinson Frobenius norm of the input Hessian of the
    temperature-scaled loss, per model: ``(M,)``."""
    _, fro = hutchinson(lambda v: input_hvp(params, x, y, v, temperature), x.shape, num_probes, generator)
    return fro.mean(0).clamp_min(0).sqrt().mean(-1).numpy()


def parameter_hvp(params, x, y, vs):
    """Per-model Hessian-vector products of the mean training loss (block-diagonal over models)."""
    ps = [p.detach().requires_grad_() for p in params]
    loss = stack_cross_entropy(stack_forward(ps, x), y).sum()
    grads = torch.autograd.grad(loss, ps, create_graph=True)
    return list(torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), ps))


def parameter_curvature(params, x, y, *, num_probes: int, power_iterations: int, generator) -> dict:
    """Top Hessian eigenvalue (power iteration) and Hutchinson trace of each model's training loss.

    ``x (M, N, d)``, ``y (M, N)``. Returns ``{"top_eigenvalue": (M,), "trace": (M,)}``.
    """
    M = params[0].shape[0]

    def per_model_dot(a, b):
        return sum((u * w).flatten(1).sum(1) for u, w in zip(a, b))

    v = [torch.randn(p.shape, generator=generator) for p in params]
    lam = torch.zeros(M)
    for _ in range(power_iterations):
        norm = torch.sqrt(per_model_dot(v, v))
        v = [u / norm.view((M,) + (1,) * (u.dim() - 1)) for u in v]
        hv = parameter_hvp(params, x, y, v)
        lam = per_model_dot(v, hv)
        v = hv
    traces = torch.zeros(M)
    for _ in range(num_probes):
        r = [(torch.randint(0, 2, p.shape, generator=generator) * 2 - 1).to(p.dtype) for p in params]
        traces += per_model_dot(r, parameter_hvp(params, x, y, r)) / num_probes
    return {"top_eigenvalue": lam.detach().numpy(), "trace": traces.detach().numpy()}


@torch.no_grad()
def fit_temperature(params, x: np.ndarray, y: np.ndarray, grid=None) -> np.ndarray:
    """Per-model temperature ``T`` minimising the validation NLL of ``logits / T`` over a log grid."""
    grid = np.exp(np.linspace(np.log(0.05), np.log(20.0), 161)) if grid is None else np.asarray(grid)
    M = params[0].shape[0]
    logits = stack_forward(params, torch.from_numpy(x).expand(M, *x.shape))
    Y = torch.from_numpy(y).expand(M, len(y))
    nll = torch.stack([stack_cross_entropy(logits / float(T), Y) for T in grid])    # (grid, M)
    return grid[nll.argmin(0).numpy()].astype(np.float32)


# ---------------------------------------------------------------------------------- captum
class _One(torch.nn.Module):
    """Model ``m`` of a stack as an ``nn.Module`` on ``(N, d)`` inputs (what captum expects)."""

    def __init__(self, params, m: int):
        super().__init__()
        self.params = [p[m:m + 1].detach() for p in params]

    def forward(self, x):
        return stack_forward(self.params, x.unsqueeze(0)).squeeze(0)


def single_model(params, m: int) -> torch.nn.Module:
    return _One(params, m)


def captum_maps(params, m: int, x: torch.Tensor, y: torch.Tensor, methods, *, ig_steps: int = 20,
                smoothgrad_samples: int = 16, smoothgrad_std: float = 0.1, seed: int = 0) -> dict:
    """Attribution maps of model ``m`` on ``x (N, d)`` from captum: ``grad`` (Saliency, signed),
    ``gxi`` (InputXGradient), ``ig`` (IntegratedGradients, zero baseline, trapezoid rule) and
    ``smoothgrad`` (NoiseTunnel over Saliency). NoiseTunnel draws from torch's global generator,
    which this function seeds with ``seed`` (and restores afterwards)."""
    from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel, Saliency

    model = single_model(params, m)
    out = {}
    for method in methods:
        if method == "grad":
            out[method] = Saliency(model).attribute(x, target=y, abs=False)
        elif method == "gxi":
            out[method] = InputXGradient(model).attribute(x, target=y)
        elif method == "ig":
            out[method] = IntegratedGradients(model).attribute(x, target=y, baselines=torch.zeros_like(x),
                                                               n_steps=ig_steps, method="riemann_trapezoid")
        elif method == "smoothgrad":
            state = torch.random.get_rng_state()
            torch.manual_seed(seed)
            try:
                out[method] = NoiseTunnel(Saliency(model)).attribute(x, target=y, nt_type="smoothgrad",
                                                                     nt_samples=smoothgrad_samples,
                                                                     stdevs=smoothgrad_std, abs=False)
            finally:
                torch.random.set_rng_state(state)
        else:
            raise ValueError(f"method must be one of grad, gxi, ig, smoothgrad; got {method!r}")
        out[method] = out[method].detach()
    return out


def integrated_gradients_ours(params, x, y, steps: int) -> torch.Tensor:
    """Our IG (zero baseline, trapezoid rule over ``steps`` points) on a stack: the reference that
    captum's ``IntegratedGradients(method='riemann_trapezoid')`` is checked against."""
    alphas = torch.linspace(0, 1, steps)
    w = torch.full((steps,), 1.0 / (steps - 1))
    w[0] = w[-1] = 0.5 / (steps - 1)
    total = sum(wi * gradient_map(params, a * x, y) for a, wi in zip(alphas, w))
    return x * total


# ---------------------------------------------------------------------------------- softmax Jacobian
def softmax_jacobian_symbolic() -> sympy.Expr:
    """For n = 3 with ``a_3 = 1 - a_1 - a_2``: the sum of squares of two residuals that sympy
    simplifies (zero proves both): ``tr J - (1 - sum a^2)`` and
    ``v^T J v - sum_i a_i (v_i - sum_j a_j v_j)^2`` (the latter makes ``J`` PSD for ``a >= 0``)."""
    a1, a2, v1, v2, v3 = sympy.symbols("a1 a2 v1 v2 v3", real=True)
    a = sympy.Matrix([a1, a2, 1 - a1 - a2])
    v = sympy.Matrix([v1, v2, v3])
    J = sympy.diag(*a) - a * a.T
    trace_gap = J.trace() - (1 - sum(ai ** 2 for ai in a))
    mean_v = sum(ai * vi for ai, vi in zip(a, v))
    quad_gap = (v.T * J * v)[0] - sum(ai * (vi - mean_v) ** 2 for ai, vi in zip(a, v))
    return sympy.simplify(sympy.expand(trace_gap) ** 2 + sympy.expand(quad_gap) ** 2)


def softmax_jacobian_numeric(sizes, draws: int, rng: np.random.Generator) -> dict:
    """Over random ``a`` (Dirichlet with concentrations 0.1, 1 and 10; peaked to flat), the largest
    eigenvalue of J, its smallest eigenvalue, and the largest ``|tr J - (1 - exp(-H_2(a)))|``."""
    lam_max, lam_min, trace_gap = 0.0, np.inf, 0.0
    for n in sizes:
        for conc in (0.1, 1.0, 10.0):
            for a in rng.dirichlet(np.full(n, conc), size=draws):
                ev = np.linalg.eigvalsh(np.diag(a) - np.outer(a, a))
                h2 = -np.log(np.sum(a ** 2))                            # Renyi-2 entropy
                lam_max, lam_min = max(lam_max, ev[-1]), min(lam_min, ev[0])
                trace_gap = max(trace_gap, abs(ev.sum() - (1 - np.exp(-h2))))
    return {"max_eigenvalue": float(lam_max), "min_eigenvalue": float(lam_min), "trace_gap": float(trace_gap)}
