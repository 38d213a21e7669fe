"""Tests for compendium.papers.tabula_reevaluation: shapes, properties, references, tiny builds and runs."""

import filecmp
import itertools
import math

import numpy as np
import pytest
import torch

from compendium.papers import tabula_reevaluation as paper
from compendium.papers.tabula_reevaluation import audit, metrics, model, tables

TINY = paper.AssetConfig(
    n_tasks=9, n_train=16, n_test=6, overlap_fraction=0.25, leak_fraction=0.34, copies=2, pool_tables=3,
    pool_rows=10, instruction_examples=400, model_seeds=1, d_model=16, n_layers=1, n_heads=2,
    base_steps=4, quartile_steps=3, tlm_steps=6, batch_size=8,
)


@pytest.fixture(scope="module")
def tiny_asset(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_asset")
    paper.build_asset_with(out, TINY, seed=3)
    return out


# ----------------------------------------------------------------------------- shapes
def test_serialization_round_trip_and_tokens():
    line = paper.serialize_row(["alcohol", "hue"], [13.2, -0.00501], ("yes", "no"), "yes")
    assert line == "opts yes no ; alcohol 13.2 , hue -0.00501 ; target yes"
    options, cells, label = paper.parse_serialized_row(line)
    assert options == ("yes", "no") and cells == {"alcohol": "13.2", "hue": "-0.00501"} and label == "yes"
    assert paper.tokenize("a 12345.0052") == ["a", "123", "45", ".", "005", "2"]  # Llama-3-style digit groups
    with pytest.raises(ValueError):
        paper.parse_serialized_row("alcohol 13.2")


def test_model_and_detector_shapes():
    cfg = model.ModelConfig(vocab_size=50, block_size=12, d_model=16, n_layers=1, n_heads=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = model.TinyCausalLM(cfg)
    ids = torch.randint(2, 50, (3, 10))
    assert net(ids).shape == (3, 10, 50)
    assert net(ids, positions=torch.tensor([9, 4, 0])).shape == (3, 50)
    with pytest.raises(ValueError):
        net(torch.zeros(1, 13, dtype=torch.long))
    rng = np.random.default_rng(0)
    ref = audit.ReferenceTable(("a", "b"), rng.normal(size=(7, 2)))
    assert paper.near_duplicate_distance(["a", "b"], rng.normal(size=(5, 2)), [ref]).shape == (5,)
    assert np.isinf(paper.near_duplicate_distance(["a", "c"], rng.normal(size=(5, 2)), [ref])).all()


# ----------------------------------------------------------------------------- properties
def test_metric_arithmetic_known_values():
    assert paper.lift(0.62, 0.55) == pytest.approx(0.07, abs=1e-15)
    assert paper.recovery_ratio(0.461, 0.500) == pytest.approx(0.922, abs=1e-15)
    assert paper.gap_closure(0.30, 0.4426, 0.50) == pytest.approx(0.713, abs=1e-12)
    assert paper.median_lift_by_type([0.1, -0.2, 0.3, 0.0], ["binary", "binary", "quartile", "quartile"]) == \
        pytest.approx({"binary": -0.05, "quartile": 0.15})
    with pytest.raises(ValueError):
        paper.gap_closure(0.5, 0.6, 0.5)
    with pytest.raises(ValueError):
        paper.lift(1.2, 0.5)


def test_median_difference_ci_known_values_shift_equivariance_and_a_loop():
    from compendium.runtime import make_rng

    a, b = np.array([0.3, 0.1, 0.2, 0.5]), np.array([0.0, -0.1, 0.05])
    out = paper.median_difference_ci(a, b, make_rng(0, 1), resamples=500)
    assert out["median_a"] == pytest.approx(0.25) and out["median_b"] == pytest.approx(0.0)
    assert out["difference"] == pytest.approx(0.25)
    lo, hi = out["ci"]
    assert lo <= hi and min(a) - max(b) <= lo and hi <= max(a) - min(b)
    # constant groups: every resample gives the same difference
    assert paper.median_difference_ci([1.0, 1.0, 1.0], [0.2, 0.2], make_rng(0), resamples=200)["ci"] == \
        pytest.approx((0.8, 0.8))
    # shifting one group shifts the interval by the same amount (same generator state)
    shifted = paper.median_difference_ci(a + 0.4, b, make_rng(0, 1), resamples=500)
    assert shifted["ci"] == pytest.approx((lo + 0.4, hi + 0.4))
    # reference: an explicit loop over resamples with the same draws
    rng = make_rng(0, 1)
    ia, ib = rng.integers(0, a.size, size=(500, a.size)), rng.integers(0, b.size, size=(500, b.size))
    diffs = [np.median(a[i]) - np.median(b[j]) for i, j in zip(ia, ib)]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(diffs, [0.025, 0.975])))
    with pytest.raises(ValueError):
        paper.median_difference_ci([0.1], b, make_rng(0))
    with pytest.raises(ValueError):
        paper.median_difference_ci(a, b, make_rng(0), resamples=10)


