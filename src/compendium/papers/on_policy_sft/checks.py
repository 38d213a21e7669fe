"""The implementation checks of the ledger: identities, limits and the kernel against its reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import torch

from . import task
from .decoding import generate, hinted_generate
from .losses import closed_form_logit_gradient, idft_gamma, weighted_nll


def symbolic_phi_moments():
    """sympy: ``E_p[phi]`` and ``Var_p[phi] - Var_p[log p]`` for a symbolic 3-category ``p`` (both simplify to 0)."""
    import sympy as sp

    p1, p2 = sp.symbols("p1 p2", positive=True)
    p = [p1, p2, 1 - p1 - p2]
    H = -sum(pi * sp.log(pi) for pi in p)
    phi = [sp.log(pi) + H for pi in p]
    mean_phi = sum(pi * f for pi, f in zip(p, phi))
    mean_log = sum(pi * sp.log(pi) for pi in p)
    var_phi = sum(pi * (f - mean_phi) ** 2 for pi, f in zip(p, phi))
    var_log = sum(pi * (sp.log(pi) - mean_log) ** 2 for pi in p)
    return sp.simplify(sp.expand(mean_phi)), sp.simplify(sp.expand(var_phi - var_log))


def gradient_check(vectors: int, rng: np.random.Generator, **idft) -> dict:
    """Autograd logit gradients of one IDFT token against their closed forms (float64).

    ``released``: ``-p_y^gamma log p_y`` against ``p_y^gamma (1 + gamma log p_y) (p - e_y)``;
    ``stopped``: ``-sg(p_y^gamma) log p_y`` against ``p_y^gamma (p - e_y)``. Neither closed form
    has a term from ``phi`` or ``gamma``, so agreement also shows that no gradient flows through
    them. Returns the largest normwise relative errors.
    """
    worst = {"released": 0.0, "stopped": 0.0}
    for _ in range(vectors):
        V = int(rng.integers(2, 200))
        z = torch.tensor(rng.normal(0, rng.uniform(0.5, 4), V), dtype=torch.float64, requires_grad=True)
        y = int(rng.integers(V))
        with torch.no_grad():
            logp = torch.log_softmax(z, -1)
            phi = logp[y] - (logp.exp() * logp).sum()
            gamma = float(idft_gamma(phi, **idft))
            w = float(torch.exp(gamma * logp[y]))
        for key, loss, g in (("released", "idft", gamma), ("stopped", "idft_sg", None)):
            value = weighted_nll(z[None, None], torch.tensor([[y]]), torch.ones(1, 1), loss, **idft)
            (grad,) = torch.autograd.grad(value, z)
            ref = closed_form_logit_gradient(z.detach(), y, w, g)
            worst[key] = max(worst[key], float((grad - ref).abs().max() / ref.abs().max()))
    return {"max_rel_error_released": worst["released"], "max_rel_error_stopped": worst["stopped"]}


def loss_limits(rng: np.random.Generator) -> dict:
    """Limits of the IDFT family on a random batch (largest gaps of loss value and logit gradient).

    ``gamma_one_vs_dft``: the stopped form with gamma fixed at 1 is DFT (value and gradient).
    ``lambda_zero_vs_gamma_one``: lambda = 0 gives gamma = 1 in both forms (so lambda = 0 is DFT for
    the stopped form, not cross-entropy). ``released_value_vs_stopped``: the two forms have the same
    value (they differ only in the gradient).
    """
    def both(loss, **kw):
        z = torch.tensor(rng_z, requires_grad=True)
        value = weighted_nll(z, y, mask, loss, **kw)
        (grad,) = torch.autograd.grad(value, z)
        return value.detach(), grad

    rng_z = rng.normal(0, 2, (4, 7, 30))
    y = torch.as_tensor(rng.integers(0, 30, (4, 7)))
    mask = torch.as_tensor(rng.random((4, 7)) < 0.8).double()
    gap = lambda a, b: max(abs(float(a[0] - b[0])), float((a[1] - b[1]).abs().max()))  # noqa: E731
    one = dict(beta=1.0, gamma_min=1.0, gamma_max=1.0, lam=1.0)
    default = dict(beta=1.0, gamma_min=0.1, gamma_max=2.0)
    return {"gamma_one_vs_dft": gap(both("idft_sg", **one), both("dft")),
            "lambda_zero_vs_gamma_one": max(gap(both("idft_sg", **default, lam=0.0), both("idft_sg", **one)),
                                            gap(both("idft", **default, lam=0.0), both("idft", **one))),
            "released_value_vs_stopped": abs(float(both("idft", **default)[0] - both("idft_sg", **default)[0]))}


def hinted_limits(model, ops: np.ndarray, rng: np.random.Generator, *, beta: float, temperature: float, top_p: float) -> dict:
    """Token mismatches of Hinted Decoding's limits under shared uniforms.

    ``beta = 0`` (no marker switch) against hinted-only sampling; ``lambda = 1`` against plain
    sampling; and the share of steps after the first marker with lambda < 1 (must be 0).
    """
    steps = 2 * ops.shape[1]
    hp, pp = task.hinted_prompt(ops), task.plain_prompt(ops)
    u = rng.random((len(ops), steps))
    kw = dict(marker=task.MARK, uniforms=u, temperature=temperature, top_p=top_p)
    beta0, _ = hinted_generate(model, hp, pp, steps, beta=0.0, switch_at_marker=False, **kw)
    hinted_only = generate(model, hp, steps, uniforms=u, temperature=temperature, top_p=top_p)
    lam1, _ = hinted_generate(model, hp, pp, steps, beta=beta, force_lambda=1.0, **kw)
    plain_only = generate(model, pp, steps, uniforms=u, temperature=temperature, top_p=top_p)
    toks, lams = hinted_generate(model, hp, pp, steps, beta=beta, **kw)
    seen = np.cumsum(toks == task.MARK, 1) - (toks == task.MARK)  # markers strictly before step t
    after = seen > 0
    return {"beta0_mismatch": int((beta0 != hinted_only).sum()), "lambda1_mismatch": int((lam1 != plain_only).sum()),
            "after_marker_not_q": int((lams[after] < 1).sum()), "after_marker_steps": int(after.sum()),
            "first_token_lambda": float(np.abs(lams[:, 0]).max()), "rows": len(ops)}


_KERNEL_SCRIPT = r"""
import json, sys, torch
from compendium.kernels.centered_loglik import centered_loglik_reference, centered_loglik_triton
device, seed = sys.argv[1], int(sys.argv[2])
g = torch.Generator().manual_seed(seed)
worst = 0.0
for N, V, scale in ((7, 24, 3.0), (5, 1000, 2.0), (3, 1500, 8.0)):
    z = (torch.randn(N, V, generator=g) * scale).to(device)
    y = torch.randint(0, V, (N,), generator=g).to(device)
    a = centered_loglik_reference(z.double(), y)
    b = centered_loglik_triton(z, y, block_v=256)
    for r, k in zip(a, b):
        worst = max(worst, float(((k.double().cpu() - r.cpu()).abs() / r.cpu().abs().clamp(min=1.0)).max()))
print(json.dumps({"max_error": worst}))
"""


def kernel_check(device: str = "cpu", seed: int = 0, timeout: float = 120) -> dict:
    """The Triton kernel against the float64 reference (error scaled by max(1, |value|)): compiled on
    CUDA, in Triton's interpreter on the CPU (a subprocess: ``TRITON_INTERPRET`` must be set before
    Triton is imported)."""
    env = dict(os.environ)
    if device != "cuda":
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _KERNEL_SCRIPT, "cuda" if device == "cuda" else "cpu", str(seed)],
                         env=env, capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
