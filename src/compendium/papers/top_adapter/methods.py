"""Every fine-tuning method of top_adapter on one frozen ``PointBackbone`` (ours, inferred).

``Tuned(backbone, method, ...)`` is the classifier of a method; all but ``features_mlp`` end in the
same head (BatchNorm without parameters, then Linear(2D, classes)) on the backbone feature. Trainable parts:

- ``linear``: the head only (linear probe), fitted to convergence: the frozen features of the
  training clouds are computed once, standardised with their own mean and variance, and the Linear
  is fitted by full-batch L-BFGS on cross-entropy + 0.5 ||W||^2 / n (scikit-learn's default
  logistic penalty, C = 1). A probe of a few AdamW steps is a statement about the optimiser, not
  about the backbone (40 steps left it at 30 % where the converged probe is near 60 %), so the
  calibration band and the baseline both use the converged one.
- Every AdamW method on the backbone starts from that converged probe (linear probing, then
  fine-tuning): ``finetune(..., head=probe.head.state_dict())`` copies the probe's standardisation
  and Linear into the model's head and keeps the standardisation fixed while training (``fixed_norm``),
  so the zero-initialised methods (adapter, LoRA, full fine-tuning, TopAdapter) start exactly at the
  probe and every method is compared from the same converged starting point.
- ``adapter``: a bottleneck adapter (D -> r -> D, GELU, up-projection zero-initialised) after every block.
- ``lora``: LoRA of rank r on every block's ``qkv`` (``peft.inject_adapter_in_model``; B is zero at init).
- ``vpt``: VPT-deep, P prompt tokens per block (replaced before every block).
- ``idpt``: IDPT-like instance-aware dynamic prompts (``DynamicPrompts``): a small generator maps the
  frozen group tokens entering the last block to P = 8 prompt tokens of that cloud (token-wise
  Linear(D -> H) + GELU, max over groups, Linear(H -> P D)), inserted before the last block. IDPT
  generates its prompts from the penultimate layer's tokens with a DGCNN-style module; our form
  (an MLP with a max pool, its sizes) is inferred, only the idea "prompts computed from the
  cloud's own frozen token features" is kept.
- ``full``: every backbone parameter (the tokenizer included).
- ``features_mlp``: no backbone: an MLP on [mean; max] over groups of tau (standardised like the
  probe's features, one hidden layer of 128, GELU), fitted to convergence like the probe (full-batch
  L-BFGS on cross-entropy + 0.5 ||W||^2 / n over both weight matrices): it cannot start from the
  probe, so it is given the probe's optimiser instead of a step budget.
- ``top``: TopAdapter = GeometricController (gated) at the input tokens + TopoTransfer stream
  added before every block; ``top_no_transfer``, ``top_no_controller`` (plain addition) and
  ``top_single_scale`` (tau of the k = 16 scale only) are its ablations.

``budget_ranks`` chooses r (adapter, LoRA), P (VPT) and the generator width H (IDPT-like) so that
those methods have as many trainable parameters (head excluded) as TopAdapter, within one unit of
r / P / H. The frozen tokenizer's output is
the same for every method except ``full``, so ``finetune`` computes it once.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from compendium.training import TrainSpec, fit, seeded_init

from .adapter import GeometricController, TopoTransfer

METHODS = ("linear", "adapter", "lora", "vpt", "full", "features_mlp", "top",
           "top_no_transfer", "top_no_controller", "top_single_scale", "idpt")
PEFT = ("linear", "adapter", "lora", "vpt", "idpt")
F_PER_SCALE = 18
IDPT_PROMPTS = 8


class DynamicPrompts(nn.Module):
    """Instance-aware prompts: group tokens (B, G, D) -> P prompt tokens (B, P, D) (IDPT-like, inferred)."""

    def __init__(self, d: int, hidden: int, n_prompts: int = IDPT_PROMPTS):
        super().__init__()
        self.d, self.n_prompts = d, n_prompts
        self.embed = nn.Sequential(nn.Linear(d, hidden), nn.GELU())
        self.out = nn.Linear(hidden, n_prompts * d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).max(1).values
        return self.out(h).view(-1, self.n_prompts, self.d)


def trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def top_parts(d: int, depth: int, f: int, gated: bool = True, transfer: bool = True) -> nn.ModuleDict:
    parts = nn.ModuleDict({"ctrl": GeometricController(d, f, gated=gated, hidden=32, gate_rank=32)})
    if transfer:
        parts["transfer"] = TopoTransfer(d, depth, hidden=16)
    return parts


def budget_ranks(d: int, depth: int, f: int) -> dict:
    """r / P of adapter, LoRA and VPT matched to TopAdapter's trainable count (head excluded)."""
    target = trainable(top_parts(d, depth, f))
    return {"target": target,
            "adapter": max(1, round((target / depth - d) / (2 * d + 1))),
            "lora": max(1, round(target / depth / (d + 3 * d))),
            "vpt": max(1, round(target / depth / d)),
            "idpt": max(1, round((target - IDPT_PROMPTS * d) / (d + 1 + IDPT_PROMPTS * d)))}


