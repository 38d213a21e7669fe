"""TopAdapter (ICML 2026, seed ``002_d926b147087f7228.txt``, abstract 16): topological primitives
injected into a frozen point-cloud transformer. Notebook: ``notebooks/vision/top_adapter.md``.

No paper text or code was available: everything here is inferred from the abstract, and the
chapter tests "topological primitives in a frozen transformer", not the authors' generator.

Parts: ``points`` (trimesh-sampled TopoShapes, FPS, kNN grouping, simplex features tau; the kNN is
``compendium.kernels.knn``), ``adapter`` (zero-initialised GeometricController and TopoTransfer),
``backbone`` (mini-PointNet tokens + 4 pre-LN blocks, masked-group Chamfer pretraining on
superquadrics), ``methods`` (linear probe, bottleneck adapter, LoRA through ``peft``, VPT-deep,
IDPT-like dynamic prompts, full fine-tuning, features-only MLP, TopAdapter and its ablations at matched trainable budgets),
``experiment`` (``build_asset``, ``Config``, ``run``, with the tau-permuted and random-init-backbone
controls). The linear probe is fitted to convergence (L-BFGS, logistic penalty C = 1) on the
standardised frozen features. peft provides LoRA; everything else is ours
because no library implements these point-cloud pieces offline (torch_geometric's fps/knn need
torch-cluster, which is not installed).

Small-scale deviations: D = 96, 4 layers, 16 groups of 16 points; 256 points per cloud at smoke,
512 at full; pretraining on superquadrics, not ShapeNet; the IDPT-like baseline is our inferred
form; the full-data run (100 clouds per class) only at full scale.
"""

from .adapter import GeometricController, TopoTransfer
from .backbone import PointBackbone, chamfer_l2, pretrain, superquadric
from .experiment import ASSET_NAME, CONFUSABLE, Config, Result, build_asset, kernel_check, load_backbone, run
from .methods import METHODS, PEFT, DynamicPrompts, Tuned, budget_ranks, finetune, trainable
from .points import fan_triangles, fps, group, random_se3, sample_shape, SHAPES, simplex_features, triangle_area

__all__ = ["ASSET_NAME", "CONFUSABLE", "Config", "DynamicPrompts", "fan_triangles", "GeometricController", "METHODS", "PEFT", "PointBackbone", "Result",
           "TopoTransfer", "Tuned", "budget_ranks", "build_asset", "chamfer_l2", "finetune", "fps", "group", "kernel_check",
           "load_backbone", "pretrain", "random_se3", "run", "sample_shape", "SHAPES", "simplex_features",
           "superquadric", "trainable", "triangle_area"]
