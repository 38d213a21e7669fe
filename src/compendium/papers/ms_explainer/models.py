"""The explained GNN (torch_geometric ``GCNConv``), its training and the trained-models asset."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init, torch_threads

from .data import DATASETS, MAX_DEGREE, make_dataset

__all__ = ["GCN", "NormCache", "ASSET_NAME", "AssetSettings", "settings_for", "split", "split_nodes", "batch_of",
           "train_gcn", "train_node_gcn", "accuracy", "node_accuracy", "build_asset", "load_asset"]

ASSET_NAME = "ms_explainer_gcns"


class NormCache:
    """``gcn_norm`` results (self-loops added, symmetric degree weights) kept per ``edge_index``
    tensor, so that the explainers' thousands of forwards over the same batches stop recomputing
    them (11% of the chapter's full run was this recomputation).

    An entry is found by the tensor object itself: its ``id``, checked with ``is`` and the
    tensor's in-place ``_version``, and the entry holds a reference to the tensor, so its storage
    cannot be reused by another tensor while the entry lives. A different tensor with equal
    values is a miss (computed again, never wrong). The normalisation does not depend on edge
    masks or features, so a cached value is exactly what ``GCNConv`` computes. Nothing is cached
    in inference mode (inference tensors cannot enter a later autograd graph).
    """

    def __init__(self, size: int = 64):
        from collections import OrderedDict

        self.size, self.entries, self.hits, self.misses = size, OrderedDict(), 0, 0

    def __call__(self, edge_index: torch.Tensor, num_nodes: int, dtype: torch.dtype):
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        key = id(edge_index)
        entry = self.entries.get(key)
        if entry is not None and entry[0] is edge_index and entry[1:4] == (edge_index._version, num_nodes, dtype):
            self.entries.move_to_end(key)
            self.hits += 1
            return entry[4]
        self.misses += 1
        with torch.no_grad():
            norm = gcn_norm(edge_index, None, num_nodes, False, True, "source_to_target", dtype)
        if not torch.is_inference_mode_enabled():
            self.entries[key] = (edge_index, edge_index._version, num_nodes, dtype, norm)
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return norm


class GCN(nn.Module):
    """Three ``GCNConv`` layers with ReLU and a linear head, on one-hot degree features; max pooling
    for graph classification (``task="graph"``), the node's own state for node classification.

    ``represent`` gives the graph representation ``h(G)`` (pooled last layer) or, for a node model,
    the node states (the rows ``index`` when given); ``forward`` the class logits. Masks are applied by
    torch_geometric's explain mode (``set_masks``), which multiplies every message by its edge's mask
    value: a mask of ones is the unmasked model. The layers' degree normalisation is computed once
    per ``edge_index`` tensor (``NormCache``) and handed to each ``GCNConv`` through its own cache
    slot; the outputs are bit for bit those of the plain layers (tested). ``norm`` hands the layers
    a normalisation computed elsewhere instead: a node explainer's batch of computation subgraphs
    carries the full graph's (``explainers.prepare_nodes``), so that a subgraph's boundary nodes keep
    their full-graph degrees and the explained node's output is the full graph's.
    """

    def __init__(self, num_classes: int, hidden: int = 32, num_layers: int = 3, in_dim: int = MAX_DEGREE + 1,
                 task: str = "graph"):
        super().__init__()
        from torch_geometric.nn import GCNConv

        if task not in ("graph", "node"):
            raise ValueError(f"task must be 'graph' or 'node', got {task!r}")
        self.task = task
        self.convs = nn.ModuleList(GCNConv(in_dim if i == 0 else hidden, hidden) for i in range(num_layers))
        self.head = nn.Linear(hidden, num_classes)
        self.norm_cache = NormCache()

    def represent(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor | None = None,
                  index: torch.Tensor | None = None, norm: tuple | None = None) -> torch.Tensor:
        """``h``: ``(B, hidden)`` max-pooled node states after the last layer (graph model), or the
        last layer's node states ``(N, hidden)``, rows ``index`` only when given (node model)."""
        from torch_geometric.nn import global_max_pool

        if norm is None:
            norm = self.norm_cache(edge_index, x.size(0), x.dtype)
        for conv in self.convs:
            conv._cached_edge_index = norm            # GCNConv reads this slot instead of calling gcn_norm
            try:
                x = torch.relu(conv(x, edge_index))
            finally:
                conv._cached_edge_index = None
        if self.task == "node":
            return x if index is None else x[index]
        return global_max_pool(x, batch)

    def forward(self, x, edge_index, batch=None, index=None, norm=None) -> torch.Tensor:
        return self.head(self.represent(x, edge_index, batch, index, norm))


def batch_of(graphs: list):
    """A torch_geometric ``Batch`` (disjoint union) of ``graphs``."""
    from torch_geometric.data import Batch

    return Batch.from_data_list(graphs)


@dataclass(frozen=True)
class AssetSettings:
    num_graphs: int
    num_models: int
    steps: int
    hidden: int = 32
    learning_rate: float = 0.01
    train_fraction: float = 0.5
    dev_fraction: float = 0.2
    datasets: tuple = DATASETS
    node_steps: int = 1200               # node sets: full-graph steps (one step sees every node)


def settings_for(scale: str) -> AssetSettings:
    if scale == "smoke":
        return AssetSettings(num_graphs=120, num_models=3, steps=200)
    if scale == "full":
        return AssetSettings(num_graphs=240, num_models=5, steps=200)
    raise ValueError(f"scale must be 'smoke' or 'full', got {scale!r}")


def split(n: int, settings: AssetSettings) -> dict:
    """Index ranges of the train / dev / test graphs (the dataset is already shuffled)."""
    a = int(round(settings.train_fraction * n))
    b = a + int(round(settings.dev_fraction * n))
    return {"train": list(range(a)), "dev": list(range(a, b)), "test": list(range(b, n))}


def split_nodes(graph, settings: AssetSettings) -> dict:
    """A node set's train / dev / test nodes: the same fractions cut from the graph's seeded ``order``."""
    order = graph.order.tolist()
    return {part: [order[i] for i in ii] for part, ii in split(len(order), settings).items()}


@torch.no_grad()
def accuracy(model: GCN, graphs: list) -> float:
    b = batch_of(graphs)
    return float((model(b.x, b.edge_index, b.batch).argmax(-1) == b.y).float().mean())


@torch.no_grad()
def node_accuracy(model: GCN, graph, nodes: list) -> float:
    pred = model(graph.x, graph.edge_index).argmax(-1)
    idx = torch.as_tensor(nodes, dtype=torch.long)
    return float((pred[idx] == graph.y[idx]).float().mean())


def train_node_gcn(graph, train_nodes: list, num_classes: int, settings: AssetSettings, seed: int) -> tuple[GCN, dict]:
    """Full-graph AdamW on the train nodes' labels, stopped once their accuracy reaches 0.99."""
    with seeded_init(seed):
        model = GCN(num_classes, settings.hidden, task="node")
    idx = torch.as_tensor(train_nodes, dtype=torch.long)
    loss = nn.CrossEntropyLoss()
    spec = TrainSpec(max_steps=settings.node_steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     threads=1, check_every=25, target=0.99, log_every=25)
    log = fit(model, lambda step: loss(model(graph.x, graph.edge_index)[idx], graph.y[idx]), spec,
              check=lambda m: node_accuracy(m, graph, train_nodes))
    return model.eval(), log.to_dict()


def train_gcn(graphs: list, num_classes: int, settings: AssetSettings, seed: int) -> tuple[GCN, dict]:
    """Full-batch AdamW on the train graphs, stopped once train accuracy reaches 0.99."""
    with seeded_init(seed):
        model = GCN(num_classes, settings.hidden)
    b = batch_of(graphs)
    loss = nn.CrossEntropyLoss()
    spec = TrainSpec(max_steps=settings.steps, learning_rate=settings.learning_rate, weight_decay=0.0,
                     threads=1, check_every=25, target=0.99, log_every=25)
    log = fit(model, lambda step: loss(model(b.x, b.edge_index, b.batch), b.y), spec,
              check=lambda m: accuracy(m, graphs))
    return model.eval(), log.to_dict()


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Per dataset: the graphs (``<name>_graphs.pt``) and ``num_models`` GCNs (``<name>_<k>.pt``,
    training seeds ``seed * 100 + k``), with train / dev / test accuracies in ``metadata.json``."""
    with torch_threads(1):          # tiny graphs: two threads only spin on a busy 2-core machine
        _build(Path(out_dir), scale, seed)


def _build(out_dir: Path, scale: str, seed: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = settings_for(scale)
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": asdict(settings), "datasets": {}}
    for name in settings.datasets:
        gs = make_dataset(name, settings.num_graphs, seed=seed * 1000 + DATASETS.index(name))
        torch.save(gs.graphs, out_dir / f"{name}_graphs.pt")
        if gs.task == "node":
            graph = gs.graphs[0]
            idx = split_nodes(graph, settings)
            train_fn = lambda s: train_node_gcn(graph, idx["train"], gs.num_classes, settings, s)
            acc_fn = lambda m, ii: node_accuracy(m, graph, ii)
        else:
            idx = split(len(gs.graphs), settings)
            train = [gs.graphs[i] for i in idx["train"]]
            train_fn = lambda s: train_gcn(train, gs.num_classes, settings, s)
            acc_fn = lambda m, ii: accuracy(m, [gs.graphs[i] for i in ii])
        info = {"num_classes": gs.num_classes, "task": gs.task, "split": {k: len(v) for k, v in idx.items()}, "models": []}
        for k in range(settings.num_models):
            model, log = train_fn(seed * 100 + k)
            torch.save(model.state_dict(), out_dir / f"{name}_{k}.pt")
            accs = {part: acc_fn(model, ii) for part, ii in idx.items()}
            info["models"].append({"train_seed": seed * 100 + k, "accuracy": accs, "steps": log["steps"]})
            print(f"{name} model {k}: " + ", ".join(f"{p} {a:.3f}" for p, a in accs.items()))
        meta["datasets"][name] = info
    meta["metrics"] = {name: [m["accuracy"] for m in v["models"]] for name, v in meta["datasets"].items()}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load_asset(path: str | Path) -> tuple[dict, dict]:
    """``({dataset: {"graphs", "split", "models", "num_classes", "task"}}, metadata)`` from an asset folder;
    a node set's ``graphs`` holds its one graph and ``split`` lists node ids."""
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    settings = AssetSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["settings"].items()})
    out = {}
    for name, info in meta["datasets"].items():
        graphs = torch.load(path / f"{name}_graphs.pt", weights_only=False)
        task = info.get("task", "graph")
        models = []
        for k in range(len(info["models"])):
            model = GCN(info["num_classes"], settings.hidden, task=task)
            model.load_state_dict(torch.load(path / f"{name}_{k}.pt", map_location="cpu", weights_only=True))
            for p in model.parameters():
                p.requires_grad_(False)
            models.append(model.eval())
        idx = split_nodes(graphs[0], settings) if task == "node" else split(len(graphs), settings)
        out[name] = {"graphs": graphs, "split": idx, "models": models, "num_classes": info["num_classes"], "task": task}
    return out, meta
