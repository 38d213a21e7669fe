r"""The tiny CNN on digits, as a stack of models (one grouped convolution serves them all).

Architecture (ours; the issue names only "a tiny CNN"): two 3 x 3 convolutions with 8 and 16
channels, padding 1, GELU after each (smooth, as in the MLPs, so that the gradient map has an input
derivative for the attack to follow), 2 x 2 average pooling, a linear head on the 16 x 4 x 4
pooled map to 10 classes (a global pool would throw away where the strokes are). The
stack of ``M`` models runs as one ``conv2d`` with ``groups = M``: the input ``(M, N, 64)`` becomes
``(N, M, 8, 8)``, the first weight ``(M * 8, 1, 3, 3)``, the second ``(M * 16, 8, 3, 3)``. Because
no two models share a weight or an input, the gradient of the sum of their outputs is each
model's own gradient, and every read-out of ``attribution.py`` (gradient map, attack, input and
parameter Hessians, temperature, captum) works on a CNN stack unchanged:
``models.stack_forward`` sends a stack whose first weight is 5-dimensional here.

Training (``train_cnn_stack``): plain SGD by autograd on the sum of the models' mean losses,
model ``m`` with its own step size, initialisation and batch order (``seeds[m]``), the last
short batch of an epoch dropped, as the MLP trainer does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["CHANNELS", "init_cnn_stack", "cnn_forward", "is_cnn", "train_cnn_stack"]

CHANNELS = (8, 16)
SIDE = 8


def is_cnn(params) -> bool:
    return params[0].dim() == 5


def init_cnn_stack(seeds, classes: int = 10, channels=CHANNELS) -> list[torch.Tensor]:
    """``[C1 (M, c1, 1, 3, 3), b1 (M, c1), C2 (M, c2, c1, 3, 3), b2 (M, c2), W (M, 16 c2, C), b (M, 1, C)]``,
    uniform +-1/sqrt(fan_in) (torch's default), model ``m`` from ``seeds[m]`` alone."""
    c1, c2 = channels
    pooled = c2 * (SIDE // 2) ** 2
    shapes = [((c1, 1, 3, 3), 9), ((c1,), 9), ((c2, c1, 3, 3), 9 * c1), ((c2,), 9 * c1), ((pooled, classes), pooled),
              ((1, classes), pooled)]
    out = [[] for _ in shapes]
    for s in seeds:
        g = torch.Generator().manual_seed(int(s) * 104729 + 17)
        for i, (shape, fan) in enumerate(shapes):
            out[i].append((torch.rand(shape, generator=g) * 2 - 1) / math.sqrt(fan))
    return [torch.stack(p) for p in out]


def cnn_forward(params, x: torch.Tensor) -> torch.Tensor:
    """Logits ``(M, N, C)`` of a CNN stack on inputs ``(M, N, 64)``."""
    C1, b1, C2, b2, W, b = params
    M, N = x.shape[0], x.shape[1]
    h = x.reshape(M, N, SIDE, SIDE).transpose(0, 1)                               # (N, M, 8, 8)
    h = F.gelu(F.conv2d(h, C1.flatten(0, 1), b1.flatten(), padding=1, groups=M))  # (N, M*c1, 8, 8)
    h = F.gelu(F.conv2d(h, C2.flatten(0, 1), b2.flatten(), padding=1, groups=M))  # (N, M*c2, 8, 8)
    h = F.avg_pool2d(h, 2).reshape(N, M, -1).transpose(0, 1)                      # (M, N, c2 * 16)
    return torch.baddbmm(b, h, W)


def train_cnn_stack(x: np.ndarray, y: np.ndarray, learning_rates, seeds, batch_size: int, epochs: int,
                    *, order_seed: int = 0) -> tuple[list[torch.Tensor], np.ndarray]:
    """Plain SGD (no momentum, no weight decay) for ``M = len(seeds)`` CNNs; returns the stack and
    the ``(epochs, M)`` mean training loss per epoch."""
    lr = torch.as_tensor(np.asarray(learning_rates, dtype=np.float32))
    seeds = [int(s) for s in seeds]
    M, n = len(seeds), len(y)
    if lr.shape != (M,):
        raise ValueError(f"need one learning rate per model, got {tuple(lr.shape)} for {M} models")
    if not 1 <= batch_size <= n or epochs < 1:
        raise ValueError(f"need batch_size in [1, {n}] and epochs >= 1, got {batch_size}, {epochs}")
    params = [p.requires_grad_() for p in init_cnn_stack(seeds, int(y.max()) + 1)]
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    gens = [np.random.default_rng([s, order_seed, 5]) for s in seeds]
    steps = n // batch_size
    losses = np.zeros((epochs, M))
    for epoch in range(epochs):
        orders = np.stack([g.permutation(n) for g in gens])
        for step in range(steps):
            idx = torch.from_numpy(orders[:, step * batch_size:(step + 1) * batch_size])
            logits = cnn_forward(params, X[idx])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), Y[idx].reshape(-1),
                                   reduction="none").view(M, -1).mean(1)
            grads = torch.autograd.grad(loss.sum(), params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p -= lr.view((M,) + (1,) * (p.dim() - 1)) * g
            losses[epoch] += loss.detach().numpy() / steps
    return [p.detach() for p in params], losses
