"""top_adapter's experiment: the backbone asset, ``Config`` and ``run(config)`` (ours, inferred).

The asset (``build_asset``) pretrains one ``PointBackbone`` on superquadrics by masked-group Chamfer
reconstruction (sizes fixed per scale here). ``run`` draws a fixed test and dev set of TopoShapes
and, per replicate (seed r = a fresh few-shot training draw and fresh initialisations), fine-tunes
every method of ``methods.METHODS`` plus two controls: ``top_permuted`` (TopAdapter trained and
tested with tau permuted across clouds, so tau no longer belongs to its cloud) and
``linear_random_init`` (the converged linear probe on the same architecture at the weights the
pretraining started from: what the pretraining adds). Every AdamW method on the backbone (the PEFT methods, full fine-tuning,
TopAdapter, its ablations and the permuted control) starts from the converged probe of its own
training draw (linear probing, then fine-tuning: ``finetune(..., head=...)``), so no comparison
sets a step-limited method against a converged one. The learning rate of each AdamW method is
chosen from ``lr_grid`` by dev accuracy at replicate 0, the same way for every method (full fine-tuning,
which moves every backbone weight, from ``lr_grid`` x ``FULL_LR_SCALE``) (the probes
and the features-only MLP are fitted to convergence by L-BFGS and have none); the best PEFT baseline is the one with the
highest mean dev accuracy (the IDPT-like dynamic prompts among them). With ``full_data_shots`` > 0
(the full scale) the PEFT methods, TopAdapter and full fine-tuning are trained again, alike, on
``full_data_shots`` clouds per class per replicate (the "full-data" run: same step budget, same
learning rates, the best PEFT chosen on dev again). ``kernel_check`` compares the Triton kNN kernel
with its PyTorch reference (compiled on CUDA, Triton's interpreter on the CPU). Every interval is a
paired t interval over replicates (``compendium.stats.paired_difference``, 90 %, i.e. one-sided
p < 0.05 when it excludes 0); the tau-permuted control is a paired TOST (``compendium.stats.tost``)
of its difference to the best PEFT within +-``min_effect``. A replicate retrains every method (fresh
draw, fresh initialisation); the pretrained backbone is one asset, shared by all replicates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from compendium import stats
from compendium.training import seeded_init
from compendium.validation import require_int, require_number

from .backbone import PointBackbone, pretrain
from .methods import METHODS, PEFT, Tuned, accuracy, budget_ranks, finetune, trainable
from .points import SHAPES, group, random_se3, sample_shape, simplex_features

ASSET_NAME = "top_adapter_backbone"
CONFUSABLE = ("sphere", "thin_torus", "disk", "annulus")
FULL_LR_SCALE = 0.1       # full fine-tuning chooses from lr_grid x 0.1 (every weight moves; the PEFT rates wreck it)
UNIT = "fine-tuning runs (a fresh few-shot draw and initialisation each)"
ASSET_SETTINGS = {
    "smoke": {"n_clouds": 512, "n_points": 256, "n_groups": 16, "k": 16, "d": 96, "depth": 4, "steps": 300, "batch": 32},
    "full": {"n_clouds": 2048, "n_points": 512, "n_groups": 16, "k": 16, "d": 96, "depth": 4, "steps": 1500, "batch": 32},
}


def build_asset(out_dir: Path, scale: str, seed: int) -> None:
    """Pretrain the backbone (seed ``seed``): ``backbone.pt`` and ``metadata.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    s = ASSET_SETTINGS[scale]
    torch.set_num_threads(1)
    enc, log = pretrain(s["n_clouds"], s["n_points"], s["n_groups"], s["k"], s["d"], s["depth"], s["steps"],
                        s["batch"], seed)
    torch.save(enc.state_dict(), out_dir / "backbone.pt")
    meta = {"name": ASSET_NAME, "scale": scale, "seed": int(seed), "settings": s,
            "parameters": sum(p.numel() for p in enc.parameters()), "log": log}
    (out_dir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"backbone: {meta['parameters']} parameters, Chamfer {log['first_logged_loss']:.4f} -> {log['final_loss']:.4f}")


