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
    # one model at a time: torch.optim.SGD on an nn.Sequential with the same init and the same
    # per-epoch batch orders equals the batched trainer's model (mini-batches, two epochs)
    x, y = digits["x_train"][:96], digits["y_train"][:96]
    lrs, seeds, B, epochs = [0.1, 0.3], [5, 6], 16, 2
    ours, _ = paper.train_stack(x, y, lrs, seeds, B, epochs, 8)
    for m, (lr, seed) in enumerate(zip(lrs, seeds)):
        init = paper.init_stack([seed], (64, 8, 8, 10))
        net = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.GELU(),
                                  torch.nn.Linear(8, 10))
        with torch.no_grad():
            for i in (0, 2, 4):
                net[i].weight.copy_(init[i][0].T)
                net[i].bias.copy_(init[i + 1][0, 0])
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        gen = np.random.default_rng([seed, 0, 5])
        for _ in range(epochs):
            order = gen.permutation(len(y))
            for step in range(len(y) // B):
                idx = order[step * B:(step + 1) * B]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])).backward()
                opt.step()
        for i in (0, 2, 4):
            torch.testing.assert_close(ours[i][m], net[i].weight.detach().T, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(ours[i + 1][m, 0], net[i].bias.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["sgd", "penalty", "sam"])
def test_batched_trainer_equals_reference_one_at_a_time(digits, kind):
    # the asset's trainer (hand-written backward, in-place batched updates) on a stack of three
    # models = the autograd reference trainer run on each model alone
    x, y = digits["x_train"][:120], digits["y_train"][:120]
    lrs, seeds = [0.05, 0.2, 0.1], [1, 2, 2]
    kw = [{} for _ in lrs]
    if kind == "penalty":
        kw = [{"penalty": [lam]} for lam in (0.0, 0.5, 2.0)]
    elif kind == "sam":
        kw = [{"sam_rho": 0.05} for _ in lrs]
    batched_kw = {"penalty": [k["penalty"][0] for k in kw]} if kind == "penalty" else kw[0]
    both, losses = paper.train_stack(x, y, lrs, seeds, 12, 2, 8, **batched_kw)
    for m in range(3):
        alone, ref_losses = paper.train_stack_reference(x, y, [lrs[m]], [seeds[m]], 12, 2, 8, **kw[m])
        for a, b in zip(both, alone):
            torch.testing.assert_close(a[m], b[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(losses[:, m], ref_losses[:, 0], rtol=1e-5)


def test_penalty_gradient_equals_double_backprop():
    # the hand-derived second-order terms of the input-gradient penalty = autograd's double
    # backprop, in float64, with a strength large enough that the penalty dominates the loss
    from compendium.papers.attribution_robustness.models import _factors, _gradients

    g = torch.Generator().manual_seed(0)
    params = [p.double() * 3 for p in paper.init_stack([0, 1], (5, 4, 4, 3))]
    x = torch.rand(2, 6, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 6), generator=g)
    lam = torch.tensor([0.0, 10.0], dtype=torch.float64)
    loss, pairs = _factors(params, x, y, lam)
    ours = _gradients(params, pairs)
    ps = [p.clone().requires_grad_() for p in params]
    xr = x.clone().requires_grad_()
    ce = paper.stack_cross_entropy(paper.stack_forward(ps, xr), y)
    (gx,) = torch.autograd.grad(ce.sum(), xr, create_graph=True)
    ref_loss = ce + lam * (gx * 6).pow(2).sum(-1).mean(1)
    ref = torch.autograd.grad(ref_loss.sum(), ps)
    torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-10, atol=1e-12)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert float((ref[0][1] - _gradients(params, _factors(params, x, y, lam * 0)[1])[0][1]).abs().max()) > 1e-3


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


def test_kendall_tau_matches_scipy():
    from scipy.stats import kendalltau

    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 12, generator=g)
    b = a + 0.7 * torch.randn(3, 4, 12, generator=g)
    b[0, 0, :3] = b[0, 0, 3]                                          # ties: tau-b
    ours = paper.kendall_tau(a, b, max_elements=300).numpy()          # several chunks
    ref = np.array([[kendalltau(a[i, j].abs().numpy(), b[i, j].abs().numpy())[0] for j in range(4)] for i in range(3)])
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    assert paper.kendall_tau(a, -a).eq(1).all()                       # magnitudes


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
    cfg = paper.Config(test_points=12, method_points=5, epsilons=(0.05, 0.1), attack_steps=3, hutchinson_probes=2,
                       power_iterations=2, curvature_points=32, ig_steps=4, smoothgrad_samples=2, check_points=3)
    table, example = paper.evaluate_task("digits", blob, cfg, torch.Generator().manual_seed(0), np.random.default_rng(0))
    assert len(table) == 9 and {"pgd_0.1", "random_0.1", "input_hessian", "top_eigenvalue", "method_ig", "kendall_0.1"} <= set(table)
    assert table["pgd_0.1"].between(0, 1).all() and (table["temperature"] > 0).all()
    est, p = paper.penalty_control(table, 0.1)
    assert -1 <= est.point <= 1 and 0 <= p <= 1
    # off the headline radius only the accuracy-matched plain-SGD models are attacked, with the
    # values a whole-stack attack gives them (models do not interact)
    matched = paper.accuracy_matched(table, cfg.accuracy_margin)
    ids = set(map(tuple, matched[["eta", "batch_size", "seed"]].values))
    inside = np.array([r.family == "sgd" and (r.eta, r.batch_size, r.seed) in ids for r in table.itertuples()])
    assert 0 < inside.sum() < len(table)
    assert table.loc[inside, "pgd_0.05"].notna().all() and table.loc[~inside, "pgd_0.05"].isna().all()
    # the power control's twin is read for the matched models only; the ratio to random everywhere
    assert table.loc[inside, "smooth_pgd_0.1"].between(0, 1).all() and table.loc[~inside, "smooth_pgd_0.1"].isna().all()
    ok = table["random_0.1"] > 0
    np.testing.assert_allclose(table.loc[ok, "pgd_over_random_0.1"], table.loc[ok, "pgd_0.1"] / table.loc[ok, "random_0.1"])
    assert (table["chance"] == 8 / 64).all()
    idx = np.random.default_rng(0).choice(len(digits["y_test"]), size=12, replace=False)
    x = torch.from_numpy(digits["x_test"][idx]).expand(9, 12, 64).contiguous()
    y = torch.from_numpy(digits["y_test"][idx]).expand(9, 12).contiguous()
    whole = paper.attribution_attack(blob["params"], x, y, k=8, eps=0.05, steps=3)["intersection"]
    correct = example["correct"]
    expect = ((whole * correct).sum(1) / correct.sum(1).clamp_min(1)).numpy()
    np.testing.assert_allclose(table.loc[inside, "pgd_0.05"].to_numpy(), expect[inside], rtol=1e-6)


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


