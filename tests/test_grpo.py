"""Tests for the shared GRPO piece, compendium.rl.grpo (advantages, k3 KL, PPO-clip loss)."""

import math

import numpy as np
import pytest
import torch

from compendium.rl import group_advantages, grpo_loss, kl_k3



@pytest.fixture(autouse=True)
def _float64():
    """Float64 for exact comparisons, restored afterwards (other test modules share the process)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _loop_reference(logp, logp_old, logp_ref, adv, mask, eps, beta, aggregation):
    """A slow, token-by-token transcription of the per-token GRPO loss and its aggregation."""
    n, t = len(logp), len(logp[0])
    per_seq, tok_sum, tok_count = [], 0.0, 0.0
    for i in range(n):
        s, c = 0.0, 0.0
        for j in range(t):
            if not mask[i][j]:
                continue
            rho = math.exp(logp[i][j] - logp_old[i][j])
            surrogate = min(rho * adv[i], min(max(rho, 1 - eps), 1 + eps) * adv[i])
            d = logp_ref[i][j] - logp[i][j]
            s += -surrogate + beta * (math.exp(d) - d - 1)
            c += 1
        per_seq.append(s / max(c, 1.0))
        tok_sum, tok_count = tok_sum + s, tok_count + c
    return float(np.mean(per_seq)) if aggregation == "sequence" else tok_sum / max(tok_count, 1.0)


# ----------------------------------------------------------------------------------- advantages
def test_advantages_have_zero_group_mean_and_unit_std():
    r = torch.randn(50, 8, generator=torch.Generator().manual_seed(0)) * 3 + 2
    a = group_advantages(r, eps=0.0)
    assert a.shape == r.shape
    assert a.mean(dim=1).abs().max() < 1e-12
    assert torch.allclose(a.std(dim=1), torch.ones(50))


def test_all_equal_group_gives_exactly_zero_and_no_nan():
    r = torch.tensor([[0.1] * 8, [0.0] * 8, [1e9] * 8, [0.3, 0.1, 0.2, 0.4, 0.1, 0.1, 0.1, 0.1]])
    for eps in (0.0, 1e-4):
        a = group_advantages(r, eps=eps)
        assert not torch.isnan(a).any()
        assert torch.equal(a[:3], torch.zeros(3, 8))          # exact zero, not 1e-17 / eps
        assert a[3].abs().sum() > 0


def test_advantages_scale_none_is_centring_and_numpy_input_works():
    r = np.arange(12.0).reshape(3, 4) ** 2
    a = group_advantages(r, scale="none")
    assert torch.allclose(a, torch.as_tensor(r - r.mean(1, keepdims=True)))
    b = group_advantages(r)                                    # eps = 1e-4 as in trl
    centred = torch.as_tensor(r - r.mean(1, keepdims=True))
    assert torch.allclose(b, centred / (torch.as_tensor(r).std(1, keepdim=True) + 1e-4))


@pytest.mark.parametrize("bad", [torch.ones(5, 1), torch.ones(3), torch.tensor([[1.0, float("nan")]])])
def test_advantages_reject_bad_input(bad):
    if bad.dim() == 1:        # a 1-D vector is one group of 3: fine
        assert group_advantages(bad).shape == (3,)
        return
    with pytest.raises(ValueError):
        group_advantages(bad)
    with pytest.raises(ValueError):
        group_advantages(torch.ones(2, 2), scale="mad")


# ------------------------------------------------------------------------------------------ KL
def test_k3_is_nonnegative_zero_at_equality_and_unbiased():
    g = torch.Generator().manual_seed(1)
    logits, logits_ref = torch.randn(6, generator=g), torch.randn(6, generator=g)
    p, q = torch.softmax(logits, 0), torch.softmax(logits_ref, 0)
    exact = float((p * (p.log() - q.log())).sum())
    tokens = torch.multinomial(p, 400_000, replacement=True, generator=g)
    k3 = kl_k3(p.log()[tokens], q.log()[tokens])
    assert (k3 >= 0).all()
    se = float(k3.std()) / math.sqrt(len(k3))
    assert abs(float(k3.mean()) - exact) < 4 * se
    assert torch.equal(kl_k3(p.log(), p.log()), torch.zeros(6))


# ---------------------------------------------------------------------------------------- loss
def _grad_of(ratio_value: float, advantage: float, eps: float = 0.2) -> float:
    logp = torch.tensor([math.log(ratio_value)], requires_grad=True)
    out = grpo_loss(logp, torch.zeros(1), torch.tensor([advantage]), clip_eps=eps)
    out.loss.backward()
    return float(logp.grad[0])


@pytest.mark.parametrize("ratio,adv", [(1.5, 1.0), (1.21, 2.0), (0.5, -1.0), (0.79, -0.3)])
def test_zero_gradient_outside_the_clip(ratio, adv):
    assert _grad_of(ratio, adv) == 0.0


@pytest.mark.parametrize("ratio,adv", [(1.1, 1.0), (0.9, -1.0), (0.5, 1.0), (1.5, -1.0)])
def test_gradient_inside_the_clip_or_on_the_pessimistic_side(ratio, adv):
    # inside the trust region, and outside it where the unclipped term is the smaller one,
    # d loss / d logp = -ratio * A
    assert _grad_of(ratio, adv) == pytest.approx(-ratio * adv, rel=1e-12)


def test_ratio_one_without_kl_is_vanilla_policy_gradient():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(32, 5, generator=g, requires_grad=True)
    actions = torch.randint(0, 5, (32,), generator=g)
    adv = torch.randn(32, generator=g)
    logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    out = grpo_loss(logp, logp.detach(), adv, logp_ref=logp.detach() - 0.3, kl_coef=0.0)
    (grad,) = torch.autograd.grad(out.loss, logits)
    logp2 = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    (grad_pg,) = torch.autograd.grad(-(adv * logp2).mean(), logits)
    assert torch.allclose(grad, grad_pg, atol=1e-14)
    assert float(out.loss.detach()) == pytest.approx(float(-adv.mean()))
    assert out.clip_fraction == 0.0 and out.mean_ratio == pytest.approx(1.0)


@pytest.mark.parametrize("aggregation", ["sequence", "token"])
def test_loss_equals_token_loop_with_mask_and_kl(aggregation):
    g = torch.Generator().manual_seed(3)
    n, t = 6, 5
    logp = -torch.rand(n, t, generator=g) * 3
    logp_old = logp + 0.4 * torch.randn(n, t, generator=g)           # ratios on both sides of the clip
    logp_ref = logp + 0.5 * torch.randn(n, t, generator=g)
    adv = torch.randn(n, generator=g)
    mask = (torch.rand(n, t, generator=g) > 0.3).double()
    mask[0] = 0.0                                                      # an all-padding sequence
    out = grpo_loss(logp, logp_old, adv, logp_ref=logp_ref, mask=mask, clip_eps=0.2, kl_coef=0.05,
                    aggregation=aggregation)
    ref = _loop_reference(logp.tolist(), logp_old.tolist(), logp_ref.tolist(), adv.tolist(), mask.tolist(),
                          0.2, 0.05, aggregation)
    assert float(out.loss.detach()) == pytest.approx(ref, rel=1e-12, abs=1e-14)
    per_seq = grpo_loss(logp, logp_old, adv, logp_ref=logp_ref, mask=mask, kl_coef=0.05,
                        aggregation=aggregation, reduction="none").loss
    combined = per_seq.mean() if aggregation == "sequence" else per_seq.sum()
    assert float(combined.detach()) == pytest.approx(float(out.loss.detach()), rel=1e-12)


def test_masked_tokens_get_no_gradient_and_do_not_change_the_loss():
    g = torch.Generator().manual_seed(4)
    logp = (-torch.rand(4, 6, generator=g)).requires_grad_(True)
    logp_old, logp_ref = logp.detach() + 0.05, logp.detach() - 0.1
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    mask = torch.ones(4, 6)
    mask[:, 4:] = 0
    out = grpo_loss(logp, logp_old, adv, logp_ref=logp_ref, mask=mask, kl_coef=0.01)
    out.loss.backward()
    assert torch.equal(logp.grad[:, 4:], torch.zeros(4, 2))
    assert (logp.grad[:, :4] != 0).all()
    garbage = logp.detach().clone()
    garbage[:, 4:] = -50.0
    again = grpo_loss(garbage, logp_old, adv, logp_ref=logp_ref, mask=mask, kl_coef=0.01)
    assert float(again.loss.detach()) == pytest.approx(float(out.loss.detach()), rel=1e-12)


def test_kl_term_pulls_towards_the_reference():
    logp = torch.tensor([-1.0], requires_grad=True)
    out = grpo_loss(logp, logp.detach(), torch.zeros(1), logp_ref=torch.tensor([-2.0]), kl_coef=0.5)
    out.loss.backward()
    # d/dlogp of beta (e^{r-l} - (r-l) - 1) = beta (1 - e^{r-l}) > 0: lowering logp reduces the loss
    assert float(logp.grad[0]) == pytest.approx(0.5 * (1 - math.exp(-1.0)))
    assert out.mean_kl == pytest.approx(math.exp(-1.0) + 1.0 - 1.0)


def test_loss_rejects_bad_input():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError):
        grpo_loss(x, torch.zeros(3, 3), torch.zeros(3))
    with pytest.raises(ValueError):
        grpo_loss(x, x, torch.zeros(4))
    with pytest.raises(ValueError):
        grpo_loss(x, x, torch.zeros(3), kl_coef=0.1)                   # no reference
    with pytest.raises(ValueError):
        grpo_loss(x, x, torch.zeros(3), aggregation="dr_grpo")
    with pytest.raises(ValueError):
        grpo_loss(x, x, torch.zeros(3), clip_eps=0.0)
