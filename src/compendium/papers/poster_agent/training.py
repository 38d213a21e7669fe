"""Rollouts, the five training arms, greedy evaluation and the asset.

Arms (all at the same environment samples per update, ``P * G * (K + 1)`` layouts produced: a
draft or an executed edit each, counted in ``collect``):

``one_shot``       drafts only: a group of ``G (K + 1)`` drafts per prompt, advantage = R(L_0)
                   normalised in the group.
``trajectory``     ``G`` episodes per prompt (draft + K edits); R(L_K) normalised over the ``G``
                   episodes and broadcast to every action of the episode.
``sarl``           draft phase: ``G`` drafts, R(L_0) normalised in the draft group; refine phase:
                   from a fixed state (a draft of the group, then the state reached by the chain's
                   first member), a group of ``G`` edits, advantage dR / (s_dR + 1e-4) with
                   dR = R(L') - R(L) and s_dR the refine group's std: the fixed state's own reward is
                   the baseline (an edit that changes nothing gets advantage 0), the group sets the
                   scale (``refine_advantages``); K refine groups per prompt.
``sarl_no_norm``   SARL with the raw phase rewards as advantages (R(L_0), dR): no group baseline.
``sarl_permuted``  the negative control: SARL with dR permuted within each refine group.

Until 2026-12-07 the refine phase also centred dR on the group mean (``group_advantages``); an
edit that changed nothing then had a positive advantage whenever most of the group's edits did
harm, and the SARL refiner learnt to change nothing (see the chapter's "Changes after first results").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from compendium.rl import group_advantages, grpo_loss
from compendium.training import TrainSpec, fit

from .env import NUM_BINS, SLOTS, LayoutEnv, Prompts, apply_edit, draft_features, refine_features, reward
from .policy import LayoutPolicy

__all__ = ["ARMS", "ASSET_NAME", "Settings", "settings_for", "refine_advantages", "collect", "arm_loss", "train_arm",
           "evaluate", "best_of_drafts", "oracle_refine", "build_asset", "load_policies"]

ASSET_NAME = "poster_agent_policies"
ARMS = ("one_shot", "trajectory", "sarl", "sarl_no_norm", "sarl_permuted")


@dataclass(frozen=True)
class Settings:
    """Training settings of the asset (chosen per scale inside the builder, fixed before any run)."""

    num_seeds: int
    updates: int
    prompts_per_update: int
    group_size: int
    refine_steps: int
    min_elements: int
    max_elements: int
    hidden: int
    learning_rate: float
    ppo_epochs: int
    clip_eps: float
    kl_coef: float
    curve_every: int
    monitor_prompts: int


def settings_for(scale: str) -> Settings:
    """Smoke: 3 elements, K = 2, 300 updates; full: 3-6 elements, K = 4, 1000 updates; six training
    seeds per arm at both scales (the unit of every interval), learning rate 1e-3."""
    common = dict(num_seeds=6, prompts_per_update=8, group_size=8, hidden=64, learning_rate=1e-3, ppo_epochs=2,
                  clip_eps=0.2, kl_coef=0.0, monitor_prompts=64)
    if scale == "smoke":
        return Settings(updates=300, refine_steps=2, min_elements=3, max_elements=3, curve_every=25, **common)
    if scale == "full":
        return Settings(updates=1000, refine_steps=4, min_elements=3, max_elements=6, curve_every=50, **common)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def refine_advantages(delta, eps: float = 1e-4) -> torch.Tensor:
    """SARL's refine-phase advantage of a group of edits from one fixed state (last axis):
    ``dR / (std_g dR + eps)``, exactly 0 in a group whose increments tie.

    ``dR = R(L') - R(L)`` is already measured against the fixed state's reward, so it is not centred
    again on the group mean: an edit that changes nothing gets advantage 0, a harmful edit a
    negative one, whatever the rest of the group did. The group only sets the scale (the unbiased
    std, as in ``compendium.rl.group_advantages``).
    """
    d = torch.as_tensor(np.asarray(delta), dtype=torch.float64)
    if d.dim() < 1 or d.shape[-1] < 2:
        raise ValueError(f"delta needs a last (group) axis of size >= 2, got shape {tuple(d.shape)}")
    flat = d.amax(dim=-1, keepdim=True) == d.amin(dim=-1, keepdim=True)
    out = d / (d.std(dim=-1, keepdim=True) + eps)
    return torch.where(flat, torch.zeros_like(out), out)


def _t(x, dtype=torch.float32):
    return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype)


def _stack_prompts(parts) -> Prompts:
    return Prompts(*(np.stack([getattr(p, f) for p in parts]) for f in ("present", "value", "kappa")))


def _draft(policy, prompts: Prompts, count: int, generator, dtype=torch.float32):
    """Sample ``count`` drafts per prompt. prompts (M, P, S) -> layouts (M, P, count, S, 4),
    log-probs (M, P, count, 4 S) and the token mask (M, P, count, 4 S)."""
    m, p, s = prompts.present.shape
    with torch.no_grad():
        logits = policy.draft_logits(_t(draft_features(prompts), dtype))                # (M, P, S, 4, B)
        logp_all = torch.log_softmax(logits, -1)
        flat = logp_all.exp().reshape(-1, NUM_BINS)
        a = torch.multinomial(flat, count, replacement=True, generator=generator)      # (M P S 4, count)
        a = a.view(m, p, s, 4, count).permute(0, 1, 4, 2, 3)                          # (M, P, count, S, 4)
        logp = logp_all[:, :, None].expand(m, p, count, s, 4, NUM_BINS).gather(-1, a[..., None])[..., 0]
    mask = np.repeat(prompts.present[:, :, None, :, None], 4, axis=-1)
    mask = np.broadcast_to(mask, (m, p, count, s, 4)).reshape(m, p, count, 4 * s)
    return a.numpy(), logp.reshape(m, p, count, 4 * s), _t(mask, dtype)


def _refine_step(policy, prompts: Prompts, layout, step_fraction, generator, greedy=False, dtype=torch.float32):
    """Sample (or take the argmax of) one edit for each layout (M, N..., S, 4); prompts broadcastable."""
    feats = refine_features(prompts, layout, step_fraction)
    lead = feats.shape[:-1]
    m = lead[0]
    present = np.ascontiguousarray(np.broadcast_to(prompts.present, lead + (len(SLOTS),)))
    with torch.no_grad():
        logits = policy.refine_logits(_t(feats.reshape(m, -1, feats.shape[-1]), dtype),
                                      torch.as_tensor(present.reshape(m, -1, len(SLOTS))))
        logp_all = torch.log_softmax(logits, -1)
        if greedy:
            a = logits.argmax(-1)
        else:
            a = torch.multinomial(logp_all.exp().reshape(-1, logits.shape[-1]), 1, generator=generator).view(logits.shape[:-1])
        logp = logp_all.gather(-1, a[..., None])[..., 0]
    action = a.numpy().reshape(lead)
    new, delta = apply_edit(prompts, layout, action)
    return dict(features=feats.reshape(m, -1, feats.shape[-1]), present=present.reshape(m, -1, len(SLOTS)),
                action=a, logp=logp, new=new, delta=delta)


def collect(arm: str, policy, prompts: Prompts, st: Settings, generator, rng, refine_steps=None, dtype=torch.float32):
    """One batch of arm ``arm`` on prompts (M, P, S): what its loss needs, and the env samples used."""
    K = st.refine_steps if refine_steps is None else refine_steps
    G = st.group_size
    m, p, s = prompts.present.shape
    pg = prompts.expand(1)                                                       # (M, P, 1, S)
    out = {"samples": 0}
    if arm == "one_shot":
        layouts, logp, mask = _draft(policy, prompts, G * (K + 1), generator, dtype)
        r0 = reward(pg, layouts)
        out.update(draft=(layouts, logp, mask, group_advantages(r0).to(dtype)), refine=None, samples=layouts.shape[2] * m * p,
                   r0=r0, rk=r0)
        return out
    layouts, logp, mask = _draft(policy, prompts, G, generator, dtype)
    r0 = reward(pg, layouts)
    out["samples"] = m * p * G
    feats, pres, acts, lps, advs = [], [], [], [], []
    if arm == "trajectory":
        state = layouts
        for k in range(K):
            step = _refine_step(policy, pg, state, k / max(K, 1), generator, dtype=dtype)
            feats.append(step["features"]), pres.append(step["present"]), acts.append(step["action"]), lps.append(step["logp"])
            state = step["new"]
            out["samples"] += m * p * G
        rk = reward(pg, state)
        adv = group_advantages(rk).to(dtype)                                     # (M, P, G)
        draft_adv = adv
        advs = [adv.reshape(m, -1)] * K
    elif arm in ("sarl", "sarl_no_norm", "sarl_permuted"):
        draft_adv = (torch.as_tensor(r0, dtype=dtype) if arm == "sarl_no_norm" else group_advantages(r0).to(dtype))
        state = layouts[:, :, 0]                                                   # a fixed draft state per prompt
        for k in range(K):
            tiled = np.broadcast_to(state[:, :, None], (m, p, G, s, 4))
            step = _refine_step(policy, pg, tiled, k / max(K, 1), generator, dtype=dtype)
            d = step["delta"]                                                      # (M, P, G) dR of the group
            if arm == "sarl_permuted":
                d = np.take_along_axis(d, np.argsort(rng.random(d.shape), axis=-1), axis=-1)
            adv = torch.as_tensor(d, dtype=dtype) if arm == "sarl_no_norm" else refine_advantages(d).to(dtype)
            feats.append(step["features"]), pres.append(step["present"]), acts.append(step["action"]), lps.append(step["logp"])
            advs.append(adv.reshape(m, -1))
            state = step["new"][:, :, 0]                                           # the chain follows member 0
            out["samples"] += m * p * G
        rk = reward(prompts, state)
    else:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    out["draft"] = (layouts, logp, mask, draft_adv)
    out["refine"] = None if K == 0 else (np.concatenate(feats, 1), np.concatenate(pres, 1), torch.cat(acts, 1),
                                         torch.cat(lps, 1), torch.cat(advs, 1))
    out.update(r0=r0, rk=rk)
    return out


def arm_loss(policy, batch: dict, prompts: Prompts, st: Settings, dtype=torch.float32) -> torch.Tensor:
    """The GRPO-clip loss of a collected batch, summed over models (each model: draft-sequence mean
    plus refine-action mean, the shared ``compendium.rl.grpo_loss``)."""
    layouts, logp_old, mask, adv = batch["draft"]
    m, p, c, s, _ = layouts.shape
    logits = policy.draft_logits(_t(draft_features(prompts), dtype))                 # (M, P, S, 4, B)
    logp_all = torch.log_softmax(logits, -1)[:, :, None].expand(m, p, c, s, 4, NUM_BINS)
    logp = logp_all.gather(-1, torch.as_tensor(layouts)[..., None])[..., 0].reshape(m * p * c, 4 * s)
    draft = grpo_loss(logp, logp_old.reshape(m * p * c, -1), adv.reshape(-1), mask=mask.reshape(m * p * c, -1),
                      clip_eps=st.clip_eps, reduction="none").loss.view(m, -1).mean(1)
    total = draft.sum()
    if batch["refine"] is not None:
        feats, pres, acts, lp_old, radv = batch["refine"]
        logits = policy.refine_logits(_t(feats, dtype), torch.as_tensor(pres))
        lp = torch.log_softmax(logits, -1).gather(-1, acts[..., None])[..., 0]
        refine = grpo_loss(lp.reshape(-1), lp_old.reshape(-1), radv.reshape(-1), clip_eps=st.clip_eps,
                           reduction="none").loss.view(m, -1).mean(1)
        total = total + refine.sum()
    return total


def evaluate(policy, prompts: Prompts, refine_steps: int, dtype=torch.float32) -> dict:
    """Greedy episodes of every model on shared prompts (N, S): R(L_0..L_K) (M, N, K + 1), the
    edits' dR as returned by the environment (M, N, K), actions (M, N, K), and the layouts
    (M, N, K + 1, S, 4)."""
    m = policy.num_models
    pm = Prompts(*(np.broadcast_to(a, (m,) + a.shape) for a in (prompts.present, prompts.value, prompts.kappa)))
    with torch.no_grad():
        logits = policy.draft_logits(_t(draft_features(pm), dtype))
    state = logits.argmax(-1).numpy()                                              # (M, N, S, 4)
    rewards, deltas, actions, layouts = [reward(pm, state)], [], [], [state]
    for k in range(refine_steps):
        step = _refine_step(policy, pm, state, k / max(refine_steps, 1), None, greedy=True, dtype=dtype)
        state = step["new"]
        rewards.append(reward(pm, state)), deltas.append(step["delta"]), actions.append(step["action"].numpy())
        layouts.append(state)
    stack = lambda xs: np.stack(xs, axis=2) if xs else np.zeros((m, len(prompts), 0))  # noqa: E731
    return {"R": stack(rewards), "dR": stack(deltas), "actions": stack(actions), "layouts": np.stack(layouts, axis=2)}


def best_of_drafts(policy, prompts: Prompts, count: int, generator) -> dict:
    """The compute-matched one-shot baseline: the greedy draft and ``count - 1`` sampled drafts per
    prompt, the best by R (M, N); also every draft's R (M, N, count)."""
    m = policy.num_models
    pm = Prompts(*(np.broadcast_to(a, (m,) + a.shape) for a in (prompts.present, prompts.value, prompts.kappa)))
    with torch.no_grad():
        greedy = policy.draft_logits(_t(draft_features(pm))).argmax(-1).numpy()[:, :, None]
    drafts = greedy
    if count > 1:
        sampled, _, _ = _draft(policy, pm, count - 1, generator)
        drafts = np.concatenate([greedy, sampled], axis=2)
    r = reward(pm.expand(1), drafts)
    pick = r.argmax(-1)
    layouts = np.take_along_axis(drafts, pick[:, :, None, None, None], axis=2)[:, :, 0]
    return {"best": r.max(-1), "all": r, "layouts": layouts}


def oracle_refine(prompts: Prompts, layouts, steps: int) -> np.ndarray:
    """The reward an oracle refiner reaches: from layouts (M, N, S, 4) on prompts (N, S), ``steps``
    times the edit (of all ``6 * 8 + 1``, the no-op included) with the largest true dR. Returns
    R (M, N, steps + 1) along the oracle's chain (non-decreasing, since the no-op is allowed)."""
    from .env import num_refine_actions
    m = layouts.shape[0]
    pm = Prompts(*(np.broadcast_to(a, (m,) + a.shape)[:, :, None] for a in (prompts.present, prompts.value, prompts.kappa)))
    acts = np.arange(num_refine_actions())
    state = np.asarray(layouts)
    rewards = [reward(Prompts(pm.present[:, :, 0], pm.value[:, :, 0], pm.kappa[:, :, 0]), state)]
    for _ in range(steps):
        tiled = np.broadcast_to(state[:, :, None], state.shape[:2] + (len(acts),) + state.shape[2:])
        new, delta = apply_edit(pm, tiled, np.broadcast_to(acts, state.shape[:2] + (len(acts),)))
        best = delta.argmax(-1)
        state = np.take_along_axis(new, best[:, :, None, None, None], axis=2)[:, :, 0]
        rewards.append(rewards[-1] + np.take_along_axis(delta, best[:, :, None], axis=2)[:, :, 0])
    return np.stack(rewards, axis=-1)


def train_arm(arm: str, st: Settings, seeds, monitor: Prompts):
    """Train the ``len(seeds)`` models of one arm in lock step; returns the policy and its log."""
    policy = LayoutPolicy(len(seeds), st.hidden, list(seeds))
    envs = [LayoutEnv(st.min_elements, st.max_elements, seed=[int(s), 17]) for s in seeds]  # the same stream in every arm
    generator = torch.Generator().manual_seed(int(seeds[0]) * 31 + ARMS.index(arm))
    rng = np.random.default_rng([int(seeds[0]), ARMS.index(arm), 5])
    cache, stats = {}, {"samples": [], "r0": [], "rk": []}
    curve = {"update": [], "R_K": [], "R_0": []}

    def loss_fn(step):
        if step % st.ppo_epochs == 0:
            prompts = _stack_prompts([e.sample(st.prompts_per_update) for e in envs])
            cache["prompts"] = prompts
            cache["batch"] = collect(arm, policy, prompts, st, generator, rng)
            b = cache["batch"]
            stats["samples"].append(int(b["samples"]))
            stats["r0"].append(float(np.mean(b["r0"])))
            stats["rk"].append(float(np.mean(b["rk"])))
        return arm_loss(policy, cache["batch"], cache["prompts"], st)

    def check(model):
        ev = evaluate(model, monitor, st.refine_steps)
        curve["update"].append(len(stats["samples"]))
        curve["R_K"].append(ev["R"][:, :, -1].mean(1).tolist())
        curve["R_0"].append(ev["R"][:, :, 0].mean(1).tolist())
        return float(ev["R"][:, :, -1].mean())

    check(policy)
    spec = TrainSpec(max_steps=st.updates * st.ppo_epochs, learning_rate=st.learning_rate, weight_decay=0.0,
                     check_every=st.curve_every * st.ppo_epochs, log_every=50)
    log = fit(policy, loss_fn, spec, check=check)
    return policy, {"log": log.to_dict(), "curve": curve, "samples_per_update": sorted(set(stats["samples"])),
                    "train_r0": stats["r0"], "train_rk": stats["rk"]}


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Train every arm (training seeds ``seed * 100 + k``) and save ``<arm>.pt`` and ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = settings_for(scale)
    seeds = [int(seed) * 100 + k for k in range(st.num_seeds)]
    monitor = LayoutEnv(st.min_elements, st.max_elements, seed=[int(seed), 99]).sample(st.monitor_prompts)
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(st), "seeds": seeds, "arms": {}}
    for arm in ARMS:
        policy, info = train_arm(arm, st, seeds, monitor)
        torch.save(policy.state_dict(), out_dir / f"{arm}.pt")
        meta["arms"][arm] = info
        print(f"{arm}: monitor R(L_K) {info['curve']['R_K'][0]} -> {info['curve']['R_K'][-1]}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {arm: {"final_monitor_R_K": meta["arms"][arm]["curve"]["R_K"][-1]} for arm in ARMS}


def load_policies(path) -> tuple[dict, dict]:
    """``({arm: LayoutPolicy}, metadata)`` from an asset folder."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    st = Settings(**meta["settings"])
    out = {}
    for arm in ARMS:
        policy = LayoutPolicy(st.num_seeds, st.hidden, meta["seeds"])
        policy.load_state_dict(torch.load(path / f"{arm}.pt", map_location="cpu", weights_only=True))
        out[arm] = policy.eval()
    meta["settings_obj"] = st
    return out, meta
