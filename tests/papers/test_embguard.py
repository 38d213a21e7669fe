"""Tests for compendium.papers.embguard: the rule engine, the generator, the parser, the metrics,
the stacked network and a tiny run."""

import json
import math

import numpy as np
import pytest
import torch

from compendium.papers import embguard as paper
from compendium.papers.embguard import experiment as experiment_module
from compendium.papers.embguard import model as model_module


@pytest.fixture(scope="module")
def spec():
    return paper.load_spec()


def _random_samples(spec, n, rng):
    """Scenes with many hazards (so several rules can fire at once), random verbs and targets."""
    G = spec.grid_size
    grid = np.where(rng.random((n, G, G)) < 0.4, rng.integers(0, spec.num_objects, (n, G, G)), -1).astype(np.int8)
    return grid, rng.integers(len(spec.verbs), size=n), rng.integers(G * G, size=n)


# ---------------------------------------------------------------- the specification and the rule engine
def test_spec_shapes(spec):
    assert spec.none_index == paper.gridhazard.NONE == 7
    assert len(spec.hazards) == len(spec.neutrals) == len(spec.verbs) == 10
    assert spec.rule_table.shape == (10, 10, 2) and (spec.rule_table >= 0).sum() == len(spec.rules)
    assert spec.glyphs.shape == (21, 3, 3, 3) and not spec.glyphs[-1].any()
    # every hazard has a rule with the target relation, and hazards are brighter than neutral objects
    assert (spec.rule_table[:, :, 0] >= 0).any(0).all()
    assert spec.glyphs[:10].max(axis=(1, 2, 3)).min() > spec.glyphs[10:20].max(axis=(1, 2, 3)).max()


def test_engine_hand_cases(spec):
    G = spec.grid_size
    grid = np.full((1, G, G), -1, np.int8)
    knife, cup = spec.hazards.index("knife"), len(spec.hazards) + spec.neutrals.index("cup")
    grid[0, 2, 2], grid[0, 2, 3], grid[0, 2, 5] = knife, cup, cup + 1
    v = {name: spec.verbs.index(name) for name in spec.verbs}

    def call(verb, cell):
        label, kind, hcell, count = paper.risk_rule_engine(spec, grid, np.array([v[verb]]), np.array([cell]))
        return bool(label[0]), int(kind[0]), int(hcell[0]), int(count[0])

    cut_sharp = spec.risk_types.index("cut_sharp")
    assert call("pick", 2 * G + 2) == (True, cut_sharp, 2 * G + 2, 1)     # pick the knife
    assert call("pick", 2 * G + 3) == (False, 7, -1, 0)                   # pick the cup beside it: no rule
    assert call("cut", 2 * G + 3) == (True, cut_sharp, 2 * G + 2, 1)      # cut beside the blade: adjacent rule
    assert call("cut", 2 * G + 5) == (False, 7, -1, 0)                    # three cells away
    assert call("walk_to", 2 * G + 2) == (False, 7, -1, 0)                # no walk_to rule for the knife


def test_engine_matches_reference(spec):
    grid, verb, target = _random_samples(spec, 400, np.random.default_rng(0))
    fast = paper.risk_rule_engine(spec, grid, verb, target)
    ref = paper.risk_rule_engine_reference(spec, grid, verb, target)
    for a, b in zip(fast, ref):
        np.testing.assert_array_equal(np.asarray(a).astype(int), np.asarray(b).astype(int))
    assert fast[0].mean() > 0.05 and (fast[3] >= 2).any()               # the cases are not all trivial
    # the any-hazard rule: unsafe exactly when a hazard is visible
    assert (paper.any_hazard_rule(spec, grid) == ((grid >= 0) & (grid < 10)).reshape(400, -1).any(1)).all()


