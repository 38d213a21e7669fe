"""VidLaDA + MARS-Cache: a bidirectional diffusion video LM and a cache for its decoding.

Paper: *VidLaDA* (ICML 2026; arXiv 2601.17868), seed file ``000_f69ae4f9f6fb29da.txt``,
abstract 11.

Implemented (``model.py``):

* token videos: F frames x P patch tokens, three object codes on background, one question per
  video that needs several frames (first frame of k, frames containing k, k before j, objects at
  frame f); the frame holding the deciding evidence is recorded, and accuracy is split by its
  tercile; train / dev / test questions come from disjoint generator streams;
* one tiny pre-LN transformer of our own with explicit boolean attention masks and a per-layer
  K/V cache (``VideoLM.partial``; a visual token's input also carries the embedding of its
  frame's number token, an inductive bias that makes frame indices easy to read out, and the
  last prompt position and the answer positions carry the embeddings of the question's three
  prompt tokens (type, first argument, second argument), so the predicting position holds the
  query it looks up in the video: without it the 2-layer models answered from question-type
  priors), trained as AR (causal mask,
  next-token CE on the answer) and
  as a masked diffusion model (bidirectional mask; the LLaDA loss: ``t ~ U(0,1)``,
  ``p_mask = (1 - eps) t + eps``, ``eps = 1e-3``, loss ``sum_masked CE / p_mask / L``);
* LLaDA's low-confidence remasking at temperature 0 (one block, ``num_transfer_tokens``);
* caches: none; a dLLM-Cache-style cache (video + prompt K/V refreshed every ``R`` steps, the
  answer recomputed every step); a visual-only cache (video K/V refreshed every ``R_v`` steps,
  full attention, the ablation); and **our reconstruction of MARS-Cache**: video K/V refreshed
  every ``R_v`` steps, and every pass over the video uses frame-chunk attention (a visual token
  sees its own frame, the text and ``A`` anchor tokens per layer, the anchors chosen as the
  visual tokens receiving the most attention from the text queries in that layer and pass);
* analytic matmul FLOPs per answer (the first pass counted), Prop. 3.1's visibility counts.
* the video-blind floor (``experiment.py``): the most frequent answer of each question type,
  fitted on questions from the training distribution; the preconditions ``mdm-floor`` and
  ``ar-floor`` ask each trained model to beat it by ``Config.floor_margin_points``.

Why our own transformer and not a ``transformers`` config: the issue asks for explicit masks and
a per-layer K/V cache whose visual part is refreshed under a different mask than the text part;
the library's attention modules do not expose partial recomputation of a subset of positions
against a cache under a per-sample 2-D mask, so the 60-line model here is the clearer choice.

Small-scale deviations:

* the released code has no MARS-Cache; the one here is a reconstruction from the abstract
  (asynchronous visual refresh, frame-wise chunk attention, anchors), not the authors' method;
* the dLLM-Cache baseline drops its value-similarity ("V-verify") partial response refresh: the
  whole answer is recomputed every step (its most accurate setting);
* models are d = 64, 2 layers, trained for 160 (smoke) or 1400 (full) steps on 6 or 8 frames of 4
  patches (not d = 128 x 4 layers on 32 x 16: a training step at d = 128 x 4 layers costs about
  five times as much CPU on the full task, see the chapter's Limits); the FLOP ratio, which is
  arithmetic, decides ``mars-flop-ratio`` at the trained configuration, where the cache settings
  (R_v, A) were chosen by dev agreement; the same formula at the issue's configuration (32 frames
  x 16 patches, d = 128, 4 layers, steps = answer = 4) is an extrapolation, reported beside it
  and recorded as not checkable (no model of that size is trained here);
* intervals are t intervals over trained models (3 at smoke, 5 at full); the issue's bootstrap
  over 3 seeds would undercover.
"""

from .experiment import (BASELINE_QUESTIONS, AssetSettings, Config, Result, build_asset, cache_exactness, choose_cheapest,
                         estimates, fit_type_majority, flop_ratio_curve, flop_ratios, hand_loss_error, load_models, mask_rate_checks,
                         type_majority_answers, run, settings_for, tercile_spread, train_model, visibility_check,
                         chunk_all_anchors_is_full)
from .model import (CachePolicy, VideoLM, ar_generate, bidirectional_mask, causal_mask, frame_chunk_mask,
                    make_questions, mdm_generate, mdm_loss, num_transfer_tokens, policy_flops,
                    visibility_counts)
