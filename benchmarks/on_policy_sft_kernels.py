"""Time the On-Policy SFT fused log-softmax + entropy + gather kernel against its PyTorch reference.

    python benchmarks/on_policy_sft_kernels.py [--rows 4096] [--vocab 151936] [--reps 20]

On CUDA it checks that the Triton kernel agrees with the reference (float32, error / max(1, |x|)
at most 1e-5), then prints the median time of both and the ratio (reference / kernel). Without
CUDA it says so and times only the reference on the CPU (smaller default sizes).
"""

from __future__ import annotations

import argparse

import torch

from compendium.kernels import centered_loglik as cl
from compendium.kernels.bench import median_time as _median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    N = args.rows or (4096 if cuda else 64)
    V = args.vocab or (151936 if cuda else 32000)
    if not cuda:
        print("No CUDA device: the Triton kernel is not timed; timing the PyTorch reference on the CPU only.")
    g = torch.Generator(device=device).manual_seed(0)
    z = torch.randn(N, V, device=device, generator=g) * 3
    y = torch.randint(0, V, (N,), device=device, generator=g)
    ref = lambda: cl.centered_loglik_reference(z, y)  # noqa: E731
    t_ref = _median_time(ref, args.reps, cuda)
    print(f"centered_loglik  N={N} V={V}: reference {t_ref * 1e3:.3f} ms")
    if cuda:
        ker = lambda: cl.centered_loglik_triton(z, y)  # noqa: E731
        worst = max(float(((k - r).abs() / r.abs().clamp(min=1.0)).max()) for k, r in zip(ker(), ref()))
        if worst > 1e-5:
            raise SystemExit(f"kernel and reference disagree: max scaled error {worst:.3e}")
        t_ker = _median_time(ker, args.reps, cuda)
        print(f"centered_loglik  N={N} V={V}: kernel {t_ker * 1e3:.3f} ms  (reference / kernel = {t_ref / t_ker:.2f}; max error {worst:.2e})")


if __name__ == "__main__":
    main()
