"""The batched kNN kernel (top_adapter's grouping) against its reference and a brute-force loop.

The Triton kernel runs in Triton's interpreter on the CPU (compiled on CUDA when
COMPENDIUM_KERNEL_DEVICE=cuda, as benchmarks/gpu_check.sh sets it); ``TRITON_INTERPRET`` must be
set before Triton is first imported, so the comparison runs in a fresh subprocess.
"""

import numpy as np
import pytest
import torch

from compendium.kernels.knn import knn, knn_reference

from conftest import run_kernel_script

SCRIPT = r"""
import json, os, torch
from compendium.kernels.knn import knn_reference, knn_triton
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"
g = torch.Generator().manual_seed(0)
out = []
# (B, N, M, C, k): N not a power of two; k = N; one query; k = 1; 2-D coordinates; a duplicated point (tie)
for B, N, M, C, k in ((2, 100, 7, 3, 16), (1, 33, 33, 3, 33), (3, 64, 1, 3, 8), (2, 17, 5, 2, 1), (1, 50, 4, 3, 12)):
    p = torch.randn(B, N, C, generator=g)
    q = torch.randn(B, M, C, generator=g)
    p[:, 1] = p[:, 0]                      # exact tie: the lower index must come first in both
    pd, qd = p.to(device), q.to(device)
    ri, rd = knn_reference(pd, qd, k)
    ki, kd = knn_triton(pd, qd, k)
    wide = torch.zeros(B, N, C + 2).to(device)
    wide[..., :C] = pd
    si, _ = knn_triton(wide[..., :C], qd, k)   # non-contiguous points
    out.append({"shape": [B, N, M, C, k], "idx_equal": bool((ki.cpu() == ri.cpu()).all()),
                "dist_err": float((kd.cpu() - rd.cpu()).abs().max()), "strided_equal": bool((si.cpu() == ki.cpu()).all())})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_kernel_equals_reference_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, timeout=600)
    assert len(results) == 5
    bad = [r for r in results if not (r["idx_equal"] and r["dist_err"] <= 1e-5 and r["strided_equal"])]
    assert not bad, bad


def test_reference_equals_brute_force():
    rng = np.random.default_rng(3)
    p = rng.normal(size=(2, 40, 3))
    q = rng.normal(size=(2, 6, 3))
    idx, dist = knn_reference(torch.tensor(p), torch.tensor(q), 5)
    for b in range(2):
        for m in range(6):
            d = np.sqrt(((p[b] - q[b, m]) ** 2).sum(1))
            want = np.argsort(d, kind="stable")[:5]
            assert idx[b, m].tolist() == want.tolist()
            assert np.allclose(dist[b, m].numpy(), d[want], atol=1e-12)
    # a query that is a cloud point finds itself first at distance 0
    idx, dist = knn_reference(torch.tensor(p), torch.tensor(p[:, :3]), 2)
    assert idx[:, :, 0].tolist() == [[0, 1, 2], [0, 1, 2]] and float(dist[..., 0].abs().max()) == 0.0


def test_ties_go_to_the_lower_index():
    p = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [3.0, 0.0]]])
    idx, _ = knn_reference(p, torch.zeros(1, 1, 2), 3)
    assert idx.tolist() == [[[0, 1, 2]]]


def test_inputs_are_checked():
    p, q = torch.zeros(1, 5, 3), torch.zeros(1, 2, 3)
    for k in (0, 6, 2.0):
        with pytest.raises(ValueError):
            knn_reference(p, q, k)
    with pytest.raises(ValueError):
        knn_reference(p, torch.zeros(1, 2, 2), 2)
    with pytest.raises(ValueError):
        knn_reference(p[0], q[0], 2)
    with pytest.raises(ValueError):
        knn_reference(p.long(), q.long(), 2)
    with pytest.raises(ValueError):
        knn(p, q, 2, backend="cuda")
    assert knn(p, q, 2)[0].shape == (1, 2, 2)      # CPU dispatch: the reference
