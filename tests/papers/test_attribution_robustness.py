"""Tests for compendium.papers.attribution_robustness: shapes, properties, references, tiny run."""

import numpy as np
import pandas as pd
import pytest
import torch

from compendium.papers import attribution_robustness as paper
from compendium.stats import Estimate
from compendium.training import torch_threads


@pytest.fixture(autouse=True)
def one_thread():
    # tiny batched ops: a second thread only adds contention on a shared 2-core machine
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def digits():
    return paper.digits_split(0)


def _tiny_blob(data, lrs=(0.05, 0.2), seeds=(0, 1, 2), batch_size=64, epochs=2, penalty=False):
    rows, parts = [], []
    lr = [e for e in lrs for _ in seeds]
    sd = [s for _ in lrs for s in seeds]
    params, losses = paper.train_stack(data["x_train"], data["y_train"], lr, sd, batch_size, epochs, 16)
    rows += [{"family": "sgd", "eta": e, "batch_size": batch_size, "seed": s, "penalty": 0.0} for e, s in zip(lr, sd)]
    parts.append(params)
    if penalty:
        p2, _ = paper.train_stack(data["x_train"], data["y_train"], [lrs[0]] * len(seeds), list(seeds), batch_size,
                                  epochs, 16, penalty=[0.5] * len(seeds))
        rows += [{"family": "penalty", "eta": lrs[0], "batch_size": batch_size, "seed": s, "penalty": 0.5} for s in seeds]
        parts.append(p2)
    params = [torch.cat([p[i] for p in parts]) for i in range(len(parts[0]))]
    return {"params": params, "data": data, "models": rows}


# ---------------------------------------------------------------- shapes and training
def test_shapes_and_split(digits):
    assert digits["x_train"].shape == (1078, 64) and digits["x_test"].shape[1] == 64
    assert digits["x_train"].min() >= 0 and digits["x_train"].max() <= 1
    g = paper.gaussian_task(50, 256, 10, 0.2, seed=0, num_val=10, num_test=20)
    assert g["x_train"].shape == (50, 256) and g["y_test"].shape == (20,)
    params = paper.init_stack([0, 1, 2], (64, 16, 16, 10))
    assert [tuple(p.shape) for p in params][:2] == [(3, 64, 16), (3, 1, 16)]
    assert paper.stack_forward(params, torch.zeros(3, 5, 64)).shape == (3, 5, 10)


def test_stack_equals_separate_training(digits):
    # one batched run of two models = each model trained alone (no cross-talk through the sum)
    x, y = digits["x_train"][:200], digits["y_train"][:200]
    both, _ = paper.train_stack(x, y, [0.05, 0.2], [3, 4], 20, 2, 8)
    alone, _ = paper.train_stack(x, y, [0.2], [4], 20, 2, 8)
    for a, b in zip(both, alone):
        torch.testing.assert_close(a[1], b[0], rtol=1e-5, atol=1e-6)
    # same seed, same init, whatever the learning rate: models are paired by seed
    p = paper.init_stack([7, 7], (64, 8, 8, 10))
    assert all(torch.equal(t[0], t[1]) for t in p)
    with pytest.raises(ValueError):
        paper.train_stack(x, y, [0.1], [0, 1], 20, 1, 8)


