"""Time the event2vec fused token kernel (table gather + last temporal conv + LayerNorm + add + mask)
against its PyTorch reference.

    python benchmarks/event2vec_kernels.py [--batch 64] [--events 4096] [--dim 64] [--reps 20]

On CUDA it checks that the Triton kernel agrees with the reference (float32, max abs error at most
1e-4), then prints the median time of both and the ratio (reference / kernel). Without CUDA it
says so and times only the reference on the CPU (smaller default sizes).
"""

from __future__ import annotations

import argparse

import torch

from compendium.kernels.bench import checked_time, median_time
from compendium.kernels.event_tokens import event_tokens_reference, event_tokens_triton


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    B = args.batch or (64 if cuda else 4)
    N = args.events or (4096 if cuda else 256)
    d = args.dim
    C, V = d // 2, 2 * 128 * 128 + 1                   # the paper's DVS Gesture sensor: 2 x 128 x 128 event types
    if not cuda:
        print("No CUDA device: the Triton kernel is not timed; timing the PyTorch reference on the CPU only.")
    g = torch.Generator(device=device).manual_seed(0)
    table = torch.randn(V, d, device=device, generator=g)
    lengths = torch.randint(N // 2, N + 1, (B,), device=device, generator=g)
    mask = torch.arange(N, device=device)[None] < lengths[:, None]
    index = torch.randint(1, V, (B, N), device=device, generator=g).masked_fill(~mask, 0)
    hidden = torch.randn(B, N, C, device=device, generator=g)
    w, b = torch.randn(d, 1, 3, device=device, generator=g), torch.randn(d, device=device, generator=g)
    gamma, beta = torch.ones(d, device=device), torch.zeros(d, device=device)
    inputs = (table, index, hidden, w, b, gamma, beta, mask)
    ref = lambda: event_tokens_reference(*inputs)  # noqa: E731
    t_ref = median_time(ref, args.reps, cuda)
    print(f"event_tokens  B={B} N={N} d={d} V={V}: reference {t_ref * 1e3:.3f} ms")
    if cuda:
        ker = lambda: event_tokens_triton(*inputs)  # noqa: E731
        t_ker, worst = checked_time(ker, ref, 1e-4, args.reps, cuda)
        print(f"event_tokens  B={B} N={N} d={d} V={V}: kernel {t_ker * 1e3:.3f} ms  "
              f"(reference / kernel = {t_ref / t_ker:.2f}; max error {worst:.2e})")


if __name__ == "__main__":
    main()
