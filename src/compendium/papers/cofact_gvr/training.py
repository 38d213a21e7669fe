"""Rollouts, the arms, the lock-step GRPO trainer and the trained-policy asset.

Every arm starts from a *base* that already reads its evidence: before RL, each training seed's
network is fine-tuned by supervised cross-entropy on the cue-free copy of its training pool (tint
independent of the answer), with the evidence cell given: the target cell with probability
``pretrain_target_share`` and a uniformly drawn cell otherwise (``pretrain_base``). The base
answers from the crop when it holds the asked shape, so the counterfactual gap is informative from
the first update, while the evidence head has never been trained (it picks cells without regard to
the question) and the tint shortcut is met first in RL. All arms of a training seed start from
that seed's base.

One update ("round") of every arm: draw ``questions_per_update`` training questions (the same ones
for every arm of a training seed), sample ``group_size`` rollouts (evidence cell e, then answer y)
per question, score the M = 2 matched counterfactuals of each rollout with the behaviour policy's
probability of y*, build the arm's reward, take GRPO's group-normalised advantages (shared
``compendium.rl.group_advantages``) and then ``minibatches`` gradient steps of the shared clipped
loss (``compendium.rl.grpo_loss``, clip 0.2, one sequence = the two tokens e and y), each on
``N / minibatches`` rollouts drawn by the arm's sampler. Every arm therefore takes the same number
of rollouts and of gradient samples; the counterfactual arms spend M extra answer passes per rollout.

==================  =====================  ==================  ============
arm                 reward                 sampler             training cue
==================  =====================  ==================  ============
grpo                answer                 uniform             0.85
grpo_iou            answer + GT-IoU        uniform             0.85
cofact              answer + selective     Q-PAS               0.85
bonus_all           answer + bonus to all  Q-PAS               0.85
no_qpas             answer + selective     uniform             0.85
qpas_only           answer                 Q-PAS               0.85
uniform_rescaled    answer + selective     uniform, rescaled   0.85
nocue_grpo          answer                 uniform             1/6
nocue_cofact        answer + selective     Q-PAS               1/6
==================  =====================  ==================  ============

"uniform" is a random partition of the buffer (each rollout once: plain GRPO); "rescaled" also
multiplies the minibatch advantages by E_QPAS|A| / mean|A| of the same buffer, so that it takes
Q-PAS's mean step size without its selection.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from compendium.rl import group_advantages, grpo_loss
from compendium.training import TrainSpec, fit, torch_threads

from .policy import GroundedPolicy
from .reward import counterfactual_cells, mediator_gap, q_pas_probabilities, q_pas_select, shaped_reward
from .scenes import NUM_CELLS, TEST_CUE, make_scenes

__all__ = ["Arm", "ARMS", "ARM_NAMES", "AssetSettings", "settings_for", "train_arms", "evaluate", "build_asset",
           "load_policies", "ASSET_NAME", "checkpoint_rounds", "prob_of", "pretrain_base", "training_pools", "initial_policy",
           "answer_accuracy_given"]

ASSET_NAME = "cofact_gvr_policies"


@dataclass(frozen=True)
class Arm:
    name: str
    reward: str          # answer | iou | selective | all
    sampler: str         # uniform | qpas | rescaled
    cue: str             # train (0.85) | none (1/6)

    @property
    def counterfactual_passes(self) -> int:
        """Extra answer-head passes per rollout spent on counterfactuals (M for the gap arms)."""
        return 2 if self.reward in ("selective", "all") else 0


ARMS = (Arm("grpo", "answer", "uniform", "train"), Arm("grpo_iou", "iou", "uniform", "train"),
        Arm("cofact", "selective", "qpas", "train"), Arm("bonus_all", "all", "qpas", "train"),
        Arm("no_qpas", "selective", "uniform", "train"), Arm("qpas_only", "answer", "qpas", "train"),
        Arm("uniform_rescaled", "selective", "rescaled", "train"),
        Arm("nocue_grpo", "answer", "uniform", "none"), Arm("nocue_cofact", "selective", "qpas", "none"))
ARM_NAMES = tuple(a.name for a in ARMS)


@dataclass(frozen=True)
class AssetSettings:
    """Everything the asset's training depends on (``settings_for`` picks them per scale)."""

    train_questions: int
    updates: int
    questions_per_update: int
    group_size: int
    minibatches: int
    num_seeds: int
    learning_rate: float
    curve_questions: int
    pretrain_steps: int = 800
    pretrain_batch: int = 64
    pretrain_target_share: float = 0.5   # share of pretraining questions shown the target cell
    train_cue: float = 0.85
    bonus_scale: float = 1.0            # lambda, fixed before any run
    quantile: float = 0.3
    alpha: float = 1.0
    clip: float = 0.2
    counterfactuals: tuple = ("shift", "mask")
    global_width: int = 8
    cell_width: int = 32
    question_width: int = 16
    hidden_width: int = 32


