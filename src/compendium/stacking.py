"""Train several copies of one small network as one program: a stacked module and its optimiser.

Tiny models on a CPU spend most of a step in per-operation overhead, so training ``S`` copies
(training seeds, or data variants of one architecture) as one ``torch.func.vmap`` over stacked
parameters costs far less than ``S`` separate loops. With :class:`StackedAdamW` the stack trains
each copy exactly as it would be trained alone (up to floating-point summation order): the losses
of the copies add, AdamW acts element-wise, and gradient clipping is applied per copy.

    stack = StackedModules(nets)                      # nets: S modules of one architecture
    opt = StackedAdamW(stack, lr=1e-2, weight_decay=0.0, max_norm=1.0)
    log = fit(stack, lambda step: per_copy_losses(stack(x_s, ...)).sum(), spec, optimizer=opt)
    nets = stack.unstack(nets)

``spec.grad_clip`` must then be None (the optimiser clips each copy itself).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["StackedModules", "StackedAdamW"]


class StackedModules(nn.Module):
    """``S`` modules of one architecture evaluated at once.

    Their parameters are stacked along a new first axis and ``forward(*inputs, **kwargs)`` is
    ``torch.func.vmap`` of ``functional_call`` over that axis: every tensor input carries a
    leading axis of size ``S`` (copy ``s`` sees slice ``s``); keyword arguments are passed
    unbatched. Buffers are stacked too and are not trained.
    """

    def __init__(self, nets: list):
        super().__init__()
        from torch.func import stack_module_state

        if not nets:
            raise ValueError("StackedModules needs at least one module")
        params, buffers = stack_module_state(list(nets))
        self.names = list(params)
        self.stacked = nn.ParameterList([nn.Parameter(params[n].detach().clone()) for n in self.names])
        self.buffer_values = {n: b.detach().clone() for n, b in buffers.items()}
        self.copies = len(nets)
        self._base = [copy.deepcopy(nets[0]).to("meta")]   # a list: not registered as a submodule

    def forward(self, *inputs, **kwargs):
        from torch.func import functional_call, vmap

        base = self._base[0]

        def one(params, *xs):
            return functional_call(base, {**dict(zip(self.names, params)), **self.buffer_values}, xs, kwargs)

        return vmap(one)(tuple(self.stacked), *inputs)

    def unstack(self, nets: list) -> list:
        """Copy slice ``s`` into ``nets[s]`` (same architecture), in eval mode, and return them."""
        if len(nets) != self.copies:
            raise ValueError(f"expected {self.copies} modules, got {len(nets)}")
        for s, net in enumerate(nets):
            state = {n: p[s].detach().clone() for n, p in zip(self.names, self.stacked)}
            state.update({n: b[s].clone() for n, b in self.buffer_values.items()})
            net.load_state_dict(state)
            net.eval()
        return nets


class StackedAdamW(torch.optim.AdamW):
    """AdamW on a :class:`StackedModules` that first clips each copy's gradient to ``max_norm``
    (the global norm over that copy's slices of every parameter), as ``clip_grad_norm_`` would
    clip the copy trained alone."""

    def __init__(self, stack: StackedModules, *, max_norm: float | None = None, **kwargs):
        if max_norm is not None and not max_norm > 0:
            raise ValueError(f"max_norm must be positive or None, got {max_norm!r}")
        super().__init__(stack.parameters(), **kwargs)
        self.max_norm = max_norm
        self.last_norms: torch.Tensor | None = None         # (S,) per-copy gradient norms before clipping

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if self.max_norm is not None and params:
            sq = sum(p.grad.reshape(p.grad.shape[0], -1).pow(2).sum(1) for p in params)
            norms = sq.sqrt()
            self.last_norms = norms
            scale = (self.max_norm / (norms + 1e-6)).clamp(max=1.0)        # clip_grad_norm_'s rule
            for p in params:
                p.grad.mul_(scale.reshape(-1, *([1] * (p.grad.dim() - 1))))
        return super().step(closure)
