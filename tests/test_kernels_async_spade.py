"""Triton kernels of compendium.kernels (sparse_decode, quest_pages) against their PyTorch
references, run on the CPU with Triton's interpreter (TRITON_INTERPRET=1).

The comparisons run in one subprocess, because the interpreter flag must be set before Triton is
first imported and another test module may already have imported it in this process. Shapes are
small and random: T not a multiple of the page size, GQA ratios 1/2/4, index sets with padding and
of size >= T, non-contiguous caches.
"""

import subprocess
import sys

import pytest
import torch

from conftest import kernel_env, run_kernel_script

SCRIPT = r"""
import json, math, torch
from compendium.kernels import sparse_decode as sd, quest_pages as qp
import os as _os
DEV = _os.environ.get("COMPENDIUM_KERNEL_DEVICE", "cpu")


def on_dev(fn, *args, **kwargs):
    # run a Triton entry point on DEV (cpu = the interpreter, cuda = compiled); results on the CPU
    out = fn(*[a.to(DEV) if torch.is_tensor(a) else a for a in args], **kwargs)
    return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()
g = torch.Generator().manual_seed(0)
out = {"decode": [], "quest": [], "quest_sets": True, "noncontig": None, "decode_full": []}
cases = [(2, 2, 1, 37), (1, 4, 2, 50), (2, 4, 1, 33), (1, 2, 2, 70), (1, 8, 2, 23)]
for b, h, hkv, t in cases:
    d = 16 if t % 2 else 32
    q = torch.randn(b, h, d, generator=g)
    k = torch.randn(b, hkv, t, d, generator=g)
    v = torch.randn(b, hkv, t, d, generator=g)
    for n in (5, t, t + 7):                                      # budget < T, = T, > T (padding)
        idx = torch.argsort(torch.rand(b, hkv, t, generator=g), -1)[..., :min(n, t)]
        if n > t:
            idx = torch.cat([idx, torch.full((b, hkv, n - t), -1)], -1)
        ref = sd.sparse_decode_reference(q, k, v, idx)
        for splits in (1, 3):
            tri = on_dev(sd.sparse_decode_triton, q, k, v, idx, num_splits=splits, block_n=8)
            out["decode"].append(float((ref - tri).abs().max()))
        out["decode_full"].append(float((ref - sd.dense_masked_reference(q, k, v, idx)).abs().max()))
    for page in (8, 16):
        kmin, kmax, valid = qp.page_metadata(k, page, length=t - 2)
        pages = kmin.shape[2]
        for kk in sorted({1, min(2, pages), pages}):
            rv, ri = qp.quest_topk_reference(q, kmin, kmax, valid, kk)
            tv, ti = on_dev(qp.quest_topk_triton, q, kmin, kmax, valid, kk, block_pages=2)
            finite = torch.isfinite(rv)
            out["quest"].append(float((rv[finite] - tv[finite]).abs().max()) if finite.any() else 0.0)
            same = all(set(a.tolist()) == set(c.tolist()) for a, c in zip(ri.view(-1, kk), ti.view(-1, kk)))
            same = same and bool(torch.equal(finite, torch.isfinite(tv))) and bool(((ri == -1) == ~finite).all())
            out["quest_sets"] = out["quest_sets"] and same
# the defaults (num_splits=4, block_n=16) on every case shape, GQA ratio and budget
out["defaults"] = []
for b, h, hkv, t in cases + [(1, 4, 1, 129), (3, 2, 2, 16)]:
    d = 16 if t % 2 else 32
    q = torch.randn(b, h, d, generator=g)
    k = torch.randn(b, hkv, t, d, generator=g)
    v = torch.randn(b, hkv, t, d, generator=g)
    for n in (1, t // 2 + 1, t + 3):
        idx = torch.argsort(torch.rand(b, hkv, t, generator=g), -1)[..., :min(n, t)]
        if n > t:
            idx = torch.cat([idx, torch.full((b, hkv, n - t), -1)], -1)
        out["defaults"].append(float((sd.sparse_decode_reference(q, k, v, idx) - on_dev(sd.sparse_decode_triton, q, k, v, idx)).abs().max()))
# bf16 inputs against the float32 reference of the same (rounded) inputs
qb, kb, vb = (torch.randn(2, 4, 32, generator=g).bfloat16(), torch.randn(2, 2, 40, 32, generator=g).bfloat16(),
              torch.randn(2, 2, 40, 32, generator=g).bfloat16())
idx = torch.argsort(torch.rand(2, 2, 40, generator=g), -1)[..., :24]
ref32 = sd.sparse_decode_reference(qb.float(), kb.float(), vb.float(), idx)
tri = on_dev(sd.sparse_decode_triton, qb, kb, vb, idx)
out["bf16_dtype"] = str(tri.dtype)
out["bf16_kernel"] = float((tri.float() - ref32).abs().max())
out["bf16_reference"] = float((sd.sparse_decode_reference(qb, kb, vb, idx).float() - ref32).abs().max())
# an all-padding row: NaN in both paths (documented contract)
idx = torch.full((1, 2, 4), -1); idx[0, 1] = torch.tensor([0, 1, 2, -1])
q, k = torch.randn(1, 2, 16, generator=g), torch.randn(1, 2, 5, 16, generator=g)
r, t_ = sd.sparse_decode_reference(q, k, k, idx), on_dev(sd.sparse_decode_triton, q, k, k, idx)
out["empty_row_nan"] = [bool(r[0, 0].isnan().all()), bool(t_[0, 0].isnan().all()),
                        bool(torch.isfinite(r[0, 1]).all()), bool(torch.isfinite(t_[0, 1]).all())]
# duplicate indices: the gather paths count a key twice, the masked definition once (documented)
idx = torch.tensor([[[0, 0, 1, 2], [0, 1, 2, 3]]])
r, t_, m_ = (sd.sparse_decode_reference(q, k, k, idx), on_dev(sd.sparse_decode_triton, q, k, k, idx),
             sd.dense_masked_reference(q, k, k, idx))
out["duplicates"] = [float((r - t_).abs().max()), float((r[0, 0] - m_[0, 0]).abs().max()), float((r[0, 1] - m_[0, 1]).abs().max())]
# Quest with k above the number of valid pages: extra slots are (-inf, -1) in both paths
k = torch.randn(1, 2, 40, 16, generator=g)
kmin, kmax, valid = qp.page_metadata(k, 8, length=12)             # 2 valid pages of 5
q = torch.randn(1, 4, 16, generator=g)
rv, ri = qp.quest_topk_reference(q, kmin, kmax, valid, 4)
tv, ti = on_dev(qp.quest_topk_triton, q, kmin, kmax, valid, 4, block_pages=2)
out["quest_overflow"] = {"ref": ri.tolist(), "tri": ti.tolist(), "ref_inf": bool(torch.isinf(rv[..., 2:]).all()),
                         "tri_inf": bool(torch.isinf(tv[..., 2:]).all())}
# a non-contiguous cache (a strided view of a larger buffer)
big = torch.randn(1, 2, 64, 32, generator=g)
k, v = big[:, :, ::2], big[:, :, 1::2]
q = torch.randn(1, 4, 32, generator=g)
idx = torch.tensor([[[0, 3, 9, 31, -1], [1, 2, 4, 8, 16]]])
out["noncontig"] = float((sd.sparse_decode_reference(q, k, v, idx) - on_dev(sd.sparse_decode_triton, q, k, v, idx)).abs().max())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted():
    pytest.importorskip("triton")
    env = kernel_env()
    return run_kernel_script(SCRIPT, env=env, timeout=300)


def test_sparse_decode_kernel_matches_reference(interpreted):
    assert len(interpreted["decode"]) == 30
    assert max(interpreted["decode"]) <= 1e-5


def test_sparse_reference_equals_dense_masked(interpreted):
    assert max(interpreted["decode_full"]) <= 1e-5


def test_non_contiguous_cache(interpreted):
    assert interpreted["noncontig"] <= 1e-5


def test_quest_block_topk_matches_reference(interpreted):
    assert interpreted["quest"] and max(interpreted["quest"]) <= 1e-4
    assert interpreted["quest_sets"]


def test_kernel_modules_import_without_triton_use():
    # importing the modules must not import Triton (lazy); the reference paths work on CPU
    code = ("import sys; import compendium.kernels.sparse_decode as a, compendium.kernels.quest_pages as b; "
            "print('triton' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_bad_arguments_raise():
    from compendium.kernels import quest_pages, sparse_decode

    q, k = torch.zeros(1, 3, 16), torch.zeros(1, 2, 5, 16)
    with pytest.raises(ValueError):
        sparse_decode.sparse_decode_reference(q, k, k, torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError):
        sparse_decode.sparse_decode(torch.zeros(1, 2, 16), k, k, torch.zeros(1, 2, 3, dtype=torch.long), backend="x")
    with pytest.raises(ValueError):
        quest_pages.page_metadata(k, 0)


def test_default_launch_parameters(interpreted):
    assert len(interpreted["defaults"]) == 21 and max(interpreted["defaults"]) <= 1e-5


def test_bf16_inputs(interpreted):
    # the kernel accumulates in float32: within bf16 output rounding of the float32 reference
    assert interpreted["bf16_dtype"] == "torch.bfloat16"
    assert interpreted["bf16_kernel"] <= 1e-2
    assert interpreted["bf16_kernel"] <= interpreted["bf16_reference"] + 1e-2


def test_empty_rows_are_nan_in_both_paths(interpreted):
    assert interpreted["empty_row_nan"] == [True, True, True, True]


def test_duplicate_indices_contract(interpreted):
    same, dup_vs_mask, distinct_vs_mask = interpreted["duplicates"]
    assert same <= 1e-5                 # kernel = gather reference, duplicates included
    assert dup_vs_mask > 1e-4           # ... which differs from the masked definition (documented)
    assert distinct_vs_mask <= 1e-5     # distinct indices: all three agree


def test_quest_k_above_valid_pages(interpreted):
    q = interpreted["quest_overflow"]
    assert q["ref_inf"] and q["tri_inf"]
    for rows in (q["ref"], q["tri"]):
        for row in rows[0]:
            assert row[2:] == [-1, -1] and sorted(row[:2]) == [0, 1]   # the two valid pages, no repeat


def test_dispatch_falls_back_with_a_warning(monkeypatch):
    import compendium.kernels as kernels
    from compendium.kernels import sparse_decode

    class FakeCuda:
        is_cuda = True

    with pytest.warns(RuntimeWarning, match="power of two"):
        assert not kernels.use_triton("auto", FakeCuda(), why_not="head size 24 is not a power of two")
    monkeypatch.setattr(kernels, "triton_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert not kernels.use_triton("auto", FakeCuda())
    assert kernels.use_triton("triton", FakeCuda()) and not kernels.use_triton("reference", FakeCuda())
    assert not kernels.use_triton("auto", torch.zeros(1))
    with pytest.raises(ValueError):
        kernels.use_triton("cuda", torch.zeros(1))
    q, k = torch.randn(1, 2, 24), torch.randn(1, 1, 5, 24)  # CPU: the reference, no warning
    idx = torch.tensor([[[0, 1, 4]]])
    torch.testing.assert_close(sparse_decode.sparse_decode(q, k, k, idx), sparse_decode.sparse_decode_reference(q, k, k, idx))
