"""The nested-prefix similarity kernel (matryoshka_3d's MRL logits) against the per-width loop.

The Triton kernel runs in Triton's interpreter on the CPU (compiled on CUDA when
COMPENDIUM_KERNEL_DEVICE=cuda, as benchmarks/gpu_check.sh sets it); ``TRITON_INTERPRET`` must be
set before Triton is first imported, so the comparison runs in a fresh subprocess. The reference
(prefix-summed chunk Grams) is compared with the loop here, in float64, with gradients.
"""

import pytest
import torch

from compendium.kernels.nested_prefix import (nested_prefix_similarity, nested_prefix_similarity_naive,
                                              nested_prefix_similarity_reference)

from conftest import run_kernel_script

SCRIPT = r"""
import json, os, torch
from compendium.kernels.nested_prefix import nested_prefix_similarity_naive, nested_prefix_similarity_triton
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"
g = torch.Generator().manual_seed(0)
out = []
# (B, N, d, dims): MRL widths of d = 64; widths that are not multiples of the block; one width; tiny rows;
# B and N not multiples of the 32-tiles; a zero row (norm floor)
for B, N, d, dims in ((8, 40, 64, (8, 16, 32, 64)), (33, 70, 48, (3, 17, 30, 48)), (5, 5, 20, (20,)),
                      (1, 3, 9, (1, 2, 9)), (40, 17, 64, (8, 64))):
    q = torch.randn(B, d, generator=g) * 2
    c = torch.randn(N, d, generator=g)
    q[0] = 0.0
    qd, cd = q.to(device), c.to(device)
    ref = nested_prefix_similarity_naive(qd.double(), cd.double(), dims).cpu()
    ker = nested_prefix_similarity_triton(qd, cd, dims).cpu()
    wide = torch.zeros(d + 3, N).to(device)
    wide[:d] = cd.T
    strided = nested_prefix_similarity_triton(qd, wide[:d].T, dims).cpu()   # non-contiguous candidates
    out.append({"shape": [B, N, d, list(dims)], "err": float((ker.double() - ref).abs().max()),
                "strided": float((strided - ker).abs().max()), "zero_row": float(ker[:, 0].abs().max())})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_kernel_equals_loop_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, timeout=600)
    assert len(results) == 5
    bad = [r for r in results if not (r["err"] <= 1e-6 and r["strided"] == 0.0 and r["zero_row"] == 0.0)]
    assert not bad, bad


def test_reference_equals_loop_with_gradients():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(6, 32, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(9, 32, generator=g, dtype=torch.float64, requires_grad=True)
    dims = (4, 8, 16, 32)
    a = nested_prefix_similarity_reference(q, c, dims)
    b = nested_prefix_similarity_naive(q, c, dims)
    assert a.shape == (4, 6, 9)
    assert torch.allclose(a, b, atol=1e-12)
    ga = torch.autograd.grad(a.sum(), (q, c))
    gb = torch.autograd.grad(b.sum(), (q, c))
    assert all(torch.allclose(x, y, atol=1e-10) for x, y in zip(ga, gb))
    # the widest prefix is the plain cosine matrix
    cos = torch.nn.functional.normalize(q, dim=1) @ torch.nn.functional.normalize(c, dim=1).T
    assert torch.allclose(a[-1], cos, atol=1e-12)
    assert nested_prefix_similarity(q, c, dims).requires_grad          # CPU dispatch: the differentiable reference


def test_inputs_are_checked():
    q, c = torch.zeros(3, 8), torch.zeros(4, 8)
    for dims in ((), (0, 8), (8, 4), (4, 9), (4, 4)):
        with pytest.raises(ValueError):
            nested_prefix_similarity_reference(q, c, dims)
    with pytest.raises(ValueError):
        nested_prefix_similarity_reference(q, torch.zeros(4, 7), (4,))
    with pytest.raises(ValueError):
        nested_prefix_similarity_reference(q.long(), c, (4,))
    with pytest.raises(ValueError):
        nested_prefix_similarity(q, c, (4,), backend="cuda")
    with pytest.raises(ValueError):
        nested_prefix_similarity(q.requires_grad_(), c, (4,), backend="triton")