def test_scales_train_the_issue_grid_and_smoke_fewer_epochs():
    full, smoke = paper.settings_for("full"), paper.settings_for("smoke")
    # the issue's design at full scale; smoke differs in epochs and in leaving out the CNN grid only
    # (the smoke asset's CPU budget)
    assert (full.epochs, full.num_seeds, len(full.learning_rates), len(full.batch_sizes)) == (60, 5, 4, 3)
    assert smoke.epochs < full.epochs and smoke.epochs == paper.models.SMOKE_EPOCHS
    assert full.cnn and not smoke.cnn
    assert ({k: v for k, v in vars(smoke).items() if k not in ("epochs", "cnn")}
            == {k: v for k, v in vars(full).items() if k not in ("epochs", "cnn")})
    att_full, att_smoke = paper.attention_settings_for("full"), paper.attention_settings_for("smoke")
    assert (att_full.epochs, att_full.num_seeds, len(att_full.learning_rates) * len(att_full.batch_sizes)) == (60, 3, 6)
    assert (att_smoke.num_seeds, att_smoke.learning_rates, att_smoke.batch_sizes) == (3, att_full.learning_rates, att_full.batch_sizes)
    with pytest.raises(ValueError):
        paper.attention_settings_for("medium")
    with pytest.raises(ValueError):
        paper.settings_for("medium")


# ------------------------------------------------------------------------------- the attention part
def _attention_settings(**kw):
    base = dict(epochs=2, num_train=96, num_val=48, num_test=48, learning_rates=(0.05, 0.2), batch_sizes=(16,),
                num_seeds=2)
    base.update(kw)
    return paper.AttentionSettings(**base)