def settings_for(scale: str) -> AssetSettings:
    """Smoke: 512 training questions, 800 pretraining steps, 8 questions per update, 200 updates;
    full: 4096, 1500, 16 per update, 600."""
    if scale == "smoke":
        return AssetSettings(train_questions=512, updates=200, questions_per_update=8, group_size=8, minibatches=2,
                             num_seeds=5, learning_rate=5e-3, curve_questions=256, pretrain_steps=800)
    if scale == "full":
        return AssetSettings(train_questions=4096, updates=600, questions_per_update=16, group_size=8,
                             minibatches=2, num_seeds=5, learning_rate=5e-3, curve_questions=512,
                             pretrain_steps=1500)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def checkpoint_rounds(updates: int) -> list[int]:
    """Rounds at which the curves are measured: dense early (the ID shortcut is learnt fast), and
    always including updates // 3 (the equal-forward-pass point of the gap arms) and the end."""
    pts = {0, updates // 3, updates}
    step = max(1, updates // 30)
    pts |= set(range(0, updates // 5 + 1, step))
    pts |= set(range(0, updates + 1, max(1, updates // 10)))
    return sorted(pts)


def _tensors(scenes, index=None):
    idx = slice(None) if index is None else index
    return (torch.from_numpy(scenes.images[idx]), torch.from_numpy(scenes.question[idx]),
            torch.from_numpy(scenes.answer[idx]), torch.from_numpy(scenes.target[idx]))


def _stack(per_model: list):
    return [torch.stack(x) for x in zip(*per_model)]


@torch.no_grad()
def evaluate(policy: GroundedPolicy, scenes, *, faithfulness: bool = True, chunk: int = 256) -> dict:
    """Greedy accuracy, grounding (chosen cell = target) and, with ``faithfulness``, whether the
    answer changes when the target cell is masked in the image: each (M, n), every model on the
    same ``scenes``."""
    from .scenes import mask_cells

    m, n = policy.num_models, len(scenes)
    out = {"correct": [], "grounded": [], "changed": []}
    for a in range(0, n, chunk):
        sl = slice(a, min(n, a + chunk))
        images, q, y, t = (x.expand(m, *x.shape) for x in _tensors(scenes, sl))
        cell, ans = policy.greedy(images, q)
        out["correct"].append((ans == y).numpy())
        out["grounded"].append((cell == t).numpy())
        if faithfulness:
            masked = torch.from_numpy(mask_cells(scenes.images[sl], scenes.target[sl])).expand(m, -1, -1, -1, -1)
            out["changed"].append((policy.greedy(masked, q)[1] != ans).numpy())
    return {k: np.concatenate(v, 1).astype(float) for k, v in out.items() if v}


def prob_of(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """The policy's probability of the true answer: logits (M, B, *S, 6), answer (M, B) -> (M, B, *S)."""
    y = answer.reshape(*answer.shape, *([1] * (logits.dim() - answer.dim())))
    return torch.softmax(logits, -1).gather(-1, y.expand(*logits.shape[:-1], 1)).squeeze(-1)


def _log_prob(logits, index):
    return torch.log_softmax(logits, -1).gather(-1, index[..., None]).squeeze(-1)


def training_pools(settings: AssetSettings, seed: int) -> dict:
    """Per training seed, its pool of training questions with the cue ('train') and without ('none')."""
    st = settings
    return {s: dict(zip(("train", "none"), make_scenes(st.train_questions, st.train_cue,
                                                       np.random.default_rng([seed, 48, 1, s]), cues=(TEST_CUE,))))
            for s in range(st.num_seeds)}


def _widths(st: AssetSettings) -> dict:
    return dict(global_width=st.global_width, cell_width=st.cell_width, question_width=st.question_width,
                hidden_width=st.hidden_width)


def pretrain_base(settings: AssetSettings, seed: int, pools: dict | None = None):
    """Supervised fine-tuning of one base network per training seed, before any RL.

    Each step draws ``pretrain_batch`` questions of the seed's cue-free pool (tint independent of
    the answer: the base does not learn the shortcut) and shows
    the answer head the target cell with probability ``pretrain_target_share``, else a uniformly
    drawn cell; the loss is the cross-entropy of the true colour. The evidence head gets no
    gradient (the cell is given). Returns the base policy (one model per training seed) and the
    training log.
    """
    st = settings
    pools = training_pools(st, seed) if pools is None else pools
    k = st.num_seeds
    base = GroundedPolicy(k, [1000 * seed + s for s in range(k)], **_widths(st))
    rngs = [np.random.default_rng([seed, 48, 4, s]) for s in range(k)]
    b = st.pretrain_batch

    def loss_fn(step: int) -> torch.Tensor:
        per_seed, cells = [], []
        for s in range(k):
            idx = rngs[s].integers(0, st.train_questions, b)
            pool = pools[s]["none"]
            per_seed.append(_tensors(pool, idx))
            shown = rngs[s].random(b) < st.pretrain_target_share
            cells.append(np.where(shown, pool.target[idx], rngs[s].integers(0, NUM_CELLS, b)))
        images, q, y, _ = _stack(per_seed)                                             # (K, B, ...)
        enc = base.encode(images, q)
        logits = base.answer_logits(enc, torch.from_numpy(np.stack(cells))[..., None]).squeeze(2)  # (K, B, 6)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        return ce.view(k, b).mean(1).sum()

    spec = TrainSpec(max_steps=st.pretrain_steps, learning_rate=st.learning_rate, weight_decay=0.0, threads=1,
                     log_every=max(1, st.pretrain_steps // 10))
    log = fit(base, loss_fn, spec)
    return base, log


@torch.no_grad()
def answer_accuracy_given(policy: GroundedPolicy, scenes, cells: np.ndarray) -> np.ndarray:
    """Greedy answer accuracy of every model when shown the given evidence cells (n,): (M, n)."""
    m = policy.num_models
    images, q, y, _ = (x.expand(m, *x.shape) for x in _tensors(scenes))
    enc = policy.encode(images, q)
    c = torch.from_numpy(np.asarray(cells)).expand(m, -1)[..., None]
    return (policy.answer_logits(enc, c).squeeze(2).argmax(-1) == y).numpy().astype(float)


def initial_policy(models: list, settings: AssetSettings, seed: int, base: GroundedPolicy | None) -> GroundedPolicy:
    """The policy every (arm, training seed) in ``models`` starts RL from: its seed's base (copied),
    or random weights seeded by the training seed when ``base`` is None."""
    st = settings
    policy = GroundedPolicy(len(models), [1000 * seed + s for _, s in models], **_widths(st))
    if base is not None:
        if base.num_models != st.num_seeds:
            raise ValueError(f"base has {base.num_models} models, need one per training seed ({st.num_seeds})")
        src = torch.tensor([s for _, s in models])
        with torch.no_grad():
            for name, param in policy.named_parameters():
                param.copy_(getattr(base, name)[src])
    return policy


def train_arms(arms, settings: AssetSettings, seed: int, curve_sets: dict | None = None,
               base: GroundedPolicy | None = None):
    """Train every (arm, training seed) in lock step; return the policy, the model list and a log.

    ``curve_sets`` maps a name ('id', 'ood') to scenes (the same test scenes go to every model)
    measured at ``checkpoint_rounds``. ``base`` (one model per training seed, from
    ``pretrain_base``) is copied into every arm of its seed; None starts from random weights.
    """
    st = settings
    models = [(arm, s) for arm in arms for s in range(st.num_seeds)]
    m, qn, g, k = len(models), st.questions_per_update, st.group_size, st.minibatches
    n = qn * g
    if n % k:
        raise ValueError("questions_per_update * group_size must be divisible by minibatches")
    policy = initial_policy(models, st, seed, base)
    pools = training_pools(st, seed)
    streams = {s: np.random.default_rng([seed, 48, 2, s]) for s in range(st.num_seeds)}
    gen = torch.Generator().manual_seed(int(seed) * 7919 + 48)
    reward_kind = [a.reward for a, _ in models]
    sampler = np.array([a.sampler for a, _ in models])
    rows = torch.arange(m)[:, None]
    buffer: dict = {}
    checkpoints = checkpoint_rounds(st.updates)
    curves = {"round": [], "id_accuracy": [], "ood_accuracy": [], "grounding": [], "mean_abs_adv_selected": []}
    snapshots: dict = {}

    def record(round_):
        if curve_sets is None:
            return
        ev_id = evaluate(policy, curve_sets["id"], faithfulness=False)
        ev_ood = evaluate(policy, curve_sets["ood"], faithfulness=False)
        curves["round"].append(round_)
        curves["id_accuracy"].append(ev_id["correct"].mean(1).tolist())
        curves["ood_accuracy"].append(ev_ood["correct"].mean(1).tolist())
        curves["grounding"].append(ev_ood["grounded"].mean(1).tolist())

    @torch.no_grad()
    def collect():
        picks = {s: streams[s].integers(0, st.train_questions, qn) for s in range(st.num_seeds)}
        per_model = [_tensors(pools[s][arm.cue], picks[s]) for arm, s in models]
        images, q, y, t = _stack(per_model)                                            # (M, Q, ...)
        enc = policy.encode(images, q)
        e = torch.multinomial(torch.softmax(enc["evidence"], -1).reshape(-1, 9), g, replacement=True,
                              generator=gen).view(m, qn, g)
        logits = policy.answer_logits(enc, e)                                          # (M, Q, G, 6)
        yhat = torch.multinomial(torch.softmax(logits, -1).reshape(-1, 6), 1, generator=gen).view(m, qn, g)
        cf = counterfactual_cells(e, st.counterfactuals, gen)                          # (M, Q, G, 2)
        gap = mediator_gap(prob_of(logits, y), prob_of(policy.answer_logits(enc, cf), y))
        correct = yhat == y[:, :, None]
        on_target = e == t[:, :, None]
        reward = torch.stack([shaped_reward(reward_kind[i], correct[i], gap[i], on_target[i], scale=st.bonus_scale)
                              for i in range(m)])
        adv = group_advantages(reward).view(m, n)
        logp_old = torch.stack([_log_prob(enc["evidence"][:, :, None].expand(-1, -1, g, -1), e),
                                _log_prob(logits, yhat)], -1).view(m, n, 2)
        # minibatches: a partition (uniform arms) or Q-PAS draws with replacement
        perm = torch.argsort(torch.rand(m, n, generator=gen), -1).view(m, k, n // k)
        qidx, _, probs = q_pas_select(adv, quantile=st.quantile, alpha=st.alpha, size=n, generator=gen)
        qidx = qidx.view(m, k, n // k)
        use_q = torch.from_numpy(sampler == "qpas")[:, None, None]
        index = torch.where(use_q, qidx, perm)
        scale = torch.ones(m)
        e_abs = (probs * adv.abs().double()).sum(-1).float()
        mean_abs = adv.abs().mean(-1)
        resc = torch.from_numpy(sampler == "rescaled")
        scale = torch.where(resc & (mean_abs > 0), e_abs / mean_abs.clamp(min=1e-12), scale)
        buffer.update(images=images, q=q, e=e.view(m, n), yhat=yhat.view(m, n), adv=adv * scale[:, None],
                      logp_old=logp_old, index=index, question_of=torch.arange(n) // g)
        sel = adv.abs().gather(-1, index.view(m, n)).mean(-1) * scale
        curves["mean_abs_adv_selected"].append(sel.tolist())

    def loss_fn(step: int) -> torch.Tensor:
        round_, part = divmod(step, k)
        if part == 0:
            if round_ in checkpoints:
                record(round_)
            if round_ == st.updates // 3:
                snapshots["third"] = {kk: v.detach().clone() for kk, v in policy.state_dict().items()}
            collect()
        b = buffer
        idx = b["index"][:, part]                                                      # (M, n/k)
        enc = policy.encode(b["images"], b["q"])
        qi = b["question_of"][idx]                                                     # (M, n/k)
        e, yhat = b["e"].gather(1, idx), b["yhat"].gather(1, idx)
        ev = enc["evidence"][rows, qi]                                                 # (M, n/k, 9)
        sub = {kk: (enc[kk][rows, qi] if kk in ("global", "question") else enc[kk]) for kk in enc}
        sub["cells"] = enc["cells"][rows, qi]
        logits = policy.answer_logits(sub, e[..., None]).squeeze(2)                    # (M, n/k, 6)
        logp = torch.stack([_log_prob(ev, e), _log_prob(logits, yhat)], -1)
        old = b["logp_old"].gather(1, idx[..., None].expand(-1, -1, 2))
        out = grpo_loss(logp.reshape(-1, 2), old.reshape(-1, 2), b["adv"].gather(1, idx).reshape(-1),
                        clip_eps=st.clip, reduction="none")
        return out.loss.view(m, -1).mean(1).sum()

    spec = TrainSpec(max_steps=st.updates * k, learning_rate=st.learning_rate, weight_decay=0.0, threads=1,
                     log_every=max(1, st.updates * k // 10))
    log = fit(policy, loss_fn, spec)
    record(st.updates)
    return policy, models, {"train": log.to_dict(), "curves": curves}, snapshots


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Pretrain the base of every training seed, then train every arm x training seed from it; save
    ``policy_base.pt`` (the bases, one per training seed), ``policy.pt`` (final), ``policy_third.pt``
    (after a third of the updates: the equal-forward-pass point) and ``metadata.json`` (settings,
    models, curves)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = settings_for(scale)
    curve_id, curve_ood = make_scenes(st.curve_questions, st.train_cue, np.random.default_rng([seed, 48, 3]),
                                      cues=(TEST_CUE,))
    with torch_threads(1):
        base, base_log = pretrain_base(st, seed)
        policy, models, log, snaps = train_arms(ARMS, st, seed, {"id": curve_id, "ood": curve_ood}, base=base)
    log["pretrain"] = base_log.to_dict()
    torch.save(base.state_dict(), out_dir / "policy_base.pt")
    torch.save(policy.state_dict(), out_dir / "policy.pt")
    torch.save(snaps["third"], out_dir / "policy_third.pt")
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(st),
            "models": [{"arm": a.name, "seed": s} for a, s in models], "log": log}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    return {"models": len(models), "updates": st.updates, "final_loss": log["train"]["final_loss"]}


def load_policies(path: str | Path) -> tuple[GroundedPolicy, GroundedPolicy, dict]:
    """The final policy, the one after a third of the updates, and the metadata, from an asset folder;
    the pretrained bases (one model per training seed) are ``meta["base"]``."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    st = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    out = []
    for name, count in (("policy.pt", len(meta["models"])), ("policy_third.pt", len(meta["models"])),
                        ("policy_base.pt", st.num_seeds)):
        p = GroundedPolicy(count, [0] * count, **_widths(st))
        p.load_state_dict(torch.load(path / name, map_location="cpu", weights_only=True))
        out.append(p.eval())
    meta["settings_obj"] = st
    meta["base"] = out[2]
    return out[0], out[1], meta
