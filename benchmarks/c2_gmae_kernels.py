"""Time the C2-GMAE sparse-GAT layer through the segment-softmax kernel against torch_geometric's GATConv.

    python benchmarks/c2_gmae_kernels.py [--nodes 20000] [--degree 10] [--reps 20]

The issue keeps the kernel only if it beats ``torch_geometric`` on a GPU. On CUDA this checks that
``SegmentGATConv`` (Triton kernel) agrees with ``BiasedGATConv`` (GATConv's softmax + propagate)
on a random degree-corrected graph with the HEA bias, then prints the median time of a forward
pass (eval) and of a forward + backward pass (train, attention dropout on) for both, and the
ratios (GATConv / kernel). Without CUDA it says so and times GATConv against the PyTorch
reference path on the CPU at a small size (the interpreter used by the tests is for correctness,
not speed).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from compendium.papers import c2_gmae as paper
from compendium.kernels.bench import median_time as _median_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--degree", type=float, default=10.0)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    n = args.nodes or (20000 if cuda else 1000)
    if not cuda:
        print("No CUDA device: the Triton kernel is not timed; timing GATConv against the PyTorch reference path on the CPU.")
    gr = paper.csbm_dc(n, 4, 0.5, args.degree, args.features, 1.0, np.random.default_rng(0)) if n <= 3000 else None
    if gr is None:                                         # csbm_dc is dense in n: draw a sparse random graph instead
        g = torch.Generator().manual_seed(0)
        m = int(args.degree * n / 2)
        src, dst = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
        keep = src != dst
        ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
        x = torch.randn(n, args.features, generator=g)
    else:
        ei, x = gr.edge_index, gr.x
    ei = paper.with_self_loops(ei, n)
    bias = torch.log(paper.hetero_edge_weights(x, ei, 1.0))
    x, ei, bias = x.to(device), ei.to(device), bias.to(device)
    torch.manual_seed(0)
    plain = paper.BiasedGATConv(args.features, args.head_dim, heads=args.heads, dropout=0.1, add_self_loops=False).to(device)
    kern = paper.SegmentGATConv(args.features, args.head_dim, heads=args.heads, dropout=0.1, add_self_loops=False).to(device)
    kern.load_state_dict(plain.state_dict())
    plain.eval(), kern.eval()
    with torch.no_grad():
        err = float((plain(x, ei, edge_attr=bias) - kern(x, ei, edge_attr=bias)).abs().max())
    backend = "Triton kernel" if cuda else "PyTorch reference"
    print(f"nodes {n}, edges {ei.shape[1]} (self loops included), heads {args.heads} x {args.head_dim}; "
          f"max |SegmentGATConv - GATConv| = {err:.2e} ({backend})")

    def forward(layer):
        def fn():
            with torch.no_grad():
                layer(x, ei, edge_attr=bias)
        return fn

    def train_step(layer):
        def fn():
            layer.train()
            layer(x, ei, edge_attr=bias).square().mean().backward()
        return fn

    rows = []
    for what, make in (("forward (eval)", forward), ("forward + backward (train)", train_step)):
        t_plain = _median_time(make(plain), args.reps, cuda)
        t_kern = _median_time(make(kern), args.reps, cuda)
        rows.append((what, t_plain, t_kern))
    print(f"{'pass':28s} {'GATConv ms':>12s} {'segment ms':>12s} {'GATConv / segment':>18s}")
    for what, a, b in rows:
        print(f"{what:28s} {1e3 * a:12.3f} {1e3 * b:12.3f} {a / b:18.2f}")


if __name__ == "__main__":
    main()