def test_lift_share_known_values_and_undefined_totals():
    assert paper.lift_share([0.3, 0.1, -0.1, 0.2], [True, False, False, True]) == pytest.approx(0.5 / 0.5)
    assert paper.lift_share([0.1, 0.3], [True, False]) == pytest.approx(0.25)
    assert math.isnan(paper.lift_share([0.1, -0.1], [True, False]))
    assert math.isnan(paper.lift_share([-0.2, 0.1], [False, True]))
    with pytest.raises(ValueError):
        paper.lift_share([0.1, 0.2], [True])


def test_lift_is_zero_for_the_majority_predictor_and_ties_are_deterministic():
    y_test = np.array(["yes", "no", "a", "yes", "no", "a"])  # a three-way tie
    label, acc = paper.majority_baseline(y_test)
    assert label == "a" and acc == pytest.approx(1 / 3)
    assert paper.majority_baseline(y_test[::-1]) == (label, acc)
    predictions = np.full(y_test.shape, label)
    assert paper.lift(float(np.mean(predictions == y_test)), acc) == 0.0
    for constant in ("yes", "no", "maybe"):  # no constant answer beats the test-split majority
        assert float(np.mean(np.full(y_test.shape, constant) == y_test)) - acc <= 0.0


def test_held_out_majority_is_chosen_on_the_train_split():
    y_train = np.array(["no", "yes", "yes", "no", "yes"])  # majority 'yes'
    y_test = np.array(["no", "no", "yes", "no"])  # test majority 'no' (0.75); 'yes' scores 0.25 here
    assert metrics.held_out_majority_accuracy(y_train, y_test) == pytest.approx(0.25)
    assert paper.majority_baseline(y_test)[1] == pytest.approx(0.75)
    # a train-split tie goes to the smallest label, as for the test-split baseline
    assert metrics.held_out_majority_accuracy(["yes", "no"], y_test) == pytest.approx(0.75)
    # never above the test-split majority: that one is the best constant on the test split
    rng = np.random.default_rng(6)
    for _ in range(40):
        tr, te = rng.choice(["a", "b", "c"], 9), rng.choice(["a", "b", "c"], 7)
        assert metrics.held_out_majority_accuracy(tr, te) <= paper.majority_baseline(te)[1] + 1e-12
    with pytest.raises(ValueError):
        metrics.held_out_majority_accuracy(y_train, [])


def test_canonical_hash_ignores_order_and_formatting_but_not_values():
    h = paper.canonical_row_hash({"Alcohol": "13.2", "hue": 1.0}, "yes")
    assert paper.canonical_row_hash({"hue": "1.00", "alcohol": 13.20}, "yes") == h
    assert paper.canonical_row_hash({"hue": "1.00", "alcohol": 13.3}, "yes") != h
    assert paper.canonical_row_hash({"hue": "1.00", "alcohol": 13.2}, "no") != h
    docs = tables.contamination_documents(np.random.default_rng(0), _toy_task(), "exact", copies=3)
    _, records = audit.parse_documents(docs)
    hashes = [paper.canonical_row_hash(c, lab) for doc in records for c, lab in doc]
    assert len(set(hashes)) == len(_toy_task().y_test)  # three formats of each row, one hash


def test_quartile_edges_are_fitted_on_train_only():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    task = tables.make_task(np.random.default_rng(2), "t", "s", "quartile", x, y, ["a", "b", "c"], n_test=10)
    y_shifted = y.copy()
    test_rows = np.random.default_rng(2).permutation(40)[:10]
    y_shifted[test_rows] += 100.0  # move the test targets far away
    shifted = tables.make_task(np.random.default_rng(2), "t", "s", "quartile", x, y_shifted, ["a", "b", "c"], n_test=10)
    assert np.array_equal(task.y_train, shifted.y_train)  # train labels (and edges) unchanged
    assert set(shifted.y_test) == {"q4"}
    assert sorted(np.unique(task.y_train, return_counts=True)[1]) == [7, 7, 8, 8]


