r"""GraphMAE and its C2 switches on torch_geometric GAT layers; masks, losses, training, metrics.

GraphMAE (as its released code describes it; the code itself is not copied): a ``mask_rate``
fraction of nodes is masked; of those, a ``replace_rate`` fraction gets the features of random
nodes and the rest are zeroed and get a learnable mask token; a 2-layer GAT encoder (PReLU,
input dropout, attention dropout), a bias-free linear map, **re-masking** (the masked rows of the
decoder input are zeroed), a 1-layer GAT decoder, and the scaled cosine error on the masked
nodes, :math:`L_{\rm SCE} = \mathrm{mean}_{i \in M} (1 - \cos(x_i, z_i))^\alpha`.

C2 switches (every formula inferred, none read):

- ``use_pe``: the encoder input is :math:`[\tilde x \,\|\, P]` with Laplacian PE ``P`` (random sign flip
  per column and step) or, with ``pe_kind='rwse'``, the random-walk encoding (no sign flips: it has
  no sign ambiguity); only ``x`` is masked. The caller passes the ``P`` of ``pe_kind``.
- ``consistency_weight`` :math:`\mu > 0`: two independent masks per step (one forward over a
  disjoint union of the two views); :math:`L = \tfrac12 (L^{(1)}_{\rm SCE} + L^{(2)}_{\rm SCE}) +
  \mu\,\mathrm{mean}_{i \in M_1 \cap M_2} (1 - \cos(h^{(1)}_i, h^{(2)}_i))`, ``h`` the encoder output;
  with ``consistency='js'`` the term is instead the Jensen-Shannon divergence between the last
  encoder layer's attention distributions of node ``i`` in the two views (per head, before
  attention dropout), averaged over heads and :math:`M_1 \cap M_2`.
- ``use_dpm``: density-partitioned masking: density-quantile bins (the caller passes the bins of
  ``density``: degree, k-core number or local clustering), exactly
  :math:`\mathrm{round}(\rho |P_q|)` masked nodes per bin, chosen with probability
  :math:`\propto \exp(-\tau c_i)` (Gumbel top-k; ``c_i`` the node's past mask count).
- ``hea_beta`` :math:`\beta > 0`: :math:`\log w_{ij}` added to every GAT logit after the LeakyReLU,
  so attention becomes :math:`\propto w_{ij} \exp(e_{ij})` (self loops: :math:`w_{ii} = 1`).

``SegmentGATConv`` is ``BiasedGATConv`` with its softmax and aggregation done by
:func:`compendium.kernels.segment_softmax.segment_softmax_aggregate` (the Triton kernel on CUDA
tensors, its PyTorch reference elsewhere, or forced with ``backend``); ``train_gmae(conv=...)``
trains through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv
from torch_geometric.utils import softmax

from compendium.training import TrainSpec, fit, seeded_init

__all__ = ["ArmSpec", "TrainSettings", "BiasedGATConv", "SegmentGATConv", "GraphMAE", "sce_loss", "random_mask",
           "density_partition_mask", "CoverageMemory", "split_mask", "train_gmae", "embed", "attach", "with_self_loops",
           "attention_js", "ARMS"]


@dataclass(frozen=True)
class ArmSpec:
    """Which C2 parts are on (all off = GraphMAE)."""

    use_pe: bool = False
    consistency_weight: float = 0.0
    use_dpm: bool = False
    hea_beta: float = 0.0
    pe_kind: str = "laplacian"        # "laplacian" | "rwse" (which PE the caller passes; sign flips for laplacian only)
    consistency: str = "cosine"       # "cosine" | "js"
    density: str = "degree"           # "degree" | "kcore" | "clustering" (which bins the caller passes)

    def __post_init__(self):
        if self.pe_kind not in ("laplacian", "rwse"):
            raise ValueError(f"pe_kind must be 'laplacian' or 'rwse', got {self.pe_kind!r}")
        if self.consistency not in ("cosine", "js"):
            raise ValueError(f"consistency must be 'cosine' or 'js', got {self.consistency!r}")
        if self.density not in ("degree", "kcore", "clustering"):
            raise ValueError(f"density must be 'degree', 'kcore' or 'clustering', got {self.density!r}")


@dataclass(frozen=True)
class TrainSettings:
    epochs: int
    mask_rate: float = 0.5
    replace_rate: float = 0.05
    sce_alpha: float = 3.0
    heads: int = 4
    head_dim: int = 16
    learning_rate: float = 5e-3
    weight_decay: float = 2e-4
    in_drop: float = 0.2
    attn_drop: float = 0.1
    dpm_bins: int = 4
    coverage_tau: float = 1.0
    self_path: bool = False           # a bias-free linear skip from each encoder layer's input (GraphMAE has none)


def arms(beta: float, mu: float, mu_js: float = 1.0) -> dict:
    """The trained arms of the chapter: GraphMAE, GraphMAE + PE, C2-full, C2 minus each part, and
    the C2-full variants: RWSE for the Laplacian PE, the JS consistency loss (weight ``mu_js``) for
    the cosine one, k-core or clustering for degree as the density of the partition."""
    full = dict(use_pe=True, consistency_weight=mu, use_dpm=True, hea_beta=beta)
    return {
        "graphmae": ArmSpec(),
        "graphmae_pe": ArmSpec(use_pe=True),
        "c2": ArmSpec(**full),
        "c2_no_pe": ArmSpec(**{**full, "use_pe": False}),
        "c2_no_cons": ArmSpec(**{**full, "consistency_weight": 0.0}),
        "c2_no_dpm": ArmSpec(**{**full, "use_dpm": False}),
        "c2_no_hea": ArmSpec(**{**full, "hea_beta": 0.0}),
        "c2_rwse": ArmSpec(**full, pe_kind="rwse"),
        "c2_js": ArmSpec(**{**full, "consistency_weight": mu_js}, consistency="js"),
        "c2_kcore": ArmSpec(**full, density="kcore"),
        "c2_clustering": ArmSpec(**full, density="clustering"),
    }


ARMS = tuple(arms(1.0, 1.0))


# ------------------------------------------------------------------------------------- layers
class BiasedGATConv(GATConv):
    """``GATConv`` whose logits get an additive per-edge bias (``edge_attr``, shape ``(E,)``) after
    the LeakyReLU; with ``edge_attr=None`` it is ``GATConv`` unchanged. Self loops added by the
    layer get ``fill_value`` (pass 0.0: weight 1); the chapter adds them once beforehand instead
    (:func:`with_self_loops`, ``add_self_loops=False``), which saves two edge rebuilds per call.

    With ``keep_attention = True`` the layer also stores its attention before dropout in
    ``self.attention`` ``(E, heads)`` (the JS consistency loss needs it with gradients)."""

    keep_attention = False

    def edge_update(self, alpha_j, alpha_i, edge_attr, index, ptr, dim_size):
        if edge_attr is None and not self.keep_attention:
            return super().edge_update(alpha_j, alpha_i, edge_attr, index, ptr, dim_size)
        alpha = alpha_j if alpha_i is None else alpha_j + alpha_i
        alpha = F.leaky_relu(alpha, self.negative_slope)
        if edge_attr is not None:
            alpha = alpha + edge_attr.view(-1, 1)                              # + log w_ij
        alpha = softmax(alpha, index, ptr, dim_size)
        if self.keep_attention:
            self.attention = alpha
        return F.dropout(alpha, p=self.dropout, training=self.training)


class SegmentGATConv(BiasedGATConv):
    r"""``BiasedGATConv`` whose softmax + aggregation run through the segment-softmax kernel module
    (``backend``: ``'auto'`` = Triton on CUDA tensors, the PyTorch reference elsewhere; ``'triton'``
    forces the kernel, on the CPU only under ``TRITON_INTERPRET=1``). Same parameters, so a state
    dict moves between the two. Attention dropout is exact: with the dropout draw ``d_e`` (0 or
    ``1/(1-p)``, drawn as ``GATConv`` draws it), :math:`\sum_e \alpha_e d_e v_e` is the kernel on the
    kept edges' logits (dropped ones pushed down by 1e4, so exp gives exactly 0 in float32) times
    :math:`S_i = \sum_e \alpha_e d_e`, the kernel again with the per-edge values ``d``. Calls that ask
    for the attention weights (or ``keep_attention``) go through ``GATConv``'s own path."""

    backend = "auto"

    def forward(self, x, edge_index, edge_attr=None, return_attention_weights=None):
        from compendium.kernels.segment_softmax import csr_from_edge_index, segment_softmax_aggregate

        if return_attention_weights or self.keep_attention or not isinstance(x, torch.Tensor) or self.res is not None:
            return super().forward(x, edge_index, edge_attr=edge_attr, return_attention_weights=return_attention_weights)
        H, C = self.heads, self.out_channels
        xs = self.lin(x).view(-1, H, C)
        a_src, a_dst = (xs * self.att_src).sum(-1), (xs * self.att_dst).sum(-1)
        e = F.leaky_relu(a_src[edge_index[0]] + a_dst[edge_index[1]], self.negative_slope)
        if edge_attr is not None:
            e = e + edge_attr.view(-1, 1)
        rowptr, src, order = csr_from_edge_index(edge_index, x.shape[0])
        if self.training and self.dropout > 0:
            d = F.dropout(torch.ones_like(e), p=self.dropout, training=True)[order]    # GATConv's draw, edge order
            e = e[order]
            out = segment_softmax_aggregate(e - 1e4 * (d == 0), rowptr, src, xs, backend=self.backend)
            edges = torch.arange(e.shape[0], device=e.device)
            out = out * segment_softmax_aggregate(e, rowptr, edges, d.unsqueeze(-1), backend=self.backend)
        else:
            out = segment_softmax_aggregate(e[order], rowptr, src, xs, backend=self.backend)
        out = out.reshape(-1, H * C) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias


