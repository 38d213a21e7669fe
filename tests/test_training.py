"""The shared trainer: seeded, thread-scoped, with an explicit stopping rule, equal to a plain loop."""

import math

import numpy as np
import pytest
import torch

from compendium.training import TrainSpec, fit, learning_rate_at, seeded_init, torch_threads


def _task(seed=0, n=256):
    rng = np.random.default_rng(seed)
    x = torch.as_tensor(rng.standard_normal((n, 8)), dtype=torch.float32)
    y = (x[:, 0] * x[:, 1] > 0).long()
    return x, y


def _model(seed):
    with seeded_init(seed):
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))


def _loss_fn(model, x, y, rng):
    def loss(step):
        idx = torch.as_tensor(rng.integers(0, len(x), 32))
        return torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
    return loss


def test_fit_equals_a_hand_written_loop_bit_for_bit():
    x, y = _task()
    spec = TrainSpec(max_steps=60, learning_rate=1e-2, weight_decay=0.01, grad_clip=1.0, warmup_steps=10,
                     schedule="cosine")
    a = _model(3)
    fit(a, _loss_fn(a, x, y, np.random.default_rng(1)), spec)

    b = _model(3)  # the reference: the loop every chapter used to write by hand
    rng = np.random.default_rng(1)
    opt = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.01)
    with torch_threads(1):
        for k in range(60):
            for g in opt.param_groups:
                g["lr"] = 1e-2 * min(1.0, (k + 1) / 10) * 0.5 * (1 + math.cos(math.pi * k / 60))
            idx = torch.as_tensor(rng.integers(0, len(x), 32))
            loss = torch.nn.functional.cross_entropy(b(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0)
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_same_seed_same_model_other_seed_other_model():
    x, y = _task()
    spec = TrainSpec(max_steps=20, learning_rate=1e-2)
    models = []
    for seed in (5, 5, 6):
        m = _model(seed)
        fit(m, _loss_fn(m, x, y, np.random.default_rng(seed)), spec)
        models.append(torch.cat([p.flatten() for p in m.parameters()]))
    assert torch.equal(models[0], models[1]) and not torch.equal(models[0], models[2])


def test_the_stopping_rule_fires_at_the_first_check_reaching_the_target():
    x, y = _task()
    m = _model(0)
    calls = []

    def check(model):
        assert not model.training  # checks run in eval mode
        calls.append(len(calls))
        return [0.1, 0.4, 0.8, 0.9][min(len(calls) - 1, 3)]

    log = fit(m, _loss_fn(m, x, y, np.random.default_rng(0)),
              TrainSpec(max_steps=100, learning_rate=1e-2, check_every=5, target=0.75), check=check)
    assert log.steps == 15 and log.stopped_early and log.checks == [(5, 0.1), (10, 0.4), (15, 0.8)]
    assert log.last_check == 0.8 and log.losses[-1][0] == 15


def test_without_a_target_it_runs_every_step_and_learns():
    x, y = _task()
    m = _model(0)
    log = fit(m, _loss_fn(m, x, y, np.random.default_rng(0)),
              TrainSpec(max_steps=300, learning_rate=1e-2, log_every=100))
    assert log.steps == 300 and not log.stopped_early
    assert [s for s, _ in log.losses] == [100, 200, 300]
    with torch.no_grad():
        acc = float((m(x).argmax(1) == y).float().mean())
    assert acc > 0.8  # XOR-like sign task: a linear model cannot exceed ~0.5


def test_seeded_init_and_threads_leave_global_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _model(7)
    assert torch.equal(torch.get_rng_state(), before)
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == threads


def test_gradient_clipping_bounds_the_update():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 1)
    before = lin.weight.detach().clone()
    x = torch.ones(1, 4)
    spec = TrainSpec(max_steps=1, learning_rate=1.0, weight_decay=0.0, grad_clip=1e-3)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)  # plain SGD makes the step size the clipped gradient
    fit(lin, lambda step: (1e6 * lin(x)).sum(), spec, optimizer=opt)
    delta = (lin.weight.detach() - before).flatten()
    assert float(delta.norm()) <= 1e-3 + 1e-9


def test_schedule_values():
    spec = TrainSpec(max_steps=100, learning_rate=1.0, warmup_steps=10, schedule="cosine")
    assert learning_rate_at(spec, 0) == pytest.approx(0.1 * 1.0)
    assert learning_rate_at(spec, 50) == pytest.approx(0.5)
    assert learning_rate_at(TrainSpec(max_steps=5, learning_rate=2.0), 3) == 2.0


@pytest.mark.parametrize("kwargs, match", [
    ({"max_steps": 0, "learning_rate": 1e-3}, "max_steps"),
    ({"max_steps": 5, "learning_rate": -1.0}, "learning_rate"),
    ({"max_steps": 5, "learning_rate": 1e-3, "schedule": "linear"}, "schedule"),
    ({"max_steps": 5, "learning_rate": 1e-3, "target": 0.5}, "check_every"),
    ({"max_steps": 5, "learning_rate": 1e-3, "grad_clip": 0.0}, "grad_clip"),
    ({"max_steps": 5.0, "learning_rate": 1e-3}, "max_steps"),
])
def test_bad_specs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainSpec(**kwargs)


def test_a_non_scalar_loss_is_refused():
    lin = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="scalar"):
        fit(lin, lambda step: lin(torch.ones(3, 2)), TrainSpec(max_steps=1, learning_rate=1e-3))


