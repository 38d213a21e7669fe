"""The fused event2vec token kernel (table gather + last temporal conv + LayerNorm + add + mask)
against its PyTorch reference, and the reference against the model's own unfused tokens.

The kernel runs in Triton's interpreter on the CPU; ``TRITON_INTERPRET`` must be set before Triton
is first imported, so the comparison runs in a fresh subprocess.
"""

import json

import pytest
import torch

from compendium.kernels.event_tokens import event_tokens, event_tokens_reference

from conftest import run_kernel_script

CASES = [
    (1, 24, 32, 16, 2049),     # the chapter's widths: d = 32 (C = 16), the 2 x 32 x 32 table
    (2, 7, 24, 12, 50),        # d not a power of two, N odd, a row with trailing pads
    (2, 5, 16, 8, 20),         # d = 16 (C = 8), trailing pads or an empty sequence
    (1, 1, 8, 2, 5),           # one event: both conv neighbours outside
]

SCRIPT = r"""
import json, os, sys, torch
from compendium.kernels.event_tokens import event_tokens_reference, event_tokens_triton
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"   # gpu_check.sh: compiled
on = lambda *xs: [x.to(device) for x in xs]
out = []
for B, N, d, C, V in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(N * 7 + d)
    table = torch.randn(V, d, generator=g)
    lengths = torch.randint(0, N + 1, (B,), generator=g)
    lengths[0] = N
    mask = torch.arange(N)[None] < lengths[:, None]
    index = torch.randint(1, V, (B, N), generator=g).masked_fill(~mask, 0)
    hidden = torch.randn(B, N, C, generator=g)
    w, b = torch.randn(d, 1, 3, generator=g), torch.randn(d, generator=g)
    gamma, beta = 1 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g)
    ref = event_tokens_reference(table, index, hidden, w, b, gamma, beta, mask)
    ker = event_tokens_triton(*on(table, index, hidden, w, b, gamma, beta, mask)).cpu()
    ht = torch.randn(B, C, N, generator=g).transpose(1, 2)         # non-contiguous hidden
    ref2 = event_tokens_reference(table, index, ht, w, b, gamma, beta, mask)
    ker2 = event_tokens_triton(*on(table, index, ht, w, b, gamma, beta, mask)).cpu()
    out.append({"shape_ok": tuple(ker.shape) == (B, N, d), "max_error": float((ker - ref).abs().max()),
                "max_error_noncontiguous": float((ker2 - ref2).abs().max()),
                "pads_zero": bool((ker[~mask] == 0).all())})
print(json.dumps(out))
"""


def test_kernel_equals_reference_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, json.dumps(CASES), timeout=300)
    assert len(results) == len(CASES)
    for case, res in zip(CASES, results):
        assert res["shape_ok"] and res["pads_zero"], (case, res)
        assert res["max_error"] <= 1e-4 and res["max_error_noncontiguous"] <= 1e-4, (case, res)


def test_reference_properties_and_dispatch():
    g = torch.Generator().manual_seed(0)
    B, N, d, C, V = 2, 6, 8, 4, 11
    table = torch.randn(V, d, generator=g)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    index = torch.randint(1, V, (B, N), generator=g).masked_fill(~mask, 0)
    hidden = torch.randn(B, N, C, generator=g)
    w = torch.zeros(d, 1, 3)
    b = torch.arange(d, dtype=torch.float32)                      # conv output = bias: LN of 0..7
    gamma, beta = torch.ones(d), torch.zeros(d)
    out = event_tokens(table, index, hidden, w, b, gamma, beta, mask)       # CPU: the reference
    ln = torch.nn.functional.layer_norm(b, (d,))
    torch.testing.assert_close(out[0], table[index[0]] + ln)
    assert out[1, 3:].abs().max() == 0                            # pads are zero
    # a conv that only reads the right neighbour: the last valid event sees zero, like the sequence end
    w2 = torch.zeros(d, 1, 3)
    w2[:, 0, 2] = 1.0
    out2 = event_tokens_reference(table, index, hidden, w2, torch.zeros(d), gamma, beta, mask)
    u_last = torch.zeros(d)                                       # hidden[1, 3] is masked out
    torch.testing.assert_close(out2[1, 2], table[index[1, 2]] + torch.nn.functional.layer_norm(u_last, (d,)))
    with pytest.raises(ValueError):
        event_tokens_reference(table, index + V, hidden, w, b, gamma, beta, mask)
    with pytest.raises(ValueError):
        event_tokens_reference(table, index, hidden[..., :3], w, b, gamma, beta, mask)
    with pytest.raises(ValueError):
        event_tokens(table, index, hidden, w, b, gamma, beta, mask, backend="cuda")


def test_reference_equals_event2vec_tokens():
    import numpy as np

    from compendium.papers import event2vec as paper
    from compendium.papers.event2vec.asset import batch_tensors

    data = paper.simulate([0, 4], np.random.default_rng(0))
    b = batch_tensors(paper.sample_events(data, 40, np.random.default_rng(1)))
    for embedding in ("mlp", "lookup"):
        model = paper.Event2Vec(dim=16, embedding=embedding).eval()
        with torch.no_grad():
            fused = model.tokens(b["x"], b["y"], b["p"], b["t"], b["mask"], fused=True, backend="reference")
            plain = model.tokens(b["x"], b["y"], b["p"], b["t"], b["mask"])
        torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)