def load_backbone(path: str | Path) -> tuple[PointBackbone, dict]:
    path = Path(path)
    meta = json.loads((path / "metadata.json").read_text())
    s = meta["settings"]
    enc = PointBackbone(s["d"], s["depth"])
    enc.load_state_dict(torch.load(path / "backbone.pt", map_location="cpu", weights_only=True))
    return enc.eval(), meta


@dataclass(frozen=True)
class Config:
    scales: tuple = (8, 16, 32)
    shots: int = 20
    dev_per_class: int = 10
    test_per_class: int = 20
    replicates: int = 3
    steps: int = 25
    batch: int = 12
    lr_grid: tuple = (0.003,)
    min_effect: float = 3.0
    ft_margin: float = 2.0
    full_data_shots: int = 0
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "scales", tuple(int(k) for k in self.scales))
        object.__setattr__(self, "lr_grid", tuple(float(x) for x in self.lr_grid))
        if len(self.scales) != 3 or any(k < 2 for k in self.scales):
            raise ValueError(f"scales must be three neighbourhood sizes >= 2, got {self.scales}")
        if not self.lr_grid or any(x <= 0 for x in self.lr_grid):
            raise ValueError(f"lr_grid must hold positive learning rates, got {self.lr_grid}")
        require_int("shots", self.shots, 1, 1000)
        require_int("dev_per_class", self.dev_per_class, 1, 1000)
        require_int("test_per_class", self.test_per_class, 1, 5000)
        require_int("replicates", self.replicates, 2, 20)
        require_int("steps", self.steps, 1, 100_000)
        require_int("batch", self.batch, 1, 10_000)
        require_number("min_effect", self.min_effect, 0.0, 100.0)
        if self.min_effect <= 0:
            raise ValueError(f"min_effect must be > 0 (the margin of the tau-permuted equivalence test), got {self.min_effect}")
        require_number("ft_margin", self.ft_margin, 0.0, 100.0)
        require_int("full_data_shots", self.full_data_shots, 0, 10_000)
        require_int("seed", self.seed, 0, 2**31 - 1)


def make_split(per_class: int, rng: np.random.Generator, backbone: PointBackbone, settings: dict, scales) -> dict:
    """TopoShapes clouds -> tensors: tokens (frozen tokenizer), centers, tau, neigh, y."""
    clouds, ys = [], []
    for c, name in enumerate(SHAPES):
        for _ in range(per_class):
            clouds.append(sample_shape(name, settings["n_points"], rng))
            ys.append(c)
    pts = torch.as_tensor(np.stack(clouds))
    neigh, centers = group(pts, settings["n_groups"], settings["k"])
    tau = simplex_features(pts, centers, scales)
    with torch.no_grad():
        tokens = backbone.tokenize(neigh)
    return {"tokens": tokens, "centers": centers, "tau": tau, "neigh": neigh, "y": torch.tensor(ys), "points": pts}


def retokenize(data: dict, backbone: PointBackbone) -> dict:
    """The same split with its tokens from another (frozen) backbone's tokenizer."""
    out = dict(data)
    with torch.no_grad():
        out["tokens"] = torch.cat([backbone.tokenize(data["neigh"][i:i + 256]) for i in range(0, len(data["y"]), 256)])
    return out


def permute_tau(data: dict, rng: np.random.Generator) -> dict:
    out = dict(data)
    out["tau"] = data["tau"][torch.as_tensor(rng.permutation(len(data["y"])))]
    return out


def tau_invariance_gap(rng: np.random.Generator, scales, n_points: int = 256, n_groups: int = 16) -> float:
    """max |tau(T x) - tau(x)| over a random rigid motion, a point permutation and a scaling (float64)."""
    pts = sample_shape("two_hole", n_points, rng).astype(np.float64)
    rot, t = random_se3(rng)

    def tau(p):
        p = torch.tensor(p)[None]
        return simplex_features(p, group(p, n_groups, max(scales))[1], scales)

    base = tau(pts)
    return max(float((tau(v) - base).abs().max()) for v in (pts @ rot.T + t, pts[rng.permutation(n_points)], 3.1 * pts))


