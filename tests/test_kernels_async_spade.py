"""Triton kernels of compendium.kernels (sparse_decode, quest_pages) against their PyTorch
references, run on the CPU with Triton's interpreter (TRITON_INTERPRET=1).

The comparisons run in one subprocess, because the interpreter flag must be set before Triton is
first imported and another test module may already have imported it in this process. Shapes are
small and random: T not a multiple of the page size, GQA ratios 1/2/4, index sets with padding and
of size >= T, non-contiguous caches.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

SCRIPT = r"""
import json, math, torch
from compendium.kernels import sparse_decode as sd, quest_pages as qp
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
            tri = sd.sparse_decode_triton(q, k, v, idx, num_splits=splits, block_n=8)
            out["decode"].append(float((ref - tri).abs().max()))
        out["decode_full"].append(float((ref - sd.dense_masked_reference(q, k, v, idx)).abs().max()))
    for page in (8, 16):
        kmin, kmax, valid = qp.page_metadata(k, page, length=t - 2)
        pages = kmin.shape[2]
        for kk in sorted({1, min(2, pages), pages}):
            rv, ri = qp.quest_topk_reference(q, kmin, kmax, valid, kk)
            tv, ti = qp.quest_topk_triton(q, kmin, kmax, valid, kk, block_pages=2)
            finite = torch.isfinite(rv)
            out["quest"].append(float((rv[finite] - tv[finite]).abs().max()) if finite.any() else 0.0)
            same = all(set(a[f].tolist()) == set(c[f].tolist()) for a, c, f in
                       zip(ri.view(-1, kk), ti.view(-1, kk), finite.view(-1, kk)))
            out["quest_sets"] = out["quest_sets"] and same
# a non-contiguous cache (a strided view of a larger buffer)
big = torch.randn(1, 2, 64, 32, generator=g)
k, v = big[:, :, ::2], big[:, :, 1::2]
q = torch.randn(1, 4, 32, generator=g)
idx = torch.tensor([[[0, 3, 9, 31, -1], [1, 2, 4, 8, 16]]])
out["noncontig"] = float((sd.sparse_decode_reference(q, k, v, idx) - sd.sparse_decode_triton(q, k, v, idx)).abs().max())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