def test_near_duplicate_distance_is_unit_invariant_and_zero_on_copies():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(12, 3)) * [1.0, 50.0, 0.01]
    ref = audit.ReferenceTable(("x", "y", "z"), values * [1.0, 100.0, 1.0])  # y in other units
    d = paper.near_duplicate_distance(["z", "x", "y"], values[:, [2, 0, 1]], [ref])
    assert np.allclose(d, 0.0, atol=1e-12)


def test_leakage_detector_finds_a_recoded_target_and_not_noise():
    rng = np.random.default_rng(4)
    y = rng.choice(["a", "b", "c"], size=60)
    codes = {"a": 17.0, "b": 42.0, "c": 5.0}
    x = np.column_stack([rng.normal(size=60), [codes[v] for v in y], rng.normal(size=60)])
    out = paper.single_feature_leakage(x, y, 0.99)
    assert out == {"score": 1.0, "column": 1, "flagged": True}
    assert not paper.single_feature_leakage(x[:, [0, 2]], y, 0.99)["flagged"]


# ----------------------------------------------------------------------------- references
def test_near_duplicate_distance_matches_a_loop():
    rng = np.random.default_rng(5)
    q = rng.normal(size=(4, 2))
    refs = [audit.ReferenceTable(("a", "b", "c"), rng.normal(size=(5, 3))),
            audit.ReferenceTable(("b", "a"), rng.normal(size=(3, 2)))]
    fast = paper.near_duplicate_distance(["a", "b"], q, refs)
    zq = (q - q.mean(0)) / q.std(0)
    slow = []
    for row in zq:
        best = np.inf
        for ref in refs:
            cols = [ref.names.index("a"), ref.names.index("b")]
            z = (ref.values[:, cols] - ref.values[:, cols].mean(0)) / ref.values[:, cols].std(0)
            for other in z:
                best = min(best, math.sqrt(sum((row[j] - other[j]) ** 2 for j in range(2)) / 2))
        slow.append(best)
    assert np.allclose(fast, slow, atol=1e-12)


def test_top_decile_p_value_matches_brute_force_enumeration():
    scores = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1, -2], dtype=float)
    flagged = np.array([1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], dtype=bool)
    out = paper.top_fraction_enrichment(scores, flagged, fraction=0.2)  # top ceil(2.4) = 3
    assert (out["n_top"], out["hits"]) == (3, 2)
    draws = list(itertools.combinations(range(12), 3))
    brute = sum(flagged[list(d)].sum() >= 2 for d in draws) / len(draws)
    assert out["p_value"] == pytest.approx(brute, rel=1e-12)


