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
gat_aggregation
    Masked-softmax neighbour aggregation of a dense GAT layer, one program per row. Checked in
    the graph-alignment chapter's tests (the chapter's models use torch_geometric's GATConv).
segment_softmax
    Segment softmax + weighted scatter-add over a CSR edge list (sparse GAT, one program per node
    and head, online softmax). Checked in the C2-GMAE chapter's tests against its reference and
    GATConv; the chapter's models use GATConv.
spec_verify
    Batched speculative verification (accept prefix, residual draw by the exponential race), one
    program per sequence; equal token for token to ``compendium.speculative.spec_verify``. Used
    by the OnlineSPEC chapter.
bench
    ``median_time``: the timing every ``benchmarks/*_kernels.py`` script uses (warm-up, CUDA
    synchronisation, median).
event_tokens
    event2vec token assembly: spatial-table gather + last temporal conv + LayerNorm + add + mask,
    one program per event. Checked in the event2vec chapter's tests against its reference (which
    equals the model's unfused tokens); the chapter's models use the unfused path.
knn
    Batched k-nearest neighbours (one program per query, k masked arg-min passes over the
    distance row). Checked in tests/test_kernels_top_adapter.py against ``torch.cdist`` + stable sort.
"""


def triton_available() -> bool:
    """Whether Triton can be imported (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def use_triton(backend: str, tensor, *, why_not: str | None = None, name: str = "kernel") -> bool:
    """The dispatch rule shared by every kernel.

    ``backend='triton'`` forces the kernel (errors propagate); ``'reference'`` forces PyTorch;
    ``'auto'`` picks Triton for CUDA tensors, but falls back to the reference with a
    :class:`RuntimeWarning` when Triton is not installed or the inputs are outside what the kernel
    supports (``why_not``, e.g. a head size that is not a power of two), instead of raising.
    """
    import warnings

    if backend not in ("auto", "triton", "reference"):
        raise ValueError(f"backend must be 'auto', 'triton' or 'reference', got {backend!r}")
    if backend != "auto":
        return backend == "triton"
    if not getattr(tensor, "is_cuda", False):
        return False
    if not triton_available():
        warnings.warn(f"{name}: Triton is not installed; using the PyTorch reference on CUDA", RuntimeWarning, stacklevel=3)
        return False
    if why_not:
        warnings.warn(f"{name}: {why_not}; using the PyTorch reference", RuntimeWarning, stacklevel=3)
        return False
    return True