# ---------------------------------------------------------------- the generator
def test_generator_conditions(spec):
    rng = np.random.default_rng(1)
    pools = paper.generate_pools(spec, 60, 40, rng)
    checks = paper.generator_checks(spec, pools)
    assert checks.pop("samples") == 220 and all(v == 0 for v in checks.values()), checks
    assert pools["causal_risky"].label.all() and pools["selective_risky"].label.all()
    assert not pools["absent_benign"].label.any() and not pools["decoupled_benign"].label.any()
    # decoupled benign is the causal scene with another target, the same verb
    c, d, a = pools["causal_risky"], pools["decoupled_benign"], pools["absent_benign"]
    assert (c.grid == d.grid).all() and (c.verb == d.verb).all() and (c.target != d.target).all()
    assert (a.target == c.target).all() and ((a.grid != c.grid).reshape(60, -1).sum(1) == 1).all()
    # training compositions never use a held-out (verb, hazard) pair as the risk
    for s in (c, pools["selective_risky"]):
        hazard = s.grid.reshape(len(s), -1)[np.arange(len(s)), s.hazard_cell]
        assert not any((int(v), int(h)) in spec.held_out for v, h in zip(s.verb, hazard))


def test_generator_detects_a_broken_pool(spec):
    """generator_checks has power: a decoupled pool whose actions are the causal ones is flagged."""
    pools = paper.generate_pools(spec, 20, 5, np.random.default_rng(2))
    broken = dict(pools, decoupled_benign=pools["causal_risky"])
    assert paper.generator_checks(spec, broken)["decoupled"] == 20


def test_heldout_split(spec):
    tests = paper.generate_test_sets(spec, 10, 15, np.random.default_rng(3))
    s = tests["heldout_risky"]
    hazard = s.grid.reshape(len(s), -1)[np.arange(len(s)), s.hazard_cell]
    assert all((int(v), int(h)) in spec.held_out for v, h in zip(s.verb, hazard))
    assert not tests["heldout_decoupled"].label.any()


def test_render(spec):
    grid = paper.generate_pools(spec, 5, 2, np.random.default_rng(4))["causal_risky"].grid
    img = paper.render_image(spec, grid)
    assert img.shape == (5, 3, 24, 24) and img.dtype == np.float32
    np.testing.assert_array_equal(paper.image_to_patches(spec, img), paper.render_patches(spec, grid))
    # cell (y, x) is the glyph of its object
    y, x = np.argwhere(grid[0] >= 0)[0]
    np.testing.assert_array_equal(img[0, :, 3 * y:3 * y + 3, 3 * x:3 * x + 3], spec.glyphs[grid[0, y, x]])


# ---------------------------------------------------------------- the schema, the parser and the metrics
def test_parser_round_trip_and_tolerance(spec):
    text = paper.format_guard_output(True, "fire", "stove_on")
    assert paper.parse_guard_output(text, spec.risk_types) == {"valid": True, "unsafe": True, "risk_type": "fire",
                                                               "hazard": "stove_on"}
    safe = paper.format_guard_output(False, "fire", "stove_on")       # safe answers carry none / none
    assert json.loads(safe) == {"potential_risk": "safe", "risk_type": "none", "hazard": "none"}
    for wrapped in (f"```json\n{text}\n```", f"<thinking>the stove is on</thinking>\n{text}", f"  {text}\n"):
        assert paper.parse_guard_output(wrapped, spec.risk_types)["valid"]


def test_malformed_are_errors(spec):
    rng = np.random.default_rng(5)
    valid = [paper.format_guard_output(bool(i % 2), "electrical", "outlet") for i in range(10)]
    bad = paper.malformed_outputs(valid, rng, 300)
    parsed = [paper.parse_guard_output(t, spec.risk_types) for t in bad]
    assert not any(p["valid"] for p in parsed)
    assert paper.parse_guard_output(None, spec.risk_types)["valid"] is False
    m = paper.guard_metrics(np.zeros(300, bool), parsed)             # all safe pairs, all answers broken
    assert m["accuracy"] == 0.0 and m["specificity"] == 0.0 and m["fpr"] == 0.0 and m["error_rate"] == 1.0


def test_guard_metrics_hand_confusion(spec):
    def ans(u):
        return paper.parse_guard_output(paper.format_guard_output(u, "fire", "candle"), spec.risk_types)

    label = np.array([1, 1, 1, 0, 0, 0, 0], bool)
    parsed = [ans(True), ans(False), {"valid": False}, ans(True), ans(False), ans(False), {"valid": False}]
    m = paper.guard_metrics(label, parsed)
    assert m["tpr"] == pytest.approx(1 / 3) and m["fnr"] == pytest.approx(2 / 3)
    assert m["fpr"] == pytest.approx(1 / 4) and m["specificity"] == pytest.approx(2 / 4)
    assert m["accuracy"] == pytest.approx(3 / 7) and m["error_rate"] == pytest.approx(2 / 7)
    assert math.isnan(paper.guard_metrics(np.ones(2, bool), [ans(True), ans(True)])["fpr"])  # no negatives


