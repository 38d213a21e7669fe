"""Explainers and the metrics the verdicts depend on.

MSExplainer (ours, reconstructed; see the package docstring), torch_geometric's PGExplainer and
GNNExplainer (the maintained implementations, driven through ``torch_geometric.explain.Explainer``),
nested top-k subgraphs, explanation AUC, fidelity and ranking stability.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
import scipy.stats
import torch
from torch import nn

from compendium.training import seeded_init

from .data import degree_features

__all__ = ["Prepared", "prepare", "prepare_nodes", "explained_nodes", "computation_subgraphs", "noisy_positions", "masked_forward", "forward_prepared", "within_graph_rank", "topk_masks", "soft_thresholds",
           "MSExplainer", "ExplainerSettings", "train_ms", "train_pg", "run_gnnexplainer", "ms_scores",
           "pg_scores", "auc_per_graph", "topk_jaccard", "pairwise_mean", "spearman_per_graph",
           "fidelity", "add_noise_edges", "parameter_count", "MODEL_CONFIG", "NODE_MODEL_CONFIG"]

MODEL_CONFIG = dict(mode="multiclass_classification", task_level="graph", return_type="raw")
NODE_MODEL_CONFIG = dict(MODEL_CONFIG, task_level="node")


@dataclass
class Prepared:
    """A batch with what every explainer reads: node embeddings ``z (N, d)`` (the explained GCN's
    last message-passing layer, as PGExplainer uses), the GCN's predicted classes ``yhat (B,)`` (the
    explained phenomenon), ``h (B, d)`` = h(G) and ``edge_graph (E,)`` (the unit an edge belongs to).

    Graph tasks: a disjoint union of ``B`` graphs. Node tasks (``target`` set): a disjoint union of
    the computation subgraphs of ``B`` explained nodes (each node's L-hop neighbourhood and the edges
    among it, torch_geometric's ``k_hop_subgraph``), ``target (B,)`` their positions in the batch,
    ``norm`` the full graph's GCN normalisation of the batch's edges and self-loops, ``eid (E,)`` each
    edge's id in the full graph; ``z`` are the full graph's embeddings (as torch_geometric's node-level
    PGExplainer computes them) and ``h``, ``yhat`` the explained nodes' states and predictions."""

    x: torch.Tensor
    edge_index: torch.Tensor
    batch: torch.Tensor
    gt: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    yhat: torch.Tensor
    h: torch.Tensor
    edge_graph: torch.Tensor
    num_graphs: int
    target: torch.Tensor | None = None
    norm: tuple | None = None
    eid: torch.Tensor | None = None

    @property
    def node_level(self) -> bool:
        return self.target is not None

    @property
    def edge_target(self) -> torch.Tensor | None:
        """``(E,)``: the batch position of the explained node whose subgraph holds each edge."""
        return None if self.target is None else self.target[self.edge_graph]

    def node_targets(self) -> torch.Tensor:
        """``(N,)`` class per batch node with ``yhat`` at the explained nodes (the ``target`` torch_geometric's
        node-level explainers index with ``index``)."""
        t = torch.zeros(self.x.shape[0], dtype=torch.long)
        t[self.target] = self.yhat
        return t


@torch.no_grad()
def prepare(model, graphs: list) -> Prepared:
    from torch_geometric.data import Batch
    from torch_geometric.utils import get_embeddings

    b = Batch.from_data_list(graphs)
    z = get_embeddings(model, b.x, b.edge_index, batch=b.batch)[-1]
    h = model.represent(b.x, b.edge_index, b.batch)
    return Prepared(b.x, b.edge_index, b.batch, b.gt.bool(), b.y, z, model.head(h).argmax(-1), h,
                    b.batch[b.edge_index[0]], len(graphs))


def _full_norm(graph) -> tuple[torch.Tensor, torch.Tensor]:
    """The full graph's ``gcn_norm`` weights: ``(edge weights (E,), self-loop weights (N,))``."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    E, N = graph.edge_index.shape[1], int(graph.num_nodes)
    ei, w = gcn_norm(graph.edge_index, None, N, False, True, "source_to_target", graph.x.dtype)
    if not (torch.equal(ei[:, :E], graph.edge_index) and torch.equal(ei[0, E:], torch.arange(N))):
        raise AssertionError("gcn_norm did not keep the edge order and append one self-loop per node")
    return w[:E], w[E:]


def _norm_of(edge_index: torch.Tensor, edge_w: torch.Tensor, loop_w: torch.Tensor) -> tuple:
    """``(edge_index with appended self-loops, weights)``: what ``GCNConv`` reads from its cache slot."""
    n = loop_w.shape[0]
    loops = torch.arange(n).repeat(2, 1)
    return torch.cat([edge_index, loops], 1), torch.cat([edge_w, loop_w])


def computation_subgraphs(graph, nodes, num_hops: int) -> list:
    """Per node: ``(subset (n,), edge ids (e,), position of the node in subset)`` of its ``num_hops``
    computation subgraph (torch_geometric's ``k_hop_subgraph``, the edges among the subset)."""
    from torch_geometric.utils import k_hop_subgraph

    out = []
    for t in nodes:
        subset, _, mapping, emask = k_hop_subgraph(int(t), num_hops, graph.edge_index, num_nodes=int(graph.num_nodes))
        out.append((subset, emask.nonzero().view(-1), int(mapping)))
    return out


def explained_nodes(graph, nodes, num_hops: int) -> list:
    """The motif nodes among ``nodes`` (in order) whose computation subgraph holds motif and non-motif
    edges (an AUC needs both: a Tree-Cycles node opposite its cycle's attachment sees only the cycle)."""
    motif = [int(t) for t in nodes if int(graph.motif[int(t)]) >= 0]
    keep = []
    for t, (_, eids, _) in zip(motif, computation_subgraphs(graph, motif, num_hops)):
        gt = graph.gt[eids]
        if gt.any() and not gt.all():
            keep.append(t)
    return keep


@torch.no_grad()
def prepare_nodes(model, graph, nodes) -> Prepared:
    """The disjoint union of the computation subgraphs of ``nodes`` of ``graph`` (one subgraph per
    node, relabelled), with the full graph's embeddings and GCN normalisation (see ``Prepared``)."""
    from torch_geometric.utils import get_embeddings

    L = len(model.convs)
    z_full = get_embeddings(model, graph.x, graph.edge_index)[-1]
    edge_w, loop_w = _full_norm(graph)
    subs = computation_subgraphs(graph, nodes, L)
    offset, eis, nids, eids, batch, target, eg = 0, [], [], [], [], [], []
    remap = torch.full((int(graph.num_nodes),), -1, dtype=torch.long)
    for b, (subset, eid, pos) in enumerate(subs):
        remap[subset] = torch.arange(len(subset)) + offset
        eis.append(remap[graph.edge_index[:, eid]])
        remap[subset] = -1
        nids.append(subset)
        eids.append(eid)
        batch.append(torch.full((len(subset),), b, dtype=torch.long))
        eg.append(torch.full((len(eid),), b, dtype=torch.long))
        target.append(offset + pos)
        offset += len(subset)
    nid, eid = torch.cat(nids), torch.cat(eids)
    edge_index = torch.cat(eis, 1)
    target = torch.tensor(target, dtype=torch.long)
    norm = _norm_of(edge_index, edge_w[eid], loop_w[nid])
    x = graph.x[nid]
    h = model.represent(x, edge_index, index=target, norm=norm)
    nodes_t = torch.as_tensor([int(t) for t in nodes], dtype=torch.long)
    return Prepared(x, edge_index, torch.cat(batch), graph.gt[eid].bool(), graph.y[nodes_t], z_full[nid],
                    model.head(h).argmax(-1), h, torch.cat(eg), len(subs), target=target, norm=norm, eid=eid)


def noisy_positions(p: Prepared, pn: Prepared) -> torch.Tensor:
    """Node tasks: for each edge of ``p``, its position in ``pn``, the same nodes' computation subgraphs
    in a graph with edges added after the original ones (a superset of each original subgraph)."""
    span = int(max(p.eid.max(), pn.eid.max())) + 1
    key_n = pn.edge_graph * span + pn.eid
    order = torch.argsort(key_n)
    key = p.edge_graph * span + p.eid
    pos = torch.searchsorted(key_n[order], key)
    found = order[pos.clamp(max=len(order) - 1)]
    if not torch.equal(key_n[found], key):
        raise AssertionError("a computation subgraph lost an edge when edges were added")
    return found


def masked_forward(model, x, edge_index, batch, mask, index=None, norm=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h, logits)`` of the GCN with every message of edge ``e`` multiplied by ``mask[e]``
    (torch_geometric's explain mode; self-loops keep weight 1); node models: at the nodes ``index``."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    set_masks(model, mask, edge_index, apply_sigmoid=False)
    try:
        h = model.represent(x, edge_index, batch, index=index, norm=norm)
    finally:
        clear_masks(model)
    return h, model.head(h)


def forward_prepared(model, p: Prepared, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``masked_forward`` on a prepared batch: ``(h (B, d), logits (B, C))`` per graph or explained node."""
    return masked_forward(model, p.x, p.edge_index, p.batch, mask, p.target, p.norm)


def within_graph_rank(scores: torch.Tensor, edge_graph: torch.Tensor) -> torch.Tensor:
    """Rank of each edge among its graph's edges, 0 = highest score (ties by index)."""
    s, g = scores.detach().double().numpy(), edge_graph.numpy()
    order = np.lexsort((np.arange(len(s)), -s, g))
    counts = np.bincount(g)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(s), dtype=np.int64)
    rank[order] = np.arange(len(s)) - starts[g[order]]
    return torch.from_numpy(rank)


def _budget(edge_graph: torch.Tensor, ratio: float) -> torch.Tensor:
    counts = torch.bincount(edge_graph).double()
    return torch.clamp(torch.ceil(ratio * counts - 1e-9), min=1).long()      # (G,)


def topk_masks(scores: torch.Tensor, edge_graph: torch.Tensor, ratios) -> torch.Tensor:
    """Hard key subgraphs ``(S, E)`` bool: per graph the top ``ceil(rho |E_g|)`` edges for each rho.

    One ranking for every budget, so increasing budgets give nested subgraphs."""
    rank = within_graph_rank(scores, edge_graph)
    return torch.stack([rank < _budget(edge_graph, r)[edge_graph] for r in ratios])


def soft_thresholds(scores: torch.Tensor, edge_graph: torch.Tensor, ratio: float) -> torch.Tensor:
    """Per edge, the midpoint between its graph's k-th and (k+1)-th scores, k = ceil(rho |E_g|)."""
    rank = within_graph_rank(scores, edge_graph)
    k = _budget(edge_graph, ratio)
    counts = torch.bincount(edge_graph)
    G = len(counts)
    hi = torch.empty(G, dtype=scores.dtype)
    lo = torch.empty(G, dtype=scores.dtype)
    at_k = rank == (k - 1)[edge_graph]
    below = rank == torch.minimum(k, counts - 1)[edge_graph]
    hi[edge_graph[at_k]] = scores.detach()[at_k]
    lo[edge_graph[below]] = scores.detach()[below]
    return ((hi + lo) / 2)[edge_graph]


def _edge_mlp(in_dim: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


class MSExplainer(nn.Module):
    """Edge scorer ``omega_uv = MLP([z_u, z_v])``, or ``MLP([z_u, z_v, z_target])`` for a node task
    (``node=True``; PGExplainer's forms and width); one MLP shared by every scale, or
    ``len(ratios)`` unshared ones (the ablation)."""

    def __init__(self, embed_dim: int, ratios=(0.1, 0.2, 0.3), shared: bool = True, hidden: int = 64,
                 node: bool = False):
        super().__init__()
        if list(ratios) != sorted(set(ratios)) or not 0 < ratios[0] or ratios[-1] >= 1:
            raise ValueError(f"ratios must increase strictly within (0, 1), got {ratios}")
        self.ratios, self.shared, self.node = tuple(ratios), shared, node
        width = (3 if node else 2) * embed_dim
        self.mlps = nn.ModuleList(_edge_mlp(width, hidden) for _ in range(1 if shared else len(ratios)))

    def logits(self, z: torch.Tensor, edge_index: torch.Tensor, edge_target: torch.Tensor | None = None) -> torch.Tensor:
        """``(M, E)``: one row per MLP (M = 1 when shared); ``edge_target (E,)`` the explained node of
        each edge's computation subgraph (node tasks)."""
        parts = [z[edge_index[0]], z[edge_index[1]]]
        if self.node:
            parts.append(z[edge_target])
        inp = torch.cat(parts, -1)
        return torch.stack([m(inp).squeeze(-1) for m in self.mlps])


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass(frozen=True)
class ExplainerSettings:
    """One explainer's training budget and loss weights (PGExplainer's defaults where shared)."""

    epochs: int
    learning_rate: float
    ratios: tuple = (0.1, 0.2, 0.3)
    shared: bool = True
    complement_weight: float = 1.0
    consistency_weight: float = 1.0
    size_weight: float = 0.05            # per graph, on the sum of mask values (PGExplainer's edge_size)
    entropy_weight: float = 1.0          # on the mean mask entropy (PGExplainer's edge_ent)
    temperature: tuple = (5.0, 2.0)      # PGExplainer's schedule, first to last epoch
    bias: float = 0.01                   # concrete-noise clipping (PGExplainer's bias)


def _entropy(m: torch.Tensor) -> torch.Tensor:
    m = 0.99 * m + 0.005
    return -(m * m.log() + (1 - m) * (1 - m).log())


def train_ms(model, batches: list, settings: ExplainerSettings, seed: int) -> MSExplainer:
    """Train an MSExplainer on ``batches`` (Prepared), ``settings.epochs`` passes in a seeded order.

    Per step, with concrete noise ``eps`` and temperature ``T``: ``w = omega + eps``; for each
    scale ``s`` the soft key mask ``M_s = sigmoid((w - theta_s) / T)`` (``theta_s`` the per-graph
    top-``rho_s`` threshold of ``w``, held fixed) and its complement ``1 - M_s``; all ``2S`` masked
    copies go through the GCN in one forward pass. Loss (averaged over scales)::

        CE(f(G_s), yhat) - lc log(1 - p_yhat(f(G \\ G_s))) + size sum(M_s) + ent H(M_s)
        + lcons |h(G_s) - h(G)|^2 / |h(G)|^2
    """
    S = len(settings.ratios)
    node = batches[0].node_level
    with seeded_init(seed):
        explainer = MSExplainer(batches[0].z.shape[1], settings.ratios, settings.shared, node=node)
    opt = torch.optim.Adam(explainer.parameters(), lr=settings.learning_rate)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng([seed, 3])
    t0, t1 = settings.temperature
    replicated = {}                      # per batch: its 2S disjoint copies, built once (the GCN caches their normalisation)
    for epoch in range(settings.epochs):
        T = t0 * (t1 / t0) ** (epoch / settings.epochs)
        for bi in rng.permutation(len(batches)):
            p = batches[bi]
            E, N, B = p.edge_index.shape[1], p.x.shape[0], p.num_graphs
            w = explainer.logits(p.z, p.edge_index, p.edge_target)             # (M, E)
            u = (1 - 2 * settings.bias) * torch.rand(w.shape, generator=gen) + settings.bias
            w = w + u.log() - (1 - u).log()
            masks = []
            for s, rho in enumerate(settings.ratios):
                ws = w[0 if settings.shared else s]
                masks.append(torch.sigmoid((ws - soft_thresholds(ws, p.edge_graph, rho)) / T))
            M = torch.stack(masks)                                             # (S, E)
            R = 2 * S                                                          # key and complement copies
            if bi not in replicated:
                replicated[bi] = _replicate(p, R)
            xr, ei, br, tr, nr = replicated[bi]
            h, logits = masked_forward(model, xr, ei, br, torch.cat([M, 1 - M]).reshape(-1), tr, nr)
            h, logits = h.view(R, B, -1), logits.view(R, B, -1)
            y = p.yhat.repeat(S)
            suff = nn.functional.cross_entropy(logits[:S].reshape(S * B, -1), y)
            p_comp = torch.softmax(logits[S:], -1).gather(-1, p.yhat.view(1, B, 1).expand(S, B, 1))
            nec = -torch.log1p(-p_comp.clamp(max=1 - 1e-6)).mean()
            size = settings.size_weight * M.sum() / (S * B)
            ent = settings.entropy_weight * _entropy(M).mean()
            cons = (((h[:S] - p.h) ** 2).sum(-1) / ((p.h ** 2).sum(-1) + 1e-12)).mean()
            loss = suff + settings.complement_weight * nec + size + ent + settings.consistency_weight * cons
            opt.zero_grad()
            loss.backward()
            opt.step()
    return explainer.eval()


def _replicate(p: Prepared, R: int) -> tuple:
    """``R`` disjoint copies of a batch, in one: ``(x, edge_index, batch, target, norm)`` (the last two
    ``None`` for graph tasks); copy ``r`` holds edges ``r E ... (r + 1) E - 1``."""
    E, N, B = p.edge_index.shape[1], p.x.shape[0], p.num_graphs
    ei = p.edge_index.repeat(1, R) + torch.arange(R).repeat_interleave(E) * N
    out = (p.x.repeat(R, 1), ei, p.batch.repeat(R) + torch.arange(R).repeat_interleave(N) * B)
    if not p.node_level:
        return out + (None, None)
    w = p.norm[1]
    target = p.target.repeat(R) + torch.arange(R).repeat_interleave(B) * N
    return out + (target, _norm_of(ei, w[:E].repeat(R), w[E:].repeat(R)))


@torch.no_grad()
def ms_scores(explainer: MSExplainer, p: Prepared) -> torch.Tensor:
    """Edge scores ``(E,)``: the shared logit (the mean logit over the unshared MLPs)."""
    return explainer.logits(p.z, p.edge_index, p.edge_target).mean(0)


@functools.cache
def _batch_embedding_pg():
    """torch_geometric's PGExplainer, but ``train`` reads the frozen GCN's node embeddings of the
    batch from ``batch_z`` when it is set, instead of recomputing them at every step (about a
    tenth of the chapter's full-scale run). ``prepare`` computed them with the same
    ``get_embeddings`` call on the same batch, so the values, and the trained explainer, are
    the same (tested bit for bit)."""
    from torch_geometric.explain import PGExplainer

    class BatchEmbeddingPGExplainer(PGExplainer):
        batch_z = None
        batch_edge_target = None

        def _get_embeddings(self, model, x, edge_index, **kwargs):
            if self.batch_z is not None and not self.is_hetero:
                return self.batch_z
            return super()._get_embeddings(model, x, edge_index, **kwargs)

        def _get_inputs(self, embedding, edge_index, index=None):
            # node level, many explained nodes per batch: each edge gets its own explained node's
            # embedding, where the library repeats the one explained node's (its scalar ``index``)
            if self.batch_edge_target is not None:
                return torch.cat([embedding[edge_index[0]], embedding[edge_index[1]],
                                  embedding[self.batch_edge_target]], dim=-1)
            return super()._get_inputs(embedding, edge_index, index)

    return BatchEmbeddingPGExplainer


def _pg_explainer(model, settings: ExplainerSettings, batch_graphs: int, node: bool = False):
    from torch_geometric.explain import Explainer

    PGExplainer = _batch_embedding_pg()

    # PGExplainer.coeffs is a class attribute that update() mutates: pass every key each time.
    # Its size term sums over the whole batch while the loss averages over graphs: divide by B.
    algo = PGExplainer(epochs=settings.epochs, lr=settings.learning_rate, edge_size=settings.size_weight / batch_graphs,
                       edge_ent=settings.entropy_weight, temp=list(settings.temperature), bias=settings.bias)
    explainer = Explainer(model, algorithm=algo, explanation_type="phenomenon", edge_mask_type="object",
                          model_config=NODE_MODEL_CONFIG if node else MODEL_CONFIG)
    return explainer, algo


def train_pg(model, batches: list, settings: ExplainerSettings, seed: int):
    """torch_geometric's PGExplainer, trained with its own ``train`` step on the same batches in
    a seeded order (its MLP init and concrete noise use torch's global stream: forked and seeded).

    Node tasks: node-level PGExplainer (MLP input ``[z_u, z_v, z_target]``, loss at the explained
    nodes, size and entropy over their computation subgraphs), on a batch of many explained nodes'
    computation subgraphs per step. The library's ``train`` takes one explained node (a scalar
    ``index``) per step; it is handed the batch's explained nodes as a list, which its ``train``
    indexes the GCN's output with (cross-entropy averaged over them) and its hard mask covers (every
    batch edge), and ``_get_inputs`` gives each edge its own explained node's embedding. With one
    explained node this is the library's node-level step (tested)."""
    rng = np.random.default_rng([seed, 3])
    node = batches[0].node_level
    with seeded_init(seed):
        explainer, algo = _pg_explainer(model, settings, batches[0].num_graphs, node=node)
        for epoch in range(settings.epochs):
            for bi in rng.permutation(len(batches)):
                p = batches[bi]
                algo.batch_z = p.z                      # the batch's embeddings, computed once
                if node:
                    algo.batch_edge_target = p.edge_target
                    algo.train(epoch, model, p.x, p.edge_index, target=p.node_targets(), index=p.target.tolist(),
                               norm=p.norm)
                else:
                    algo.train(epoch, model, p.x, p.edge_index, target=p.yhat, batch=p.batch)
        algo.batch_z = algo.batch_edge_target = None
    return algo


@torch.no_grad()
def pg_scores(algo, p: Prepared) -> torch.Tensor:
    """PGExplainer's edge logits ``(E,)`` (its explanation is their sigmoid; logits avoid float ties)."""
    algo.batch_edge_target = p.edge_target
    try:
        return algo.mlp(algo._get_inputs(p.z, p.edge_index, None)).view(-1)
    finally:
        algo.batch_edge_target = None


def run_gnnexplainer(model, p: Prepared, epochs: int, learning_rate: float, seed: int) -> torch.Tensor:
    """torch_geometric's GNNExplainer on every graph of ``p`` at once (one mask entry per edge,
    Adam per entry, so the graphs are optimised independently); default coefficients, the size
    term divided by the number of graphs because it sums over the batch while the loss averages."""
    from torch_geometric.explain import Explainer, GNNExplainer

    with seeded_init(seed):
        algo = GNNExplainer(epochs=epochs, lr=learning_rate, edge_size=0.005 / p.num_graphs)
        explainer = Explainer(model, algorithm=algo, explanation_type="phenomenon", edge_mask_type="object",
                              model_config=NODE_MODEL_CONFIG if p.node_level else MODEL_CONFIG)
        if p.node_level:            # node level: the explained nodes' outputs (``index``), on their subgraphs
            expl = explainer(p.x, p.edge_index, target=p.node_targets(), index=p.target, norm=p.norm)
        else:
            expl = explainer(p.x, p.edge_index, target=p.yhat, batch=p.batch)
    return expl.edge_mask.detach()


# ------------------------------------------------------------------------------ metrics
def auc_per_graph(scores: torch.Tensor, gt: torch.Tensor, edge_graph: torch.Tensor) -> np.ndarray:
    """ROC AUC of ``scores`` against the motif edges, per graph (Mann-Whitney, ties count half);
    NaN for a graph without both kinds of edge."""
    s, y, g = scores.double().numpy(), gt.numpy().astype(bool), edge_graph.numpy()
    out = np.full(g.max() + 1, np.nan)
    for k in range(len(out)):
        sel = g == k
        yk = y[sel]
        npos, nneg = yk.sum(), (~yk).sum()
        if npos and nneg:
            r = scipy.stats.rankdata(s[sel])
            out[k] = (r[yk].sum() - npos * (npos + 1) / 2) / (npos * nneg)
    return out


def topk_jaccard(a: torch.Tensor, b: torch.Tensor, edge_graph: torch.Tensor, ratio: float) -> np.ndarray:
    """Per graph, the Jaccard index of the top-``rho`` edge sets of two score vectors."""
    ma, mb = topk_masks(a, edge_graph, [ratio])[0], topk_masks(b, edge_graph, [ratio])[0]
    G = int(edge_graph.max()) + 1
    inter = torch.zeros(G).index_add_(0, edge_graph, (ma & mb).double().float())
    union = torch.zeros(G).index_add_(0, edge_graph, (ma | mb).double().float())
    return (inter / union).numpy()


def spearman_per_graph(a: torch.Tensor, b: torch.Tensor, edge_graph: torch.Tensor) -> np.ndarray:
    """Per graph, the Spearman correlation of two score vectors (ranks within the graph, ties by
    index; NaN for a graph whose ranks do not vary)."""
    g = edge_graph.numpy()
    ra = within_graph_rank(a, edge_graph).numpy().astype(float)
    rb = within_graph_rank(b, edge_graph).numpy().astype(float)
    n = np.bincount(g).astype(float)
    ca, cb = ra - (np.bincount(g, ra) / n)[g], rb - (np.bincount(g, rb) / n)[g]
    num = np.bincount(g, ca * cb)
    den = np.sqrt(np.bincount(g, ca * ca) * np.bincount(g, cb * cb))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def pairwise_mean(runs: list, fn) -> float:
    """Mean of ``fn(a, b)`` (a per-graph array, averaged) over all pairs of runs."""
    vals = [np.nanmean(fn(runs[i], runs[j])) for i in range(len(runs)) for j in range(i + 1, len(runs))]
    return float(np.mean(vals))


@torch.no_grad()
def fidelity(model, p: Prepared, key: torch.Tensor) -> tuple[float, float]:
    """``(Fidelity+, Fidelity-)`` of hard key subgraphs ``key (E,)`` bool against the model's own
    predictions: ``1 - agree(f(G \\ G_s))`` and ``1 - agree(f(G_s))`` (the model agrees with
    itself on G, so acc(G) = 1)."""
    _, lg_key = forward_prepared(model, p, key.float())
    _, lg_comp = forward_prepared(model, p, (~key).float())
    return (float((lg_comp.argmax(-1) != p.yhat).float().mean()), float((lg_key.argmax(-1) != p.yhat).float().mean()))


def add_noise_edges(graphs: list, fraction: float, rng: np.random.Generator) -> list:
    """Copies with ``round(fraction |E|)`` new random undirected edges each, appended after the
    original edges (so the first ``E`` entries of every ``edge_index`` are the original edges)."""
    out = []
    for d in graphs:
        n = d.num_nodes
        present = set(map(tuple, d.edge_index.t().tolist()))
        new, count = [], int(round(fraction * d.edge_index.shape[1] / 2))
        while len(new) < 2 * count:
            i, j = (int(v) for v in rng.choice(n, 2, replace=False))
            if (i, j) not in present:
                present.update({(i, j), (j, i)})
                new += [(i, j), (j, i)]
        e = d.clone()
        extra = torch.tensor(new, dtype=torch.long).t().reshape(2, -1)
        e.edge_index = torch.cat([d.edge_index, extra], 1)
        e.x = degree_features(e.edge_index, n)                      # the perturbed graph's own degrees
        e.gt = torch.cat([d.gt, torch.zeros(extra.shape[1], dtype=torch.bool)])
        out.append(e)
    return out
