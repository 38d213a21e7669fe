r"""EMBGuard: action-conditioned hazard data cut a guardrail's false positives (a toy reproduction).

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 12: EMBGuard, an MLLM guardrail that
judges a (visual observation, action) pair of an embodied agent, trained on EMBHazard (15.1k
action-conditioned pairs). Code: github.com/dongwxxkchoi/EMBGuard (read through the project's
research card; no code was copied). The paper text was not available: the data pipeline below
follows the repository's README as summarised in the card, and the attribution of the lower
false-positive rate to the *decoupled-benign* pairs is the card's inference, which this chapter
tests in a toy.

What is implemented
-------------------
``gridhazard.py`` -- GridHazard. An 8 x 8 grid of objects (10 hazards, 10 neutral objects, each a
3 x 3 colour glyph; hazards bright, neutral objects dim), rendered to a 24 x 24 x 3 image. An
action is (verb, target cell) over 10 verbs. The rule engine (rules in
``data/embguard_scenarios.json``) returns (unsafe, risk type of 7 or none, hazard cell):
unsafe iff some hazard :math:`h` and rule :math:`(v, h, \rho)` exist with the target equal to
:math:`h`'s cell (:math:`\rho` = target) or at Chebyshev distance 1 (:math:`\rho` = adjacent).
The generator makes EMBGuard's four conditions by construction: causal risky, absent benign (the
hazard replaced by a neutral object), decoupled benign (the same scene, the target moved to an
object the rule engine calls safe) and selective risky (2-3 hazards, exactly one relevant), plus
a held-out-composition split ((verb, hazard) pairs never risky in training).

``model.py`` -- the guard: stride-3 patch embedding, a learned target-cell vector, FiLM from the
verb embedding before each of two residual 3 x 3 convolutions, heads for risk (BCE), risk type
(8-way CE) and a hazard pointer over cells (CE on unsafe pairs). Arms: (a) no action input,
(b) no decoupled-benign training pairs, (d) the full mix (25 % decoupled benign), the dose levels
10 % and 50 %, and (d) without selective-risky pairs; (c) is the rule "unsafe if any hazard".
Every arm gets the same number of training pairs and steps. All arms x 5 seeds train as one
stacked network (exactly equivalent to separate training, tested).

``guard.py`` -- the JSON answer schema (potential_risk, risk_type, hazard), a tolerant parser
that returns an error, never "safe", for malformed answers, the metrics and FPR at matched TPR.

What is ours and what is a library's
------------------------------------
Training: ``compendium.training.fit``; intervals and Spearman: ``compendium.stats``; layers: torch.
The grid world, the rules, the generator, the stacked CNN and the parser are ours: no library
provides an embodied-hazard simulator, and an MLLM is far outside a CPU budget.

Small-scale deviations
----------------------
- A 24 x 24 symbolic image and a 6.5k-parameter CNN per model instead of photographs and a 2B/4B
  Qwen3-VL fine-tuned with LlamaFactory; no natural-language explanations.
- The hazard is named by a pointer over grid cells, scored exactly, not by an LLM judge.
- 2,000 training pairs and 300 steps per model at smoke scale, 15,000 and 2,000 at full.
"""

from .experiment import Config, Result, answers, evaluate, measurements, run
from .gridhazard import (
    CONDITIONS,
    Samples,
    Spec,
    any_hazard_rule,
    causal_triplet,
    generate_pools,
    generate_test_sets,
    generator_checks,
    image_to_patches,
    load_spec,
    render_image,
    render_patches,
    risk_rule_engine,
    risk_rule_engine_reference,
    selective_scene,
)
from .guard import fpr_at_tpr, fpr_at_tpr_reference, format_guard_output, guard_metrics, malformed_outputs, parse_guard_output
from .model import (
    ARM_LABELS,
    ARMS,
    ASSET_NAME,
    DOSE_ARMS,
    AssetSettings,
    StackedGuardNet,
    arm_counts,
    batch_tensors,
    build_asset,
    guard_loss,
    load_asset,
    settings_for,
    train_stacked,
)
