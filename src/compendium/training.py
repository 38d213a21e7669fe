"""One small trainer for the tiny torch models the chapters train (assets and in-notebook fits).

Every chapter that trains a model needs the same handful of things, and each used to write them
again: AdamW, gradient clipping, a learning-rate warm-up or cosine decay, seeded initialisation
that leaves the global RNG alone, a scoped thread count (one thread: faster for these sizes on a
shared 2-core machine, and bitwise reproducible), and a stopping rule that checks a held-out
metric every few steps. :func:`fit` makes each of them an explicit argument and records what
happened (:class:`TrainLog`), so an asset can save its training metrics beside its weights.

    spec = TrainSpec(max_steps=800, learning_rate=3e-3, check_every=10, target=0.5)
    with seeded_init(seed):
        model = TinyModel(config)
    rng = np.random.default_rng(seed)                     # batches: the caller's own stream
    log = fit(model, lambda step: loss_of(model, next_batch(rng)), spec,
              check=lambda m: dev_accuracy(m, dev))
    metrics = log.to_dict()

The batch stream belongs to the caller (a closure over its own generator), so the trainer never
draws random numbers itself: the same seed gives the same model, step for step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

import torch

__all__ = ["TrainSpec", "TrainLog", "fit", "learning_rate_at", "seeded_init", "torch_threads"]

SCHEDULES = ("constant", "cosine", "linear_decay")


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(threads)``; restore the previous count after."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Seed torch's CPU generator for the block (parameter initialisation), then restore it.

    The global stream is forked, so building a model here neither depends on nor moves whatever
    else the process has drawn.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


@dataclass(frozen=True)
class TrainSpec:
    """How to train: optimiser, schedule, clipping, threads and the stopping rule.

    Parameters
    ----------
    max_steps : int
        Optimiser steps at most (the stopping rule may end earlier).
    learning_rate : float
        Peak AdamW learning rate.
    weight_decay : float
        AdamW's decoupled weight decay.
    betas : tuple of float
        AdamW's moment coefficients.
    grad_clip : float or None
        Clip the global gradient norm to this value before each step (None: no clipping).
    warmup_steps : int
        Linear warm-up: step ``k`` (0-based) uses ``lr * min(1, (k + 1) / warmup_steps)``.
    schedule : {'constant', 'cosine', 'linear_decay'}
        After the warm-up, a constant rate, ``lr * (1 + cos(pi * k / max_steps)) / 2``, or
        ``lr * (f + (1 - f) * (1 - k / max_steps))`` with ``f = final_fraction`` (linear decay
        towards ``f * lr``).
    final_fraction : float
        Where ``'linear_decay'`` ends, as a fraction of the peak rate (0 for the other schedules).
    threads : int
        torch threads while training (restored afterwards).
    check_every : int
        Evaluate ``check(model)`` every this many steps (0: never).
    target : float or None
        Stop at the first check whose value is ``>= target`` (needs ``check_every``).
    log_every : int
        Record the training loss every this many steps (and at the last step).
    """

    max_steps: int
    learning_rate: float
    weight_decay: float = 0.01
    betas: tuple = (0.9, 0.999)
    grad_clip: float | None = None
    warmup_steps: int = 0
    schedule: str = "constant"
    final_fraction: float = 0.0
    threads: int = 1
    check_every: int = 0
    target: float | None = None
    log_every: int = 50

    def __post_init__(self):
        for name in ("max_steps", "warmup_steps", "check_every", "threads", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainSpec.{name} must be a non-negative integer, got {value!r}")
        if self.max_steps < 1 or self.threads < 1 or self.log_every < 1:
            raise ValueError("TrainSpec needs max_steps, threads and log_every >= 1")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(f"TrainSpec.learning_rate must be a positive number, got {self.learning_rate!r}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"TrainSpec.weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.grad_clip is not None and not (self.grad_clip > 0 and math.isfinite(self.grad_clip)):
            raise ValueError(f"TrainSpec.grad_clip must be positive or None, got {self.grad_clip!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainSpec.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not (0.0 <= self.final_fraction <= 1.0):
            raise ValueError(f"TrainSpec.final_fraction must be in [0, 1], got {self.final_fraction!r}")
        if self.final_fraction and self.schedule != "linear_decay":
            raise ValueError("TrainSpec.final_fraction applies to the 'linear_decay' schedule only")
        if self.target is not None and self.check_every == 0:
            raise ValueError("TrainSpec.target needs check_every > 0 (a stopping rule needs a check)")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))


def learning_rate_at(spec: TrainSpec, step: int) -> float:
    """The learning rate of 0-based optimiser step ``step`` under ``spec``'s warm-up and schedule."""
    lr = spec.learning_rate
    if spec.warmup_steps:
        lr *= min(1.0, (step + 1) / spec.warmup_steps)
    if spec.schedule == "cosine":
        lr *= 0.5 * (1.0 + math.cos(math.pi * step / spec.max_steps))
    elif spec.schedule == "linear_decay":
        lr *= spec.final_fraction + (1.0 - spec.final_fraction) * (1 - step / spec.max_steps)
    return lr


