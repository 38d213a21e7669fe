"""The batched policy, the prior planner and rollouts (all models of every arm at once)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from . import world as wd

HIDDEN = 32
INPUT_SIZE = wd.NUM_FEATURES + 6                 # five image statistics + one-hot step (K = 6)


# ------------------------------------------------------------------------------------------ policy
class BatchedPolicy(torch.nn.Module):
    """``M`` independent tanh MLPs (11 -> 32 -> 32 -> 17) evaluated together.

    Model ``m`` is initialised from its own generator seeded with ``init_seeds[m]`` (so two models
    with the same seed start identical), with a near-zero last layer (an almost uniform start).
    """

    def __init__(self, init_seeds, hidden: int = HIDDEN):
        super().__init__()
        shapes = [(INPUT_SIZE, hidden), (hidden, hidden), (hidden, wd.NUM_ACTIONS)]
        weights = [[] for _ in shapes]
        for s in init_seeds:
            g = torch.Generator().manual_seed(int(s))
            for k, (i, o) in enumerate(shapes):
                scale = 0.01 if k == len(shapes) - 1 else 1.0
                weights[k].append(torch.randn(i, o, generator=g) * scale / math.sqrt(i))
        self.w = torch.nn.ParameterList([torch.nn.Parameter(torch.stack(w)) for w in weights])
        self.b = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(len(init_seeds), 1, o)) for _, o in shapes])

    def forward(self, x: torch.Tensor, params=None) -> torch.Tensor:
        """Logits, shape (M, n, 17), for inputs (M, n, 11); ``params`` = (weights, biases) overrides."""
        ws, bs = params if params is not None else (list(self.w), list(self.b))
        h = x
        for k, (w, b) in enumerate(zip(ws, bs)):
            h = torch.baddbmm(b, h, w)
            if k < len(ws) - 1:
                h = torch.tanh(h)
        return h

    def snapshot(self):
        return [w.detach().clone() for w in self.w], [b.detach().clone() for b in self.b]


def policy_inputs(features: torch.Tensor, step: int, horizon: int) -> torch.Tensor:
    """Concatenate the image statistics (..., 5) with a one-hot of the step index."""
    onehot = torch.zeros(*features.shape[:-1], horizon, dtype=features.dtype)
    onehot[..., step] = 1.0
    return torch.cat([features, onehot], -1)


def heuristic_prior(features: torch.Tensor) -> torch.Tensor:
    """The prior planner's action distribution, shape (..., 17): an auto-exposure / auto-white-balance
    rule that knows nothing about contrast or saturation. Half of its mass is uniform; the other half
    steps whichever of exposure and temperature reads farther from neutral back towards it (big beyond
    0.6 JND, small beyond 0.3 JND), and is spread evenly over the eight contrast / saturation edits
    and STOP once both read within 0.3 JND."""
    look = wd.decode_look(features)
    ev = look[..., [0, 3]]
    pick = ev.abs().argmax(-1)
    j = torch.where(pick == 0, 0, 3)
    dev = torch.gather(ev, -1, pick[..., None])[..., 0]
    toward_plus = dev < 0
    k = torch.where(dev.abs() >= 0.6, torch.where(toward_plus, 3, 0), torch.where(toward_plus, 2, 1))
    rule = torch.zeros(*features.shape[:-1], wd.NUM_ACTIONS, dtype=features.dtype)
    rule = rule.scatter(-1, (4 * j + k)[..., None], 1.0)
    rest = torch.zeros(wd.NUM_ACTIONS, dtype=features.dtype)
    rest[4:12] = 1.0 / 9
    rest[wd.STOP] = 1.0 / 9
    rule = torch.where((dev.abs() < 0.3)[..., None], rest, rule)
    return 0.5 / wd.NUM_ACTIONS + 0.5 * rule


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last axis (nats)."""
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


# ------------------------------------------------------------------------------------------ rollouts
@dataclass
class Rollout:
    """A batch of trajectories for M models: inputs (M, N, K, 11), actions and alive masks (M, N, K),
    behaviour-time log-probabilities under the policy (M, N, K), start/final looks (M, N, 4), targets."""

    inputs: torch.Tensor
    actions: torch.Tensor
    alive: torch.Tensor
    logp_old: torch.Tensor
    start: torch.Tensor
    final: torch.Tensor
    target: torch.Tensor
    micro: torch.Tensor
    entropy: torch.Tensor


