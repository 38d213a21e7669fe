"""The chunk VAE, the chunk policies (MSE, 256-bin token and mixture-density heads in three action
spaces), their training with ``compendium.training.fit``, and the trained-models asset.

Every module holds ``models`` independent copies (one per training seed) as a leading axis: the
linear layers are batched matrix products and the convolutions grouped by model, so five seeds
train in one program. AdamW acts per element and no gradient clipping couples the copies, so each
copy trains exactly as it would alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.interpolate
import torch
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init

from .tasks import EPISODE_STEPS, HORIZON, OBS_DIM, chunk_targets, sample_episodes

__all__ = ["ASSET_NAME", "SPACES", "HEADS", "BatchedLinear", "BatchedConv1d", "ChunkVAE", "ChunkPolicy", "spline_basis",
           "upsample_matrix", "AssetSettings", "settings_for", "training_pairs", "train_vae",
           "train_policy", "policy_targets", "train_all", "build_asset", "load_models"]

ASSET_NAME = "latent_action_chunking_models"
SPACES = ("action60", "action15", "latent")
HEADS = ("mse", "token", "stochastic")
KNOTS_15HZ = np.arange(0, HORIZON + 1, 4)          # 13 knots at 15 Hz spanning the 48-step chunk
NUM_BINS = 256
BIN_RANGE = 3.0                                    # bins cover [-3, 3] standard deviations
TOKEN_SUBSET = 16                                  # numbers per sample scored in each token-head step


class BatchedLinear(nn.Module):
    """``models`` independent linear maps: (M, B, fin) -> (M, B, fout)."""

    def __init__(self, models: int, fin: int, fout: int):
        super().__init__()
        bound = 1 / math.sqrt(fin)
        self.weight = nn.Parameter(torch.empty(models, fin, fout).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(models, 1, fout).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class BatchedConv1d(nn.Module):
    """``models`` independent 1-D convolutions on channels-last input (M, B, L, C) -> (M, B, L', C').

    Implemented as unfold + batched matrix product (grouped convolutions are slow on the CPU).
    """

    def __init__(self, models: int, fin: int, fout: int, kernel: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.kernel, self.stride, self.padding = kernel, stride, padding
        bound = 1 / math.sqrt(fin * kernel)
        self.weight = nn.Parameter(torch.empty(models, fin * kernel, fout).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(models, 1, fout).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        M, B = x.shape[:2]
        if self.padding:
            x = nn.functional.pad(x, (0, 0, self.padding, self.padding))
        patches = x.unfold(2, self.kernel, self.stride)                     # (M, B, L', C, k)
        length = patches.shape[2]
        out = torch.baddbmm(self.bias, patches.reshape(M, B * length, -1), self.weight)
        return out.reshape(M, B, length, -1)


def spline_basis(steps: int, control_points: int) -> np.ndarray:
    """Clamped cubic B-spline design matrix (steps, control_points) on [0, 1] (scipy)."""
    interior = np.linspace(0, 1, control_points - 2)[1:-1]
    knots = np.concatenate([[0.0] * 4, interior, [1.0] * 4])
    x = np.linspace(0, 1, steps)
    return scipy.interpolate.BSpline.design_matrix(x, knots, 3).toarray()


def upsample_matrix(kind: str, knots=KNOTS_15HZ, steps: int = HORIZON) -> np.ndarray:
    """The linear map (steps, len(knots)) that interpolates 15 Hz knots to 60 Hz steps 0..steps-1.

    ``kind`` is ``'linear'`` (numpy) or ``'cubic'`` (scipy's not-a-knot ``CubicSpline``).
    """
    eye = np.eye(len(knots))
    t = np.arange(steps)
    if kind == "linear":
        return np.stack([np.interp(t, knots, e) for e in eye], 1)
    if kind == "cubic":
        return scipy.interpolate.CubicSpline(knots, eye, axis=0)(t)
    raise ValueError(f"kind must be 'linear' or 'cubic', got {kind!r}")


class ChunkVAE(nn.Module):
    r"""1-D-conv VAE of 48-step 2-D action chunks: 48 steps -> 12 latent steps x 4 dims (stride 4).

    Encoder: conv(5) -> conv(4, stride 4) -> conv(3) giving :math:`\mu, \log\sigma^2`; decoder:
    two conv(3) at the latent rate, a linear map to ``control_points`` 2-D control points and a
    fixed clamped cubic B-spline to 48 steps (so decoded chunks are smooth by construction). Loss:
    MSE (normalised units) + ``beta`` * KL per latent element. Batched over ``models`` seeds.
    """

    def __init__(self, models: int, horizon: int = HORIZON, stride: int = 4, latent_dim: int = 4,
                 beta: float = 1e-3, width: int = 32, control_points: int = 20):
        super().__init__()
        if horizon % stride:
            raise ValueError(f"horizon ({horizon}) must be a multiple of stride ({stride})")
        self.models, self.horizon, self.stride, self.latent_dim, self.beta = models, horizon, stride, latent_dim, beta
        self.latent_steps = horizon // stride
        M, W = models, width
        self.encoder = nn.Sequential(
            BatchedConv1d(M, 2, W, 5, padding=2), nn.GELU(),
            BatchedConv1d(M, W, W, stride, stride=stride), nn.GELU(),
            BatchedConv1d(M, W, 2 * latent_dim, 3, padding=1))
        self.decoder = nn.Sequential(
            BatchedConv1d(M, latent_dim, W, 3, padding=1), nn.GELU(),
            BatchedConv1d(M, W, W, 3, padding=1), nn.GELU())
        self.to_points = BatchedLinear(M, W * self.latent_steps, control_points * 2)
        self.control_points = control_points
        self.register_buffer("basis", torch.tensor(spline_basis(horizon, control_points), dtype=torch.float32))
        self.register_buffer("mean", torch.zeros(M, 1, 1, 2))
        self.register_buffer("scale", torch.ones(M, 1, 1, 1))

    def encode(self, chunks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(M, B, 48, 2) -> mean and log-variance, each (M, B, 12, 4)."""
        h = self.encoder((chunks - self.mean) / self.scale)                  # (M, B, 12, 8)
        return h[..., :self.latent_dim], h[..., self.latent_dim:].clamp(-10, 5)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """(M, B, 12, 4) -> (M, B, 48, 2) chunks."""
        M, B = z.shape[:2]
        h = self.decoder(z).reshape(M, B, -1)                                 # (M, B, 12 W)
        points = self.to_points(h).reshape(M, B, self.control_points, 2)
        return torch.einsum("tk,mbkc->mbtc", self.basis, points) * self.scale + self.mean

    def encode_then_decode(self, chunks: torch.Tensor) -> torch.Tensor:
        """Decode the posterior mean: the projection RTR applies, (M, B, 48, 2) -> same."""
        return self.decode(self.encode(chunks)[0])

    def loss(self, chunks: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Sum over models of (MSE + beta * KL), each a mean over its own batch."""
        mu, logvar = self.encode(chunks)
        z = mu + torch.exp(0.5 * logvar) * torch.randn(mu.shape, generator=generator)
        recon = (self.decode(z) - chunks) / self.scale
        kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp())
        return (recon.pow(2).mean((1, 2, 3)) + self.beta * kl.mean((1, 2, 3))).sum()


class ChunkPolicy(nn.Module):
    """Observation -> a chunk target of ``out_dim`` numbers, with one of three heads.

    ``mse``: the mean; ``token``: 256 bins per number over [-3, 3] standard deviations, decoded by
    argmax (as VLA tokenisers do); ``stochastic``: a mixture of ``components`` diagonal Gaussians,
    decoded by sampling. Targets are standardised per number (training mean and std per model).
    """

    def __init__(self, models: int, out_dim: int, head: str, hidden: int = 128, token_features: int = 8,
                 components: int = 2):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        self.models, self.out_dim, self.head, self.components, self.token_features = models, out_dim, head, components, token_features
        M, D = models, out_dim
        self.trunk = nn.Sequential(BatchedLinear(M, OBS_DIM, hidden), nn.GELU(), BatchedLinear(M, hidden, hidden), nn.GELU())
        if head == "mse":
            self.out = BatchedLinear(M, hidden, D)
        elif head == "token":
            self.out = BatchedLinear(M, hidden, D * token_features)
            self.token_weight = nn.Parameter(torch.randn(M, token_features, NUM_BINS) / math.sqrt(token_features))
            self.token_bias = nn.Parameter(torch.zeros(M, D, NUM_BINS))
        else:
            self.out = BatchedLinear(M, hidden, components * (1 + 2 * D))
        for name, shape in (("obs_mean", (M, 1, OBS_DIM)), ("obs_std", (M, 1, OBS_DIM)),
                            ("target_mean", (M, 1, D)), ("target_std", (M, 1, D))):
            self.register_buffer(name, torch.zeros(shape) if "mean" in name else torch.ones(shape))
        width = 2 * BIN_RANGE / NUM_BINS
        self.register_buffer("bin_centers", torch.linspace(-BIN_RANGE + width / 2, BIN_RANGE - width / 2, NUM_BINS))

    def _features(self, obs):
        return self.trunk((obs - self.obs_mean) / self.obs_std)

    def _token_logits(self, h, elements=None):
        M, B = h.shape[:2]
        D, F = self.out_dim, self.token_features
        weight, bias_f, bias = self.out.weight.reshape(M, -1, D, F), self.out.bias.reshape(M, 1, D, F), self.token_bias
        if elements is not None:                       # score only the sampled numbers while training
            weight, bias_f, bias = weight[:, :, elements], bias_f[:, :, elements], bias[:, elements]
        d = weight.shape[2]
        feats = torch.baddbmm(bias_f.reshape(M, 1, d * F), h, weight.reshape(M, -1, d * F))
        logits = torch.bmm(feats.reshape(M, B * d, F), self.token_weight)
        return logits.reshape(M, B, d, NUM_BINS) + bias[:, None]

    def _mixture(self, h):
        M, B = h.shape[:2]
        K, D = self.components, self.out_dim
        out = self.out(h)
        logits = out[..., :K]
        means = out[..., K:K + K * D].reshape(M, B, K, D)
        log_std = out[..., K + K * D:].reshape(M, B, K, D).clamp(-6, 2)
        return torch.log_softmax(logits, -1), means, log_std

    def loss(self, obs: torch.Tensor, target: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Sum over models of the head's mean loss; obs (M, B, OBS_DIM), target (M, B, D) raw."""
        y = (target - self.target_mean) / self.target_std
        h = self._features(obs)
        if self.head == "mse":
            return (self.out(h) - y).pow(2).mean((1, 2)).sum()
        if self.head == "token":
            elements = torch.randperm(self.out_dim, generator=generator)[:min(self.out_dim, TOKEN_SUBSET)]
            logits = self._token_logits(h, elements)                        # (M, B, d, 256)
            bins = ((y[..., elements] + BIN_RANGE) / (2 * BIN_RANGE) * NUM_BINS).long().clamp(0, NUM_BINS - 1)
            nll = nn.functional.cross_entropy(logits.reshape(-1, NUM_BINS), bins.reshape(-1), reduction="none")
            return nll.reshape(self.models, -1).mean(1).sum()
        log_pi, means, log_std = self._mixture(h)
        z = (y[:, :, None] - means) / log_std.exp()
        log_prob = (-0.5 * z ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)      # (M, B, K)
        return -(torch.logsumexp(log_pi + log_prob, -1)).mean(1).sum() / self.out_dim

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The decoded target (M, B, D) in raw units (argmax for tokens, a sample for mixtures)."""
        h = self._features(obs)
        if self.head == "mse":
            y = self.out(h)
        elif self.head == "token":
            y = self.bin_centers[self._token_logits(h).argmax(-1)]
        else:
            if generator is None:
                raise ValueError("the stochastic head samples: pass a torch.Generator")
            log_pi, means, log_std = self._mixture(h)
            k = torch.multinomial(log_pi.exp().reshape(-1, self.components), 1, generator=generator).reshape(log_pi.shape[:2])
            pick = k[..., None, None].expand(*k.shape, 1, self.out_dim)
            mu, sd = means.gather(2, pick)[:, :, 0], log_std.gather(2, pick)[:, :, 0].exp()
            y = mu + sd * torch.randn(mu.shape, generator=generator)
        return y * self.target_std + self.target_mean


@dataclass(frozen=True)
class AssetSettings:
    models: int            # training seeds (the unit of replication)
    demos: int             # expert episodes per model
    start_stride: int      # chunk starts every this many steps of each demo
    vae_steps: int
    policy_steps: int
    batch_size: int
    hidden: int = 128
    state_noise: float = 0.01
    goal_noise: float = 0.01
    learning_rate: float = 3e-3


def settings_for(scale: str) -> AssetSettings:
    if scale == "smoke":
        return AssetSettings(models=5, demos=60, start_stride=3, vae_steps=400, policy_steps=400, batch_size=64)
    if scale == "full":
        return AssetSettings(models=5, demos=600, start_stride=2, vae_steps=2000, policy_steps=2000, batch_size=128)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def training_pairs(settings: AssetSettings, seed: int) -> dict:
    """Per-model expert data: observations (M, N, OBS_DIM) and chunks (M, N, 49, 2) (own demos per model)."""
    obs, chunks = [], []
    for k in range(settings.models):
        rng = np.random.default_rng([seed, k, 11])
        ep = sample_episodes(settings.demos, rng)
        grid = np.arange(0, EPISODE_STEPS, settings.start_stride)
        starts = np.broadcast_to(grid, (len(ep), len(grid)))
        x = ep.states[np.arange(len(ep))[:, None], starts] + rng.normal(0, settings.state_noise, starts.shape + (2,))
        v = ep.velocities[np.arange(len(ep))[:, None], starts]
        goal = ep.goal[:, None] + rng.normal(0, settings.goal_noise, starts.shape + (4,))
        o = _observe_grid(x, v, starts, ep.task, goal)
        obs.append(o.reshape(-1, OBS_DIM))
        chunks.append(chunk_targets(ep.commands, starts, HORIZON, extra=1).reshape(-1, HORIZON + 1, 2))
    as_t = lambda a: torch.tensor(np.stack(a), dtype=torch.float32)  # noqa: E731
    return {"obs": as_t(obs), "chunks": as_t(chunks)}


def _observe_grid(x, v, starts, task, goal):
    """Observations for every (episode, start): (E, N, OBS_DIM)."""
    u = starts / EPISODE_STEPS
    phase = np.stack([u, np.sin(2 * np.pi * u), np.cos(2 * np.pi * u)], -1)
    onehot = np.broadcast_to(np.eye(3)[task][:, None], starts.shape + (3,))
    return np.concatenate([x, v / 2.0, phase, goal, onehot], -1).astype(np.float32)


def _batches(n: int, models: int, batch: int, seed: int):
    rng = np.random.default_rng(seed)
    return lambda: torch.tensor(rng.integers(0, n, (models, batch)))


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x[torch.arange(x.shape[0])[:, None], idx]


def train_vae(data: dict, settings: AssetSettings, seed: int) -> tuple[ChunkVAE, dict]:
    chunks = data["chunks"][:, :, :HORIZON]
    with seeded_init(seed):
        vae = ChunkVAE(settings.models)
    vae.mean.copy_(chunks.mean((1, 2), keepdim=True))
    vae.scale.copy_(chunks.std((1, 2, 3), keepdim=True))
    draw, gen = _batches(chunks.shape[1], settings.models, settings.batch_size, seed + 1), torch.Generator().manual_seed(seed + 2)
    spec = TrainSpec(max_steps=settings.vae_steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     warmup_steps=20, schedule="cosine", threads=1, log_every=50)
    log = fit(vae, lambda step: vae.loss(_gather(chunks, draw()), gen), spec)
    return vae.eval(), log.to_dict()


@torch.no_grad()
def policy_targets(space: str, data: dict, vae: ChunkVAE) -> torch.Tensor:
    """The target each space learns: (M, N, D)."""
    chunks = data["chunks"]
    M, N = chunks.shape[:2]
    if space == "action60":
        return chunks[:, :, :HORIZON].reshape(M, N, -1)
    if space == "action15":
        return chunks[:, :, KNOTS_15HZ].reshape(M, N, -1)
    if space == "latent":
        return torch.cat([vae.encode(chunks[:, i:i + 4096, :HORIZON])[0] for i in range(0, N, 4096)], 1).reshape(M, N, -1)
    raise ValueError(f"space must be one of {SPACES}, got {space!r}")


def train_policy(space: str, head: str, data: dict, targets: torch.Tensor, settings: AssetSettings,
                 seed: int) -> tuple[ChunkPolicy, dict]:
    with seeded_init(seed):
        policy = ChunkPolicy(settings.models, targets.shape[-1], head, settings.hidden)
    obs = data["obs"]
    policy.obs_mean.copy_(obs.mean(1, keepdim=True))
    policy.obs_std.copy_(obs.std(1, keepdim=True).clamp_min(1e-3))
    policy.target_mean.copy_(targets.mean(1, keepdim=True))
    policy.target_std.copy_(targets.std(1, keepdim=True).clamp_min(1e-4))
    draw, gen = _batches(obs.shape[1], settings.models, settings.batch_size, seed + 1), torch.Generator().manual_seed(seed + 2)

    def loss_fn(step):
        idx = draw()
        return policy.loss(_gather(obs, idx), _gather(targets, idx), gen)

    spec = TrainSpec(max_steps=settings.policy_steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     warmup_steps=20, schedule="cosine", threads=1, log_every=50)
    log = fit(policy, loss_fn, spec)
    return policy.eval(), log.to_dict()


def train_all(settings: AssetSettings, seed: int) -> tuple[ChunkVAE, dict, dict]:
    """Train the VAE, then every (space, head) policy, each with ``settings.models`` seeds."""
    data = training_pairs(settings, seed)
    vae, vae_log = train_vae(data, settings, 1000 * seed + 1)
    meta = {"name": ASSET_NAME, "seed": int(seed), "settings": asdict(settings), "vae": {"log": vae_log}, "policies": {}}
    policies = {}
    for i, space in enumerate(SPACES):
        targets = policy_targets(space, data, vae)
        for j, head in enumerate(HEADS):
            policy, log = train_policy(space, head, data, targets, settings, 1000 * seed + 10 * i + j + 10)
            policies[(space, head)] = policy
            meta["policies"][f"{space}_{head}"] = {"space": space, "head": head, "out_dim": int(targets.shape[-1]), "log": log}
    return vae, policies, meta


def build_asset(out_dir: Path, scale: str, seed: int) -> dict:
    """Train everything at ``scale`` and save ``vae.pt``, ``policy_<space>_<head>.pt``, ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vae, policies, meta = train_all(settings_for(scale), seed)
    meta["scale"] = scale
    torch.save(vae.state_dict(), out_dir / "vae.pt")
    for (space, head), policy in policies.items():
        torch.save(policy.state_dict(), out_dir / f"policy_{space}_{head}.pt")
        print(f"{space}/{head}: final loss {meta['policies'][f'{space}_{head}']['log']['final_loss']:.4f}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return {"vae_final_loss": meta["vae"]["log"]["final_loss"],
            **{k: v["log"]["final_loss"] for k, v in meta["policies"].items()}}


def load_models(path: str | Path) -> tuple[ChunkVAE, dict, dict]:
    """``(vae, {(space, head): policy}, metadata)`` from an asset folder, in eval mode."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    s = meta["settings"]
    vae = ChunkVAE(s["models"])
    vae.load_state_dict(torch.load(path / "vae.pt", map_location="cpu", weights_only=True))
    policies = {}
    for key, info in meta["policies"].items():
        policy = ChunkPolicy(s["models"], info["out_dim"], info["head"], s["hidden"])
        policy.load_state_dict(torch.load(path / f"policy_{key}.pt", map_location="cpu", weights_only=True))
        policies[(info["space"], info["head"])] = policy.eval()
    return vae.eval(), policies, meta
