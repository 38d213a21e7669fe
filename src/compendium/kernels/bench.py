"""Timing for the kernel benchmarks (``benchmarks/*_kernels.py``, run by ``benchmarks/gpu_check.sh``).

One warm-up call (on CUDA it also compiles the Triton kernel), then the median wall time of
``reps`` calls; on CUDA each call is followed by ``torch.cuda.synchronize()`` so the time is the
kernel's, not its launch's.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_time(fn: Callable[[], object], reps: int, cuda: bool) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after one untimed warm-up call."""
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a whole number >= 1, got {reps!r}")
    sync = _synchronize if cuda else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _synchronize() -> None:
    import torch

    torch.cuda.synchronize()
