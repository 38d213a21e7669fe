"""Time the nested-prefix similarity kernel (matryoshka_3d's MRL logits) against its references.

    python benchmarks/matryoshka_3d_kernels.py [--queries 4096] [--docs 8192] [--dim 1024] [--reps 20]

On CUDA it checks that the Triton kernel agrees with the per-width loop (max abs error at most
1e-5 in float32), then prints the median time of the kernel, the PyTorch reference (prefix-summed
chunk Grams) and the loop, and the ratios. Without CUDA it says so and times the two PyTorch
versions on the CPU only (smaller default sizes). Widths: MRL's {8, 16, ...} < d plus d.
"""

from __future__ import annotations

import argparse

import torch

from compendium.kernels import nested_prefix as npx
from compendium.kernels.bench import checked_time
from compendium.kernels.bench import median_time as _median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    B = args.queries or (4096 if cuda else 256)
    N = args.docs or (8192 if cuda else 1024)
    d = args.dim or (1024 if cuda else 256)
    dims, m = [], 8
    while m < d:
        dims.append(m)
        m *= 2
    dims.append(d)
    if not cuda:
        print("No CUDA device: the Triton kernel is not timed; timing the PyTorch references on the CPU only.")
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(B, d, device=device, generator=g)
    c = torch.randn(N, d, device=device, generator=g)
    with torch.no_grad():
        ref = lambda: npx.nested_prefix_similarity_reference(q, c, dims)  # noqa: E731
        naive = lambda: npx.nested_prefix_similarity_naive(q, c, dims)  # noqa: E731
        t_ref = _median_time(ref, args.reps, cuda)
        t_naive = _median_time(naive, args.reps, cuda)
        print(f"nested_prefix  B={B} N={N} d={d} widths={len(dims)}: reference {t_ref * 1e3:.3f} ms, "
              f"per-width loop {t_naive * 1e3:.3f} ms (loop / reference = {t_naive / t_ref:.2f})")
        if cuda:
            ker = lambda: npx.nested_prefix_similarity_triton(q, c, dims)  # noqa: E731
            t_ker, worst = checked_time(ker, naive, 1e-5, args.reps, cuda, against="loop")
            print(f"nested_prefix  B={B} N={N} d={d}: kernel {t_ker * 1e3:.3f} ms  (reference / kernel = "
                  f"{t_ref / t_ker:.2f}, loop / kernel = {t_naive / t_ker:.2f}; max error {worst:.2e})")


if __name__ == "__main__":
    main()