class GraphMAE(nn.Module):
    """Encoder (2 GAT layers, ``heads x head_dim``, PReLU), ``encoder_to_decoder``, GAT decoder.

    Parameters
    ----------
    feature_dim : int
        ``d``, the reconstructed features.
    pe_dim : int
        Extra unmasked input columns (0: none).
    conv : type
        ``BiasedGATConv`` (default) or ``GATConv`` (the plain reference).
    """

    def __init__(self, feature_dim: int, pe_dim: int, settings: TrainSettings, conv=BiasedGATConv):
        super().__init__()
        s = settings
        hidden = s.heads * s.head_dim
        self.enc_mask_token = nn.Parameter(torch.zeros(1, feature_dim))
        kw = dict(dropout=s.attn_drop, add_self_loops=False)       # self loops are in edge_index already
        self.enc1 = conv(feature_dim + pe_dim, s.head_dim, heads=s.heads, **kw)
        self.enc2 = conv(hidden, s.head_dim, heads=s.heads, **kw)
        self.act1, self.act2 = nn.PReLU(), nn.PReLU()
        self.encoder_to_decoder = nn.Linear(hidden, hidden, bias=False)
        self.dec = conv(hidden, feature_dim, heads=1, **kw)
        self.in_drop = s.in_drop
        self.skip1 = self.skip2 = None
        if s.self_path:                                            # created last: the GAT layers' init is unchanged
            self.skip1 = nn.Linear(feature_dim + pe_dim, hidden, bias=False)
            self.skip2 = nn.Linear(hidden, hidden, bias=False)

    def layer(self, k: int, h, edge_index, **kw):
        """Encoder layer ``k`` (1 or 2) before its activation: the GAT output, plus ``skip_k(h)`` with a self path.
        With ``return_attention_weights`` in ``kw`` returns ``(out, attention)``."""
        conv, skip = (self.enc1, self.skip1) if k == 1 else (self.enc2, self.skip2)
        out = conv(h, edge_index, **kw)
        if skip is None:
            return out
        if isinstance(out, tuple):
            return out[0] + skip(h), out[1]
        return out + skip(h)

    def encode(self, x, edge_index, bias=None, return_attention=False):
        """``(n, heads * head_dim)``; with ``return_attention`` also the last layer's ``(edge_index, alpha)``."""
        kw = {} if bias is None else {"edge_attr": bias}
        h = self.act1(self.layer(1, F.dropout(x, self.in_drop, self.training), edge_index, **kw))
        h = F.dropout(h, self.in_drop, self.training)
        if return_attention:
            out, att = self.layer(2, h, edge_index, return_attention_weights=True, **kw)
            return self.act2(out), att
        return self.act2(self.layer(2, h, edge_index, **kw))

    def decode(self, h, mask_nodes, edge_index, bias=None):
        kw = {} if bias is None else {"edge_attr": bias}
        r = self.encoder_to_decoder(h)
        r = r.index_fill(0, mask_nodes, 0.0)                   # re-mask before the decoder
        return self.dec(r, edge_index, **kw)


