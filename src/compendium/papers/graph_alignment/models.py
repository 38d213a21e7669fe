"""Siamese GNNs from torch_geometric layers, their training, and the trained-models asset.

Every model: the nodes carry no features (a constant 1); a first ``GCNConv(1, width)`` turns
degrees into features for every architecture (as in ngmb: attention over identical inputs is
uniform, so a GAT from constant input would stay constant), then four layers
``h <- h + ReLU(GraphNorm(conv(h)))``, a final ``Linear(width, out_dim)``; widths chosen so the
parameter counts agree within 10 % (:func:`width_for`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init

from .graphs import make_pairs

__all__ = ["ARCHITECTURES", "ANISOTROPIC", "ISOTROPIC", "SiameseGNN", "width_for", "parameter_count",
           "to_edge_index", "embed", "similarity", "alignment_loss", "AssetSettings", "settings_for",
           "train_model", "build_asset", "load_models", "load_checkpoints", "ASSET_NAME"]

ASSET_NAME = "graph_alignment_gnns"
ARCHITECTURES = ("gcn", "gin", "gat", "gatedgcn", "ggnn")
ISOTROPIC = ("gcn", "gin")
ANISOTROPIC = ("gat", "gatedgcn")   # GGNN (ngmb's "GatedGCN") has uniform neighbour weights: in neither
LABELS = {"gcn": "GCN", "gin": "GIN", "gat": "GAT", "gatedgcn": "GatedGCN", "ggnn": "GGNN"}
GAT_HEADS = 2


def _conv(architecture: str, width: int) -> nn.Module:
    from torch_geometric.nn import GATConv, GatedGraphConv, GCNConv, GINConv, ResGatedGraphConv

    if architecture == "gcn":
        return GCNConv(width, width)
    if architecture == "gin":
        return GINConv(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)))
    if architecture == "gat":
        return GATConv(width, width // GAT_HEADS, heads=GAT_HEADS)
    if architecture == "gatedgcn":   # Bresson & Laurent's edge gate: eta_ij = sigma(K h_i + Q h_j)
        return ResGatedGraphConv(width, width)
    if architecture == "ggnn":       # Li et al.'s gated graph NN: sum of W h_j, then a GRU
        return GatedGraphConv(width, num_layers=1)
    raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")


class SiameseGNN(nn.Module):
    """One GNN applied to both graphs of a pair.

    Parameters
    ----------
    architecture : one of ``ARCHITECTURES``
    width : int
        Hidden width (a multiple of the GAT head count for ``gat``).
    out_dim : int
        Embedding size; similarity ``S = H_A H_B^T``.
    num_layers : int
    """

    def __init__(self, architecture: str, width: int, out_dim: int = 32, num_layers: int = 4):
        super().__init__()
        from torch_geometric.nn import GCNConv, GraphNorm

        if architecture == "gat" and width % GAT_HEADS:
            raise ValueError(f"gat width must be a multiple of {GAT_HEADS}, got {width}")
        self.architecture, self.width, self.out_dim = architecture, width, out_dim
        self.inp = GCNConv(1, width)
        self.convs = nn.ModuleList(_conv(architecture, width) for _ in range(num_layers))
        self.norms = nn.ModuleList(GraphNorm(width) for _ in range(num_layers))
        self.out = nn.Linear(width, out_dim)

    def forward(self, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        """Node embeddings ``(N, out_dim)`` for ``N`` nodes of a batch of graphs (constant input)."""
        h = self.inp(torch.ones(batch.numel(), 1, dtype=self.out.weight.dtype), edge_index)
        for conv, norm in zip(self.convs, self.norms):
            h = h + torch.relu(norm(conv(h, edge_index), batch))
        return self.out(h)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def width_for(architecture: str, target: int, out_dim: int = 32) -> int:
    """The width whose parameter count is closest to ``target`` (even widths 8..256)."""
    best = min(range(8, 257, 2), key=lambda w: abs(parameter_count(SiameseGNN(architecture, w, out_dim)) - target))
    return best


def to_edge_index(A: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """A stack ``(G, n, n)`` as one disjoint-union graph: ``edge_index (2, E)``, ``batch (G n,)``."""
    G, n, _ = A.shape
    g, i, j = np.nonzero(A)
    edge_index = torch.from_numpy(np.stack([g * n + i, g * n + j])).long()
    return edge_index, torch.arange(G).repeat_interleave(n)


def embed(model: SiameseGNN, A: np.ndarray) -> torch.Tensor:
    """Embeddings ``(G, n, out_dim)`` of every graph in ``A``."""
    G, n, _ = A.shape
    return model(*to_edge_index(A)).view(G, n, -1)


def similarity(model: SiameseGNN, A: np.ndarray, B: np.ndarray) -> torch.Tensor:
    """``S = H_A H_B^T`` for each pair: ``(G, n, n)``; both graphs go through one forward pass."""
    H = embed(model, np.concatenate([A, B]))
    HA, HB = H[: len(A)], H[len(A):]
    return HA @ HB.transpose(1, 2)


def alignment_loss(S: torch.Tensor, perm: np.ndarray) -> torch.Tensor:
    """Mean over rows of ``-log softmax_row(S)[i, perm[i]]``."""
    G, n, _ = S.shape
    return nn.functional.cross_entropy(S.reshape(G * n, n), torch.from_numpy(np.asarray(perm)).reshape(-1).long())


@dataclass(frozen=True)
class AssetSettings:
    architectures: tuple
    num_seeds: int
    steps: int
    batch_pairs: int
    param_target: int
    etas: tuple = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
    num_nodes: int = 50
    mean_degree: float = 6.0
    out_dim: int = 32
    learning_rate: float = 3e-3
    checkpoints: tuple = ()      # steps (< steps) at which a snapshot of every model is kept as well


def settings_for(scale: str) -> AssetSettings:
    """Smoke: the four models the headline compares, short training; full: all five, 2000 steps
    (about 25 CPU minutes for the 25 models, one thread). Both keep snapshots at 1/8, 1/4 and 1/2
    of the run (the accuracy-against-steps curve and the convergence check)."""
    if scale == "smoke":
        return AssetSettings(architectures=("gcn", "gin", "gat", "gatedgcn"), num_seeds=5, steps=100,
                             batch_pairs=8, param_target=12000, checkpoints=(12, 25, 50))
    if scale == "full":
        return AssetSettings(architectures=ARCHITECTURES, num_seeds=5, steps=2000, batch_pairs=8,
                             param_target=12000, checkpoints=(250, 500, 1000))
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def train_model(architecture: str, width: int, settings: AssetSettings, seed: int) -> tuple[SiameseGNN, dict]:
    """Train one model on fresh pairs, each with eta drawn uniformly from the grid (seeded stream).

    The weights after each step in ``settings.checkpoints`` are kept in ``model.snapshots``
    (``{step: state_dict}``): points along this one run (its cosine schedule included), not models
    trained for that many steps from the start."""
    with seeded_init(seed):
        model = SiameseGNN(architecture, width, settings.out_dim)
    rng = np.random.default_rng([seed, 7])        # the batch stream, shared by every architecture
    snapshots: dict = {}

    def loss_fn(step: int) -> torch.Tensor:
        if step in settings.checkpoints:          # the weights after ``step`` updates (no effect on training)
            snapshots[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        etas = rng.choice(settings.etas, settings.batch_pairs)
        A, Bp, perm = make_pairs(settings.batch_pairs, settings.num_nodes, settings.mean_degree, etas, rng)
        return alignment_loss(similarity(model, A, Bp), perm)

    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     grad_clip=0.1, warmup_steps=max(1, settings.steps // 10), schedule="cosine",
                     threads=1, log_every=10)
    log = fit(model, loss_fn, spec)
    model.snapshots = snapshots
    return model, log.to_dict()


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Train ``num_seeds`` models per architecture (training seeds ``seed * 100 + k``): one
    ``<arch>_<k>.pt`` each and ``metadata.json`` with widths, parameter counts and training logs."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_for(scale)
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(settings), "models": {}}
    for arch in settings.architectures:
        width = width_for(arch, settings.param_target, settings.out_dim)
        for k in range(settings.num_seeds):
            model, log = train_model(arch, width, settings, seed * 100 + k)
            torch.save(model.state_dict(), out_dir / f"{arch}_{k}.pt")
            for step, state in model.snapshots.items():
                torch.save(state, out_dir / f"{arch}_{k}_step{step}.pt")
            meta["models"][f"{arch}_{k}"] = {"architecture": arch, "width": width, "train_seed": seed * 100 + k,
                                             "parameters": parameter_count(model), "log": log,
                                             "checkpoints": sorted(int(s) for s in model.snapshots)}
            print(f"{arch} seed {k}: width {width}, loss {log['final_loss']:.3f}")
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_checkpoints(path: str | Path) -> dict:
    """``{arch: {step: [model per seed]}}``: the snapshots along training kept in the asset (eval
    mode), the final models under ``settings.steps``; empty for an asset without snapshots."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    out_dim, final = meta["settings"]["out_dim"], int(meta["settings"]["steps"])
    out: dict = {}
    for key, info in meta["models"].items():
        for step in list(info.get("checkpoints", [])) + [final]:
            model = SiameseGNN(info["architecture"], info["width"], out_dim)
            name = f"{key}.pt" if step == final else f"{key}_step{step}.pt"
            model.load_state_dict(torch.load(path / name, map_location="cpu", weights_only=True))
            out.setdefault(info["architecture"], {}).setdefault(int(step), []).append(model.eval())
    return {a: v for a, v in out.items() if len(v) > 1}


def load_models(path: str | Path) -> tuple[dict, dict]:
    """``({arch: [model per seed]}, metadata)`` from an asset folder (models in eval mode)."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    out_dim = meta["settings"]["out_dim"]
    models: dict[str, list] = {}
    for key, info in meta["models"].items():
        model = SiameseGNN(info["architecture"], info["width"], out_dim)
        model.load_state_dict(torch.load(path / f"{key}.pt", map_location="cpu", weights_only=True))
        model.train_seed = int(info["train_seed"])      # the probe's random-init twin starts here
        models.setdefault(info["architecture"], []).append(model.eval())
    return models, meta
