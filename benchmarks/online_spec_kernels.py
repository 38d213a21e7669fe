"""Time the OnlineSPEC batched speculative-verify kernel against its PyTorch reference.

    python benchmarks/online_spec_kernels.py [--batch 256] [--gamma 4] [--vocab 32000]

On CUDA it checks that the Triton kernel agrees with the reference token for token (same
uniforms and exponentials), then prints the median time of both and the ratio (reference /
kernel). Without CUDA it says so and times only the reference on the CPU (smaller default sizes).
"""

from __future__ import annotations

import argparse

import torch

from compendium.kernels import spec_verify as sv
from compendium.kernels.bench import median_time as _median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    B = args.batch or (256 if cuda else 32)
    V = args.vocab or (16384 if cuda else 4096)
    if not cuda:
        print("No CUDA device: the Triton kernel is not timed; timing the PyTorch reference on the CPU only.")
    g = torch.Generator(device=device).manual_seed(0)
    p = torch.softmax(torch.randn(B, args.gamma + 1, V, device=device, generator=g), -1)
    q = torch.softmax(p[:, : args.gamma].log() + 0.5 * torch.randn(B, args.gamma, V, device=device, generator=g), -1)
    d = torch.multinomial(q.reshape(-1, V), 1, generator=g).view(B, args.gamma)
    u = torch.rand(B, args.gamma, device=device, generator=g)
    e = torch.empty(B, V, device=device).exponential_(generator=g)
    ref = lambda: sv.spec_verify_reference(p, q, d, u, e)  # noqa: E731
    t_ref = _median_time(ref, args.reps, cuda)
    print(f"spec_verify  B={B} gamma={args.gamma} V={V}: reference {t_ref * 1e3:.3f} ms")
    if cuda:
        ker = lambda: sv.spec_verify_triton(p, q, d, u, e)  # noqa: E731
        n_r, t_r = ref()
        n_k, t_k = ker()
        agree = bool(torch.equal(n_r, n_k) and torch.equal(t_r, t_k))
        t_ker = _median_time(ker, args.reps, cuda)
        print(f"  triton {t_ker * 1e3:.3f} ms  ratio reference/kernel {t_ref / t_ker:.2f}  token-for-token agreement: {agree}")
        if not agree:
            raise SystemExit("kernel and reference disagree")


if __name__ == "__main__":
    main()