def sce_loss(x: torch.Tensor, z: torch.Tensor, alpha: float = 3.0) -> torch.Tensor:
    r"""Scaled cosine error :math:`\mathrm{mean}_i (1 - \cos(x_i, z_i))^\alpha` over rows."""
    cos = F.cosine_similarity(x, z, dim=-1)
    return (1.0 - cos).pow(alpha).mean()


# -------------------------------------------------------------------------------------- masks
def random_mask(num_nodes: int, rate: float, gen: torch.Generator) -> torch.Tensor:
    """GraphMAE's mask: the first ``int(rate n)`` nodes of a random permutation (sorted)."""
    perm = torch.randperm(num_nodes, generator=gen)
    return perm[: int(rate * num_nodes)]


class CoverageMemory:
    """Per-node mask counts for density-partitioned masking (``tau = inf``: least-masked first)."""

    def __init__(self, bins: np.ndarray, tau: float):
        self.bins = torch.as_tensor(bins).long()
        self.counts = torch.zeros(len(bins))
        self.tau = float(tau)


def density_partition_mask(memory: CoverageMemory, rate: float, gen: torch.Generator) -> torch.Tensor:
    """Mask exactly ``round(rate |P_q|)`` nodes in each density bin ``q``; within a bin, Gumbel
    top-k on ``-tau * count`` (uniform for ``tau = 0``; least counts first, ties random, for
    ``tau = inf``). Updates ``memory.counts``; returns the sorted masked node indices."""
    n = memory.bins.numel()
    u = torch.rand(n, generator=gen).clamp_min(1e-12)
    if math.isinf(memory.tau):
        key = -memory.counts + 0.5 * u                        # counts are integers: u only breaks ties
    else:
        key = -memory.tau * memory.counts - torch.log(-torch.log(u.clamp_max(1 - 1e-7)))
    chosen = []
    for q in range(int(memory.bins.max()) + 1):
        members = torch.nonzero(memory.bins == q).view(-1)
        k = int(round(rate * members.numel()))
        chosen.append(members[torch.topk(key[members], k).indices])
    mask = torch.sort(torch.cat(chosen)).values
    memory.counts[mask] += 1
    return mask


