"""compendium.stacking: a vmapped stack of copies trains each copy as it would be trained alone."""

import pytest
import torch
from torch import nn

from compendium.stacking import StackedAdamW, StackedModules
from compendium.training import TrainSpec, fit, seeded_init


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 5)
        self.ln = nn.LayerNorm(5)
        self.b = nn.Linear(5, 2)

    def forward(self, x, mask, *, scale=1.0):
        return self.b(torch.relu(self.ln(self.a(x)))) * mask[..., None] * scale


def _nets(k):
    out = []
    for s in range(k):
        with seeded_init(s):
            out.append(Tiny())
    return out


def test_forward_matches_each_copy_and_unstack_round_trips():
    nets = _nets(3)
    stack = StackedModules(nets)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 3, generator=g)
    mask = torch.rand(3, 4, generator=g) > 0.3
    out = stack(x, mask, scale=2.0)
    for s in range(3):
        torch.testing.assert_close(out[s], nets[s](x[s], mask[s], scale=2.0))
    back = stack.unstack(_nets(3))
    for a, b in zip(back, nets):
        for pa, pb in zip(a.parameters(), b.parameters()):
            assert torch.equal(pa, pb)
    with pytest.raises(ValueError):
        stack.unstack(_nets(2))


@pytest.mark.parametrize("max_norm", [None, 0.05])
def test_stacked_training_equals_separate_training(max_norm):
    """Three copies with different data: one stacked fit (per-copy clipping) against three fits."""
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(3, 20, 8, 3, generator=g), torch.randn(3, 20, 8, 2, generator=g)
    mask = torch.ones(3, 8)
    spec = TrainSpec(max_steps=20, learning_rate=3e-2, weight_decay=0.0, grad_clip=None, warmup_steps=3,
                     schedule="cosine")
    stack = StackedModules(_nets(3))
    opt = StackedAdamW(stack, lr=spec.learning_rate, weight_decay=0.0, max_norm=max_norm)
    fit(stack, lambda step: ((stack(X[:, step], mask) - Y[:, step]) ** 2).mean((1, 2)).sum(), spec, optimizer=opt)
    stacked = stack.unstack(_nets(3))
    if max_norm is not None:
        assert opt.last_norms.shape == (3,) and (opt.last_norms > max_norm).all()   # the clip was active
    for s, net in enumerate(_nets(3)):
        alone = TrainSpec(**{**spec.__dict__, "grad_clip": max_norm})
        fit(net, lambda step: ((net(X[s, step], mask[s]) - Y[s, step]) ** 2).mean(), alone)
        for pa, pb in zip(net.parameters(), stacked[s].parameters()):
            torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        StackedModules([])
    with pytest.raises(ValueError):
        StackedAdamW(StackedModules(_nets(2)), lr=1e-2, max_norm=0.0)