def test_key_token_task_labels_are_the_majority_class():
    s = _attention_settings()
    data = paper.key_token_task(s, 0)
    for split in ("train", "val", "test"):
        tok, y = data[f"tokens_{split}"] - 1, data[f"y_{split}"]
        assert tok.shape == (len(y), s.length)
        cls_of_key = np.where(tok < 2 * s.classes, tok // 2, -1)
        counts = np.stack([(cls_of_key == c).sum(1) for c in range(s.classes)], 1)
        assert (counts.argmax(1) == y).all() and (counts.max(1) == s.keys).all() and (counts.sum(1) == s.keys + 1).all()
    assert data["table"].shape == (2 * s.classes + s.distractors + 1, s.dim)
    with pytest.raises(ValueError):
        paper.key_token_task(_attention_settings(keys=16), 0)


@pytest.mark.parametrize("kind", ["softmax", "kernel"])
def test_attention_stack_equals_a_loop_and_maps_are_distributions(kind):
    # the stacked einsum model equals a per-model, per-head loop written with plain matrix products
    s = _attention_settings()
    params = paper.attention.init_attention_stack([0, 1, 2], s)
    x = torch.randn(5, s.length + 1, s.dim)
    logits = paper.attention.forward(params, x, kind, s.heads)
    amap = paper.attention_map(params, x, kind, s.heads)
    assert torch.allclose(amap.sum(-1) + paper.attention.attention_weights(
        params, x.expand(3, *x.shape), kind, s.heads)[0].mean(2)[..., 0], torch.ones(3, 5), atol=1e-5)
    dh = s.dim // s.heads
    for m in range(3):
        Wq, Wk, Wv, Wo, W1, b1, W2, b2 = (p[m] for p in params)
        for n in range(5):
            q, k, v = x[n, 0] @ Wq, x[n] @ Wk, x[n] @ Wv
            heads, maps = [], []
            for h in range(s.heads):
                qh, kh, vh = q[h * dh:(h + 1) * dh], k[:, h * dh:(h + 1) * dh], v[:, h * dh:(h + 1) * dh]
                if kind == "softmax":
                    a = torch.softmax(kh @ qh / dh ** 0.5, 0)
                else:
                    w = (torch.nn.functional.elu(kh) + 1) @ (torch.nn.functional.elu(qh) + 1)
                    a = w / w.sum()
                maps.append(a)
                heads.append(a @ vh)
            hid = x[n, 0] + torch.cat(heads) @ Wo
            out = torch.nn.functional.gelu(hid @ W1 + b1) @ W2 + b2
            assert torch.allclose(out, logits[m, n], atol=1e-5)
            assert torch.allclose(torch.stack(maps).mean(0)[1:], amap[m, n], atol=1e-6)
    with pytest.raises(ValueError):
        paper.attention.forward(params, x, "linear", s.heads)


def test_attention_training_learns_and_equals_separate_training():
    s = _attention_settings(epochs=3)
    data = paper.key_token_task(s, 0)
    x, y = paper.attention.embed(data, "train"), torch.as_tensor(data["y_train"])
    both, loss = paper.train_attention_stack(x, y, [0.1, 0.2], [4, 5], 16, 3, "softmax", s)
    one, _ = paper.train_attention_stack(x, y, [0.2], [5], 16, 3, "softmax", s)
    for a, b in zip(both, one):
        assert torch.allclose(a[1:], b, atol=1e-5)
    longer, loss30 = paper.train_attention_stack(x, y, [0.2], [5], 16, 30, "softmax", s)
    assert loss30[0] < loss[1] and loss30[0] < 0.7 * np.log(s.classes)


def test_attention_attack_beats_random_holds_the_label_and_stays_in_the_ball():
    s = _attention_settings()
    data = paper.key_token_task(s, 1)
    x, y = paper.attention.embed(data, "train"), torch.as_tensor(data["y_train"])
    params, _ = paper.train_attention_stack(x, y, [0.2], [0], 16, 20, "kernel", s)
    xt = paper.attention.embed(data, "test").unsqueeze(0)
    yt = torch.as_tensor(data["y_test"]).unsqueeze(0)
    out = paper.attention_attack(params, xt, yt, "kernel", s.heads, k=3, eps=0.3, steps=10)
    d = out["delta"]
    assert d.abs().max() <= 0.3 + 1e-6 and d[:, :, 0].abs().max() == 0
    kept = out["intersection"] < 1
    pred0 = paper.attention.forward(params, xt, "kernel", s.heads).argmax(-1)
    pred1 = paper.attention.forward(params, xt + d, "kernel", s.heads).argmax(-1)
    assert (pred0 == pred1)[kept].all()
    rnd = xt + paper.random_perturbation(xt, 0.3, torch.Generator().manual_seed(0), box=None) * (
        torch.arange(xt.shape[2]) > 0).view(1, 1, -1, 1)
    r = paper.topk_intersection(paper.attention_map(params, rnd, "kernel", s.heads), out["clean_map"], 3)
    assert out["intersection"].mean() < r.mean()


def test_attention_measurements_on_a_constructed_table():
    # kernel intersections rise with eta/B, softmax ones are flat noise: the kernel rho is positive,
    # the softmax null holds and the difference is resolved above zero
    rng = np.random.default_rng(0)
    rows = []
    for kind in paper.KINDS:
        for eta in (0.05, 0.1, 0.2):
            for B in (16, 64):
                for seed in range(3):
                    base = 0.3 + (np.log(eta / B) + 6) * 0.1 if kind == "kernel" else 0.5
                    pgd = base + 0.01 * rng.standard_normal()
                    rows.append({"kind": kind, "eta": eta, "batch_size": B, "seed": seed, "eta_over_b": eta / B,
                                 "val_accuracy": 1.0, "test_accuracy": 1.0, "pgd_0.1": pgd, "random_0.1": pgd + 0.2})
    m = paper.attention_measurements(pd.DataFrame(rows), eps=0.1, margin=0.02, mlp_rho=-0.9, rng=0, resamples=500)
    assert m["kernel"]["rho"].low > 0.5 and m["softmax_null"] and m["difference"].low > 0
    assert m["kernel"]["pooled_sanity"].low > 0 and m["softmax"]["configs"] == 6


# ------------------------------------------------------------------------------------- the tiny CNN
def test_cnn_stack_equals_torch_modules_model_by_model():
    from compendium.papers.attribution_robustness import cnn

    params = cnn.init_cnn_stack([0, 1, 2])
    x = torch.rand(3, 7, 64)
    logits = paper.stack_forward(params, x)          # dispatches to the CNN
    assert logits.shape == (3, 7, 10) and cnn.is_cnn(params)
    for m in range(3):
        c1, c2 = torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.Conv2d(8, 16, 3, padding=1)
        head = torch.nn.Linear(256, 10)
        with torch.no_grad():
            c1.weight.copy_(params[0][m]); c1.bias.copy_(params[1][m])
            c2.weight.copy_(params[2][m]); c2.bias.copy_(params[3][m])
            head.weight.copy_(params[4][m].T); head.bias.copy_(params[5][m, 0])
        net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 8, 8)), c1, torch.nn.GELU(), c2, torch.nn.GELU(),
                                  torch.nn.AvgPool2d(2), torch.nn.Flatten(), head)
        assert torch.allclose(net(x[m]), logits[m], atol=1e-5)


