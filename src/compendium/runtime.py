"""Seeding and devices: the one place that touches global RNG state.

Library code takes an explicit ``numpy.random.Generator`` / ``torch.Generator``; notebooks call
:func:`seed_everything` once, in the chapter set-up, so that plotting jitter or a library that
ignores generators is reproducible too.
"""

from __future__ import annotations

import os
import random
import warnings

import numpy as np

DEVICES = ("auto", "cpu", "cuda")


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and (if installed) PyTorch globally; return a fresh NumPy generator."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed))  # noqa: NPY002 - the single sanctioned global seeding point
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency, but keep numerics importable
        pass
    else:
        torch.manual_seed(int(seed))
        torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(int(seed))


def make_rng(seed: int, *streams: int) -> np.random.Generator:
    """A NumPy generator for ``seed`` and optional sub-stream ids (independent, reproducible)."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=tuple(int(s) for s in streams)))


def torch_generator(seed: int, device: str = "cpu"):
    """A seeded ``torch.Generator`` on ``device``."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def resolve_device(device: str = "auto") -> str:
    """Map ``'auto' | 'cpu' | 'cuda'`` to the device to use.

    ``'auto'`` picks CUDA when available. ``'cuda'`` without a GPU falls back to the CPU with a
    clear warning (the ``gpu`` profile asks for CUDA; a laptop without one still runs).
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return "cpu"
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:
        return "cuda"
    if device == "cuda":
        warnings.warn(
            "device='cuda' was requested (the gpu profile sets it) but no CUDA device is visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); running on the CPU.",
            RuntimeWarning,
            stacklevel=2,
        )
    return "cpu"
