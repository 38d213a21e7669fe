"""compendium.losses: the one InfoNCE / contrastive-loss implementation (hand values, properties)."""

import math

import pytest
import torch
from torch.nn import functional as F

from compendium.losses import cosine_logits, hard_negative_loss, info_nce, info_nce_from_logits, nested_prefix_loss


def test_info_nce_on_a_hand_computed_3x3():
    # unit vectors along the axes: cos = identity, so every row has logits (1/tau on the diagonal, 0 elsewhere)
    q = torch.eye(3, dtype=torch.float64)
    tau = 0.5
    expected = -math.log(math.exp(2.0) / (math.exp(2.0) + 2.0))
    assert abs(float(info_nce(q, q.clone(), temperature=tau)) - expected) < 1e-12
    # scaling the inputs changes nothing (cosine), permuting the candidates with the targets neither
    assert abs(float(info_nce(3 * q, 0.5 * q, temperature=tau)) - expected) < 1e-12
    perm = torch.tensor([2, 0, 1])
    assert abs(float(info_nce(q, q[perm], temperature=tau, targets=torch.argsort(perm))) - expected) < 1e-12


def test_info_nce_equals_cross_entropy_of_cosine_logits():
    g = torch.Generator().manual_seed(0)
    q, c = torch.randn(5, 7, generator=g, dtype=torch.float64), torch.randn(9, 7, generator=g, dtype=torch.float64)
    logits = (F.normalize(q, dim=1) @ F.normalize(c, dim=1).T) / 0.05
    assert torch.allclose(cosine_logits(q, c, 0.05), logits)
    assert torch.allclose(info_nce(q, c), F.cross_entropy(logits, torch.arange(5)))
    sym = info_nce(q, c[:5], symmetric=True)
    both = (F.cross_entropy(logits[:, :5], torch.arange(5)) + F.cross_entropy(logits[:, :5].T, torch.arange(5))) / 2
    assert torch.allclose(sym, both)
    assert torch.allclose(info_nce_from_logits(logits), F.cross_entropy(logits, torch.arange(5)))


def test_hard_negative_loss_is_info_nce_over_own_candidates():
    g = torch.Generator().manual_seed(1)
    q, p = torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randn(4, 6, generator=g, dtype=torch.float64)
    n = torch.randn(4, 3, 6, generator=g, dtype=torch.float64)
    each = [info_nce(q[i:i + 1], torch.cat([p[i:i + 1], n[i]]), temperature=0.1) for i in range(4)]
    assert torch.allclose(hard_negative_loss(q, p, n, temperature=0.1), torch.stack(each).mean())
    # a query equal to its positive and orthogonal to its negatives: loss -> log(1 + K e^{-1/tau})
    q = torch.eye(4, dtype=torch.float64)[:, :4]
    n = torch.stack([torch.roll(torch.eye(4, dtype=torch.float64), k, 0) for k in (1, 2, 3)], 1)
    tau = 0.2
    assert abs(float(hard_negative_loss(q, q, n, temperature=tau)) - math.log(1 + 3 * math.exp(-1 / tau))) < 1e-12


def test_nested_prefix_loss_with_one_width_is_the_loss():
    g = torch.Generator().manual_seed(2)
    q, c = torch.randn(4, 8, generator=g), torch.randn(6, 8, generator=g)
    fn = lambda a, b: info_nce(a, b)  # noqa: E731
    assert torch.equal(nested_prefix_loss(fn, [q, c], [8], [1.0]), 1.0 * info_nce(q, c))
    two = nested_prefix_loss(fn, [q, c], [2, 8], [0.5, 1.0])
    assert torch.allclose(two, 0.5 * info_nce(q[:, :2], c[:, :2]) + info_nce(q, c))


def test_gradients_flow_and_inputs_are_checked():
    q = torch.randn(3, 4, requires_grad=True)
    info_nce(q, torch.randn(3, 4)).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    with pytest.raises(ValueError):
        info_nce(torch.randn(3, 4), torch.randn(3, 5))
    with pytest.raises(ValueError):
        info_nce(torch.randn(3, 4), torch.randn(2, 4))            # default targets need N >= B
    with pytest.raises(ValueError):
        info_nce(torch.randn(3, 4), torch.randn(3, 4), temperature=0.0)
    with pytest.raises(ValueError):
        info_nce_from_logits(torch.randn(3, 4), torch.tensor([0, 1, 4]))
    with pytest.raises(ValueError):
        info_nce_from_logits(torch.randn(3, 4), torch.tensor([0, 1, 2]), symmetric=True)
    with pytest.raises(ValueError):
        hard_negative_loss(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(ValueError):
        nested_prefix_loss(info_nce, [torch.randn(3, 4), torch.randn(3, 4)], [2, 8], [1.0, 1.0])
