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


def checked_time(kernel: Callable[[], object], reference: Callable[[], object], tol: float, reps: int,
                 cuda: bool, against: str = "reference") -> tuple[float, float]:
    """Check that ``kernel()`` agrees with ``reference()`` (max abs difference at most ``tol``), then
    time the kernel: ``(median seconds, max abs difference)``. A disagreement exits with a message
    naming ``against`` and the error, so a wrong kernel is never timed."""
    worst = float((kernel() - reference()).abs().max())
    if not worst <= tol:
        raise SystemExit(f"kernel and {against} disagree: max abs error {worst:.3e} (tolerance {tol:.0e})")
    return median_time(kernel, reps, cuda), worst
