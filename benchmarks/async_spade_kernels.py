"""Time the AsyncSpade GPU kernels against their PyTorch references.

    python benchmarks/async_spade_kernels.py [--context 32768] [--budget 2048] [--batch 8]

On CUDA it checks that each Triton kernel agrees with its reference, then prints the median
time of both and the ratio (reference / kernel) for the sparse gather decode attention and the
fused Quest page scoring + top-k. Without CUDA it says so and times only the references on the
CPU (smaller default sizes), because Triton kernels need a GPU (the interpreter used by the tests
is for correctness, not speed).
"""

from __future__ import annotations

import argparse

import torch

from compendium.kernels import quest_pages, routing, sparse_decode
from compendium.kernels.bench import median_time as _median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=None, help="cached tokens T")
    parser.add_argument("--budget", type=int, default=None, help="selected tokens per KV head")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    context = args.context or (32768 if cuda else 4096)
    budget = args.budget or (2048 if cuda else 256)
    if not cuda:
        print("No CUDA device: the Triton kernels are not timed; timing the PyTorch references on the CPU only.")
    g = torch.Generator(device=device).manual_seed(0)
    b, h, hkv, d = args.batch, args.heads, args.kv_heads, args.head_dim
    q = torch.randn(b, h, d, device=device, generator=g)
    k = torch.randn(b, hkv, context, d, device=device, generator=g)
    v = torch.randn(b, hkv, context, d, device=device, generator=g)
    idx = torch.argsort(torch.rand(b, hkv, context, device=device, generator=g), -1)[..., :budget]
    kmin, kmax, valid = quest_pages.page_metadata(k, args.page)
    top_pages = max(1, budget // args.page)
    z_route = torch.randn(8192, 128, device=device, generator=g)
    g_route = routing.gumbel_noise((8192, 128), torch.Generator().manual_seed(1)).to(device)
    print(f"device={device} B={b} H={h} H_kv={hkv} d={d} T={context} budget={budget} page={args.page}")

    rows = [
        ("sparse decode attention",
         lambda: sparse_decode.sparse_decode_reference(q, k, v, idx),
         lambda: sparse_decode.sparse_decode_triton(q, k, v, idx, num_splits=8, block_n=32)),
        ("quest scores + top-k",
         lambda: quest_pages.quest_topk_reference(q, kmin, kmax, valid, top_pages),
         # 32 pages per program: a 32 x d tile and at most 32 unrolled arg-max rounds (no spill)
         lambda: quest_pages.quest_topk_triton(q, kmin, kmax, valid, top_pages, block_pages=32)),
        ("expert-sample routing (8192 x 128, k=8)",
         lambda: routing.expert_sample_route_reference(z_route, g_route, 8, 4, 16, 1.0),
         lambda: routing.expert_sample_route_triton(z_route, g_route, 8, 4, 16, 1.0)),
        ("dense decode attention (for scale)",
         lambda: sparse_decode.dense_masked_reference(q, k, v, idx), None),
    ]
    for name, ref, kernel in rows:
        t_ref = _median_time(ref, args.reps, cuda)
        if kernel is None or not cuda:
            print(f"{name:36s} reference {1e3 * t_ref:9.3f} ms")
            continue
        if name.startswith("sparse"):
            err = float((ref() - kernel()).abs().max())
        elif name.startswith("expert"):
            err = float((ref()[1] - kernel()[1]).abs().max())
        else:
            err = float((ref()[0] - kernel()[0]).abs().max())
        t_ker = _median_time(kernel, args.reps, cuda)
        print(f"{name:36s} reference {1e3 * t_ref:9.3f} ms  triton {1e3 * t_ker:9.3f} ms  "
              f"ratio {t_ref / t_ker:6.2f}x  max|diff| {err:.2e}")


if __name__ == "__main__":
    main()
