"""The fused Expert-Sample routing kernel against its PyTorch reference.

The kernel runs in Triton's interpreter on the CPU. ``TRITON_INTERPRET`` must be set before Triton
is first imported, and another test module may already have imported it in this process, so
the comparison runs in a fresh subprocess.
"""

import json

import pytest
import torch

from compendium.kernels.routing import expert_sample_route, expert_sample_route_reference

pytest.importorskip("triton")

from conftest import run_kernel_script

CASES = [
    (37, 32, 8, 4, 8, 1.0),      # Expert-Sample
    (20, 16, 4, 0, 16, 2.0),     # noise on all experts
    (16, 12, 3, 3, 9, 0.0),      # plain top-k
    (16, 10, 5, 2, 3, 0.5),      # the pool exactly fills the tail
]

SCRIPT = r"""
import json, sys, torch
from compendium.kernels.routing import expert_sample_route_reference, expert_sample_route_triton, gumbel_noise
import os as _os
DEV = _os.environ.get("COMPENDIUM_KERNEL_DEVICE", "cpu")


def on_dev(fn, *args, **kwargs):
    # run a Triton entry point on DEV (cpu = the interpreter, cuda = compiled); results on the CPU
    out = fn(*[a.to(DEV) if torch.is_tensor(a) else a for a in args], **kwargs)
    return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()
out = []
for rows, experts, k, head, pool, tau in json.loads(sys.argv[1]):
    gen = torch.Generator().manual_seed(rows)
    z = torch.randn(rows, experts, generator=gen)
    z[0, :4] = 0.25                                   # ties break towards the lower index in both
    g = gumbel_noise((rows, experts), gen)
    i_ref, w_ref = expert_sample_route_reference(z, g, k, head, pool, tau)
    i_ker, w_ker = on_dev(expert_sample_route_triton, z, g, k, head, pool, tau)
    out.append({"indices_equal": bool(torch.equal(i_ker, i_ref)), "shape_ok": tuple(i_ker.shape) == (rows, k),
                "max_weight_error": float((w_ker - w_ref).abs().max())})
print(json.dumps(out))
"""


def test_kernel_equals_reference_in_interpreter():
    results = run_kernel_script(SCRIPT, json.dumps(CASES), timeout=120)
    assert len(results) == len(CASES)
    for case, res in zip(CASES, results):
        assert res["indices_equal"] and res["shape_ok"], (case, res)
        assert res["max_weight_error"] <= 1e-6, (case, res)


def test_reference_shapes_and_dispatch():
    z = torch.randn(2, 3, 16)
    g = torch.zeros_like(z)
    idx, w = expert_sample_route(z, g, 4, 2, 6, 1.0)
    assert idx.shape == w.shape == (2, 3, 4)
    torch.testing.assert_close(idx.sort(-1).values, z.topk(4, -1).indices.sort(-1).values)   # g = 0: top-k
    for bad in [dict(k=0), dict(k=4, head=5), dict(k=4, head=2, pool=1), dict(k=4, head=2, pool=15)]:
        args = dict(k=4, head=2, pool=6) | bad
        with pytest.raises(ValueError):
            expert_sample_route_reference(z, g, args["k"], args["head"], args["pool"], 1.0)
    with pytest.raises(ValueError):
        expert_sample_route(z, g, 4, 2, 6, 1.0, backend="cuda")
