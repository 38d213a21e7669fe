r"""The policy (an MLP over K value bins), SFT with optional LDS weights, and GRPO with several rewards.

Many small policies are trained at once as one *ensemble* module: member m has its own weights
(stacked on a leading axis), its own data and its own batches, and the training loss is the sum
of the members' losses. Adam(W) updates each weight from its own gradient and moments only, and
nothing couples the members (no gradient clipping), so SFT this way gives the same weights as
training them one by one, only faster (tested in ``tests/papers/test_ccc_grpo_regression.py``).
GRPO members draw their rollouts from one shared torch generator, so a member's rollouts (not
its update rule) depend on the ensemble's composition.

GRPO (:func:`grpo_train`) uses ``compendium.rl.grpo``: rollouts of G bins per input from the
current policy, rewards per arm, group-normalised advantages, ``inner_updates`` PPO-clip steps per
rollout batch with the k3 KL to the frozen SFT reference; AdamW without weight decay (Adam).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from compendium.rl import group_advantages, grpo_loss
from compendium.training import TrainSpec, fit

from .reward import ccc_loo_rewards, pointwise_rewards

__all__ = ["EnsembleMLP", "lds_weights", "pad_members", "sft_train", "grpo_train", "predict", "ARMS", "DECODINGS"]

ARMS = ("pointwise", "ccc", "ccc_pointwise", "ccc_permuted")


class EnsembleMLP(nn.Module):
    """``M`` independent MLPs ``d -> h -> h -> K`` (ReLU) evaluated in one batched call.

    Parameters
    ----------
    seeds : sequence of int
        One initialisation seed per member (member m's weights depend on ``seeds[m]`` only,
        drawn as ``nn.Linear``'s default uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))).
    in_dim, hidden, out_dim : int
    """

    def __init__(self, seeds, in_dim: int, hidden: int, out_dim: int):
        super().__init__()
        sizes = [(in_dim, hidden), (hidden, hidden), (hidden, out_dim)]
        weights = {f"w{k}": [] for k in range(3)} | {f"b{k}": [] for k in range(3)}
        for seed in seeds:
            g = torch.Generator().manual_seed(int(seed))
            for k, (fan_in, fan_out) in enumerate(sizes):
                bound = 1.0 / math.sqrt(fan_in)
                weights[f"w{k}"].append((torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound)
                weights[f"b{k}"].append((torch.rand(1, fan_out, generator=g) * 2 - 1) * bound)
        for name, values in weights.items():
            setattr(self, name, nn.Parameter(torch.stack(values)))
        self.members = len(seeds)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(M, N, K)`` for inputs ``(M, N, d)`` (member m sees ``x[m]``)."""
        h = torch.relu(torch.baddbmm(self.b0, x, self.w0))
        h = torch.relu(torch.baddbmm(self.b1, h, self.w1))
        return torch.baddbmm(self.b2, h, self.w2)

    def select(self, index) -> "EnsembleMLP":
        """A new ensemble made of copies of members ``index`` (a list of member positions)."""
        out = EnsembleMLP.__new__(EnsembleMLP)
        nn.Module.__init__(out)
        for name in ("w0", "w1", "w2", "b0", "b1", "b2"):
            setattr(out, name, nn.Parameter(getattr(self, name).detach()[list(index)].clone()))
        out.members = len(index)
        return out


def lds_weights(y_bins, num_bins: int, kernel_size: int = 5, sigma: float = 2.0) -> np.ndarray:
    """Label-distribution-smoothing inverse-frequency weights (Yang et al., 2021), mean 1.

    The bin histogram is convolved with a Gaussian kernel (``kernel_size`` bins, std ``sigma``);
    each sample gets ``1 / smoothed density`` of its bin, rescaled to mean 1 over the samples.
    """
    y_bins = np.asarray(y_bins)
    counts = np.bincount(y_bins, minlength=num_bins).astype(float)
    half = kernel_size // 2
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) / sigma) ** 2)
    smooth = np.convolve(np.pad(counts, half, mode="constant"), kernel / kernel.max(), mode="valid")
    w = 1.0 / np.maximum(smooth[y_bins], 1e-12)
    return w / w.mean()


