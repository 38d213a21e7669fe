"""The masked-softmax GAT aggregation kernel against its PyTorch reference, and the reference
against torch_geometric's GATConv.

The kernel runs in Triton's interpreter on the CPU; ``TRITON_INTERPRET`` must be set before Triton
is first imported, so the comparison runs in a fresh subprocess.
"""

import json

import numpy as np
import pytest
import torch

from compendium.kernels.gat_aggregation import masked_softmax_aggregate, masked_softmax_aggregate_reference

from conftest import run_kernel_script

CASES = [
    (2, 50, 32, 0.12),     # the chapter's size: n = 50, d = 32
    (3, 13, 7, 0.3),       # n and d not powers of two
    (1, 9, 40, 0.0),       # no edges: every row empty (self-loops off) -> zeros
    (2, 17, 64, 1.0),      # complete graphs, d > block
]

SCRIPT = r"""
import json, os, sys, torch
from compendium.kernels.gat_aggregation import masked_softmax_aggregate_reference, masked_softmax_aggregate_triton
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"   # gpu_check.sh: compiled
on = lambda *xs: [x.to(device) for x in xs]                                          # .to keeps the strides
out = []
for B, n, d, p in json.loads(sys.argv[1]):
    gen = torch.Generator().manual_seed(n * 31 + d)
    e = 3 * torch.randn(B, n, n, generator=gen)
    mask = torch.rand(B, n, n, generator=gen) < p
    v = torch.randn(B, n, d, generator=gen)
    ref = masked_softmax_aggregate_reference(e, mask, v)
    ker = masked_softmax_aggregate_triton(*on(e, mask, v)).cpu()
    vt = torch.randn(B, d, n, generator=gen).transpose(1, 2)      # non-contiguous values
    ref2 = masked_softmax_aggregate_reference(e, mask, vt)
    ker2 = masked_softmax_aggregate_triton(*on(e, mask, vt)).cpu()
    out.append({"shape_ok": tuple(ker.shape) == (B, n, d), "max_error": float((ker - ref).abs().max()),
                "max_error_noncontiguous": float((ker2 - ref2).abs().max())})
print(json.dumps(out))
"""


def test_kernel_equals_reference_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, json.dumps(CASES), timeout=300)
    assert len(results) == len(CASES)
    for case, res in zip(CASES, results):
        assert res["shape_ok"], (case, res)
        assert res["max_error"] <= 1e-5 and res["max_error_noncontiguous"] <= 1e-5, (case, res)


def test_reference_properties_and_dispatch():
    e = torch.randn(2, 6, 6)
    mask = torch.zeros(2, 6, 6, dtype=torch.bool)
    mask[:, :, 0] = True                                   # one neighbour: alpha = 1 on it
    v = torch.randn(2, 6, 3)
    out = masked_softmax_aggregate(e, mask, v)             # CPU tensors: the reference
    torch.testing.assert_close(out, v[:, :1].expand(-1, 6, -1))
    mask[:, 2] = False
    assert masked_softmax_aggregate_reference(e, mask, v)[:, 2].abs().max() == 0   # empty row -> 0
    ones = torch.ones(2, 6, 6, dtype=torch.bool)
    torch.testing.assert_close(masked_softmax_aggregate_reference(torch.zeros(2, 6, 6), ones, v),
                               v.mean(1, keepdim=True).expand(-1, 6, -1))           # equal logits: the mean
    with pytest.raises(ValueError):
        masked_softmax_aggregate_reference(e, mask.float(), v)
    with pytest.raises(ValueError):
        masked_softmax_aggregate(e, mask, v, backend="cuda")


def test_reference_equals_gatconv():
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn import GATConv

    from compendium.papers.graph_alignment import erdos_renyi, to_edge_index

    torch.manual_seed(0)
    A = erdos_renyi(3, 12, 3.0, np.random.default_rng(0))
    B, n, _ = A.shape
    x = torch.randn(B * n, 8)
    conv = GATConv(8, 5, heads=1).eval()
    edge_index, _ = to_edge_index(A)
    with torch.no_grad():
        expected = conv(x, edge_index).view(B, n, 5)
        Wx = conv.lin(x).view(B, n, 5)                     # W h
        a_src = (Wx * conv.att_src.view(1, 1, 5)).sum(-1)  # a_src . W h_j
        a_dst = (Wx * conv.att_dst.view(1, 1, 5)).sum(-1)  # a_dst . W h_i
        e = torch.nn.functional.leaky_relu(a_dst[:, :, None] + a_src[:, None, :], conv.negative_slope)
        mask = torch.from_numpy(A) | torch.eye(n, dtype=torch.bool)   # GATConv adds self-loops
        got = masked_softmax_aggregate_reference(e, mask, Wx) + conv.bias
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
