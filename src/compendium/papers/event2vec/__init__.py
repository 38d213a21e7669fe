r"""event2vec: raw event-camera events as token vectors for a Transformer, without frames.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 17. Method as read in the authors'
released code (v3) and summarised in the research card; the paper's full text was not available,
so the details below follow the code, and the parametric-versus-lookup hypothesis is the card's
inference, not a statement of the paper.

Equations implemented
---------------------
An event is :math:`e = (x, y, t, p)`. Spatial embedding (``models.MLPEventEmbedding``):
:math:`v_s = \mathrm{LN}(W_3\,\mathrm{ReLU}(\mathrm{LN}(W_2\,\mathrm{ReLU}(\mathrm{LN}(W_1 [\hat x, \hat y, \hat p])))))`
with bias-free :math:`W_i` and :math:`\hat x = 2x/(W-1) - 1` (likewise y, p); the lookup variant
(``LookupEventEmbedding``) is one learned row per event type, index :math:`pHW + yW + x + 1`
(row 0 = pad). Temporal embedding (``TemporalConvEmbedding``): :math:`t \leftarrow (t - t_0)/\max(t - t_0)`,
:math:`\Delta t_n = t_n - t_{n-1}` (:math:`\Delta t_0 = 0`, zero at pads), three kernel-3 convolutions
(1 :math:`\to` d/4 :math:`\to` d/2 :math:`\to` d, the last two grouped) with LayerNorm, re-masked
after every layer. Token :math:`(v_s + v_t) \odot \text{mask}`. Sequence model: post-norm layers of
bidirectional forgetting attention (``ForgettingAttention``): :math:`\mathrm{softmax}_j(q_i\cdot k_j/\sqrt{d_h} + D_{ij})`,
:math:`D_{ij} = \sum_{l=j+1}^{i}\log f_l` (:math:`j \le i`), :math:`\sum_{l=i}^{j-1}\log g_l` (:math:`j > i`),
:math:`f, g = \sigma(\cdot)` data-dependent gates per head; masked mean pooling, linear head.
``attention='softmax'`` drops the gates (a set model beyond the conv's window of 7 events).
Baselines: a frame CNN on 8 time bins x 2 polarities, PointNet on (x, y, t, p) and a time-blind
frame CNN (one time bin: a count image per polarity). Test accuracy = mean over re-samplings of N events (uniform without
replacement, re-sorted by time).

What is ours and what is a library's
-----------------------------------
All in plain torch: FoX's reference implementation is flash-linear-attention's Triton kernels,
which need a GPU; the forgetting attention here is a dense O(N^2) transcription of its
definition. The DVS simulator (``events.py``) is ours: tonic ships transforms but no simulator,
and evlib's ESIM costs ~435 MB. Training: ``compendium.training.fit``; intervals:
``compendium.stats``. The fused token kernel (table gather + last temporal conv + LayerNorm + add +
mask) is ``compendium.kernels.event_tokens``, with its PyTorch reference.

Small-scale deviations
----------------------
- A synthetic 32 x 32 DVS with 8 motion classes instead of DVS Gesture / ASL-DVS / DVS-Lip; its
  background rate is calibrated on dev (``asset.calibrate_noise``) so the frame CNN is near 0.8 at full scale.
- d in {16, 32} (dev-picked), 2 heads, 2 layers, FFN 2d, no sequence pooling, no augmentation;
  100 (smoke) / 400 (full) AdamW steps of 1024 events (1024 / N recordings, N drawn per step from
  {32, 64, 128}; the paper trains at one N, 64 epochs), a learning rate per architecture picked on
  dev; 3 (smoke) / 5 (full) training seeds, each architecture's copies trained as one vmapped stack.
- Dense forgetting attention in torch (the paper: FoX's linear-time kernels, kv heads = h/2).
- No k-means "cluster events" and no masked-event pretraining (DVS-Lip only in the paper).
"""

from . import events
from .asset import ASSET_NAME, FAMILIES, AssetSettings, build_asset, load_models, make_model, settings_for, transform
from .events import CLASSES, PAIRS, EventSet, SensorSettings, events_to_frames, lookup_index, sample_events, simulate
from .experiment import (
    Config,
    Result,
    accuracies,
    draw_logits,
    draw_sets,
    fused_gap,
    gather_gap,
    invariance_gaps,
    lookup_bijection,
    measurements,
    pair_accuracies,
    run,
    softmax_limit_gap,
    worst_case,
)
from .models import (
    Event2Vec,
    ForgettingAttention,
    FrameCNN,
    LookupEventEmbedding,
    MLPEventEmbedding,
    PointNet,
    TemporalConvEmbedding,
    delta_t,
    masked_mean_pool,
    normalize_coords,
    parameter_count,
)
