"""GASS geometry-aware spherical sampling: a diffusers UNet on digits, plus a 16-D toy for geometry.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 10. The card
(``shared/papers/gass_diversity.md``) reads the released script; we implement our own reading.

Equations implemented (:mod:`.core`, shared by both settings)
-------------------------------------------------------------
* GASS (:func:`build_e_target`): ``a_i = <e_i, e_t>``, ``r_i = e_i - a_i e_t``;
  ``a_i' = clip(a_i + w1 U(-r1, r1), -1, 1)``; ``u_ind`` = among 10 random unit vectors made
  orthogonal to ``e_t`` by QR, the one with the largest mean ``|<r_i, b>|``;
  ``target_i = normalise(a_i' e_t + r_i + w2 U(-r2, r2) u_ind)``.
* :func:`optimise_x0_to_target`: Adam on x̂_0 maximising mean cos(φ(x̂_0), target) (lr 8e-3,
  ≤ 60 steps, stop after 4 steps with gain < 5e-5), at the first ``guided_steps`` sampler steps.
* Metrics: projection spreads (std of ``<e, e_t>`` and of ``<e, u_ind>``), Vendi score with the
  cosine kernel, alignment = mean cos(φ(x), e_t), density and coverage (Naeem et al. 2020, k = 5).

The main setting: class-conditional digits (:mod:`.generator`, :mod:`.digits`)
-------------------------------------------------------------------------------
* Generator: a ``diffusers`` ``UNet2DModel`` with class embeddings (ten digits plus a null label),
  epsilon prediction, trained with 10 % label dropout on the training split of sklearn's digits by
  the asset rule ``gass_digits_unet`` (three training seeds); sampled with diffusers'
  ``DDIMScheduler`` (eta = 0) under classifier-free guidance ``ε = ε_∅ + w (ε_c - ε_∅)``.
* φ: the image tower of the project's tiny CLIP-style encoder (asset ``tiny_clip_digits`` of the
  ``prototype_tta`` chapter, its first encoder), the digit right-aligned on its 8x24 canvas;
  ``e_t(k)`` = its text embedding of the one-digit prompt ``k``.
* The hook (:func:`ddim_sample`): x̂_0 = (x_t - √(1-ᾱ_t) ε̂)/√ᾱ_t, Adam on x̂_0 through φ,
  then ε̂' = (x_t - √ᾱ_t x̂_0')/√(1-ᾱ_t) so that the DDIM step uses x̂_0' (the diffusion analogue of
  the rectified-flow velocity rewrite ``v' = (x_σ - x̂_0')/σ``).
* Baselines: plain sampling at lower CFG, an order-2 Vendi repulsion on x̂_0 (Adam on
  log Σ_ij cos²(e_i, e_j) per batch, same steps and stopping rule; strength = its learning rate),
  GASS with ``u_ind`` = the top PC of real residuals, GASS at four radii r (the dose) and GASS
  guided at more early steps (``guided_grid``: the dose over guided steps, testing whether the
  later CFG steps undo the early edits).
* Density and coverage are measured in φ's image-embedding space against the real *test* digits
  of the class (50 per class, unseen by the encoder and the generator).

The 16-D toy (:mod:`.toy`)
--------------------------
``x = 3 c_k + s_dep z_dep c_k + s_ind z_ind d + s_n eps`` in R^16, orthonormal class directions
``c_k`` and ``d`` orthogonal to them; a class-conditional rectified-flow MLP (10 % label dropout,
trained in the run: a few seconds a model) sampled by CFG Euler steps, ``v' = (x_σ - x̂_0')/σ``;
φ a fixed random two-layer tanh MLP R^16 -> S^31 (not CLIP). Kept for the exact-geometry checks and
for the disentanglement rows, which need the ground-truth factors z_dep, z_ind that digits lack.

Ours, and why
-------------
The GASS pieces, the hook and the metrics are ours (no library implements them). The generator's
architecture and scheduler are diffusers'; the encoder is the project's own asset. The toy's flow
model and sampler are a plain torch loop (16-D, no library needed). The Vendi repulsion uses the
order-2 Vendi score so that its gradient needs no eigen-decomposition of a near-singular kernel.

Small-scale deviations
----------------------
φ is a tiny CLIP trained on digits, not CLIP; the "prompts" are digit classes (2 at smoke, 4 at
full); 8x8 pixel-space diffusion with a 165k-parameter UNet, DDIM with 20 trailing steps and x̂_0
clipped to [-1, 1] (the paper: 28 steps of SD3-M in latent space) and guidance at steps 1-5 (the
paper: 1-10 of 28); one ``u_ind`` per class, chosen once from real training residuals by the
paper's rule and used both to push and to measure (the script re-selects it per batch); 10 images
per batch (as the paper); one repulsion strength at smoke, three at full (time).
The repulsion baseline uses the order-2 Vendi score. The Vendi repulsion, the PCA u_ind and the
dose arms are run on digits only; the disentanglement rows on the toy only.

Results: the chapter's ledger and its full-scale record (no numbers here, they go stale). The
ledger's statistics (per-generator intervals, the deciding replicate, the matched-arm pick, the
dose steps, the shift in seed-SDs) live in :mod:`.analysis`, tested in the chapter's tests.
"""