def test_linear_decay_equals_the_hand_written_rate_bit_for_bit():
    spec = TrainSpec(max_steps=37, learning_rate=3e-3, warmup_steps=5, schedule="linear_decay", final_fraction=0.1)
    for k in range(37):  # the warm-up-then-linear-decay rule a chapter wrote by hand
        assert learning_rate_at(spec, k) == 3e-3 * min(1.0, (k + 1) / 5) * (0.1 + 0.9 * (1 - k / 37))
    plain = TrainSpec(max_steps=10, learning_rate=1.0, schedule="linear_decay")
    assert learning_rate_at(plain, 0) == 1.0 and learning_rate_at(plain, 5) == 0.5
    with pytest.raises(ValueError, match="final_fraction"):
        TrainSpec(max_steps=5, learning_rate=1e-3, final_fraction=0.1)  # only for linear_decay
    with pytest.raises(ValueError, match="final_fraction"):
        TrainSpec(max_steps=5, learning_rate=1e-3, schedule="linear_decay", final_fraction=1.5)


def test_fit_with_a_torch_scheduler_equals_the_hand_written_loop_bit_for_bit():
    x, y = _task()

    def adam_one_cycle(model):
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=40, pct_start=0.1)

    a = _model(2)
    opt, sched = adam_one_cycle(a)
    fit(a, _loss_fn(a, x, y, np.random.default_rng(4)), TrainSpec(max_steps=40, learning_rate=5e-3),
        optimizer=opt, scheduler=sched)

    b = _model(2)  # the reference: Adam with OneCycleLR (which also cycles beta1), stepped by hand
    opt, sched = adam_one_cycle(b)
    rng = np.random.default_rng(4)
    with torch_threads(1):
        for _ in range(40):
            idx = torch.as_tensor(rng.integers(0, len(x), 32))
            loss = torch.nn.functional.cross_entropy(b(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_a_scheduler_must_own_the_rate_alone():
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(lin.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    loss = lambda step: lin(torch.ones(1, 2)).sum()  # noqa: E731
    with pytest.raises(ValueError, match="optimizer"):
        fit(lin, loss, TrainSpec(max_steps=1, learning_rate=1e-3), scheduler=sched)
    with pytest.raises(ValueError, match="constant"):
        fit(lin, loss, TrainSpec(max_steps=1, learning_rate=1e-3, schedule="cosine"), optimizer=opt, scheduler=sched)


def test_lr_scale_groups_follow_the_schedule_as_lambdalr_does_bit_for_bit():
    """A group with lr_scale c trains at c times the scheduled rate: equal, to the last bit, to
    per-group base rates under torch's LambdaLR with the warm-up factor (the loop fit replaces)."""
    x, y = _task()
    lr, c, warmup = 3e-3, 30.0, 7

    def groups(model):
        first, rest = list(model[0].parameters()), list(model[2].parameters())
        return first, rest

    a = _model(6)
    first, rest = groups(a)
    opt = torch.optim.AdamW([{"params": rest}, {"params": first, "lr_scale": c}], lr=lr, weight_decay=0.01)
    fit(a, _loss_fn(a, x, y, np.random.default_rng(8)),
        TrainSpec(max_steps=30, learning_rate=lr, weight_decay=0.01, grad_clip=1.0, warmup_steps=warmup), optimizer=opt)
    assert [g["lr"] for g in opt.param_groups] == [lr, lr * c]

    b = _model(6)
    first, rest = groups(b)
    opt = torch.optim.AdamW([{"params": rest, "lr": lr}, {"params": first, "lr": lr * c}], lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup))
    rng = np.random.default_rng(8)
    params = rest + first
    with torch_threads(1):
        for _ in range(30):
            idx = torch.as_tensor(rng.integers(0, len(x), 32))
            loss = torch.nn.functional.cross_entropy(b(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    # and the scale matters: without it the first layer ends elsewhere
    d = _model(6)
    fit(d, _loss_fn(d, x, y, np.random.default_rng(8)),
        TrainSpec(max_steps=30, learning_rate=lr, weight_decay=0.01, grad_clip=1.0, warmup_steps=warmup))
    assert not torch.equal(d[0].weight, a[0].weight)


def test_lr_scale_zero_freezes_the_group():
    x, y = _task()
    m = _model(9)
    before = m[0].weight.detach().clone()
    opt = torch.optim.AdamW([{"params": m[0].parameters(), "lr_scale": 0.0}, {"params": m[2].parameters()}], lr=1e-2,
                            weight_decay=0.01)
    fit(m, _loss_fn(m, x, y, np.random.default_rng(3)), TrainSpec(max_steps=5, learning_rate=1e-2, warmup_steps=2),
        optimizer=opt)
    assert torch.equal(m[0].weight, before) and opt.param_groups[0]["lr"] == 0.0


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "2"])
def test_a_bad_lr_scale_is_refused(bad):
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW([{"params": lin.parameters(), "lr_scale": bad}], lr=1e-3)
    with pytest.raises(ValueError, match="lr_scale"):
        fit(lin, lambda step: lin(torch.ones(1, 2)).sum(), TrainSpec(max_steps=1, learning_rate=1e-3), optimizer=opt)


def test_lr_scale_with_a_scheduler_is_refused():
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW([{"params": lin.parameters(), "lr_scale": 2.0}], lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    with pytest.raises(ValueError, match="lr_scale"):
        fit(lin, lambda step: lin(torch.ones(1, 2)).sum(), TrainSpec(max_steps=1, learning_rate=1e-3),
            optimizer=opt, scheduler=sched)
