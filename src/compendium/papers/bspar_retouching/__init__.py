r"""B-Spar: Bayesian densified sparse feedback against proxy-reward hacking in RL retouching.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 11 ("B-Spar: Bayesian Sparse-Reward
Modeling for RL-based Image Editing"). **Only the abstract was available.** It names three
components (prior-guided trajectory sampling, Bayesian reward modelling that densifies sparse
binary feedback, anchor-regularised policy optimisation) without formulas; *every formula below is
our inferred reading of the abstract*, built as switchable variants (:data:`train.ARMS`).

Equations implemented (all inferred)
------------------------------------
*RetouchWorld* (``world.py``): looks :math:`p \in \mathbb R^4` in JND units, 17 actions (4
attributes x {-1, -0.2, +0.2, +1} JND, STOP), K = 6; the simulated rater
:math:`P(y=1) = \sigma(k (d_0 - d_K))` with :math:`d = \lVert p - \eta\rVert`, k = 1; the hackable
proxy :math:`Q = -d + \gamma m` (m: small contrast / saturation edits), gain
:math:`(d_0 - d_K) + \gamma m`.

*Bayesian reward* (``reward.py``): :math:`\alpha_i = \kappa\sigma(z_i) + \sum_j w_{ij}y_j`,
:math:`\beta_i = \kappa(1-\sigma(z_i)) + \sum_j w_{ij}(1-y_j)`, :math:`r_i = \alpha_i/(\alpha_i+\beta_i)`;
:math:`z` the batch-standardised proxy gain, :math:`w_{ij}` a Gaussian kernel on (start, final)
image statistics with the pool's median distance as bandwidth, the pool holding labelled
*training* trajectories only (ring buffer), label rate :math:`\rho = 0.1`, :math:`\kappa = 4`.

*Prior-guided sampling* (``policy.rollout``): behaviour policy :math:`(1-\lambda_t)\pi_\theta + \lambda_t
\pi_{prior}`, :math:`\lambda` annealed linearly from 0.5 to 0 over the first half of training;
:math:`\pi_{prior}` an auto-exposure / white-balance rule (half uniform). GRPO's ratios use
:math:`\pi_{\theta_{old}}` (no behaviour correction).

*Anchor*, two readings, each its own arm: (a) :math:`\lambda_a\,E_{\tau\in\mathcal A}[-\frac1{|\tau|}
\sum_t \log\pi_\theta(a_t|s_t)]` over the 16 best-rewarded trajectories so far; (b)
:math:`\lambda_a\,\mathrm{KL}(\pi_\theta\|\pi_{EMA})` at visited states (exact over the 17 actions),
EMA decay 0.95 per iteration; :math:`\lambda_a = 0.1`.

*GRPO* (shared :mod:`compendium.rl.grpo`): G = 8 rollouts per image, group-normalised advantages
(:func:`~compendium.rl.grpo.masked_group_advantages` where unlabelled rewards are dropped), the
clipped surrogate (:math:`\varepsilon = 0.2`), two epochs per batch.

What is ours and what is a library's
------------------------------------
GRPO advantages and loss: the shared :mod:`compendium.rl.grpo` (plain torch; trl's trainer needs a
language model). Training loop: :func:`compendium.training.fit`. Statistics:
:mod:`compendium.stats`. Ours: the world, the reward, the batched policy, the planner, the anchors.
The digits come from scikit-learn through :func:`compendium.data.load`.

Small-scale deviations
----------------------
- A 16x16 toy world with global edits and an MLP on five image statistics stands in for an
  MLLM agent with executable tools; the "human" is a logistic rater of the distance change.
- The policy sees global statistics only, so the glyph does not matter to it (the digits give the
  pictures their varied luminance and chroma patterns).
- Smoke: 40 iterations of 8 images x 8 rollouts, five blocks of five training seeds (the chapter's
  seed picks a block, so the seed sweep retrains); full: 400 iterations of 16 images, one block.
- The kernel features are (start, final) statistics, not final ones alone: the rater judges the
  change, which the final image alone does not show across different start images.
"""

from .experiment import (
    AUC_ITERATIONS,
    CONTROL_MARGIN,
    DO_NOTHING,
    ENTROPY_FRACTION,
    FLOOR_MARGIN,
    HEADLINE_COMPARATORS,
    LEVEL,
    NONINFERIORITY,
    SMALLEST_EFFECT,
    UNIT,
    Config,
    Result,
    auc,
    entropy_at,
    example_edits,
    measurements,
    numeric_checks,
    oracle_success,
    run,
    symbolic_checks,
    variance_redraws,
)
from .reward import (
    advantage_redraw_variance,
    bayes_reward,
    beta_posterior,
    kernel_pooled_counts,
    label_sum_reward,
    median_bandwidth,
    standardise,
)
from .train import (
    ARMS,
    ASSET_NAME,
    COLLAPSE_ENTROPY,
    LABELS,
    Arm,
    BatchedPolicy,
    LockstepTrainer,
    Settings,
    build_asset,
    evaluate,
    heuristic_prior,
    load_runs,
    load_world,
    rollout,
    settings_for,
    train_all,
    trajectory_metrics,
)
from .world import (
    ATTRIBUTES,
    NUM_ACTIONS,
    STOP,
    World,
    action_table,
    decode_look,
    human_probability,
    image_statistics,
    image_statistics_rendered,
    make_world,
    proxy_gain,
    render,
)