def knn_brute_gap(rng: np.random.Generator, n_points: int = 200, n_queries: int = 17, k: int = 16) -> float:
    """max |distance of the j-th kNN (compendium.kernels.knn) - j-th smallest brute-force distance| (float64)."""
    from compendium.kernels.knn import knn

    pts = torch.tensor(rng.normal(size=(2, n_points, 3)))
    q = torch.tensor(rng.normal(size=(2, n_queries, 3)))
    idx, _ = knn(pts, q, k)
    got = (pts[torch.arange(2)[:, None, None], idx] - q[:, :, None]).norm(dim=-1).numpy()
    p, qq = pts.numpy(), q.numpy()
    brute = np.sort(np.sqrt(((qq[:, :, None, :] - p[:, None, :, :]) ** 2).sum(-1)), -1)[..., :k]
    return float(np.abs(got - brute).max())


def init_identity_gap(backbone: PointBackbone, data: dict, ranks: dict) -> float:
    """max |logits(TopAdapter at step 0) - logits(frozen backbone + the same head)|."""
    from compendium.training import seeded_init

    f = data["tau"].shape[-1]
    with seeded_init(123):
        top = Tuned(backbone, "top", len(SHAPES), f, ranks)
    with seeded_init(123):
        lin = Tuned(backbone, "linear", len(SHAPES), f, ranks)
    s = slice(0, 64)
    with torch.no_grad():
        a = top(data["tokens"][s], data["centers"][s], data["tau"][s])
        b = lin(data["tokens"][s], data["centers"][s], data["tau"][s])
    return float((a - b).abs().max())


_KERNEL_SCRIPT = r"""
import json, sys, torch
from compendium.kernels.knn import knn_reference, knn_triton
device = sys.argv[1]
g = torch.Generator().manual_seed(int(sys.argv[2]))
err, equal, cases = 0.0, True, 0
# (B, N, M, k): N not a power of two with a duplicated point (a tie), and k = N
for B, N, M, k in ((2, 40, 3, 8), (1, 17, 2, 17)):
    p = torch.randn(B, N, 3, generator=g)
    q = torch.randn(B, M, 3, generator=g)
    p[:, 1] = p[:, 0]
    ri, rd = knn_reference(p.to(device), q.to(device), k)
    ki, kd = knn_triton(p.to(device), q.to(device), k)
    equal &= bool((ri.cpu() == ki.cpu()).all())
    err, cases = max(err, float((rd.cpu() - kd.cpu()).abs().max())), cases + 1
print(json.dumps({"idx_equal": equal, "dist_err": err, "cases": cases}))
"""


def kernel_check(device: str = "cpu", seed: int = 0, timeout: float = 300) -> dict:
    """The Triton kNN kernel against ``knn_reference`` (indices equal, largest distance gap): compiled
    on CUDA, in Triton's interpreter on the CPU (a subprocess: ``TRITON_INTERPRET`` must be set
    before Triton is first imported)."""
    env = dict(os.environ)
    if device != "cuda":
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", _KERNEL_SCRIPT, "cuda" if device == "cuda" else "cpu", str(seed)],
                         env=env, capture_output=True, text=True, timeout=timeout, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["mode"] = "compiled on CUDA" if device == "cuda" else "Triton interpreter, CPU"
    return res


@dataclass
class Result:
    config: Config
    accuracy: dict            # method -> (replicates,) test accuracy in points
    dev_accuracy: dict        # method -> (replicates,) dev accuracy in points
    class_accuracy: dict      # method -> (replicates, classes) in points
    lr: dict                  # method -> chosen learning rate
    trainable: dict           # method -> trainable parameters (head included)
    ranks: dict
    best_peft: str
    backbone_parameters: int
    tau_gap: float
    identity_gap: float
    knn_gap: float
    asset: dict
    full_data: dict = field(default_factory=dict)   # method -> (replicates,) test accuracy, full-data run
    full_data_dev: dict = field(default_factory=dict)
    full_data_best_peft: str = ""
    metrics: dict = field(default_factory=dict)