def rollout(policy: BatchedPolicy, start: torch.Tensor, target: torch.Tensor, horizon: int, gen: torch.Generator,
            *, prior_weight: torch.Tensor | None = None, prior_kind=None, params=None) -> Rollout:
    """Roll out every model's policy (optionally mixed with a prior planner) from ``start`` (M, N, 4).

    ``prior_weight`` (M,) is each model's mixing weight lambda this iteration and ``prior_kind``
    (M,) bool is True for the heuristic planner (False: uniform).
    """
    delta, micro_table = (torch.as_tensor(t) for t in wd.action_table())
    delta = delta.to(start.dtype)
    M, N, _ = start.shape
    look = start.clone()
    alive = torch.ones(M, N, dtype=torch.bool)
    inputs, actions, alives, logps, ents = [], [], [], [], []
    micro = torch.zeros(M, N, dtype=start.dtype)
    with torch.no_grad():
        for t in range(horizon):
            feats = wd.image_statistics(look)
            x = policy_inputs(feats, t, horizon)
            logits = policy(x, params)
            probs = torch.softmax(logits, -1)
            behaviour = probs
            if prior_weight is not None:
                prior = torch.where(prior_kind[:, None, None], heuristic_prior(feats),
                                    torch.full_like(probs, 1.0 / wd.NUM_ACTIONS))
                lam = prior_weight[:, None, None]
                behaviour = (1 - lam) * probs + lam * prior
            a = torch.multinomial(behaviour.reshape(M * N, -1), 1, generator=gen).reshape(M, N)
            inputs.append(x)
            actions.append(a)
            alives.append(alive.clone())
            logps.append(torch.log_softmax(logits, -1).gather(-1, a[..., None])[..., 0])
            ents.append(entropy(logits))
            edit = alive & (a != wd.STOP)
            look = look + delta[a] * edit[..., None]
            micro = micro + (micro_table[a] & edit).to(start.dtype)
            alive = edit
    return Rollout(inputs=torch.stack(inputs, 2), actions=torch.stack(actions, 2), alive=torch.stack(alives, 2),
                   logp_old=torch.stack(logps, 2), start=start, final=look, target=target, micro=micro,
                   entropy=torch.stack(ents, 2))


def trajectory_metrics(ro: Rollout, gamma: torch.Tensor, human_slope: float) -> dict:
    """Per-trajectory distances, human success probability, proxy gain, features and edit counts."""
    d0 = (ro.start - ro.target).norm(dim=-1)
    dk = (ro.final - ro.target).norm(dim=-1)
    edits = (ro.alive & (ro.actions != wd.STOP)).sum(-1).to(d0.dtype)
    features = torch.cat([wd.image_statistics(ro.start), wd.image_statistics(ro.final)], -1)
    return dict(d0=d0, dk=dk, success=wd.human_probability(d0, dk, human_slope),
                proxy=wd.proxy_gain(d0, dk, ro.micro, gamma[:, None]), edits=edits, micro=ro.micro,
                features=features)


def evaluate(policy: BatchedPolicy, world: wd.World, gammas: torch.Tensor, settings, seed: int,
             rollouts: int = 1, params=None) -> dict:
    """Held-out metrics per model (the policy alone, sampled), each of shape (M,); ``settings`` is a
    :class:`~compendium.papers.bspar_retouching.train.Settings` (its ``horizon`` and ``human_slope``).

    ``success`` is the mean exact :math:`P(y=1)`; ``micro_fraction`` the share of edits that are
    rewarded micro-edits; ``entropy`` the mean policy entropy over visited states."""
    M = len(gammas)
    start = torch.as_tensor(np.tile(world.as_shot, (rollouts, 1)), dtype=torch.float32)[None].expand(M, -1, -1)
    target = torch.as_tensor(np.tile(world.target, (rollouts, 1)), dtype=torch.float32)[None].expand(M, -1, -1)
    gen = torch.Generator().manual_seed(int(seed))
    ro = rollout(policy, start.contiguous(), target.contiguous(), settings.horizon, gen, params=params)
    m = trajectory_metrics(ro, gammas, settings.human_slope)
    alive = ro.alive.to(start.dtype)
    return dict(success=m["success"].mean(1), dk=m["dk"].mean(1), proxy=m["proxy"].mean(1),
                proxy_gamma1=wd.proxy_gain(m["d0"], m["dk"], m["micro"], 1.0).mean(1),
                micro_fraction=m["micro"].sum(1) / m["edits"].sum(1).clamp(min=1.0),
                edits=m["edits"].mean(1), entropy=(ro.entropy * alive).sum((1, 2)) / alive.sum((1, 2)))