def test_cnn_training_stack_equals_separate_runs_and_reads_out(digits):
    from compendium.papers.attribution_robustness import cnn

    small = {k: v[:256] if k.endswith("train") else v for k, v in digits.items()}
    both, losses = cnn.train_cnn_stack(small["x_train"], small["y_train"], [0.1, 0.2], [3, 4], 32, 2)
    one, _ = cnn.train_cnn_stack(small["x_train"], small["y_train"], [0.2], [4], 32, 2)
    for a, b in zip(both, one):
        assert torch.allclose(a[1:], b, atol=1e-6)
    assert losses.shape == (2, 2)
    x = torch.from_numpy(digits["x_test"][:6]).expand(2, 6, 64).contiguous()
    y = torch.from_numpy(digits["y_test"][:6]).expand(2, 6).contiguous()
    out = paper.attribution_attack(both, x, y, k=8, eps=0.1, steps=3)
    assert out["delta"].abs().max() <= 0.1 + 1e-6 and out["intersection"].shape == (2, 6)
    with pytest.raises(ValueError):
        cnn.train_cnn_stack(small["x_train"], small["y_train"], [0.1], [3, 4], 32, 2)


def test_topk_pgd_keeps_the_best_labelled_iterate_within_the_mask_and_ball():
    # a linear "map" |w * x| on 8 features: lowering the top-2 share means shrinking the top features
    w = torch.arange(1.0, 9.0)
    x = torch.ones(3, 8)
    mask = torch.ones_like(x)
    mask[:, 0] = 0.0
    calls = []

    def map_fn(xa, last):
        calls.append(last)
        logits = torch.stack([xa.sum(-1), torch.zeros(xa.shape[0])], -1)    # label 0 while sum > 0
        return w * xa, logits

    clean = (w * x).detach()
    label = torch.zeros(3, dtype=torch.long)
    delta, inter = paper.topk_pgd(map_fn, x, clean, label, k=2, eps=0.9, steps=8, mask=mask)
    assert calls == [False] * 8 + [True]
    assert delta.abs().max() <= 0.9 + 1e-6 and torch.all(delta[:, 0] == 0)
    assert torch.all(inter < 1)                  # the top two features were pushed out of the top-2
    assert torch.allclose(torch.tensor([float(((w * (x + delta)).topk(2).indices >= 6).sum()) / 2]),
                          inter[:1])
    # a label that can never be held: nothing is kept
    never = torch.ones(3, dtype=torch.long)
    delta, inter = paper.topk_pgd(map_fn, x, clean, never, k=2, eps=0.9, steps=4)
    assert torch.all(delta == 0) and torch.all(inter == 1)
    with pytest.raises(ValueError):
        paper.topk_pgd(map_fn, x, clean, label, k=2, eps=0.0, steps=4)