def run(config: Config, asset_path: str | Path) -> Result:
    torch.set_num_threads(1)
    backbone, meta = load_backbone(asset_path)
    s = meta["settings"]
    base = config.seed * 1000
    test = make_split(config.test_per_class, np.random.default_rng(base + 1), backbone, s, config.scales)
    dev = make_split(config.dev_per_class, np.random.default_rng(base + 2), backbone, s, config.scales)
    trains = [make_split(config.shots, np.random.default_rng(base + 10 + r), backbone, s, config.scales)
              for r in range(config.replicates)]
    f = test["tau"].shape[-1]
    ranks = budget_ranks(backbone.d, backbone.depth, f)
    # the controls before idpt, so the seeds of the methods that came first stay the same
    methods = tuple(x for x in METHODS if x != "idpt") + ("top_permuted", "linear_random_init", "idpt")
    perm_rng = np.random.default_rng(base + 3)
    with seeded_init(int(meta["seed"])):            # the weights the asset's pretraining started from
        random_bb = PointBackbone(s["d"], s["depth"]).eval()
    random_splits = {}

    probes = {}                                     # (train set, replicate) -> the converged probe's head

    def probe_head(r, train_sets, offset):
        key = (offset, r)
        if key not in probes:
            model, _ = finetune(backbone, "linear", train_sets[r], len(SHAPES), ranks, steps=config.steps,
                                batch=config.batch, lr=float("nan"), seed=base + offset + 100 * r + methods.index("linear"))
            probes[key] = (model, {k: v.clone() for k, v in model.head.state_dict().items()})
        return probes[key]

    def train_eval(method, r, lr, train_sets=trains, offset=0):
        tr, te, dv = train_sets[r], test, dev
        name, bb, head = method, backbone, None
        if method == "linear":
            model = probe_head(r, train_sets, offset)[0]
            return accuracy(model, te), accuracy(model, dv), {"trainable": trainable(model)}
        if method == "top_permuted":
            name = "top"
            tr, te, dv = (permute_tau(x, perm_rng) for x in (tr, te, dv))
        elif method == "linear_random_init":
            name, bb = "linear", random_bb
            for key, x in (("test", te), ("dev", dv), (r, tr)):
                if key not in random_splits:
                    random_splits[key] = retokenize(x, random_bb)
            tr, te, dv = random_splits[r], random_splits["test"], random_splits["dev"]
        if name != "linear" and name != "features_mlp":
            head = probe_head(r, train_sets, offset)[1]      # linear probing, then fine-tuning
        model, info = finetune(bb, name, tr, len(SHAPES), ranks, steps=config.steps, batch=config.batch,
                               lr=lr, seed=base + offset + 100 * r + methods.index(method), head=head)
        return accuracy(model, te), accuracy(model, dv), info

    lr, first = {}, {}                              # first: the replicate-0 run at the chosen rate, reused
    for m in methods:
        if m.startswith("linear") or m == "features_mlp":
            lr[m] = float("nan")                    # fitted by L-BFGS: no learning rate to choose
        else:
            grid = tuple(x * FULL_LR_SCALE for x in config.lr_grid) if m == "full" else tuple(config.lr_grid)
            if len(grid) == 1:
                lr[m] = grid[0]
            else:
                runs = [train_eval(m, 0, x) for x in grid]
                best_i = int(np.argmax([out[1].mean() for out in runs]))
                lr[m], first[m] = grid[best_i], runs[best_i]
    acc, dev_acc, cls_acc, n_train = {}, {}, {}, {}
    y = test["y"].numpy()
    for m in methods:
        rows, drows, crows = [], [], []
        for r in range(config.replicates):
            correct, dcorrect, info = first[m] if (r == 0 and m in first) else train_eval(m, r, lr[m])
            rows.append(100 * correct.mean())
            drows.append(100 * dcorrect.mean())
            crows.append([100 * correct[y == c].mean() for c in range(len(SHAPES))])
            n_train[m] = info["trainable"]
        acc[m], dev_acc[m], cls_acc[m] = np.array(rows), np.array(drows), np.array(crows)
    best = max(PEFT, key=lambda m: dev_acc[m].mean())
    result = Result(config, acc, dev_acc, cls_acc, lr, n_train, ranks, best, sum(p.numel() for p in backbone.parameters()),
                    tau_invariance_gap(np.random.default_rng(base + 4), config.scales), init_identity_gap(backbone, test, ranks),
                    knn_brute_gap(np.random.default_rng(base + 5)), meta)
    if config.full_data_shots > 0:
        big = [make_split(config.full_data_shots, np.random.default_rng(base + 500 + r), backbone, s, config.scales)
               for r in range(config.replicates)]
        for m in PEFT + ("top", "full"):
            runs = [train_eval(m, r, lr[m], train_sets=big, offset=50) for r in range(config.replicates)]
            result.full_data[m] = np.array([100 * out[0].mean() for out in runs])
            result.full_data_dev[m] = np.array([100 * out[1].mean() for out in runs])
        result.full_data_best_peft = max(PEFT, key=lambda m: result.full_data_dev[m].mean())
    result.metrics = summarize(result)
    return result