def pad_members(arrays, width: int | None = None, dtype=torch.float32) -> torch.Tensor:
    """Stack per-member arrays of different lengths (and feature widths) into one zero-padded tensor.

    Parameters
    ----------
    arrays : list of M arrays, shape (n_m,) or (n_m, d_m)
    width : int, optional
        Feature width to pad every (n_m, d_m) array to (zero columns contribute nothing to an MLP).

    Returns
    -------
    torch.Tensor, shape (M, max n_m) or (M, max n_m, width)
    """
    arrays = [np.asarray(a) for a in arrays]
    n = max(len(a) for a in arrays)
    if arrays[0].ndim == 1:
        out = np.zeros((len(arrays), n), dtype=arrays[0].dtype)
        for m, a in enumerate(arrays):
            out[m, : len(a)] = a
    else:
        width = width or max(a.shape[1] for a in arrays)
        out = np.zeros((len(arrays), n, width))
        for m, a in enumerate(arrays):
            out[m, : len(a), : a.shape[1]] = a
    return torch.as_tensor(out, dtype=dtype)


def _batch(rngs, sizes, batch_size):
    """``(M, batch)`` indices, member m's from its own generator within its own ``sizes[m]``."""
    return torch.as_tensor(np.stack([r.integers(0, n, batch_size) for r, n in zip(rngs, sizes)]))


