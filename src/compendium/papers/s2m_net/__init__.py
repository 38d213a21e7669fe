r"""S2M-Net: spectral-spatial token mixing and a morphology-aware adaptive loss (MASL).

Paper card
----------
"S2M-Net: Spectral-Spatial Mixing with Morphology-Aware Adaptive Loss for Medical Image
Segmentation", Md. Sanaullah Chowdhury and Lameya Sabrin, ICML 2026; seed file
``000_f69ae4f9f6fb29da.txt``, abstract 9. **No code and no paper text were available**: the two
public abstracts differ (an arXiv v1 calls the block a "Spectral-Selective Token Mixer"); we follow
the ICML abstract. The SSTM layout, the four descriptors, the five losses and the weighting rule
below are our inference from it, not the authors' design.

Equations implemented
---------------------
SSTM (``layers.SSTMBlock``) on :math:`x \in \mathbb{R}^{C \times H \times W}`:

.. math::
   \mathrm{Spec}_K(x) = \mathrm{irfft2}\big(W \odot P_K\,\mathrm{rfft2}(x)\big),\quad
   \mathrm{Gate}_d(x) = \sigma\big(W_2\,\mathrm{GELU}(W_1 x)\big),\quad
   y = x + \mathrm{DW}_{3\times3}\big(P_{1\times1}(\mathrm{Spec}_K(x) \odot \mathrm{Gate}_d(x))\big)

with :math:`P_K` the centred K x K low-frequency block, :math:`W \in \mathbb{C}^{C\times K\times(K/2+1)}`
learnable and :math:`d = 16`. Ablations: ``FNOBlock`` (no gate), ``SelfAttention2d`` (global
attention, :math:`O((HW)^2 C)`), the plain U-Net (no mixer, width raised to equal parameters).
All sit in ``TinyUNet`` at the two lowest resolutions (1/4 and 1/8).

Energy fraction (``shapes.low_frequency_energy_fraction``), one definition: mean removed,
:math:`\sum_{|k| \in K\times K} |\hat x_k|^2 / \sum_k |\hat x_k|^2` over the centred block, a
share :math:`K^2/(HW)` of the spectrum (1/121 at K = 32, 352 x 352).

MASL (``morphology.MASL``): descriptors :math:`m` = (compactness :math:`4\pi A/P^2`, tubularity
:math:`|\mathrm{skel}|/A`, irregularity :math:`1 - A/A_{hull}`, scale :math:`A/HW`) of each ground
truth; weights :math:`w = w_{min} + (1 - 5w_{min})\,\mathrm{softmax}(\theta + \Phi\tilde m)` over
(Dice, BCE, focal, boundary, soft-clDice), each loss divided by its running mean.

What is ours and what is a library's
-----------------------------------
FFTs, convolutions, attention (``scaled_dot_product_attention``): PyTorch. Perimeter, skeleton,
convex hull: scikit-image. Distance transforms, connected components: scipy. Intervals and slopes:
``compendium.stats``. Stacked training: ``torch.func`` (``stack_module_state``, ``functional_call``, ``vmap``). Training: ``compendium.training.fit``. Ours: the mixers' layout, the U-Net,
the synthetic families, the losses (no maintained PyTorch package for clDice and the boundary loss
works offline here), MASL and the FLOP counts.

Small-scale deviations
----------------------
- Synthetic 32 px images (K = 4) at smoke scale, 96 and 128 px (K = 8) at full (the paper: 15 real
  datasets); the real images (sklearn's photographs, scikit-image's retina and cameraman) enter
  only the spectral-energy measurements, since no package ships segmentation masks for them.
- U-Nets of about 0.03-0.04 M parameters (the paper: 4.7 M), first-level width 6 (S2M-toy),
  trained for 80 (smoke) or 100 (full) AdamW steps of 4 images at learning rate 0.02, three
  training seeds per arm trained at once (``compendium.stacking.StackedModules``: ``torch.func.vmap`` over stacked
  parameters): far from converged.
- Every arm trains at the first size (32 px at smoke, 96 px at full); at 128 px (full) only the
  plain U-Net and S2M-toy, which the mixer claim compares.
- Two more loss arms at the first size answer why MASL fails here: MASL with theta and Phi
  frozen at the prior (``s2m_masl_frozen``) and fixed weights that put 0.6 on soft-clDice
  (``s2m_cldice_heavy``, ``CLDICE_HEAVY_WEIGHTS``), the power control of the clDice comparisons.
- The multi-class variant is a drawn instrument (shaft + tip, 3 classes), trained for the plain
  U-Net and S2M-toy at the first size with class-weighted cross-entropy + foreground soft Dice; HD95
  (``morphology.hd95``, scipy distance transforms) is reported, not decided on.
"""

from .experiment import (
    ARMS,
    ASSET_NAME,
    CLDICE_HEAVY_WEIGHTS,
    INSTRUMENT_ARMS,
    LABELS,
    LOSS_ARMS,
    MIXER_ARMS,
    AssetSettings,
    Config,
    Result,
    build_asset,
    decide,
    evaluate,
    evaluate_instruments,
    load_models,
    measurements,
    predict,
    real_images,
    run,
    settings_for,
    time_layer,
    train_arm,
    training_set,
    width_for,
)
from .layers import (
    MIXERS,
    ConvBlock,
    FNOBlock,
    SelfAttention2d,
    SpatialGate,
    SpectralMixer,
    SSTMBlock,
    TinyUNet,
    corner_gradient,
    count_flops,
    flop_ratio_symbolic,
    flops_attention,
    flops_sstm,
    make_mixer,
    parameter_count,
)
from .morphology import (
    DESCRIPTORS,
    LOSSES,
    MASL,
    betti0_error,
    bce_loss,
    boundary_pixels,
    boundary_loss,
    cldice_score,
    descriptors,
    dice_loss,
    dice_score,
    focal_loss,
    hd95,
    loss_terms,
    multiclass_dice_scores,
    multiclass_loss,
    morphology_prior,
    soft_cldice_loss,
    soft_skeleton,
)
from .real import grey, skimage_camera, skimage_retina, sklearn_sample_photos
from .shapes import (
    FAMILIES,
    INSTRUMENT_CLASSES,
    ellipse_mask,
    instrument_labels,
    family_mask,
    low_frequency_energy_fraction,
    make_dataset,
    make_instrument_dataset,
    parseval_gap,
    render_image,
    signed_distance,
    star_mask,
    vessel_mask,
)
