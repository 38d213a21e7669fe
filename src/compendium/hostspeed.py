"""How fast this host runs the kind of work the chapters do, against the host the budgets were set on.

The smoke budget (60 s a chapter on 2 cores) was fixed on the reference host: the 2-core machine of
the ninth session (2026-12-02), where the whole smoke book built in 1608 s. Hosts differ: on
2026-12-03 the same code and lock took 2752 s on this project's 2-core host, and CI's chapters ran
1.4x to 1.7x longer than on the reference. A wall-clock budget check that ignores the host's speed
then fails for the host, not for the chapter. :func:`slowdown` times a fixed probe (a small torch
MLP trained on one thread, a NumPy reduction and a pure-Python loop: the three kinds of work in the
chapters) and divides by :data:`REFERENCE_PROBE_S`, the probe's time on the reference host.

:data:`REFERENCE_PROBE_S` is inferred, not measured there (that host is gone): the probe took
:data:`PROBE_S_20261203` on the 2026-12-03 host, scaled by 1608 / 2752, the two hosts' smoke-book
times. The runtime page always reports the strict budget; only CI's gate is scaled.
"""

from __future__ import annotations

import time

PROBE_S_20261203 = 0.822  # median of 7 runs of probe() on the 2026-12-03 host (0.734 to 1.015 s)
SMOKE_BOOK_S_REFERENCE = 1608.0
SMOKE_BOOK_S_20261203 = 2752.0


def probe_once() -> float:
    """Seconds for one run of the fixed probe (single-threaded; a few hundred milliseconds to ~1 s)."""
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(256, 64, generator=gen)
        y = torch.randn(256, 1, generator=gen)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(900):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        a = np.random.default_rng(0).standard_normal((400, 400))
        for _ in range(60):
            a = np.tanh(a @ a.T / 400.0)
        total = 0
        for i in range(900_000):
            total += i % 7
        return time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)


def probe(repeats: int = 5) -> float:
    """The fastest of ``repeats`` probe runs after one warm-up run (the least disturbed by other load)."""
    probe_once()
    return min(probe_once() for _ in range(repeats))


def reference_probe_s() -> float:
    """The probe's time on the reference host (inferred; see the module docstring)."""
    return PROBE_S_20261203 * SMOKE_BOOK_S_REFERENCE / SMOKE_BOOK_S_20261203


def slowdown(repeats: int = 5) -> float:
    """This host's probe time over the reference host's, never below 1 (a faster host gets no credit)."""
    return max(1.0, probe(repeats) / reference_probe_s())
