"""The batched speculative-verify kernel against compendium.speculative.spec_verify, token for
token with matched uniforms and exponentials, and its PyTorch reference against the same.

The kernel runs in Triton's interpreter on the CPU (compiled on CUDA when
COMPENDIUM_KERNEL_DEVICE=cuda, as benchmarks/gpu_check.sh sets it); ``TRITON_INTERPRET`` must be
set before Triton is first imported, so the comparison runs in a fresh subprocess.
"""


import numpy as np
import pytest
import torch

from compendium import speculative as spec
from compendium.kernels.spec_verify import spec_verify, spec_verify_reference

from conftest import run_kernel_script


def _shapes(count=200, seed=0):
    """Random (B, gamma, V, concentration, same-draft share) cases hitting the edges."""
    rng = np.random.default_rng(seed)
    fixed = [(1, 1, 2, 1.0, 0.0), (3, 1, 5, 0.3, 0.5), (7, 4, 64, 1.0, 0.0), (5, 6, 17, 0.1, 0.0),
             (4, 3, 100, 3.0, 1.0), (2, 8, 33, 0.5, 0.0), (9, 2, 1, 1.0, 0.0)]
    out = list(fixed)
    while len(out) < count:
        out.append((int(rng.integers(1, 12)), int(rng.integers(1, 9)), int(rng.integers(2, 130)),
                    float(rng.choice([0.1, 0.5, 1.0, 3.0])), float(rng.choice([0.0, 0.0, 0.3]))))
    return out


def _case(B, gamma, V, conc, same, seed):
    """float32 inputs: targets, drafts from q, uniforms, exponentials (some rows with q = p)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, conc), size=(B, gamma + 1)).astype(np.float32)
    q = rng.dirichlet(np.full(V, conc), size=(B, gamma)).astype(np.float32)
    rows = rng.random(B) < same
    q[rows] = p[rows, :gamma]
    d = spec.categorical(q.astype(np.float64), rng)
    return p, q, d, rng.random((B, gamma)).astype(np.float32), rng.exponential(size=(B, V)).astype(np.float32)


SCRIPT = r"""
import json, os, sys
import numpy as np, torch
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from test_kernels_online_spec import _case, _shapes
from compendium import speculative as spec
from compendium.kernels.spec_verify import spec_verify_triton
device = "cuda" if os.environ.get("COMPENDIUM_KERNEL_DEVICE") == "cuda" else "cpu"
out = []
for i, (B, gamma, V, conc, same) in enumerate(_shapes()):
    p, q, d, u, e = _case(B, gamma, V, conc, same, i)
    ref_n, ref_t = spec.spec_verify(p, q, d, u, e)
    t = lambda x: torch.from_numpy(x).to(device)
    n, tok = spec_verify_triton(t(p), t(q), t(d), t(u), t(e))
    # a non-contiguous copy of p (a transposed buffer) must give the same answer
    pt = t(np.ascontiguousarray(p.transpose(2, 0, 1))).permute(1, 2, 0)
    n2, tok2 = spec_verify_triton(pt, t(q), t(d), t(u), t(e))
    out.append({"n_mismatch": int((n.cpu().numpy() != ref_n).sum()), "tok_mismatch": int((tok.cpu().numpy() != ref_t).sum()),
                "noncontig_mismatch": int((n2.cpu().numpy() != ref_n).sum() + (tok2.cpu().numpy() != ref_t).sum()),
                "tokens": int(B)})
print(json.dumps(out))
"""


def test_kernel_equals_spec_verify_token_for_token_in_interpreter():
    pytest.importorskip("triton")
    results = run_kernel_script(SCRIPT, timeout=600)
    assert len(results) == len(_shapes()) >= 200
    bad = [(i, r) for i, r in enumerate(results) if r["n_mismatch"] or r["tok_mismatch"] or r["noncontig_mismatch"]]
    assert not bad, bad[:5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_equals_spec_verify(dtype):
    for i, (B, gamma, V, conc, same) in enumerate(_shapes(60, seed=1)):
        p, q, d, u, e = _case(B, gamma, V, conc, same, 1000 + i)
        if dtype == torch.float64:
            p, q, u, e = (x.astype(np.float64) for x in (p, q, u, e))
        ref = spec.spec_verify(p, q, d, u, e)
        n, tok = spec_verify(*(torch.from_numpy(x) for x in (p, q, d, u, e)))  # CPU: the reference
        assert np.array_equal(n.numpy(), ref[0]) and np.array_equal(tok.numpy(), ref[1]), (i, B, gamma, V)


def test_reference_is_lossless_and_checks_inputs():
    gen = torch.Generator().manual_seed(0)
    V, gamma, n = 6, 2, 40_000
    p1 = torch.distributions.Dirichlet(torch.ones(V)).sample((1,))[0]
    q1 = torch.distributions.Dirichlet(torch.ones(V)).sample((1,))[0]
    p = p1.expand(n, gamma + 1, V)
    q = q1.expand(n, gamma, V)
    d = torch.multinomial(q1, n * gamma, replacement=True, generator=gen).view(n, gamma)
    u = torch.rand(n, gamma, generator=gen)
    e = torch.empty(n, V).exponential_(generator=gen)
    n_acc, nxt = spec_verify_reference(p, q, d, u, e)
    first = torch.where(n_acc > 0, d[:, 0], nxt)
    freq = torch.bincount(first, minlength=V).double() / n
    assert (freq - p1.double()).abs().max() < 5 * (0.25 / n) ** 0.5
    with pytest.raises(ValueError):
        spec_verify_reference(p[:, :2], q, d, u, e)
    with pytest.raises(ValueError):
        spec_verify_reference(p, q, d.float(), u, e)
    with pytest.raises(ValueError):
        spec_verify_reference(p, q, d + V, u, e)
    with pytest.raises(ValueError):
        spec_verify(p, q, d, u, e, backend="cuda")