def test_fpr_at_tpr_matches_brute_force():
    rng = np.random.default_rng(6)
    for _ in range(30):
        pos = rng.integers(0, 8, size=int(rng.integers(1, 30))) / 8        # ties on purpose
        neg = rng.integers(0, 8, size=int(rng.integers(1, 30))) / 8
        for tpr in (0.1, 0.5, 0.9, 1.0):
            assert paper.fpr_at_tpr(pos, neg, tpr)[0] == paper.fpr_at_tpr_reference(pos, neg, tpr)
    assert paper.fpr_at_tpr([0.9, 0.8, 0.1], [0.85, 0.2], 2 / 3) == (0.5, 0.8)
    with pytest.raises(ValueError):
        paper.fpr_at_tpr([], [0.1], 0.9)


def test_auc_matches_pairwise_count():
    rng = np.random.default_rng(10)
    for _ in range(20):
        pos = rng.integers(0, 6, size=int(rng.integers(1, 25))) / 6          # ties on purpose
        neg = rng.integers(0, 6, size=int(rng.integers(1, 25))) / 6
        brute = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (pos.size * neg.size)
        assert experiment_module.auc(pos, neg) == pytest.approx(brute, abs=1e-12)
    x = rng.random(50)
    assert experiment_module.auc(x, x) == 0.5                               # identical scores: no discrimination
    assert experiment_module.auc([0.9, 0.8], [0.1, 0.2]) == 1.0 and experiment_module.auc([0.1], [0.9]) == 0.0
    with pytest.raises(ValueError):
        experiment_module.auc([], [0.5])


def test_exact_rate_difference_has_width_at_the_ends():
    from compendium.stats import clopper_pearson

    e = experiment_module.exact_rate_difference(200, 200, 0, 200, unit="test pairs")
    cp = clopper_pearson(200, 200, level=0.975, unit="test pairs")
    assert e.point == 1.0 and e.high == 1.0 and e.low == pytest.approx(cp.low - (1 - cp.low)) and 0.9 < e.low < 1.0
    e = experiment_module.exact_rate_difference(3, 10, 3, 10, unit="x")
    assert e.point == 0.0 and e.low < 0 < e.high and e.low == pytest.approx(-e.high)


def test_every_model_bound_is_decided_by_the_worst_model():
    # three models clear a floor of 0.5 by far, one does not: the check must fail on that one
    est, k = experiment_module.every_model_bound([200, 200, 70, 200], 200, [0, 0, 0, 1], 200, side="low",
                                                 threshold=0.5, what="model")
    assert k == 2 and est.high < 0.5
    est, k = experiment_module.every_model_bound([200, 199], 200, [0, 0], 200, side="low", threshold=0.5, what="model")
    assert k == 1 and est.low > 0.5
    # equivalence band: the seed pair with the largest absolute bound decides
    est, k = experiment_module.every_model_bound([0, 6, 0], 200, [0, 0, 1], 200, side="abs", what="pair")
    assert k == 1 and est.high > 0.05


# ---------------------------------------------------------------- arms, the stacked network, a tiny run
def test_arm_counts(spec):
    for arm, (fraction, _, selective) in paper.ARMS.items():
        c = paper.arm_counts(arm, 2000, spec.base_composition)
        assert sum(c.values()) == 2000 and c["decoupled_benign"] == round(fraction * 2000)
        assert (c["selective_risky"] > 0) == selective
    assert paper.arm_counts("no_decoupled", 1000, spec.base_composition) == {
        "causal_risky": 400, "absent_benign": 300, "decoupled_benign": 0, "selective_risky": 300}