# ---------------------------------------------------------------- power control, partial correlation
def test_blended_forward_interpolates_gelu_and_its_linearisation(digits):
    blob = _tiny_blob(digits, epochs=1)
    x = torch.from_numpy(digits["x_test"][:10]).expand(6, 10, 64).contiguous()
    y = torch.from_numpy(digits["y_test"][:10]).expand(6, 10).contiguous()
    p = blob["params"]
    torch.testing.assert_close(paper.blended_forward(p, x, 0.0), paper.stack_forward(p, x))
    # alpha = 1: a linear model (activation h/2), so its gradient map is the same at every input
    g = torch.Generator().manual_seed(0)
    xr = x + paper.random_perturbation(x, 0.2, g)

    def grad(fw, z):
        z = z.clone().requires_grad_()
        f = fw(z).gather(-1, y.unsqueeze(-1)).sum()
        return torch.autograd.grad(f, z)[0]

    g1, g2 = grad(lambda z: paper.blended_forward(p, z, 1.0), x), grad(lambda z: paper.blended_forward(p, z, 1.0), xr)
    torch.testing.assert_close(g1, g2)
    # alpha in (0, 1): the map moves with the input, but less than the model's own map
    d0 = (grad(lambda z: paper.stack_forward(p, z), x) - grad(lambda z: paper.stack_forward(p, z), xr)).norm()
    dh = (grad(lambda z: paper.blended_forward(p, z, 0.5), x) - grad(lambda z: paper.blended_forward(p, z, 0.5), xr)).norm()
    assert 0 < dh < d0
    with pytest.raises(ValueError):
        paper.blended_forward(p, x, 1.5)


def test_blended_attack_at_alpha_zero_is_the_attack(digits):
    blob = _tiny_blob(digits, epochs=2)
    x = torch.from_numpy(digits["x_test"][:8]).expand(6, 8, 64).contiguous()
    y = torch.from_numpy(digits["y_test"][:8]).expand(6, 8).contiguous()
    a = paper.attribution_attack(blob["params"], x, y, k=8, eps=0.1, steps=3)["intersection"]
    b = paper.blended_attack(blob["params"], x, y, 0.0, k=8, eps=0.1, steps=3)
    torch.testing.assert_close(a, b["intersection"])
    assert b["correct"].dtype == torch.bool and b["correct"].shape == (6, 8)


def test_partial_spearman_removes_a_shared_cause():
    rng = np.random.default_rng(0)
    z = rng.normal(size=200)
    x, y = z + 0.3 * rng.normal(size=200), z + 0.3 * rng.normal(size=200)
    raw, _ = paper.rank_test(x, y, "greater")
    part, p = paper.partial_spearman(x, y, z)
    assert raw.low > 0.7 and part.low < 0 < part.high and p > 0.01
    # with an unrelated covariate the partial correlation is about the plain one
    w = rng.normal(size=200)
    part2, _ = paper.partial_spearman(x, y, w)
    assert abs(part2.point - raw.point) < 0.05 and part2.low < part2.point < part2.high
    # undefined: too few units
    void, p1 = paper.partial_spearman(x[:5], y[:5], z[:5])
    assert (void.low, void.high, p1) == (-1.0, 1.0, 1.0)


def test_smoothing_power_pairs_twin_and_model():
    t = pd.DataFrame({"smooth_pgd_0.1": [0.9, 0.8, 0.85, np.nan], "base_pgd_0.1": [0.7, 0.6, 0.7, 0.5]})
    est = paper.smoothing_power(t, 0.1)
    assert est.n == 3 and abs(est.point - np.mean([0.2, 0.2, 0.15])) < 1e-12