@dataclass
class TrainLog:
    """What :func:`fit` did: steps run, losses, checks, whether the stopping rule fired."""

    steps: int = 0
    losses: list = field(default_factory=list)  # (step, loss), 1-based steps
    checks: list = field(default_factory=list)  # (step, value)
    stopped_early: bool = False
    final_loss: float = math.nan
    seconds: float = 0.0

    @property
    def last_check(self) -> float | None:
        return self.checks[-1][1] if self.checks else None

    def to_dict(self, timing: bool = False) -> dict:
        """JSON-ready metrics (wall time left out unless asked: it varies between runs)."""
        out = asdict(self)
        out["last_check"] = self.last_check
        if not timing:
            out.pop("seconds")
        return out


def _lr_scale(group: dict) -> float:
    c = group.get("lr_scale", 1.0)
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not (c >= 0 and math.isfinite(c)):
        raise ValueError(f"a param group's lr_scale must be a number >= 0, got {c!r}")
    return float(c)


def _scaled_spec(spec: TrainSpec, c: float) -> TrainSpec | None:
    """``spec`` with peak rate ``c * spec.learning_rate`` (None for ``c = 0``: a frozen group)."""
    if c == 1.0:
        return spec
    return replace(spec, learning_rate=spec.learning_rate * c) if c > 0 else None


def fit(
    model: torch.nn.Module,
    loss_fn: Callable[[int], torch.Tensor],
    spec: TrainSpec,
    *,
    check: Callable[[torch.nn.Module], float] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> TrainLog:
    """Train ``model`` by minimising ``loss_fn(step)`` with AdamW under ``spec``.

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place (``model.train()`` during steps; checks run in ``eval()`` mode).
    loss_fn : callable
        ``loss_fn(step) -> scalar tensor`` for 0-based ``step``: draws its own batch (from the
        caller's seeded generator) and returns the loss to minimise.
    spec : TrainSpec
    check : callable, optional
        ``check(model) -> float`` on held-out data, every ``spec.check_every`` steps.
    optimizer : torch.optim.Optimizer, optional
        Continue with this optimiser (e.g. a second phase, or another optimiser such as Adam);
        default a fresh AdamW from ``spec``. Without a ``scheduler``, ``fit`` sets every param
        group's rate each step to the rate of ``spec`` (warm-up and schedule) with peak
        ``spec.learning_rate * group.get("lr_scale", 1.0)``: a group with ``"lr_scale": 30.0``
        (e.g. an embedding table) follows the same schedule at 30 times the rate; ``0`` freezes it.
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        A torch scheduler of ``optimizer`` that owns the learning rate (and whatever else it
        schedules, e.g. ``OneCycleLR``'s momentum): ``fit`` then leaves the rate alone and calls
        ``scheduler.step()`` after every optimiser step. Needs ``spec``'s schedule 'constant'
        with no warm-up, so that two schedules never compete.

    Returns
    -------
    TrainLog
    """
    if spec.check_every and check is None:
        raise ValueError("spec.check_every > 0 needs a check(model) function")
    if scheduler is not None:
        if optimizer is None or scheduler.optimizer is not optimizer:
            raise ValueError("a scheduler needs the optimizer it schedules (pass both)")
        if spec.schedule != "constant" or spec.warmup_steps:
            raise ValueError("with a scheduler, spec.schedule must be 'constant' with warmup_steps=0")
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate,
                                      weight_decay=spec.weight_decay, betas=spec.betas)
    log = TrainLog()
    start = time.perf_counter()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    # one spec per distinct lr_scale; the scaled peak is multiplied first, as torch's LambdaLR does
    # (base_lr * factor), so a group's rates equal LambdaLR's to the last bit
    scales = [_lr_scale(group) for group in optimizer.param_groups]
    if scheduler is not None and any(c != 1.0 for c in scales):
        raise ValueError("lr_scale is applied by fit's own schedule: with a scheduler, set each group's rate instead")
    specs = {c: _scaled_spec(spec, c) for c in set(scales)}
    with torch_threads(spec.threads):
        model.train()
        for step in range(spec.max_steps):
            if scheduler is None:
                rates = {c: 0.0 if sc is None else learning_rate_at(sc, step) for c, sc in specs.items()}
                for group, c in zip(optimizer.param_groups, scales):
                    group["lr"] = rates[c]
            loss = loss_fn(step)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise ValueError("loss_fn(step) must return a scalar tensor")
            optimizer.zero_grad()
            loss.backward()
            if spec.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            log.steps = step + 1
            log.final_loss = float(loss.detach())
            if log.steps % spec.log_every == 0:
                log.losses.append((log.steps, log.final_loss))
            if spec.check_every and log.steps % spec.check_every == 0:
                model.eval()
                with torch.no_grad():
                    value = float(check(model))
                model.train()
                log.checks.append((log.steps, value))
                if spec.target is not None and value >= spec.target:
                    log.stopped_early = log.steps < spec.max_steps
                    break
        if not log.losses or log.losses[-1][0] != log.steps:
            log.losses.append((log.steps, log.final_loss))
        model.eval()
    log.seconds = time.perf_counter() - start
    return log
