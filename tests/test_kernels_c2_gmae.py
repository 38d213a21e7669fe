"""The segment-softmax aggregation kernel (sparse GAT) against its PyTorch reference, and the
reference against torch_geometric's GATConv with and without the chapter's HEA bias.

The kernel runs in Triton's interpreter on the CPU; ``TRITON_INTERPRET`` must be set before Triton
is first imported, so the comparison runs in a fresh subprocess.
"""

import json

import pytest
import torch

from compendium.kernels.segment_softmax import (
    csr_from_edge_index,
    segment_softmax_aggregate,
    segment_softmax_aggregate_reference,
)

from conftest import kernel_env, run_kernel_script

CASES = [
    (40, 4, 16, 0.15),     # the chapter's layer: 4 heads of 16
    (13, 3, 7, 0.4),       # H and C not powers of two
    (9, 1, 5, 0.0),        # no edges: every segment empty -> zeros
    (30, 2, 33, 1.0),      # complete graph: segments of 30 > block_e = 16, C > 32
]

SCRIPT = r"""
import json, os, sys, torch
from compendium.kernels.segment_softmax import (csr_from_edge_index, segment_softmax_aggregate_reference,
                                                segment_softmax_aggregate_triton)
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"   # gpu_check.sh: compiled
on = lambda *xs: [x.to(device) for x in xs]                                          # .to keeps the strides
out = []
for n, H, C, p in json.loads(sys.argv[1]):
    gen = torch.Generator().manual_seed(n * 31 + C)
    A = torch.rand(n, n, generator=gen) < p
    edge_index = A.nonzero().T.flip(0)                   # (src, dst)
    rowptr, src, order = csr_from_edge_index(edge_index, n)
    E = src.numel()
    e = 4 * torch.randn(E, H, generator=gen)
    v = torch.randn(n, H, C, generator=gen)
    ref = segment_softmax_aggregate_reference(e, rowptr, src, v)
    ker = segment_softmax_aggregate_triton(*on(e, rowptr, src, v)).cpu()
    vt = torch.randn(C, H, n, generator=gen).permute(2, 1, 0)       # non-contiguous values
    err2 = float((segment_softmax_aggregate_triton(*on(e, rowptr, src, vt)).cpu() - segment_softmax_aggregate_reference(e, rowptr, src, vt)).abs().max()) if E else 0.0
    out.append({"shape_ok": tuple(ker.shape) == (n, H, C), "max_error": float((ker - ref).abs().max()),
                "max_error_noncontiguous": err2, "edges": E})
print(json.dumps(out))
"""


def test_kernel_equals_reference_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, json.dumps(CASES), timeout=600)
    assert len(results) == len(CASES)
    for case, res in zip(CASES, results):
        assert res["shape_ok"], (case, res)
        assert res["max_error"] <= 1e-5 and res["max_error_noncontiguous"] <= 1e-5, (case, res)


def test_reference_properties_and_dispatch():
    edge_index = torch.tensor([[1, 2, 0, 3], [0, 0, 1, 1]])        # node 0 <- 1, 2; node 1 <- 0, 3; 2, 3 empty
    rowptr, src, order = csr_from_edge_index(edge_index, 4)
    assert rowptr.tolist() == [0, 2, 4, 4, 4] and src.tolist() == [1, 2, 0, 3]
    v = torch.randn(4, 2, 3)
    out = segment_softmax_aggregate(torch.zeros(4, 2), rowptr, src, v)          # CPU: the reference
    torch.testing.assert_close(out[0], (v[1] + v[2]) / 2)                       # equal logits: the mean
    assert out[2:].abs().max() == 0                                            # empty segments -> 0
    big = torch.tensor([[50.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 50.0]])
    out = segment_softmax_aggregate_reference(big, rowptr, src, v)
    torch.testing.assert_close(out[0, 0], v[1, 0])                             # a dominant logit picks its source
    torch.testing.assert_close(out[1, 1], v[3, 1])
    with pytest.raises(ValueError):
        segment_softmax_aggregate_reference(torch.zeros(3, 2), rowptr, src, v)
    with pytest.raises(ValueError):
        segment_softmax_aggregate(torch.zeros(4, 2), rowptr, src, v, backend="cuda")


@pytest.mark.parametrize("with_bias", [False, True])
def test_reference_equals_gatconv(with_bias):
    from compendium.papers.c2_gmae import BiasedGATConv, csbm_dc, hetero_edge_weights, with_self_loops
    import numpy as np

    gr = csbm_dc(40, 4, 0.3, 5.0, 6, 1.0, np.random.default_rng(0))
    ei = with_self_loops(gr.edge_index, gr.num_nodes)
    torch.manual_seed(0)
    conv = BiasedGATConv(6, 5, heads=3, add_self_loops=False).eval()
    bias = torch.log(hetero_edge_weights(gr.x, ei, 2.0)) if with_bias else None
    with torch.no_grad():
        expected = conv(gr.x, ei, edge_attr=bias) if with_bias else conv(gr.x, ei)
        Wx = conv.lin(gr.x).view(-1, 3, 5)
        a_src = (Wx * conv.att_src).sum(-1)
        a_dst = (Wx * conv.att_dst).sum(-1)
        e = torch.nn.functional.leaky_relu(a_src[ei[0]] + a_dst[ei[1]], conv.negative_slope)
        if with_bias:
            e = e + bias[:, None]
        rowptr, src, order = csr_from_edge_index(ei, gr.num_nodes)
        got = segment_softmax_aggregate_reference(e[order], rowptr, src, Wx).reshape(-1, 15) + conv.bias
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


TRAIN_SCRIPT = r"""
import json, numpy as np
from compendium.papers import c2_gmae as paper
gr = paper.csbm_dc(24, 4, 0.4, 4.0, 6, 1.0, np.random.default_rng(0))
s = paper.TrainSettings(epochs=2, heads=2, head_dim=4)
out = paper.kernel_training_gap(gr, s, 0, paper.arms(1.0, 1.0)["c2"], 3, backend="triton")
print(json.dumps(out))
"""


@pytest.mark.slow
def test_training_through_the_interpreted_kernel_equals_gatconv():
    """C2-full (PE, DPM, HEA bias, two views, attention dropout) trained for two epochs through the
    Triton kernel (forced, in the interpreter on the CPU) follows the GATConv run."""
    pytest.importorskip("triton")
    env = kernel_env()
    env["TRITON_INTERPRET"] = "1"                      # a CPU run even under COMPENDIUM_KERNEL_DEVICE=cuda
    res = run_kernel_script(TRAIN_SCRIPT, env=env, timeout=600)
    assert res["backend"] == "triton"
    assert res["loss_gap"] <= 1e-4 and res["embed_gap"] <= 1e-3, res
