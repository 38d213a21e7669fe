"""GPU kernels with PyTorch reference implementations.

One module per kernel; each module imports Triton lazily (inside the function that launches the
kernel), so ``import compendium.kernels.<module>`` works on a machine without Triton and the
reference implementation is always available. This ``__init__`` imports nothing: import the
module you need, e.g. ``from compendium.kernels import sparse_decode``.

Modules
-------
sparse_decode
    Decode-step attention over a gathered index set of the KV cache (split-K online softmax,
    grouped-query attention). Used by the AsyncSpade chapter.
quest_pages
    Quest page scoring (upper bound from per-page min/max keys) fused with a block-local top-k.
    Used by the AsyncSpade chapter.
routing
    Expert-Sample routing (keep the top-h experts, Gumbel-sample the tail) fused in one kernel.
    Used by the Expert-Sample chapter.
"""