def _gather(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return t[torch.arange(t.shape[0])[:, None], idx]


def sft_train(model: EnsembleMLP, x_train: list, bins_train: list, weights: list, *, steps: int,
              batch_size: int = 128, learning_rate: float = 3e-3, rngs: list) -> dict:
    """Cross-entropy on the target bin (weighted per sample), one data set and generator per member.

    Parameters
    ----------
    model : EnsembleMLP with M members
    x_train, bins_train, weights : lists of M arrays
        Features (n_m, d_m <= model input), bin indices (n_m,), sample weights (n_m,) (ones for
        plain SFT).
    steps, batch_size, learning_rate : training settings (AdamW, cosine schedule, weight decay 0.01)
    rngs : list of M numpy Generators (the batch streams)

    Returns
    -------
    dict : the training log (``TrainLog.to_dict``)
    """
    sizes = [len(b) for b in bins_train]
    xs = pad_members(x_train, model.w0.shape[1])
    bs, ws = pad_members(bins_train, dtype=torch.long), pad_members(weights)
    spec = TrainSpec(max_steps=steps, learning_rate=learning_rate, weight_decay=0.01, schedule="cosine",
                     threads=1, log_every=max(1, steps // 4))

    def loss_fn(step):
        idx = _batch(rngs, sizes, batch_size)
        logits = model(_gather(xs, idx))                                             # (M, batch, K)
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), _gather(bs, idx), reduction="none")
        return (_gather(ws, idx) * ce).mean(1).sum()

    return fit(model, loss_fn, spec).to_dict()


DECODINGS = ("median", "greedy")


def predict(model: EnsembleMLP, x: list, centers: list, decode: str = "median") -> list:
    """Point predictions of every member on its own inputs: a list of M arrays.

    ``decode='median'``: the bin where the policy's cumulative probability first reaches 1/2 (the
    MAE-optimal read-out of a distribution); ``'greedy'``: the most probable bin (an LLM's greedy
    decoding).
    """
    if decode not in DECODINGS:
        raise ValueError(f"decode must be one of {DECODINGS}, got {decode!r}")
    with torch.no_grad():
        logits = model(pad_members(x, model.w0.shape[1]))
        if decode == "greedy":
            k = logits.argmax(-1)
        else:
            cdf = torch.softmax(logits.double(), -1).cumsum(-1)
            k = (cdf < 0.5).sum(-1).clamp(max=logits.shape[-1] - 1)
    k = k.numpy()
    return [np.asarray(c)[k[m, : len(xm)]] for m, (xm, c) in enumerate(zip(x, centers))]


def _arm_rewards(arm: str, preds: torch.Tensor, y: torch.Tensor, scale: float, gen: torch.Generator):
    if arm == "pointwise":
        return pointwise_rewards(preds, y, scale)
    if arm == "ccc":
        return ccc_loo_rewards(preds, y)
    if arm == "ccc_pointwise":
        return ccc_loo_rewards(preds, y) + pointwise_rewards(preds, y, scale)
    if arm == "ccc_permuted":       # the pairing of predictions and targets is destroyed in each batch
        perm = torch.argsort(torch.rand(y.shape, generator=gen), dim=-1)
        return ccc_loo_rewards(preds, torch.gather(y, -1, perm))
    raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")


def grpo_train(model: EnsembleMLP, reference: EnsembleMLP, arms: list, x_train: list, y_train: list,
               centers: list, *, steps: int, batch_size: int, group_size: int, learning_rate: float,
               clip_eps: float, kl_coef: float, inner_updates: int, reward_scale: list,
               batch_rngs: list, generator: torch.Generator) -> dict:
    """GRPO for every member: member m uses reward ``arms[m]`` on its own data and value grid.

    Parameters
    ----------
    model, reference : EnsembleMLP with M members (the reference is frozen)
    arms : list of M arm names from ``ARMS``
    x_train, y_train : lists of M arrays (n_m, d_m) and (n_m,)
    centers : list of M arrays (K,), the value of each bin for member m
    steps : int
        Rollout batches; the optimiser takes ``steps * inner_updates`` steps.
    batch_size, group_size : B and G
    learning_rate, clip_eps, kl_coef, inner_updates : GRPO settings
    reward_scale : list of M floats, the pointwise reward's scale (training-y standard deviation)
    batch_rngs : list of M numpy Generators (members with equal generators see equal batches)
    generator : torch.Generator for the rollouts and the permuted-target control

    Returns
    -------
    dict : ``reward`` (steps, M) mean raw reward per rollout batch, ``clip_fraction`` and
    ``mean_kl`` (per rollout batch, after its last update), and the training log.
    """
    m_members = model.members
    sizes = [len(y) for y in y_train]
    xs, ys = pad_members(x_train, model.w0.shape[1]), pad_members(y_train, dtype=torch.float64)
    centers_t = pad_members(centers, dtype=torch.float64)                  # (M, K)
    for p in reference.parameters():
        p.requires_grad_(False)
    state: dict = {}
    history = {"reward": [], "clip_fraction": [], "mean_kl": []}
    groups: dict = {}
    for m, arm in enumerate(arms):
        groups.setdefault(arm, []).append(m)
    scales = torch.tensor(reward_scale, dtype=torch.float64)

    def rollout():
        idx = _batch(batch_rngs, sizes, batch_size)
        x, y = _gather(xs, idx), _gather(ys, idx)                           # (M, B, d), (M, B)
        with torch.no_grad():
            logp_all = torch.log_softmax(model(x), -1)                     # (M, B, K)
            k = logp_all.shape[-1]
            actions = torch.multinomial(logp_all.exp().reshape(-1, k), group_size, replacement=True,
                                        generator=generator).reshape(m_members, batch_size, group_size)
            preds = torch.gather(centers_t, 1, actions.reshape(m_members, -1)).reshape(actions.shape)
            rewards = torch.empty(m_members, batch_size, group_size, dtype=torch.float64)
            for arm, members in groups.items():
                rewards[members] = _arm_rewards(arm, preds[members], y[members], scales[members], generator)
            adv = group_advantages(rewards)                                 # (M, B, G)
            logp_old = logp_all.gather(-1, actions)
            logp_ref = torch.log_softmax(reference(x), -1).gather(-1, actions)
        history["reward"].append(rewards.mean((1, 2)).numpy())
        state.update(x=x, actions=actions, adv=adv, logp_old=logp_old, logp_ref=logp_ref)

    def loss_fn(step):
        if step % inner_updates == 0:
            rollout()
        logp = torch.log_softmax(model(state["x"]), -1).gather(-1, state["actions"])   # (M, B, G)
        out = grpo_loss(logp.reshape(-1), state["logp_old"].reshape(-1), state["adv"].reshape(-1),
                        logp_ref=state["logp_ref"].reshape(-1), clip_eps=clip_eps, kl_coef=kl_coef,
                        reduction="none")
        if step % inner_updates == inner_updates - 1:
            history["clip_fraction"].append(out.clip_fraction)
            history["mean_kl"].append(out.mean_kl)
        return out.loss.reshape(m_members, -1).mean(1).sum()

    spec = TrainSpec(max_steps=steps * inner_updates, learning_rate=learning_rate, weight_decay=0.0,
                     threads=1, log_every=max(1, steps * inner_updates // 4))
    log = fit(model, loss_fn, spec)
    return {"reward": np.array(history["reward"]), "clip_fraction": np.array(history["clip_fraction"]),
            "mean_kl": np.array(history["mean_kl"]), "log": log.to_dict()}