def summarize(res: Result) -> dict:
    """Every paired estimate a verdict depends on (points of accuracy, interval over replicates)."""
    a, unit = res.accuracy, UNIT
    pd = lambda x, y: stats.paired_difference(x, y, unit=unit, level=0.90)
    conf = [SHAPES.index(c) for c in CONFUSABLE]
    other = [i for i in range(len(SHAPES)) if i not in conf]
    gain = res.class_accuracy["top"] - res.class_accuracy[res.best_peft]          # (replicates, classes)
    target = res.ranks["target"]
    m = {
        "headline": pd(a["top"], a[res.best_peft]),
        "vs_full": pd(a["top"], a["full"]),
        "confusable": stats.mean_interval(gain[:, conf].mean(1) - gain[:, other].mean(1), unit=unit, level=0.90),
        "vs_features": pd(a["top"], a["features_mlp"]),
        "vs_linear": pd(a["top"], a["linear"]),
        "permuted_gain": pd(a["top_permuted"], a[res.best_peft]),
        "permuted_tost": stats.tost(a["top_permuted"], a[res.best_peft], paired=True, margin=res.config.min_effect,
                                    unit=unit),
        "headroom": stats.mean_interval(a[res.best_peft], unit=unit, level=0.90),
        "full_accuracy": stats.mean_interval(a["full"], unit=unit, level=0.90),
        "full_vs_probe": pd(a["full"], a["linear"]),
        "top_accuracy": stats.mean_interval(a["top"], unit=unit, level=0.90),
        "probe": stats.mean_interval(a["linear"], unit=unit, level=0.90),
        "probe_dev": stats.mean_interval(res.dev_accuracy["linear"], unit=unit, level=0.90),
        "probe_random": stats.mean_interval(a["linear_random_init"], unit=unit, level=0.90),
        "vs_random_init": pd(a["linear"], a["linear_random_init"]),
        "ablations": {k: pd(a["top"], a[k]) for k in ("top_no_transfer", "top_no_controller", "top_single_scale")},
        "budget_gap": max(abs((res.trainable[k] - res.trainable["linear"]) - target) / target for k in ("adapter", "lora", "vpt", "idpt")),
        "top_fraction": 100 * (res.trainable["top"] - res.trainable["linear"]) / res.backbone_parameters,
        "mean": {k: float(v.mean()) for k, v in a.items()},
    }
    if res.full_data:
        f, b = res.full_data, res.full_data_best_peft
        m["full_data_headline"] = pd(f["top"], f[b])
        m["full_data_vs_full"] = pd(f["top"], f["full"])
    return m
