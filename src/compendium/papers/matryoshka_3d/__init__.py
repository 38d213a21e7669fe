r"""ML-Embed: 3-D Matryoshka learning, embeddings truncatable in width, depth and embedding rank.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 15 (ML-Embed, CodeFuse). The method
is read from the authors' released code as summarised in the research card (model, losses,
arguments, config); the paper's full text was not available, so where the card infers a detail
the chapter says so.

Equations implemented
---------------------
Embedding: last-token pooling of a decoder, cosine similarity, :math:`\tau = 0.05`. Per batch
(``model.contrastive_terms``): in-batch InfoNCE plus the hard-negative loss (query against its
positive and its own K hard negatives), from :mod:`compendium.losses`.

- MRL (width): :math:`\mathcal L = \sum_n \mathcal L(m_n) / (n \sqrt{d / m_n})` over widths
  :math:`m_1 = d > m_2 > \dots` (:math:`\{8, 16, \dots\} < d` plus :math:`d`), prefixes re-normalised.
  All widths' logits come from one nested-prefix similarity pass
  (:mod:`compendium.kernels.nested_prefix`, Triton with a PyTorch reference).
- MLL (depth): the same loss at exits :math:`\{1, 2, 4, 8, 16, 24, \dots\} \cap [1, L] \cup \{L\}`,
  intermediate states through the final norm, averaged.
- MEL (embedding rank): :math:`E \approx U' W` with :math:`U' = U_r \operatorname{diag}(S_r)`,
  :math:`W = V_r^\top` (SVD of the stage-0 embedding, both trained); each step draws one nested rank
  :math:`r_s \in \{r/8, r/4, r/2, r\}` with :math:`p(r_s) \propto r_s` and embeds with
  :math:`U'_{:, :r_s} W_{:r_s}`. Eckart-Young: :math:`\lVert E - U'W\rVert_F = \sqrt{\sum_{i > r} s_i^2}`.
- 3D-ML: all three at once (rank sampled, widths summed, exits averaged).

The released config sets ``use_mrl`` and ``use_mll`` with ``r = 512`` but leaves ``use_mel`` off,
so that config trains a fixed rank-512 factorisation (our ``fixed_rank`` variant), not MEL.

What is ours and what is a library's
-----------------------------------
Encoder: ``transformers.Qwen3Model`` from a ``Qwen3Config`` (random init); training:
``compendium.training.fit``; intervals and TOST: ``compendium.stats``; the reference losses of
``sentence-transformers`` (``MatryoshkaLoss``, ``Matryoshka2dLoss``) are run beside ours on a shared
batch (``st_reference``). Ours: the toy language family (``data``), the three nested axes and the
losses (``model``; the InfoNCE itself is the library's shared :mod:`compendium.losses`), the
nested-prefix kernel, the evaluation cube (``experiment``).

Small-scale deviations
----------------------
- Synthetic multilingual retrieval (200 concepts, 20 topics, 6 languages) instead of 60M real
  pairs in 282 languages; a 6-layer, d = 64 Qwen3 (about 0.3M backbone parameters) instead of
  0.6B-8B; the rank axis is r = 32 with ranks {4, 8, 16, 32} instead of r = 512 with {64, ..., 512}.
- Stage 0 (the "pretrained" model the factorisation starts from) is trained here until its dev
  R@1 reaches 0.70; stage 1 trains every variant from it for a fixed number of steps, with the
  same batches for every variant at a given training seed.
- Training pairs are drawn balanced over languages (each language equally often, as in the
  evaluation sets); the pool sizes still make languages 2-5 low-resource (few distinct documents).
  Stage 0 initialises the token embedding at std 1 and trains it at 30 times the body's rate
  (chosen on the dev split; ``model.settings_for``). At full scale both stages train on batches
  of 64 queries (more in-batch negatives per query), and stage 0 reaches its 0.70 target in about
  2600 steps (about 14 minutes of CPU); on batches of 16 it had stopped at 0.325 after 2500 steps
  (the chapter's Limits give the probes). The full assets take about 27 minutes of CPU in all.
- Smoke scale: a smaller training pool and far fewer steps (see ``model.settings_for``).
- Stage 0 is one workflow asset (``matryoshka_3d_stage0``, ``build_stage0``) and each stage-1
  variant another (``matryoshka_3d_<variant>``, ``build_<variant>``), which requires it: Snakemake
  builds stage 0 first, then the six variants, in parallel where cores allow.
"""

from .data import RetrievalSet, Task, TaskSpec, TrainingPool, make_retrieval_set, make_task, render, token_of
from .experiment import (EQUIVALENCE_MARGIN, HEADLINE_EFFECTS, PAPER_WEIGHTS_1024, Config, Result, cube_recall,
                         equivalence, measurements, monotonicity_violations, paired_gain, rank_frequency_test, run,
                         svd_init_gap)
from .model import (LABELS, STAGE0_ASSET, TEMPERATURE, VARIANT_ASSETS, VARIANTS, AssetSettings, Encoder,
                    EncoderSettings, FactorizedEmbedding, Variant, asset_dirs, build_fixed_rank, build_mel,
                    build_ml3d, build_mll, build_mrl, build_plain, build_stage0, build_variant, contrastive_terms,
                    dev_recall, encode, load_assets, mel_ranks, mll_layers, mrl_dims, mrl_weights, pad_batch, rank_probabilities, recall_at_1,
                    sample_rank, settings_for, task_for, train_stage0, train_variant, variant, variant_loss)