def test_sgd_matches_torch_optim_sgd(digits):
    # plain SGD of the stack = torch.optim.SGD on an nn.Sequential with the same init and batches
    x, y = digits["x_train"][:64], digits["y_train"][:64]
    ours, _ = paper.train_stack(x, y, [0.1], [5], 64, 3, 8)        # full batch: order irrelevant
    init = paper.init_stack([5], (64, 8, 8, 10))
    net = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.GELU(),
                              torch.nn.Linear(8, 10))
    with torch.no_grad():
        for layer, i in zip((0, 2, 4), (0, 2, 4)):
            net[layer].weight.copy_(init[i][0].T)
            net[layer].bias.copy_(init[i + 1][0, 0])
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
    torch.testing.assert_close(ours[0][0], net[0].weight.detach().T, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- attribution properties
def test_topk_and_rank_correlation():
    a = torch.tensor([[5.0, -4.0, 3.0, 0.1, 0.2]])
    b = torch.tensor([[0.1, 4.0, -5.0, 3.0, 0.0]])
    assert paper.topk_intersection(a, a, 3).item() == 1.0
    assert paper.topk_intersection(a, b, 2).item() == 0.5          # {0,1} vs {2,1}
    assert paper.rank_correlation(a, a).item() == pytest.approx(1.0)
    assert paper.rank_correlation(a, -a).item() == pytest.approx(1.0)    # magnitudes
    with pytest.raises(ValueError):
        paper.topk_mask(a, 6)


def test_attack_stays_in_budget_and_beats_random(digits):
    blob = _tiny_blob(digits, epochs=5)
    x = torch.from_numpy(digits["x_test"][:30]).expand(6, 30, 64).contiguous()
    y = torch.from_numpy(digits["y_test"][:30]).expand(6, 30).contiguous()
    out = paper.attribution_attack(blob["params"], x, y, k=8, eps=0.1, steps=10)
    assert out["delta"].abs().max() <= 0.1 + 1e-6
    assert (x + out["delta"]).min() >= -1e-6 and (x + out["delta"]).max() <= 1 + 1e-6
    with torch.no_grad():
        p0 = paper.stack_forward(blob["params"], x).argmax(-1)
        p1 = paper.stack_forward(blob["params"], x + out["delta"]).argmax(-1)
    assert torch.equal(p0, p1)                                        # the label is held
    g = torch.Generator().manual_seed(0)
    xr = x + paper.random_perturbation(x, 0.1, g)
    rand = paper.topk_intersection(out["clean_map"], paper.gradient_map(blob["params"], xr, y), 8)
    assert out["intersection"].mean() < rand.mean()


def test_captum_agrees_and_checks_pass(digits):
    blob = _tiny_blob(digits, epochs=3)
    cfg = paper.Config(check_points=4, hutchinson_probes=8, ig_steps=10)
    c = paper.implementation_checks(blob, cfg, torch.Generator().manual_seed(0))
    assert max(c["captum_gap"].values()) < 1e-5
    assert c["ig_scale"] == pytest.approx(9 / 10, rel=1e-4)           # captum's trapezoid weights sum to (n-1)/n
    assert c["hvp_rel_error"] < 1e-4
    assert max(abs(z) for z in c["hutchinson_z"].values()) < 4
    assert c["top_eig_rel_error"] < 1e-3
    assert c["softmax_symbolic"] == 0
    num = c["softmax_numeric"]
    assert num["max_eigenvalue"] <= 0.5 + 1e-12 and num["min_eigenvalue"] > -1e-12 and num["trace_gap"] < 1e-12


def test_hutchinson_known_matrix():
    A = torch.diag(torch.arange(1.0, 6.0))
    tr, fro = paper.hutchinson(lambda v: v @ A, (1, 5), 50, torch.Generator().manual_seed(0))
    assert torch.allclose(tr, torch.full_like(tr, 15.0))             # diagonal: v^T A v = tr A exactly
    assert torch.allclose(fro, torch.full_like(fro, 55.0))


def test_temperature_recovers_a_scaled_model(digits):
    blob = _tiny_blob(digits, epochs=20)
    p = [t.clone() for t in blob["params"]]
    p[-2] *= 3.0
    p[-1] *= 3.0                                                      # logits x 3
    T0 = paper.fit_temperature(blob["params"], digits["x_val"], digits["y_val"])
    T3 = paper.fit_temperature(p, digits["x_val"], digits["y_val"])
    np.testing.assert_allclose(T3 / T0, 3.0, rtol=0.06)


# ---------------------------------------------------------------- statistics of verdicts
def _table():
    rows = []
    rng = np.random.default_rng(0)
    for eta in (0.01, 0.1):
        for B in (8, 128):
            for s in range(5):
                rows.append({"family": "sgd", "eta": eta, "batch_size": B, "seed": s, "finite": True, "penalty": 0.0,
                             "val_accuracy": 0.5 if (eta, B) == (0.01, 128) else 0.95 + 0.001 * s,
                             "pgd_0.1": eta / B * 10 + 0.01 * rng.standard_normal(), "random_0.1": 0.9})
    t = pd.DataFrame(rows)
    t["eta_over_b"] = t["eta"] / t["batch_size"]
    return t


def test_accuracy_matching_and_sanity():
    t = _table()
    m = paper.accuracy_matched(t, 0.02)
    assert len(m) == 15 and not ((m["eta"] == 0.01) & (m["batch_size"] == 128)).any()
    est, key, per = paper.attack_sanity(t, 0.1)
    assert isinstance(est, Estimate) and len(per) == 4 and est.low == min(e.low for e in per.values())
    h = paper.headroom(m, 0.1)
    assert h.n == 15


def test_tiny_run(digits):
    blob = _tiny_blob(digits, penalty=True)
    cfg = paper.Config(test_points=12, method_points=5, epsilons=(0.1,), attack_steps=3, hutchinson_probes=2,
                       power_iterations=2, curvature_points=32, ig_steps=4, smoothgrad_samples=2, check_points=3)
    table, example = paper.evaluate_task("digits", blob, cfg, torch.Generator().manual_seed(0), np.random.default_rng(0))
    assert len(table) == 9 and {"pgd_0.1", "random_0.1", "input_hessian", "top_eigenvalue", "method_ig"} <= set(table)
    assert table["pgd_0.1"].between(0, 1).all() and (table["temperature"] > 0).all()
    est, p = paper.penalty_control(table, 0.1)
    assert -1 <= est.point <= 1 and 0 <= p <= 1


def test_config_validation():
    with pytest.raises(ValueError):
        paper.Config(headline_epsilon=0.3)
    with pytest.raises(ValueError):
        paper.Config(top_k=0)
    assert paper.Config(epsilons=[0.1]).epsilons == (0.1,)


def test_direction_words():
    assert paper.direction(Estimate(0.3, 0.1, 0.5)) == "positive"
    assert paper.direction(Estimate(-0.3, -0.5, -0.1)) == "negative"
    assert paper.direction(Estimate(0.1, -0.1, 0.3)) == "not distinguishable from zero"
