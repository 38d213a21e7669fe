r"""CCC-reward GRPO: a batch-level concordance reward against regression to the mean.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 7: "Injecting distributional
awareness into MLLMs via reinforcement learning for deep imbalanced regression". Multimodal LLMs
fine-tuned to output numbers (SFT, or RL with a per-sample reward) regress to the mean and do
badly on rare targets; the paper adds a *batch-level* reward, Lin's concordance correlation
coefficient (CCC) between the batch's predictions and targets, to GRPO. **The reward's formulas
below are our reconstruction from a summary of the method, not from the paper's text or code.**

Equations implemented
---------------------
- ``reward.py``: :math:`\mathrm{CCC}(x,y) = 2\,\mathrm{cov}/(\sigma_x^2+\sigma_y^2+(\mu_x-\mu_y)^2)`
  :math:`= \rho \cdot 2/(v + 1/v + u^2)` (sympy); the leave-one-out batch reward
  :math:`r_{i,g} = \mathrm{CCC}(z^{(i,g)}, y)`, :math:`z_j = m_j = \frac1G\sum_g \hat y_{j,g}` for
  :math:`j \ne i`, :math:`z_i = \hat y_{i,g}` (vectorised from running sums, and by a loop); the
  pointwise reward :math:`-|\hat y - y|/s`, :math:`s` the training-target standard deviation.
- GRPO from the shared ``compendium.rl.grpo``: group-normalised advantages, PPO-clip with the k3
  KL to the SFT reference (``policy.py`` runs the rollouts).
- ``tasks.py``: DIR shot regions (many > 100, medium 20-100, few < 20 training samples per value
  bin, Yang et al. 2021), MAE per region (few-shot claims on the *supported* bins, 5 to 19 training
  samples; ``tasks.SUPPORT_MIN``), the geometric mean of absolute errors (GM), the
  regression-to-the-mean slope (OLS of prediction on truth; 1 is calibrated).
- ``policy.lds_weights``: the non-RL baseline, label-distribution smoothing with inverse-frequency
  weights (Gaussian kernel of 5 bins, sigma 2) in the SFT cross-entropy.

What is ours and what is a library's
-----------------------------------
Optimiser, schedules and the training loop: torch and ``compendium.training.fit``; GRPO:
``compendium.rl.grpo`` (ours, shared; trl's loss lives inside its LLM trainer, which needs a
language model and a tokenizer: ``tests/test_grpo_trl.py`` shows the shared loss and its gradients
equal to trl's on one batch). Intervals: ``compendium.stats``. Symbolic checks: sympy. Data: sklearn's
diabetes and statsmodels' randhie through ``compendium.data``. The reward, the policy, the
ensemble trainer and the metrics are ours.

Small-scale deviations
----------------------
- The MLLM is replaced by an MLP over K = 100 value bins ("number tokens"), one sampled bin per
  rollout. The test prediction is the policy's median bin (greedy, argmax-bin decoding is
  reported beside it: with a broad SFT distribution over 100 bins it is a noisy estimate). Every output is valid, so the format reward
  is constant and dropped.
- The four visual benchmarks are replaced by a long-tailed toy (log-normal y, sigma 0.8; features
  a fixed random map of [y, log y, sqrt y] plus noise, test set balanced over the range) and two
  real tables: diabetes with its training tail down-sampled and randhie's doctor visits.
- Several policies train at once as one batched ensemble (identical to separate training).
- Two PPO updates per rollout batch (the clip is active on the second); the CCC + pointwise reward
  is their plain sum, and the LDS weights use fixed, standard settings (not tuned on a dev split).
"""

from .experiment import UNIT, Config, Result, measurements, reward_checks, run, train_task
from .policy import ARMS, EnsembleMLP, grpo_train, lds_weights, predict, sft_train
from .reward import (
    ccc,
    ccc_bound_gaps,
    ccc_identity_gap,
    ccc_loo_rewards,
    ccc_loo_rewards_bruteforce,
    ccc_shift_scale,
    pearson,
    pointwise_rewards,
    reward_argmax,
    reward_curve,
)
from .tasks import (
    REGIONS,
    SUPPORT_MIN,
    Task,
    diabetes_task,
    gm_error,
    longtail_task,
    per_bin_bias,
    randhie_task,
    randhie_visits,
    regression_metrics,
    rtm_slope,
    shot_regions,
    supported_bins,
    to_bins,
    value_grid,
)