class Tuned(nn.Module):
    def __init__(self, backbone: nn.Module, method: str, n_classes: int, f: int, ranks: dict, scales: int = 3):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
        self.method, self.scales = method, scales
        self.fixed_norm = False         # True: the head's standardisation stays at its statistics while training
        d, depth = backbone.d, backbone.depth
        self.backbone = copy.deepcopy(backbone)
        for p in self.backbone.parameters():
            p.requires_grad_(method == "full")
        # the frozen pooled features vary little across clouds (per-dimension std 0.01-0.18 around
        # means up to 2.6 at smoke), so every head standardises them first (batch statistics, no
        # parameters) as Point-MAE's BatchNorm head does
        self.head = nn.Sequential(nn.BatchNorm1d(2 * d, affine=False), nn.Linear(2 * d, n_classes))
        self.adapters = self.prompts = self.top = self.dynamic = None
        if method == "features_mlp":
            self.backbone = None
            self.head = nn.Sequential(nn.BatchNorm1d(2 * f, affine=False), nn.Linear(2 * f, 128), nn.GELU(),
                                      nn.Linear(128, n_classes))
        elif method == "adapter":
            r = ranks["adapter"]
            self.adapters = nn.ModuleList(nn.Sequential(nn.Linear(d, r), nn.GELU(), nn.Linear(r, d)) for _ in range(depth))
            for a in self.adapters:
                nn.init.zeros_(a[2].weight)
                nn.init.zeros_(a[2].bias)
        elif method == "lora":
            from peft import LoraConfig, inject_adapter_in_model

            inject_adapter_in_model(LoraConfig(r=ranks["lora"], lora_alpha=ranks["lora"], target_modules=["qkv"]), self.backbone)
            for name, p in self.backbone.named_parameters():
                p.requires_grad_("lora_" in name)
        elif method == "vpt":
            self.prompts = nn.Parameter(0.02 * torch.randn(depth, ranks["vpt"], d))
        elif method == "idpt":
            self.dynamic = DynamicPrompts(d, ranks["idpt"])
        elif method.startswith("top"):
            f_used = F_PER_SCALE if method == "top_single_scale" else f
            self.top = top_parts(d, depth, f_used, gated=method != "top_no_controller",
                                 transfer=method != "top_no_transfer")

    def train(self, mode: bool = True):
        super().train(mode)
        if self.fixed_norm:
            self.head[0].eval()
        return self

    def select_tau(self, tau: torch.Tensor) -> torch.Tensor:
        if self.method == "top_single_scale":      # the middle scale (k = 16 of 8, 16, 32)
            mid = self.scales // 2
            return tau[..., mid * F_PER_SCALE:(mid + 1) * F_PER_SCALE]
        return tau

    def tau_summary(self, tau: torch.Tensor) -> torch.Tensor:
        """[mean; max] of tau over groups: (B, G, F) -> (B, 2F), the input of ``features_mlp``."""
        return torch.cat([tau.mean(1), tau.max(1).values], -1)

    def forward(self, tokens: torch.Tensor, centers: torch.Tensor, tau: torch.Tensor,
                neigh: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, G, D) from the frozen tokenizer (``neigh`` (B, G, k, 3) instead for ``full``),
        centres (B, G, 3), tau (B, G, F) -> logits (B, classes)."""
        if self.method == "features_mlp":
            return self.head(self.tau_summary(tau))
        if self.method == "full":
            tokens = self.backbone.tokenize(neigh)
        add = None
        if self.top is not None:
            tokens, e = self.top["ctrl"](tokens, self.select_tau(tau))
            if "transfer" in self.top:
                add = self.top["transfer"].streams(e)
        prompts = None if self.prompts is None else list(self.prompts[:, None])
        dynamic = None if self.dynamic is None else (self.backbone.depth - 1, self.dynamic)
        feat = self.backbone.encode(tokens, centers, add=add, prompts=prompts, adapters=self.adapters, dynamic=dynamic)
        return self.head(feat)


def accuracy(model: Tuned, data: dict, batch: int = 256) -> np.ndarray:
    """Per-cloud correctness (bool array) of ``model`` on ``data`` (tokens, centers, tau, neigh, y)."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(data["y"]), batch):
            s = slice(i, i + batch)
            logits = model(data["tokens"][s], data["centers"][s], data["tau"][s], data["neigh"][s])
            out.append((logits.argmax(-1) == data["y"][s]).numpy())
    return np.concatenate(out)


