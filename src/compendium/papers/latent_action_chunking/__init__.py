r"""High-frequency action chunks in a VAE latent space, and Reuse-then-Refine (RTR).

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 10: "Learning High-Frequency
Continuous Action Chunks in Latent Space" (Kunyun Wang, Yuhang Zheng, Yupeng Zheng, Jieru Zhao,
Wenchao Ding). Read: the abstract, figure captions and the public RTR controller code as
summarised in the research card (stale-step alignment, newest chunk wins, reuse of 24 refined
steps, encode-decode of the splice). The tasks, plant, policies and decoder below are ours.

Equations implemented
---------------------
Plant (``tasks.plant_step``): :math:`\ddot x = \omega^2(a - x) - 2\zeta\omega\dot x`, 60 Hz
semi-implicit Euler, :math:`\omega = 2\pi\cdot 4`, :math:`\zeta = 0.8`.

VAE (``models.ChunkVAE``): :math:`(\mu, \log\sigma^2) = E(c)`, :math:`c \in \mathbb R^{48\times 2}`,
:math:`\mu \in \mathbb R^{12\times 4}`; :math:`\hat c = B\,L(\mathrm{conv}(z))` with ``B`` a clamped
cubic B-spline basis (48 x 20); loss :math:`\lVert \hat c - c\rVert^2 + \beta\,\mathrm{KL}`, :math:`\beta = 10^{-3}`.

Execution (``execution.py``): launch every 24 steps, arrival after latency ``d``, stale steps
``c[:d]`` dropped; ACT weights :math:`w_i = e^{-m i}/\sum_j e^{-m j}`, ``i = 0`` oldest;
RTR :math:`\tilde c_k = D(E(\tilde c_{k-1}[24{:}48] \Vert c_k[24{:}48]))`, :math:`\tilde c_0 = c_0`.

Metrics (``tasks.py``): jerk :math:`\mathrm{mean}_t\lVert\Delta^3 a_t\rVert f^3`; boundary gap per
chunk :math:`\max_{t^*}\lVert a_{t^*} - a_{t^*-1}\rVert` over its switch (and RTR splice) steps;
deviation, the RMSE to the nearer valid expert path; stalls, steps with speed < 0.02.

What is ours and what is a library's
------------------------------------
Savitzky-Golay filter (``scipy.signal.savgol_filter``), cubic interpolation
(``scipy.interpolate.CubicSpline``) and the B-spline basis (``scipy.interpolate.BSpline``) are
SciPy's; training is ``compendium.training.fit``; intervals and p-values ``compendium.stats``.
The tasks, the batched networks, the executor and the metrics are ours (no library implements
chunked asynchronous execution).

Small-scale deviations
----------------------
- 2-D point-mass tasks (write, wipe, trace) with a slow "contact" segment and a 6 Hz scrub, no
  forces; two stroke directions make the start bimodal.
- Policies are small MLPs; the stochastic head is a 2-component Gaussian mixture (not diffusion);
  the token head is argmax over 256 bins per number.
- The VAE's decoder ends in a fixed cubic B-spline (20 control points), smooth by construction.
- Smoke: 60 demonstrations and 300 steps per model; full: 600 and 1500. Five seeds each.
"""

from .execution import (MODES, Rollout, align_stale, crossfade, ensemble_weights, rollout, rtr_refine,
                        temporal_ensemble)
from .experiment import (DEVIATION_MARGIN, ENSEMBLE_MARGIN, FLOOR_DEVIATION, FLOOR_POLICIES, JERK_GAIN, UNIT, Config,
                         Result, evaluate, hold_policy, make_policy, measurements, project_with, run, savgol_window)
from .models import (ASSET_NAME, HEADS, KNOTS_15HZ, SPACES, AssetSettings, BatchedLinear, ChunkPolicy, ChunkVAE,
                     build_asset, load_models, policy_targets, settings_for, spline_basis, train_all,
                     train_policy, train_vae, training_pairs, upsample_matrix)
from .tasks import (EPISODE_STEPS, HORIZON, HZ, PERIOD, TASKS, Episodes, boundary_gap, chunk_targets, expert_commands,
                    jerk, observe, path_deviation, plant_step, sample_episodes, simulate_plant, stall_count,
                    timing_law)