def split_mask(mask_nodes: torch.Tensor, num_nodes: int, replace_rate: float, gen: torch.Generator):
    """GraphMAE's split of the masked nodes: ``(token_nodes, noise_nodes, noise_sources)``."""
    m = mask_nodes.numel()
    perm = torch.randperm(m, generator=gen)
    num_noise = int(replace_rate * m)
    token = mask_nodes[perm[: int((1 - replace_rate) * m)]]
    noise = mask_nodes[perm[m - num_noise:]] if num_noise else mask_nodes[:0]
    sources = torch.randperm(num_nodes, generator=gen)[:num_noise]
    return token, noise, sources


def masked_input(model: GraphMAE, x: torch.Tensor, mask_nodes, settings: TrainSettings, gen) -> torch.Tensor:
    token, noise, sources = split_mask(mask_nodes, x.shape[0], settings.replace_rate, gen)
    out = x.clone()
    out[token] = 0.0
    out[noise] = x[sources]
    out[token] = out[token] + model.enc_mask_token
    return out


# ------------------------------------------------------------------------------------ training
def with_self_loops(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``edge_index`` without its self loops, then one self loop per node appended (as GATConv does)."""
    from torch_geometric.utils import add_self_loops, remove_self_loops

    return add_self_loops(remove_self_loops(edge_index)[0], num_nodes=num_nodes)[0]


def _views_graph(edge_index: torch.Tensor, bias, n: int):
    """Edge index and bias of the disjoint union of two copies of the graph."""
    ei = torch.cat([edge_index, edge_index + n], 1)
    return ei, (None if bias is None else torch.cat([bias, bias]))


def train_gmae(x: torch.Tensor, edge_index: torch.Tensor, pe: np.ndarray | None, degree_bins: np.ndarray,
               arm: ArmSpec, settings: TrainSettings, seed: int, conv=BiasedGATConv):
    """Train one model of ``arm`` on the graph ``edge_index`` (without self loops; they are added
    here); returns ``(model, per-epoch losses)``; the model keeps ``edge_index`` with self loops,
    its HEA bias and its PE for :func:`embed` and the metrics.

    Initialisation under ``seeded_init(seed)``; masks and PE sign flips from
    ``torch.Generator().manual_seed(seed + 1)``; dropout from the global stream, forked and
    seeded with ``seed + 2`` for the duration (restored afterwards).
    """
    from .graphs import hetero_edge_weights

    n, d = x.shape
    pe_t = None if (pe is None or not arm.use_pe) else torch.tensor(pe, dtype=torch.float32)
    flip_signs = arm.pe_kind == "laplacian"                      # eigenvectors have no fixed sign; RWSE has
    with seeded_init(seed):
        model = GraphMAE(d, 0 if pe_t is None else pe_t.shape[1], settings, conv=conv)
    js_loss = arm.consistency == "js" and arm.consistency_weight > 0
    model.enc2.keep_attention = js_loss
    gen = torch.Generator().manual_seed(seed + 1)
    edge_index = with_self_loops(edge_index, n)                  # w_ii = 1: log-bias 0 on self loops
    bias = torch.log(hetero_edge_weights(x, edge_index, arm.hea_beta)) if arm.hea_beta > 0 else None
    memory = CoverageMemory(degree_bins, settings.coverage_tau) if arm.use_dpm else None
    two_views = arm.consistency_weight > 0
    union_ei, union_bias = _views_graph(edge_index, bias, n)

    def draw_mask():
        if memory is not None:
            return density_partition_mask(memory, settings.mask_rate, gen)
        return random_mask(n, settings.mask_rate, gen)

    def inputs(mask_nodes):
        xm = masked_input(model, x, mask_nodes, settings, gen)
        if pe_t is not None and flip_signs:
            signs = torch.randint(0, 2, (1, pe_t.shape[1]), generator=gen) * 2.0 - 1.0
            xm = torch.cat([xm, pe_t * signs], 1)
        elif pe_t is not None:
            xm = torch.cat([xm, pe_t], 1)
        return xm

    def loss_fn(step: int) -> torch.Tensor:
        if not two_views:
            mask_nodes = draw_mask()
            h = model.encode(inputs(mask_nodes), edge_index, bias)
            z = model.decode(h, mask_nodes, edge_index, bias)
            return sce_loss(x[mask_nodes], z[mask_nodes], settings.sce_alpha)
        m1, m2 = draw_mask(), draw_mask()
        xin = torch.cat([inputs(m1), inputs(m2)])
        h = model.encode(xin, union_ei, union_bias)
        both = torch.cat([m1, m2 + n])
        z = model.decode(h, both, union_ei, union_bias)
        rec = 0.5 * (sce_loss(x[m1], z[m1], settings.sce_alpha) + sce_loss(x[m2], z[m2 + n], settings.sce_alpha))
        common = m1[torch.isin(m1, m2)]
        if js_loss:                                               # attention of the two views, edge for edge
            att = model.enc2.attention
            E = edge_index.shape[1]
            cons = js_per_target(att[:E], att[E:], edge_index[1], n)[common].mean()
        else:
            cons = (1.0 - F.cosine_similarity(h[common], h[common + n], dim=-1)).mean()
        return rec + arm.consistency_weight * cons

    spec = TrainSpec(max_steps=settings.epochs, learning_rate=settings.learning_rate,
                     weight_decay=settings.weight_decay, threads=1, log_every=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay, foreach=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 2)
        log = fit(model, loss_fn, spec, optimizer=optimizer)
    model.enc2.keep_attention, model.enc2.attention = False, None
    model.hea_bias, model.pe, model.graph_edges = bias, pe_t, edge_index
    return model, np.array([loss for _, loss in log.losses])


def _model_input(model: GraphMAE, x: torch.Tensor) -> torch.Tensor:
    return x if model.pe is None else torch.cat([x, model.pe], 1)


def attach(model: GraphMAE, edge_index: torch.Tensor, num_nodes: int, bias=None, pe=None) -> GraphMAE:
    """Give an untrained model the graph (self loops added), bias and PE that :func:`embed` uses."""
    model.hea_bias, model.pe, model.graph_edges = bias, pe, with_self_loops(edge_index, num_nodes)
    return model


@torch.no_grad()
def embed(model: GraphMAE, x: torch.Tensor) -> np.ndarray:
    """Encoder output on the unmasked graph the model was trained on, eval mode: ``(n, heads * head_dim)``."""
    model.eval()
    return model.encode(_model_input(model, x), model.graph_edges, model.hea_bias).numpy()


@torch.no_grad()
def final_sce(model: GraphMAE, x, settings: TrainSettings, seed: int) -> float:
    """Reconstruction SCE (eval mode) under a fixed random evaluation mask shared by every model."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    mask_nodes = torch.sort(random_mask(x.shape[0], settings.mask_rate, gen)).values
    xm = _model_input(model, masked_input(model, x, mask_nodes, settings, gen))
    h = model.encode(xm, model.graph_edges, model.hea_bias)
    z = model.decode(h, mask_nodes, model.graph_edges, model.hea_bias)
    return float(sce_loss(x[mask_nodes], z[mask_nodes], settings.sce_alpha))


def js_per_target(p: torch.Tensor, q: torch.Tensor, target: torch.Tensor, num_nodes: int) -> torch.Tensor:
    r"""Jensen-Shannon divergence (nats) between two attention distributions per target node:
    ``p, q (E,)`` or ``(E, H)`` sum to one over the edges of each ``target``; returns
    ``(num_nodes,)``, or with heads ``(num_nodes,)`` averaged over heads. Differentiable (the
    softmax keeps every entry positive; ``xlogy`` gives 0 at 0)."""
    m = 0.5 * (p + q)
    term = 0.5 * (torch.xlogy(p, p) - torch.xlogy(p, m)) + 0.5 * (torch.xlogy(q, q) - torch.xlogy(q, m))
    out = torch.zeros((num_nodes,) + tuple(term.shape[1:]), dtype=p.dtype, device=p.device).index_add(0, target, term)
    return out if out.ndim == 1 else out.mean(1)


@torch.no_grad()
def attention_js(model: GraphMAE, x, settings: TrainSettings, seed: int) -> float:
    """Context consistency: mean over nodes masked in both of two fixed random masks of the JS
    divergence between the last encoder layer's attention (mean over heads) in the two views."""
    model.eval()
    n = x.shape[0]
    gen = torch.Generator().manual_seed(seed)
    m1, m2 = random_mask(n, settings.mask_rate, gen), random_mask(n, settings.mask_rate, gen)
    atts = []
    for mask_nodes in (m1, m2):
        xm = _model_input(model, masked_input(model, x, mask_nodes, settings, gen))
        _, (ei, alpha) = model.encode(xm, model.graph_edges, model.hea_bias, return_attention=True)
        atts.append(alpha.mean(1))
    js = js_per_target(atts[0].double(), atts[1].double(), ei[1], n)
    common = m1[torch.isin(m1, m2)]
    return float(js[common].mean())