def test_stacked_equals_separate_training(spec):
    """Two slices trained together equal each trained alone (same batches, AdamW elementwise)."""
    pools = paper.generate_pools(spec, 30, 10, np.random.default_rng(7))
    data = [pools["causal_risky"], paper.Samples.concat([pools["absent_benign"], pools["selective_risky"]])]
    settings = paper.AssetSettings(num_seeds=1, train_pairs=30, steps=4, batch_size=8, width=6, embed=4)
    rng = np.random.default_rng(8)
    idx = [rng.integers(len(d), size=(4, 8)) for d in data]
    net = paper.StackedGuardNet([11, 12], [True, False], width=6, embed=4)
    singles = [paper.StackedGuardNet([s], [u], width=6, embed=4) for s, u in ((11, True), (12, False))]
    for i, single in enumerate(singles):
        for name, p in single.named_parameters():
            torch.testing.assert_close(p.data[0], dict(net.named_parameters())[name].data[i])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    opts = [torch.optim.AdamW(s.parameters(), lr=1e-2) for s in singles]
    for step in range(settings.steps):
        batches = [paper.batch_tensors(spec, d, ix[step][None], 0.0, None) for d, ix in zip(data, idx)]
        joint = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
        opt.zero_grad()
        paper.guard_loss(net, joint).backward()
        opt.step()
        for s, o, b in zip(singles, opts, batches):
            o.zero_grad()
            paper.guard_loss(s, b).backward()
            o.step()
    for i, single in enumerate(singles):
        for name, p in single.named_parameters():
            torch.testing.assert_close(p.data[0], dict(net.named_parameters())[name].data[i], rtol=1e-4, atol=1e-5)


def test_forward_shapes_and_scene_only_ignores_action(spec):
    net = paper.StackedGuardNet([1, 2], [True, False], width=6, embed=4)
    s = paper.generate_pools(spec, 4, 1, np.random.default_rng(9))["causal_risky"]
    b = paper.batch_tensors(spec, s, np.tile(np.arange(4), (2, 1)), 0.0, None)
    risk, kind, ptr = net(b["patches"], b["target"], b["verb"])
    assert risk.shape == (2, 4) and kind.shape == (2, 4, 8) and ptr.shape == (2, 4, 64)
    risk2, _, _ = net(b["patches"], (b["target"] + 1) % 64, (b["verb"] + 1) % 10)
    torch.testing.assert_close(risk[1], risk2[1])                   # the scene-only slice never sees the action
    assert not torch.allclose(risk[0], risk2[0])


def test_tiny_run(spec, tmp_path, monkeypatch):
    monkeypatch.setattr(model_module, "settings_for",
                        lambda scale: paper.AssetSettings(num_seeds=2, train_pairs=40, steps=3, batch_size=8, width=6, embed=4))
    paper.build_asset(tmp_path, "smoke", 0)
    net, meta = paper.load_asset(tmp_path)
    assert len(meta["models"]) == 2 * len(paper.ARMS)
    assert all(v == 0 for k, v in meta["generator_checks"].items() if k != "samples")
    res = paper.run(paper.Config(test_per_condition=10, heldout_pairs=10, malformed_outputs=11), net, meta, spec)
    m = paper.measurements(res)
    assert res.round_trip_mismatches == 0 and res.malformed_accepted == 0 and res.fpr_at_tpr_gap == 0
    assert res.rule_fpr["decoupled_benign"] == 1.0 and res.rule_fpr["absent_benign"] == 0.0
    assert m["premise"].n == 2 and 0 <= m["fpr_d"].point <= 1 and -1 <= m["dose"].point <= 1
    # the learned-model floor: (d)'s causal-risky TPR minus its absent-benign FPR (0 for a constant guard)
    floor = res.tpr["causal_risky"]["embguard"] - res.fpr["absent_benign"]["embguard"]
    assert m["floor_t"].n == 2 and np.isclose(m["floor_t"].point, floor.mean())
    assert m["floor"].point == pytest.approx(floor[m["floor_model"]]) and m["floor"].low < m["floor"].high
    # the scene-only discriminability control: one AUC per trained model, TOST over them
    assert all(v.shape == (2,) and ((0 <= v) & (v <= 1)).all() for v in res.auc.values())
    assert m["scene_auc"].margin == 0.1 and m["scene_auc"].estimate.n == 2
    assert np.isclose(m["scene_auc"].estimate.point, res.auc["scene_only"].mean() - 0.5)
    assert all(v == 0 for k, v in res.checks.items() if k != "samples")
    with pytest.raises(ValueError):
        paper.Config(test_per_condition=1)
