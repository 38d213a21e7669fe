r"""Every arm trained in lock step: one batched MLP policy with a model axis, GRPO on each arm's reward.

A model is one (arm, training seed) pair; models that share a training seed share their initial
weights, their stream of training images and the uniforms behind their label draws (paired
comparisons). The loss is the sum of the models' own losses and Adam is elementwise, so the
models do not interact (no global gradient clipping).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from compendium.rl.grpo import grpo_loss, masked_group_advantages
from compendium.training import TrainSpec, fit, torch_threads

from . import reward as rw
from . import world as wd
from .policy import (INPUT_SIZE, BatchedPolicy, entropy, evaluate, heuristic_prior, policy_inputs, rollout,  # noqa: F401
                     trajectory_metrics)

ASSET_NAME = "bspar_retouching_runs"
COLLAPSE_ENTROPY = 0.25 * math.log(wd.NUM_ACTIONS)


@dataclass(frozen=True)
class Arm:
    """One training recipe. ``reward``: 'proxy' (B1), 'sparse' (raw labels, unlabelled dropped),
    'sum' (B3: standardised proxy + signed label), 'bayes' (B-Spar's posterior mean);
    ``prior``: behaviour mixing with the heuristic planner, a uniform one, or none;
    ``anchor``: 'nll' on the best trajectories so far, 'ema' (KL to an EMA policy) or none."""

    reward: str
    gamma: float = 1.0
    prior: str = "none"
    anchor: str = "none"
    shuffle_labels: bool = False


ARMS = {
    "b1": Arm("proxy"), "b2": Arm("sparse"), "b3": Arm("sum"),
    "bspar": Arm("bayes", prior="heuristic", anchor="nll"),
    "bspar_ema": Arm("bayes", prior="heuristic", anchor="ema"),
    "no_prior": Arm("bayes", prior="none", anchor="nll"),
    "no_bayes": Arm("sparse", prior="heuristic", anchor="nll"),
    "no_anchor": Arm("bayes", prior="heuristic", anchor="none"),
    "shuffled": Arm("bayes", prior="heuristic", anchor="nll", shuffle_labels=True),
    "uniform_prior": Arm("bayes", prior="uniform", anchor="nll"),
    "b1_g0": Arm("proxy", gamma=0.0), "bspar_g0": Arm("bayes", gamma=0.0, prior="heuristic", anchor="nll"),
    "b1_g05": Arm("proxy", gamma=0.5), "bspar_g05": Arm("bayes", gamma=0.5, prior="heuristic", anchor="nll"),
}
LABELS = {"b1": "B1 proxy GRPO", "b2": "B2 raw labels", "b3": "B3 labels + proxy", "bspar": "B-Spar (NLL anchor)",
          "bspar_ema": "B-Spar (EMA-KL anchor)", "no_prior": "B-Spar −prior", "no_bayes": "B-Spar −Bayes",
          "no_anchor": "B-Spar −anchor", "shuffled": "B-Spar, shuffled labels", "uniform_prior": "B-Spar, uniform prior",
          "b1_g0": "B1, γ = 0", "bspar_g0": "B-Spar, γ = 0", "b1_g05": "B1, γ = 0.5", "bspar_g05": "B-Spar, γ = 0.5"}


@dataclass(frozen=True)
class Settings:
    """Everything the training depends on, fixed before any run (JND = 1, gamma, kappa, rho...)."""

    iterations: int
    images_per_iteration: int
    seed_blocks: int
    seeds_per_block: int = 5
    group_size: int = 8
    horizon: int = 6
    learning_rate: float = 3e-3
    epochs: int = 2
    clip_eps: float = 0.2
    label_rate: float = 0.1
    kappa: float = 4.0
    human_slope: float = 1.0
    prior_mix: float = 0.5
    prior_anneal_fraction: float = 0.5
    anchor_weight: float = 0.1
    anchor_size: int = 16
    ema_decay: float = 0.95
    pool_size: int = 128
    eval_every: int = 5
    eval_images: int = 64
    train_images: int = 64
    test_images: int = 128
    final_rollouts: int = 4
    arms: tuple = tuple(ARMS)

    @property
    def num_seeds(self) -> int:
        return self.seed_blocks * self.seeds_per_block


def settings_for(scale: str) -> Settings:
    """Smoke: 5 blocks of 5 training seeds (the chapter's seed picks a block); full: one block, longer."""
    if scale == "smoke":
        return Settings(iterations=40, images_per_iteration=8, seed_blocks=5, eval_every=5)
    if scale == "full":
        return Settings(iterations=400, images_per_iteration=16, seed_blocks=1, eval_every=10, pool_size=256,
                        eval_images=128, train_images=1024, test_images=256)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


# ------------------------------------------------------------------------------------------ training
def load_world(settings: Settings, seed: int) -> tuple[wd.World, wd.World]:
    """Training and held-out images: disjoint digits, tinted and degraded with a fixed generator."""
    from compendium.data import load

    digits = load("digits")                                      # checked against data/manifest.yaml
    rng = np.random.default_rng([seed, 1])
    order = rng.permutation(len(digits.target))
    n_train, n_test = settings.train_images, settings.test_images
    if n_train + n_test > len(order):
        raise ValueError(f"train_images + test_images must be at most {len(order)}")
    world = wd.make_world(digits.data[order[:n_train + n_test]], digits.target[order[:n_train + n_test]], rng)
    return world.subset(np.arange(n_train)), world.subset(np.arange(n_train, n_train + n_test))


class LockstepTrainer:
    """State of every model's training: label pools, anchor sets, EMA policies, the eval curve.

    ``loss(step)`` is what :func:`compendium.training.fit` minimises: on the first of each
    iteration's ``epochs`` steps it rolls out, labels, computes every arm's reward and the group
    advantages; every step returns the summed GRPO (+ anchor) loss of all models.
    """

    def __init__(self, settings: Settings, seed: int, seeds=None):
        self.s = s = settings
        self.seed = int(seed)
        self.arm_names = list(s.arms)
        self.train_seeds = list(range(s.num_seeds)) if seeds is None else list(seeds)
        self.model_arm = [a for _ in self.train_seeds for a in self.arm_names]
        self.model_seed = [k for k in range(len(self.train_seeds)) for _ in self.arm_names]
        M = self.M = len(self.model_arm)
        self.policy = BatchedPolicy([1000 * self.seed + self.train_seeds[k] for k in self.model_seed])
        self.train_world, self.test_world = load_world(s, self.seed)
        self.eval_world = self.test_world.subset(np.arange(min(s.eval_images, s.test_images)))
        arms = [ARMS[a] for a in self.model_arm]
        t = lambda v, dt=torch.float32: torch.tensor(v, dtype=dt)          # noqa: E731
        self.gamma = t([a.gamma for a in arms])
        self.kind = {k: t([a.reward == k for a in arms], torch.bool) for k in ("proxy", "sparse", "sum", "bayes")}
        self.shuffle = t([a.shuffle_labels for a in arms], torch.bool)
        self.uses_prior = t([a.prior != "none" for a in arms], torch.bool)
        self.prior_heuristic = t([a.prior == "heuristic" for a in arms], torch.bool)
        self.nll = t([a.anchor == "nll" for a in arms])
        self.ema = t([a.anchor == "ema" for a in arms])
        self.ema_params = self.policy.snapshot()
        N, D, K = s.images_per_iteration * s.group_size, 2 * wd.NUM_FEATURES, s.horizon
        self.N = N
        self.pool_f = torch.zeros(M, s.pool_size, D)
        self.pool_y = torch.zeros(M, s.pool_size)
        self.pool_valid = torch.zeros(M, s.pool_size, dtype=torch.bool)
        self.pool_next = 0
        A = s.anchor_size
        self.anchor_x = torch.zeros(M, A, K, INPUT_SIZE)
        self.anchor_a = torch.zeros(M, A, K, dtype=torch.long)
        self.anchor_alive = torch.zeros(M, A, K, dtype=torch.bool)
        self.anchor_score = torch.full((M, A), -torch.inf)
        self.gen = torch.Generator().manual_seed(10_000 + self.seed)
        self.image_rngs = [np.random.default_rng([self.seed, 2, k]) for k in self.train_seeds]
        self.label_rngs = [np.random.default_rng([self.seed, 3, k]) for k in self.train_seeds]
        self.curve_iterations: list[int] = []
        self.curves: dict[str, list] = {k: [] for k in ("success", "entropy", "proxy", "micro_fraction", "dk")}
        self.labels_used = 0
        self.batch = None

    # --------------------------------------------------------------- one iteration's data
    def _per_seed(self, rows) -> torch.Tensor:
        return torch.as_tensor(np.stack(rows))[torch.tensor(self.model_seed)]

    def _prior_weight(self, iteration: int) -> torch.Tensor:
        end = max(1, int(self.s.prior_anneal_fraction * self.s.iterations))
        lam = self.s.prior_mix * max(0.0, 1.0 - iteration / end)
        return self.uses_prior.to(torch.float32) * lam

    def collect(self, iteration: int) -> None:
        s, M, N, G = self.s, self.M, self.N, self.s.group_size
        # EMA anchor policy: theta_ema <- decay * theta_ema + (1 - decay) * theta, once per iteration
        if iteration > 0:
            cur = self.policy.snapshot()
            self.ema_params = tuple([s.ema_decay * e + (1 - s.ema_decay) * c for e, c in zip(E, C)]
                                    for E, C in zip(self.ema_params, cur))
        idx = self._per_seed([r.choice(len(self.train_world), s.images_per_iteration) for r in self.image_rngs])
        idx = idx.repeat_interleave(G, dim=1)                                # (M, N): groups are consecutive
        start = torch.as_tensor(self.train_world.as_shot, dtype=torch.float32)[idx]
        target = torch.as_tensor(self.train_world.target, dtype=torch.float32)[idx]
        ro = rollout(self.policy, start, target, s.horizon, self.gen, prior_weight=self._prior_weight(iteration),
                     prior_kind=self.prior_heuristic)
        m = trajectory_metrics(ro, self.gamma, s.human_slope)
        # sparse human feedback: the same round(rho N) positions and uniforms for every arm of a seed
        n_lab = max(1, round(s.label_rate * N))
        u = [r.random(N) for r in self.label_rngs]
        lab = [np.isin(np.arange(N), r.permutation(N)[:n_lab]) for r in self.label_rngs]
        labelled = self._per_seed(lab)
        y = (self._per_seed(u).to(torch.float32) < m["success"]).to(torch.float32)
        self.labels_used += n_lab
        # the labelled pool (training trajectories only): a ring buffer per model
        rows = labelled.nonzero()[:, 1].reshape(M, n_lab)
        slots = (self.pool_next + torch.arange(n_lab)) % s.pool_size
        self.pool_next = int((self.pool_next + n_lab) % s.pool_size)
        self.pool_f[:, slots] = torch.gather(m["features"], 1, rows[..., None].expand(-1, -1, m["features"].shape[-1]))
        self.pool_y[:, slots] = torch.gather(y, 1, rows)
        self.pool_valid[:, slots] = True
        pool_y = self.pool_y
        if bool(self.shuffle.any()):            # control: labels permuted over the pool's entries
            keys = torch.rand(M, s.pool_size, generator=self.gen) + (~self.pool_valid) * 2.0
            perm = keys.argsort(1)
            shuffled = self.pool_y.clone()
            for i in torch.nonzero(self.shuffle)[:, 0].tolist():
                valid = perm[i][: int(self.pool_valid[i].sum())]
                shuffled[i, valid] = self.pool_y[i, valid[torch.randperm(len(valid), generator=self.gen)]]
            pool_y = torch.where(self.shuffle[:, None], shuffled, self.pool_y)
        # every arm's reward, then each model keeps its own
        bayes, _ = rw.bayes_reward(m["proxy"], m["features"], self.pool_f, pool_y, self.pool_valid,
                                   strength=s.kappa)
        reward = torch.zeros(M, N)
        valid = torch.ones(M, N, dtype=torch.bool)
        k = self.kind
        reward = torch.where(k["proxy"][:, None], m["proxy"], reward)
        reward = torch.where(k["sparse"][:, None], y, reward)
        valid = torch.where(k["sparse"][:, None], labelled, valid)
        reward = torch.where(k["sum"][:, None], rw.label_sum_reward(m["proxy"], y, labelled.to(torch.float32)), reward)
        reward = torch.where(k["bayes"][:, None], bayes.to(torch.float32), reward)
        adv = masked_group_advantages(reward.reshape(M, -1, G), valid.reshape(M, -1, G)).reshape(M, N)
        # anchor set: the best-rewarded trajectories seen so far (where a reward exists)
        score = torch.where(valid, reward, torch.full_like(reward, -torch.inf))
        all_score = torch.cat([self.anchor_score, score], 1)
        top = all_score.topk(s.anchor_size, dim=1).indices                   # (M, A)
        cat = lambda old, new: torch.cat([old, new], 1)                    # noqa: E731
        pick = lambda t: torch.gather(t, 1, top.view(M, -1, *([1] * (t.dim() - 2))).expand(-1, -1, *t.shape[2:]))  # noqa: E731
        self.anchor_x = pick(cat(self.anchor_x, ro.inputs))
        self.anchor_a = pick(cat(self.anchor_a, ro.actions))
        self.anchor_alive = pick(cat(self.anchor_alive, ro.alive))
        self.anchor_score = torch.gather(all_score, 1, top)
        with torch.no_grad():
            logits_ema = self.policy(ro.inputs.reshape(M, N * s.horizon, -1), self.ema_params)
        self.batch = dict(ro=ro, adv=adv, logq_ema=torch.log_softmax(logits_ema, -1).reshape(M, N, s.horizon, -1))

    # --------------------------------------------------------------- the loss fit minimises
    def record(self, iteration: int) -> None:
        ev = evaluate(self.policy, self.eval_world, self.gamma, self.s, seed=20_000 + self.seed + iteration)
        self.curve_iterations.append(iteration)
        for key in self.curves:
            self.curves[key].append(ev[key].numpy().copy())

    def loss(self, step: int) -> torch.Tensor:
        s, M, N, K = self.s, self.M, self.N, self.s.horizon
        iteration, epoch = divmod(step, s.epochs)
        if epoch == 0:
            if iteration % s.eval_every == 0:
                self.record(iteration)
            self.collect(iteration)
        ro, adv = self.batch["ro"], self.batch["adv"]
        logq = torch.log_softmax(self.policy(ro.inputs.reshape(M, N * K, -1)), -1)     # (M, N K, 17)
        logp = logq.gather(-1, ro.actions.reshape(M, -1, 1))[..., 0].reshape(M, N, K)
        alive = ro.alive.to(logp.dtype)
        pg = grpo_loss(logp.reshape(M * N, K), ro.logp_old.reshape(M * N, K), adv.reshape(-1),
                       mask=alive.reshape(M * N, K), clip_eps=s.clip_eps, reduction="none").loss.reshape(M, N).mean(1)
        # the EMA reading: exact KL(pi_theta || pi_ema) over the 17 actions at every visited state
        logq = logq.reshape(M, N, K, -1)
        kl_state = (logq.exp() * (logq - self.batch["logq_ema"])).sum(-1)
        kl = (kl_state * alive).sum((1, 2)) / alive.sum((1, 2)).clamp(min=1.0)
        A = s.anchor_size
        a_logits = self.policy(self.anchor_x.reshape(M, A * K, -1))
        a_logp = torch.log_softmax(a_logits, -1).gather(-1, self.anchor_a.reshape(M, -1, 1))[..., 0].reshape(M, A, K)
        a_alive = self.anchor_alive.to(logp.dtype)
        a_valid = torch.isfinite(self.anchor_score).to(logp.dtype)
        per_traj = -(a_logp * a_alive).sum(-1) / a_alive.sum(-1).clamp(min=1.0)
        nll = (per_traj * a_valid).sum(1) / a_valid.sum(1).clamp(min=1.0)
        return (pg + s.anchor_weight * (self.nll * nll + self.ema * kl)).sum()


def train_all(settings: Settings, seed: int = 0, seeds=None) -> tuple[LockstepTrainer, dict]:
    """Train every (arm, seed) model; return the trainer and a JSON-able record of the run."""
    trainer = LockstepTrainer(settings, seed, seeds)
    spec = TrainSpec(max_steps=settings.iterations * settings.epochs, learning_rate=settings.learning_rate,
                     weight_decay=0.0, threads=1, log_every=max(1, settings.iterations))
    with torch_threads(1):
        log = fit(trainer.policy, trainer.loss, spec)
        trainer.record(settings.iterations)
        final = evaluate(trainer.policy, trainer.test_world, trainer.gamma, settings, seed=30_000 + int(seed),
                         rollouts=settings.final_rollouts)
    record = dict(settings=asdict(settings), seed=int(seed), arms=trainer.arm_names, train_seeds=trainer.train_seeds,
                  model_arm=trainer.model_arm, model_seed=trainer.model_seed, labels_per_model=trainer.labels_used,
                  curve_iterations=trainer.curve_iterations,
                  curves={k: np.stack(v, 1).tolist() for k, v in trainer.curves.items()},
                  final={k: v.tolist() for k, v in final.items()}, log=log.to_dict())
    return trainer, record


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Train every arm at every training seed of the scale; write ``runs.json`` and ``policies.pt``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer, record = train_all(settings_for(scale), seed)
    record["scale"] = scale
    (out_dir / "runs.json").write_text(json.dumps(record) + "\n")
    torch.save({"weights": [w.detach() for w in trainer.policy.w], "biases": [b.detach() for b in trainer.policy.b]},
               out_dir / "policies.pt")
    means = {a: float(np.mean([f for f, ma in zip(record["final"]["success"], record["model_arm"]) if ma == a]))
             for a in record["arms"]}
    (out_dir / "metadata.json").write_text(json.dumps({"metrics": {"final_success": means}}, indent=1) + "\n")
    print("final success by arm:", {k: round(v, 3) for k, v in means.items()})


def load_runs(path: str | Path) -> tuple[dict, dict]:
    """``(record, policies)`` from an asset folder."""
    path = Path(path)
    record = json.loads((path / "runs.json").read_text())
    policies = torch.load(path / "policies.pt", map_location="cpu", weights_only=True)
    return record, policies
