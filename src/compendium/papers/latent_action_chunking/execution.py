"""Chunk execution under synchronous and asynchronous inference, as in the RTR controller.

A new inference starts every ``period`` steps from the current observation; its chunk covers the
``horizon`` steps from that launch and arrives ``latency`` steps later, when the steps that
elapsed meanwhile are dropped (:func:`align_stale`) and the newest chunk wins. Modes:

``sync``        the robot holds its last command while it waits, then runs 24 steps of the chunk;
``naive``       asynchronous, newest chunk wins at its arrival;
``ensemble``    ACT temporal ensembling: every arrived chunk that covers step t votes, weights
                ``exp(-m i)`` with ``i = 0`` the oldest (:func:`ensemble_weights`);
``crossfade``   newest wins, blended linearly from the old chunk over ``crossfade_steps``;
``rtr``         Reuse-then-Refine: ``refined = D(E(last_refined[-24:] ++ new[24:]))`` on arrival,
                no reuse after a reset (:func:`rtr_refine`);
``rtr_identity`` the same splice with the identity in place of encode-decode (negative control).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .tasks import EPISODE_STEPS, HORIZON, PERIOD, Episodes, observe, plant_step

__all__ = ["MODES", "align_stale", "ensemble_weights", "temporal_ensemble", "crossfade", "rtr_refine",
           "Rollout", "rollout"]

MODES = ("sync", "naive", "ensemble", "crossfade", "rtr", "rtr_identity")


def align_stale(chunk: np.ndarray, launch: int, now: int) -> tuple[np.ndarray, int]:
    """Drop the steps of a chunk launched at ``launch`` that elapsed by ``now``: (rest, dropped)."""
    dropped = now - launch
    if dropped < 0 or dropped > chunk.shape[-2]:
        raise ValueError(f"a chunk launched at {launch} cannot be aligned at {now} (horizon {chunk.shape[-2]})")
    return chunk[..., dropped:, :], dropped


def ensemble_weights(count: int, decay: float = 0.01) -> np.ndarray:
    """ACT's weights ``exp(-m i) / sum``, ``i = 0`` the oldest prediction (shape (count,))."""
    if count < 1 or decay < 0:
        raise ValueError("ensemble_weights needs count >= 1 and decay >= 0")
    w = np.exp(-decay * np.arange(count))
    return w / w.sum()


def temporal_ensemble(predictions: list, decay: float = 0.01) -> np.ndarray:
    """Weighted mean of the predictions for one step, oldest first (each (..., 2))."""
    w = ensemble_weights(len(predictions), decay)
    return sum(wi * p for wi, p in zip(w, predictions))


def crossfade(old: np.ndarray, new: np.ndarray, steps: int) -> np.ndarray:
    """Blend two aligned chunks (..., L, 2): weight of ``new`` rises as (i + 1) / (steps + 1), then 1."""
    w = np.minimum((np.arange(new.shape[-2]) + 1) / (steps + 1), 1.0)[:, None]
    return (1 - w) * old + w * new


def rtr_refine(last_refined: np.ndarray | None, new_chunk: np.ndarray, reuse_steps: int,
               project: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Reuse-then-Refine: splice the last refined chunk's final ``reuse_steps`` before the new
    chunk's steps from ``reuse_steps`` on, and project the result (VAE encode-decode).

    The new chunk was launched ``reuse_steps`` after the last one, so both halves are aligned in
    time. ``last_refined=None`` (the first chunk, or after a reset) returns the new chunk as is.
    """
    if last_refined is None:
        return new_chunk
    concat = np.concatenate([last_refined[..., -reuse_steps:, :], new_chunk[..., reuse_steps:, :]], -2)
    return project(concat)


@dataclass
class Rollout:
    """One closed-loop run of every model on every episode (arrays (M, E, T, 2))."""

    actions: np.ndarray
    states: np.ndarray
    velocities: np.ndarray
    cycles: list = field(default_factory=list)    # per chunk after the first: its boundary steps
    dropped: list = field(default_factory=list)   # stale steps dropped at each arrival
    launches: list = field(default_factory=list)


def rollout(policy: Callable[[np.ndarray], np.ndarray], episodes: Episodes, models: int, *, mode: str,
            latency: int, rng: np.random.Generator, goal_noise: float = 0.01, decay: float = 0.01,
            crossfade_steps: int = 12, project: Callable | None = None, period: int = PERIOD,
            horizon: int = HORIZON) -> Rollout:
    """Run ``policy`` (obs (M, E, OBS_DIM) -> chunks (M, E, horizon, 2)) in closed loop."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not 0 <= latency <= horizon - period:
        raise ValueError(f"latency must lie in [0, {horizon - period}], got {latency}")
    if mode == "rtr" and project is None:
        raise ValueError("mode 'rtr' needs project= (the VAE's encode-then-decode)")
    T, E = EPISODE_STEPS, len(episodes)
    x = np.broadcast_to(episodes.commands[:, 0], (models, E, 2)).copy()
    v = np.zeros_like(x)
    hold = x.copy()
    out = Rollout(np.empty((models, E, T, 2)), np.empty((models, E, T, 2)), np.empty((models, E, T, 2)))
    pending, arrived, last_refined = [], [], None
    identity = (lambda c: c)  # noqa: E731
    sync_next = 0                  # sync: when the next inference starts
    for t in range(T):
        launch_now = (t == sync_next) if mode == "sync" else (t % period == 0)
        if launch_now:
            goal = episodes.goal + rng.normal(0, goal_noise, episodes.goal.shape)
            chunk = np.asarray(policy(observe(x, v, t, episodes.task, goal)), float)
            pending.append({"t0": t, "arrival": t + latency, "chunk": chunk})
            out.launches.append(t)
            if mode == "sync":
                sync_next = t + latency + period
        for c in [c for c in pending if c["arrival"] == t]:
            pending.remove(c)
            if mode == "sync":
                c["start"] = t                        # the robot waited: the chunk starts now
                out.dropped.append(0)
            else:
                c["start"] = c["t0"]
                _, dropped = align_stale(c["chunk"], c["t0"], t)
                out.dropped.append(dropped)
            if mode in ("rtr", "rtr_identity"):
                c["chunk"] = rtr_refine(last_refined, c["chunk"], period, project if mode == "rtr" else identity)
                last_refined = c["chunk"]
            if arrived:
                steps = {t}
                splice = c["t0"] + period
                if mode in ("rtr", "rtr_identity") and t < splice < t + period and splice < T:
                    steps.add(splice)
                out.cycles.append(sorted(steps))
            arrived.append(c)
        if not arrived:
            a = hold
        else:
            new = arrived[-1]
            i = t - new["start"]
            if mode == "sync":
                a = new["chunk"][:, :, i] if i < period else hold
            elif mode == "ensemble":
                votes = [c["chunk"][:, :, t - c["start"]] for c in arrived if 0 <= t - c["start"] < horizon]
                a = temporal_ensemble(votes, decay)
            else:
                a = new["chunk"][:, :, min(i, horizon - 1)]
                if mode == "crossfade" and len(arrived) > 1 and t - new["arrival"] < crossfade_steps:
                    old = arrived[-2]
                    w = (t - new["arrival"] + 1) / (crossfade_steps + 1)
                    a = (1 - w) * old["chunk"][:, :, min(t - old["start"], horizon - 1)] + w * a
        hold = a
        out.actions[:, :, t], out.states[:, :, t], out.velocities[:, :, t] = a, x, v
        x, v = plant_step(x, v, a)
    return out