from dataclasses import dataclass

from .core import (build_e_target, decompose_on_axis, density_coverage, optimise_x0_repulsion,  # noqa: F401
                   optimise_x0_to_target, orthogonal_candidates, projection_spread, rf_velocity_from_x0,
                   select_u_ind, top_pc, vendi2_loss, vendi_score)
from . import analysis  # noqa: F401
from .digits import DigitsConfig, DigitsResult, run_digits  # noqa: F401
from .toy import Arm, Encoder, FlowMLP, Toy, make_toy, sample, sample_data, train_flow  # noqa: F401
from .toy import Config as ToyConfig  # noqa: F401
from .toy import Result as ToyResult  # noqa: F401
from .toy import run as run_toy  # noqa: F401

TOY_ARMS = ("vanilla", "dep_only", "ind_only")  # the toy serves the disentanglement rows only
TOY_MODELS = 3


@dataclass(frozen=True)
class Config:
    """The chapter's parameters (names match the notebook's parameters cell and the registry)."""

    seed: int = 0
    num_models: int = 3
    num_classes: int = 2
    num_batches: int = 2
    batch_size: int = 10
    r: float = 0.02
    dose_grid: tuple = (0.01, 0.02, 0.05, 0.1)
    sampler_steps: int = 20
    guided_steps: int = 5
    cfg: float = 5.0
    low_cfg_grid: tuple = (1.5, 2.5, 3.5)
    repel_grid: tuple = (0.032,)
    guided_grid: tuple = (5, 15)
    toy_classes: int = 2
    toy_train_steps: int = 1000
    toy_batches: int = 4
    toy_batch_size: int = 16

    def digits(self) -> DigitsConfig:
        return DigitsConfig(seed=self.seed, num_models=self.num_models, num_classes=self.num_classes,
                            num_batches=self.num_batches, batch_size=self.batch_size,
                            sampler_steps=self.sampler_steps, guided_steps=self.guided_steps, cfg=self.cfg,
                            low_cfg_grid=self.low_cfg_grid, repel_grid=self.repel_grid, r=self.r,
                            dose_grid=self.dose_grid, guided_grid=self.guided_grid)

    def toy(self) -> ToyConfig:
        return ToyConfig(seed=self.seed, num_models=TOY_MODELS, num_classes=self.toy_classes,
                         train_steps=self.toy_train_steps, num_batches=self.toy_batches,
                         batch_size=self.toy_batch_size, r=self.r, sampler_steps=self.sampler_steps,
                         guided_steps=self.guided_steps, cfg=self.cfg, arm_names=TOY_ARMS)


def run(config: Config, generators, clip, split) -> tuple:
    """Both settings: ``(DigitsResult, ToyResult)``; ``generators`` and ``clip`` come from the assets."""
    return run_digits(config.digits(), generators, clip, split), run_toy(config.toy())