def test_read_out_at_answer_slots_matches_the_full_forward_and_ignores_padding():
    cfg = model.ModelConfig(vocab_size=40, block_size=16, d_model=16, n_layers=2, n_heads=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        net = model.TinyCausalLM(cfg).eval()
    ids = torch.randint(2, 40, (4, 12))
    lengths = torch.tensor([12, 7, 3, 9])
    with torch.no_grad():
        full = net(ids)[torch.arange(4), lengths - 1]
        fast = model.answer_logits(net, ids, lengths)
        padded = ids.clone()
        padded[1, 7:] = 0  # right padding after the prompt must not change its answer logits
        again = model.answer_logits(net, padded, lengths)
    assert torch.allclose(full, fast, atol=1e-6) and torch.allclose(fast, again, atol=1e-6)


# ----------------------------------------------------------------------------- tiny builds and runs
def test_builder_is_deterministic_and_complete(tiny_asset, tmp_path):
    paper.build_asset_with(tmp_path, TINY, seed=3)
    for name in ("benchmark.json", "contamination_key.json", "vocab.json", "metrics.json", "model_config.json"):
        assert filecmp.cmp(tiny_asset / name, tmp_path / name, shallow=False), name
    for kind in model.MODEL_KINDS:
        a, b = torch.load(tiny_asset / f"{kind}_0.pt"), torch.load(tmp_path / f"{kind}_0.pt")
        assert all(torch.equal(a[k], b[k]) for k in a)
    loaded = paper.load_asset(tiny_asset)
    assert len(loaded["tasks"]) == TINY.n_tasks
    assert len(loaded["key"]["overlap"]) == 3 and len(loaded["key"]["leak"]) == 3
    with pytest.raises(ValueError):
        paper.build_asset(tmp_path, "huge", 0)


def test_tiny_run_is_deterministic(tiny_asset):
    config = paper.Config(bootstrap_resamples=200, gbm_estimators=10)
    first, second = paper.run(config, tiny_asset), paper.run(config, tiny_asset)
    assert first.tasks.equals(second.tasks)
    assert first.tasks.shape[0] == TINY.n_tasks
    assert set(first.tasks.group) == {"clean", "overlap", "leak"}
    m = first.metrics
    assert m["exact_recall"] == 1.0 and m["exact_precision"] == 1.0  # injected exact copies, hashed
    assert m["leak_recall"] == 1.0 and m["leak_survival"] == 1.0
    assert m["clean_ci"] == second.metrics["clean_ci"]
    assert "clean_near_zero" not in m  # the first build's one-sided rule is gone; the ledger decides on intervals
    frame = first.tasks
    standard = frame.type.isin(("binary", "categorical"))
    clean = standard & (frame.group == "clean")
    # the corrected lift is the lift over the train split's majority, never larger than the paper's
    # lift of the same answers by more than the test-split majority's head start
    assert np.allclose(frame.corrected_lift_tlm, frame.acc_tlm - frame.majority_train)
    assert (frame.corrected_lift_tlm >= frame.lift_tlm - 1e-12).all()
    est = m["estimates"]
    assert est["clean_corrected_lift"].point == pytest.approx(float(np.median(frame.corrected_lift_tlm[clean])))
    assert est["lr_clean_corrected_lift"].n == int(clean.sum())
    assert np.isfinite(est["lift_recovery_contrast"].point)
    assert est["lift_recovery_contrast"].point == pytest.approx(
        m["lift_base_standard"] - 0.5 * m["lift_tlm_standard"])
    assert ((first.tasks.acc_tlm >= 0) & (first.tasks.acc_tlm <= 1)).all()
    assert est["clean_lift"].unit == "tasks" and est["clean_lift"].point == pytest.approx(m["clean_median_lift"])
    assert est["recovery_ratio"].n == int(first.tasks.type.isin(("binary", "categorical")).sum())
    assert m["naive_exact_recall"] == 1.0  # each injected exact row has a verbatim copy
    robust = first.robustness.set_index("family")
    assert list(robust.index) == list(paper.robustness.FAMILIES)
    assert robust.loc["verbatim", "naive"] == 1.0 and robust.loc["permuted+padded", "canonical"] == 1.0
    assert robust.loc["permuted+padded", "naive"] == 0.0  # the naive match misses every permuted copy
    assert robust.loc["reordered-rows", "canonical"] == 1.0
    assert robust.loc["renamed-column", "either"] == 0.0  # both row detectors need the same column names
    # the real-table subset: tasks cut from sklearn's and statsmodels' tables, scored with the same rules
    frame = first.tasks
    real = frame.origin == "real"
    assert (real == (frame.source != "synthetic")).all() and m["real_tasks"] == int(real.sum())
    assert any(src.startswith("statsmodels_") for src in m["real_sources"])
    standard = frame.type.isin(("binary", "categorical"))
    for key, column, group in (("clean_lift_real", "lift_tlm", "clean"), ("lr_clean_lift_real", "lift_lr", "clean"),
                               ("contaminated_lift_real", "lift_tlm", "overlap"),
                               ("clean_corrected_lift_real", "corrected_lift_tlm", "clean"),
                               ("lr_clean_corrected_lift_real", "corrected_lift_lr", "clean")):
        values = frame[column][real & standard & (frame.group == group)]
        if len(values) >= 2:
            assert est[key].n == len(values) and est[key].point == pytest.approx(float(np.median(values)))
        else:
            assert est[key] is None


@pytest.mark.parametrize("bad", [
    {"bootstrap_resamples": 10}, {"near_duplicate_tolerance": 0.0}, {"leakage_threshold": 1.5},
    {"round_digits": 0}, {"gbm_estimators": 5}, {"seed": -1},
])
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_bad_asset_config_raises():
    with pytest.raises(ValueError):
        paper.AssetConfig(n_tasks=3)
    with pytest.raises(ValueError):
        paper.AssetConfig(overlap_fraction=0.8, leak_fraction=0.3)


def _toy_task():
    x = np.array([[1.5, 20.0], [2.25, 30.5], [3.0, 41.0]])
    return tables.Task("toy", "s", "binary", ("alpha", "beta"),
                       x, np.array(["yes", "no", "yes"]), x, np.array(["yes", "no", "no"]))


def test_interval_estimates_and_chance_adjusted_ratio():
    from compendium.papers.tabula_reevaluation import metrics

    rng = np.random.default_rng(0)
    base, tlm, maj = np.full(8, 0.55), np.full(8, 0.60), np.full(8, 0.50)
    # 5 of 10 points of lift recovered: exactly on the 0.5 bar, a contrast of 0
    assert metrics.lift_recovery_contrast(base, tlm, maj) == pytest.approx(0.0, abs=1e-12)
    assert metrics.lift_recovery_contrast(base, tlm, maj, share=0.25) == pytest.approx(0.05 - 0.025)
    assert metrics.recovery_of_means(base, tlm) == pytest.approx(0.55 / 0.60)
    # the contrast stays defined where the ratio has its pole (no TLM lift): base lift 0.05 minus half of 0
    assert metrics.lift_recovery_contrast(base, maj, maj) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        metrics.lift_recovery_contrast(base, tlm, maj, share=0.0)
    # per resample, the sign of the contrast is the side of 0.5 on which the ratio of mean lifts falls
    draws = np.random.default_rng(2)
    for _ in range(50):
        b, t, m = draws.uniform(0, 1, 6), draws.uniform(0, 1, 6), draws.uniform(0, 1, 6)
        tlm_lift, base_lift = np.mean(t - m), np.mean(b - m)
        if tlm_lift > 0:
            assert (metrics.lift_recovery_contrast(b, t, m) > 0) == (base_lift / tlm_lift > 0.5)
    est = metrics.task_bootstrap(metrics.lift_recovery_contrast, [base, tlm, maj], rng, resamples=200)
    assert est.point == pytest.approx(0.0, abs=1e-12) and est.low == pytest.approx(0.0, abs=1e-12)
    assert "undefined" not in est.method
    noisy = rng.normal(0.0, 0.05, 40)
    med = metrics.median_interval(noisy, np.random.default_rng(1), resamples=500)
    assert med.low <= np.median(noisy) <= med.high and med.n == 40
    # the test-split majority of a balanced binary task with 24 rows is inflated above 0.5
    assert metrics.expected_majority_accuracy(24, 0.5) == pytest.approx(0.5806, abs=1e-3)
    assert metrics.expected_majority_accuracy(1, 0.5) == 1.0


def test_perturbation_families_by_hand():
    from compendium.papers.tabula_reevaluation import robustness

    task = tables.Task("t", "s", "binary", ("alpha", "beta", "gamma"), np.zeros((2, 3)), np.array(["yes", "no"]),
                       np.array([[1.234, 20.5, 3.0], [4.5, 6.25, 7.0]]), np.array(["no", "yes"]))
    rng = np.random.default_rng(0)
    for family in robustness.FAMILIES:
        doc = robustness.perturbed_document(task, family, rng)
        assert len(doc) == 2
    r = robustness.detector_recall([task], "dropped-column", rng, round_digits=3, near_duplicate_tolerance=0.1)
    assert r["canonical"] == 0.0 and r["near"] == 0.0 and r["rows"] == 2
    r = robustness.detector_recall([task], "rounded-2", rng, round_digits=3, near_duplicate_tolerance=0.1)
    assert r["canonical"] == 0.0  # 1.234 -> 1.2 changes the 3-digit hash
    with pytest.raises(ValueError):
        robustness.perturbed_document(task, "shuffled", rng)


def test_statsmodels_tables_through_the_manifest():
    from compendium import data
    from compendium.papers.tabula_reevaluation import real

    anes = data.load("statsmodels_anes96_vote")
    assert anes.data.shape == (944, 9) and np.bincount(anes.target).tolist() == [551, 393]
    assert "logpopul" not in anes.feature_names and "vote" not in anes.feature_names
    visit = data.load("statsmodels_randhie_visit")
    assert visit.data.shape == (20190, 9) and set(np.unique(visit.target)) == {0, 1}
    mode = data.load("statsmodels_modechoice_wide")
    assert mode.data.shape == (210, 13) and set(np.unique(mode.target)) == {0, 1, 2, 3}
    assert (mode.data.std(axis=0) > 0).all()  # the all-zero car terminal time is dropped
    # one traveller by hand: the first row of the long table is individual 1, air: ttme 69, invc 59, invt 100; chose car
    names = mode.feature_names
    assert mode.data[0, names.index("ttme_air")] == 69 and mode.data[0, names.index("invt_air")] == 100
    assert mode.target[0] == real.MODES.index("car")
    grunfeld = data.load("statsmodels_grunfeld_investment")
    assert grunfeld.data.shape == (220, 3) and grunfeld.target[0] == pytest.approx(317.6)
    assert grunfeld.feature_names == ["value", "capital", "year"]
    assert {name for name, _ in tables.REAL_SOURCES} >= {"statsmodels_anes96_vote", "statsmodels_grunfeld_investment"}