def _lbfgs(params: list, z: torch.Tensor, y: torch.Tensor, forward, weights: list, max_iter: int) -> tuple[float, float]:
    """Full-batch L-BFGS on cross-entropy(forward(z), y) + 0.5 sum ||W||^2 / n; returns (gradient norm, objective)."""
    n = len(y)
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, tolerance_grad=1e-7,
                            tolerance_change=1e-10, history_size=20, line_search_fn="strong_wolfe")

    def objective():
        return nn.functional.cross_entropy(forward(z), y) + 0.5 * sum(w.pow(2).sum() for w in weights) / n

    def closure():
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    opt.step(closure)
    opt.zero_grad()
    loss = objective()
    loss.backward()
    gnorm = float(torch.cat([p.grad.flatten() for p in params]).norm())
    opt.zero_grad()
    return gnorm, float(loss.detach())


def _standardise(bn: nn.BatchNorm1d, feats: torch.Tensor) -> torch.Tensor:
    """Set ``bn``'s running statistics to the features' mean and (unbiased) variance; returns bn(feats) in eval mode."""
    bn.running_mean.copy_(feats.mean(0))
    bn.running_var.copy_(feats.var(0) if len(feats) > 1 else torch.ones_like(bn.running_var))
    bn.eval()
    with torch.no_grad():
        return bn(feats)


def fit_probe(model: Tuned, train: dict, max_iter: int = 200) -> tuple[float, float]:
    """Fit ``model``'s head (method ``linear``) to convergence; returns (gradient norm, objective) at the end.

    The BatchNorm of the head gets the training features' mean and (unbiased) variance as its
    running statistics and stays in eval mode, so training and test clouds are standardised alike.
    """
    model.eval()
    with torch.no_grad():
        feats = torch.cat([model.backbone.encode(train["tokens"][i:i + 256], train["centers"][i:i + 256])
                           for i in range(0, len(train["y"]), 256)])
    bn, lin = model.head
    z = _standardise(bn, feats)
    return _lbfgs(list(lin.parameters()), z, train["y"], lin, [lin.weight], max_iter)


def fit_features_mlp(model: Tuned, train: dict, max_iter: int = 200) -> tuple[float, float]:
    """Fit ``features_mlp`` to convergence like the probe (standardised input, L-BFGS, both weight
    matrices penalised); returns (gradient norm, objective) at the end."""
    model.eval()
    bn, l1, act, l2 = model.head
    z = _standardise(bn, model.tau_summary(train["tau"]))
    mlp = nn.Sequential(l1, act, l2)
    return _lbfgs(list(mlp.parameters()), z, train["y"], mlp, [l1.weight, l2.weight], max_iter)


def finetune(backbone: nn.Module, method: str, train: dict, n_classes: int, ranks: dict, *, steps: int,
             batch: int, lr: float, seed: int, scales: int = 3, head: dict | None = None) -> tuple[Tuned, dict]:
    """Train ``method`` on ``train`` with AdamW (``compendium.training.fit``), or ``linear`` by
    ``fit_probe`` and ``features_mlp`` by ``fit_features_mlp`` (steps, batch and lr unused); returns
    (model, info).

    ``head``: the state dict of a fitted probe's head (``linear``), copied into the model's head
    before training; its standardisation then stays fixed (linear probing, then fine-tuning)."""
    f = train["tau"].shape[-1]
    with seeded_init(seed):
        model = Tuned(backbone, method, n_classes, f, ranks, scales)
    if method in ("linear", "features_mlp"):
        gnorm, loss = (fit_probe if method == "linear" else fit_features_mlp)(model, train)
        head_n = sum(p.numel() for p in model.head.parameters()) if method == "linear" else 0
        return model, {"trainable": trainable(model), "trainable_without_head": trainable(model) - head_n,
                       "final_loss": loss, "grad_norm": gnorm}
    if head is not None:
        model.head.load_state_dict(head)
        model.fixed_norm = True
    gen = torch.Generator().manual_seed(seed)
    n = len(train["y"])

    def loss_fn(step: int) -> torch.Tensor:
        i = torch.randperm(n, generator=gen)[:batch]
        logits = model(train["tokens"][i], train["centers"][i], train["tau"][i], train["neigh"][i])
        return nn.functional.cross_entropy(logits, train["y"][i])

    spec = TrainSpec(max_steps=steps, learning_rate=lr, weight_decay=0.01, warmup_steps=max(1, steps // 10),
                     schedule="cosine", grad_clip=1.0, log_every=max(1, steps // 5))
    log = fit(model, loss_fn, spec)
    head_n = sum(p.numel() for p in model.head.parameters())
    return model, {"trainable": trainable(model), "trainable_without_head": trainable(model) - head_n,
                   "final_loss": float(log.final_loss)}
