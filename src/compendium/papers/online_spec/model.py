r"""The fixed targets (an order-2 n-gram table, or a random-init GPT-2 read through two tokens, both
with domain blocks) and the low-capacity draft.

Target. ``V`` tokens: optionally a set of tokens shared by every domain, the rest split into
``K`` contiguous blocks (the domains). After the context ``(a, b)`` (``b`` the newest token) the
next token stays in ``b``'s block or is shared; after a shared ``b`` it is in ``a``'s block. So a
sequence started in a domain stays in it, and the domains overlap through the shared tokens.
Inside the allowed set its law is
``(1 - leak) softmax(beta * (s_b + w_a / 2 + noise_ab)) + leak * uniform(block)`` with Gaussian
scores: part of the table is additive in the two context tokens (what the draft can learn) and
part is an interaction no additive model can fit. Conditionals are exact: the table is the
target. The second target (:func:`transformer_target`) keeps the blocks and the smoothing but
takes the in-block law from a random-init ``transformers`` GPT-2 at a temperature; with a
two-token window its table is exact too.

Draft. Logits ``z(a, b) = (E1[a] + E2[b]) U^T + bias`` with embeddings of rank ``d``: the last
two tokens in, a softmax out. Its parameters are one flat vector ``theta`` (so learners can
average, carry momentum and take optimistic steps on it). The per-context loss is
``KL(p(.|a,b) || q_theta(.|a,b))``; its gradient with respect to the logits is ``q - p``, and the
chain rule through the embeddings is written out in :func:`kl_loss_and_grad`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from ...ngram import NGramModel


@dataclass(frozen=True)
class BlockTarget:
    """An order-2 n-gram target with domain blocks.

    Attributes
    ----------
    model : NGramModel
        ``model.table[a, b]`` is ``p(. | a, b)``, shape ``(V+1, V+1, V)`` (index ``V`` = before start).
    blocks : tuple of ndarray
        Token ids of each domain.
    shared : ndarray
        Token ids every domain shares (empty: closed blocks).
    """

    model: NGramModel
    blocks: tuple
    shared: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def vocab(self) -> int:
        return self.model.vocab

    def rows(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``p(. | a, b)`` for context arrays ``a, b`` (same shape ``S``) -> ``S + (V,)``."""
        return self.model.table[a, b]


def block_target(vocab: int, domains: int, leak: float, sharpness: float, interaction: float,
                 rng: np.random.Generator, shared: int = 0) -> BlockTarget:
    """Draw a :class:`BlockTarget` (see the module docstring for the law).

    Parameters
    ----------
    vocab, domains : int
        Tokens ``V`` and domain blocks ``K`` (``V >= 2 K``).
    leak : float
        Weight of the uniform smoothing inside the block, in ``[0, 1)``.
    sharpness : float
        ``beta``: larger is more peaked.
    interaction : float
        Scale of the non-additive part ``noise_ab`` relative to the additive scores.
    rng : numpy.random.Generator
    shared : int
        Tokens shared by every domain (the last ``shared`` ids; see :func:`domain_split`).
    """
    blocks, common = domain_split(vocab, domains, shared)
    if not 0 <= leak < 1 or sharpness <= 0 or interaction < 0:
        raise ValueError(f"need 0 <= leak < 1, sharpness > 0, interaction >= 0; got {leak}, {sharpness}, {interaction}")
    V = vocab
    s = rng.normal(size=(V + 1, V))  # newest-token scores (row V: start of sequence)
    w = rng.normal(size=(V + 1, V))  # older-token scores
    noise = interaction * rng.normal(size=(V + 1, V + 1, V))
    scores = sharpness * (s[None, :, :] + 0.5 * w[:, None, :] + noise)  # (a, b, v)
    return BlockTarget(block_law(scores, blocks, leak, common), blocks, common)


def domain_split(vocab: int, domains: int, shared: int = 0) -> tuple[tuple, np.ndarray]:
    """The domain blocks and the shared tokens: the last ``shared`` ids are common to every domain,
    the others are split into ``domains`` contiguous blocks (each of at least two tokens)."""
    if domains < 1 or shared < 0 or vocab - shared < 2 * domains:
        raise ValueError(f"need vocab - shared >= 2 * domains >= 2 and shared >= 0, got vocab={vocab}, "
                         f"domains={domains}, shared={shared}")
    return tuple(np.array_split(np.arange(vocab - shared), domains)), np.arange(vocab - shared, vocab)


def block_law(scores: np.ndarray, blocks: tuple, leak: float, shared: np.ndarray | None = None) -> NGramModel:
    """``(1 - leak) softmax(scores restricted to b's block) + leak * uniform(block)`` per context.

    Parameters
    ----------
    scores : ndarray, shape ``(V+1, V+1, V)``
        Logits of the next token after each context ``(a, b)`` (index ``V``: before the start).
    blocks : tuple of ndarray
        Token ids of each domain; after the newest token ``b`` the next token stays in ``b``'s
        block (after the start symbol every token is allowed).
    leak : float
        Weight of the uniform smoothing inside the block, in ``[0, 1)``.
    shared : ndarray, optional
        Tokens common to every domain (the domains overlap through them). After a domain token the
        next token is in its block or shared; after a shared token ``b`` it is in the block of the
        older token ``a`` (a shared token never follows a shared token, so the domain is never lost).
    """
    V = scores.shape[-1]
    if scores.shape != (V + 1, V + 1, V):
        raise ValueError(f"scores must have shape (V+1, V+1, V), got {scores.shape}")
    shared = np.zeros(0, dtype=np.int64) if shared is None else np.asarray(shared, dtype=np.int64)
    block_of = np.full(V + 1, -1)  # -1: a shared token or the start symbol
    for k, b in enumerate(blocks):
        block_of[b] = k
    if np.any(block_of[shared] != -1) or np.sum(block_of[:V] == -1) != len(shared):
        raise ValueError("blocks and shared tokens must partition the vocabulary")
    is_shared = np.zeros(V, dtype=bool)
    is_shared[shared] = True
    # the newest token's block (and the shared tokens); after a shared token, the older token's
    # block; at the start of a sequence (or after two tokens without a domain), all tokens
    dom = np.where(block_of[None, :] >= 0, block_of[None, :], block_of[:, None])  # (a, b) -> domain or -1
    allowed = (block_of[None, None, :V] == dom[..., None]) | ((block_of[None, :, None] >= 0) & is_shared)
    allowed[dom < 0] = True
    allowed[:, V] = True
    inside = np.where(allowed, scores, -np.inf)
    inside = np.exp(inside - inside.max(-1, keepdims=True))
    inside /= inside.sum(-1, keepdims=True)
    flat = allowed / allowed.sum(-1, keepdims=True)
    table = (1 - leak) * inside + leak * flat  # smoothing inside the block: a domain never ends
    return NGramModel(table / table.sum(-1, keepdims=True))


def transformer_target(vocab: int, domains: int, leak: float, temperature: float, init_scale: float,
                       width: int, seed: int, heads: int = 4, layers: int = 2, shared: int = 0) -> BlockTarget:
    r"""A random-init ``transformers`` GPT-2 causal LM, read through a two-token window.

    The model is built from a ``GPT2Config`` (``layers`` blocks of width ``width``, untied output
    layer, no dropout, weights drawn with standard deviation ``init_scale``; no hub weights, no
    training) over ``V + 1`` token ids, id ``V`` being the start symbol. Its context window is two
    tokens (``n_positions = 2``), so its conditionals are exact and enumerable: one batched
    forward over the ``(V+1)^2`` contexts ``[a, b]`` gives every row. The law of the next token is
    :func:`block_law` of ``logits / temperature`` (the start id dropped from the output), so the
    domains work as in :func:`block_target`, and inside a block the law is the transformer's.

    Parameters
    ----------
    vocab, domains : int
        Tokens ``V`` and domain blocks ``K`` (``V >= 2 K``).
    leak : float
        Uniform smoothing inside the block, in ``[0, 1)``.
    temperature : float
        Sampling temperature (the issue fixes 0.7).
    init_scale : float
        ``initializer_range`` of the random init.
    width, seed, heads, layers : int
        Model width, initialisation seed (``compendium.training.seeded_init``), heads and blocks.
    shared : int
        Tokens shared by every domain (:func:`domain_split`).
    """
    blocks, common = domain_split(vocab, domains, shared)
    if not 0 <= leak < 1 or temperature <= 0 or init_scale <= 0:
        raise ValueError(f"need 0 <= leak < 1, temperature > 0, init_scale > 0; got {leak}, {temperature}, {init_scale}")
    if width < 1 or heads < 1 or width % heads or layers < 1:
        raise ValueError(f"need width divisible by heads and layers >= 1, got {width}, {heads}, {layers}")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from ...training import seeded_init

    V = vocab
    config = GPT2Config(vocab_size=V + 1, n_positions=2, n_embd=width, n_layer=layers, n_head=heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=init_scale,
                        tie_word_embeddings=False, bos_token_id=V, eos_token_id=V, pad_token_id=None)
    with seeded_init(seed):
        model = GPT2LMHeadModel(config).eval()
    a, b = np.divmod(np.arange((V + 1) ** 2), V + 1)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(np.stack([a, b], axis=1))).logits[:, -1, :V]
    scores = logits.double().numpy().reshape(V + 1, V + 1, V) / temperature
    return BlockTarget(block_law(scores, blocks, leak, common), blocks, common)


# ------------------------------------------------------------------------------------------ draft
@dataclass(frozen=True)
class DraftShape:
    """Sizes of the draft's parameter blocks inside the flat vector ``theta``."""

    vocab: int
    rank: int

    @property
    def size(self) -> int:
        V, d = self.vocab, self.rank
        return 2 * (V + 1) * d + V * d + V

    def split(self, theta: np.ndarray):
        """Views ``E1 (V+1, d), E2 (V+1, d), U (V, d), bias (V,)`` into ``theta``."""
        V, d = self.vocab, self.rank
        n = (V + 1) * d
        return (theta[:n].reshape(V + 1, d), theta[n:2 * n].reshape(V + 1, d),
                theta[2 * n:2 * n + V * d].reshape(V, d), theta[2 * n + V * d:])

    def init(self, rng: np.random.Generator, scale: float = 0.1) -> np.ndarray:
        return scale * rng.normal(size=self.size)


def draft_logits(shape: DraftShape, theta: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(E1[a] + E2[b]) U^T + bias``: shape ``a.shape + (V,)``."""
    E1, E2, U, bias = shape.split(theta)
    return (E1[a] + E2[b]) @ U.T + bias


def draft_table(shape: DraftShape, theta: np.ndarray) -> np.ndarray:
    """``q_theta(. | a, b)`` for every context, shape ``(V+1, V+1, V)``.

    The logits are additive, ``z(a, b) = E1[a] U^T + (E2[b] U^T + bias)``, so
    ``exp z(a, b) = A[a] * C[b]`` elementwise: ``2 (V+1) V`` exponentials instead of ``(V+1)^2 V``.
    """
    E1, E2, U, bias = shape.split(theta)
    z1, z2 = E1 @ U.T, E2 @ U.T + bias
    A = np.exp(z1 - z1.max(1, keepdims=True))
    C = np.exp(z2 - z2.max(1, keepdims=True))
    e = A[:, None, :] * C[None, :, :]
    total = e.sum(-1, keepdims=True)
    bad = ~(total[..., 0] > 1e-250)  # the factorised maxima underflowed: recompute those rows exactly
    if bad.any():
        a, b = np.nonzero(bad)
        e[a, b] = draft_probs(shape, theta, a, b)
        total[a, b] = 1.0
    return e / total


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def draft_probs(shape: DraftShape, theta: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``q_theta(. | a, b)``, shape ``a.shape + (V,)``."""
    return softmax(draft_logits(shape, theta, a, b))


def entropy_term(p: np.ndarray) -> np.ndarray:
    """``sum_v p log p`` per row (the constant part of ``KL(p || q)``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)


def kl_loss_and_grad(shape: DraftShape, theta: np.ndarray, a: np.ndarray, b: np.ndarray, p: np.ndarray,
                     weights: np.ndarray | None = None, neg_entropy: np.ndarray | None = None):
    r"""Weighted mean ``KL(p_i || q_theta(. | a_i, b_i))`` and its gradient in ``theta``.

    Parameters
    ----------
    a, b : ndarray of int, shape ``(N,)``
        Contexts (older, newer).
    p : ndarray, shape ``(N, V)``
        Target rows at those contexts.
    weights : ndarray, shape ``(N,)``, optional
        Non-negative, summing to 1 (uniform when omitted).
    neg_entropy : ndarray, shape ``(N,)``, optional
        ``sum_v p log p`` per row, if already computed.

    Returns
    -------
    loss : float
    grad : ndarray, shape ``theta.shape``
    """
    N = len(a)
    w = np.full(N, 1.0 / N) if weights is None else weights
    E1, E2, U, bias = shape.split(theta)
    h = E1[a] + E2[b]                                      # (N, d)
    z = h @ U.T + bias                                     # (N, V)
    z = z - z.max(axis=1, keepdims=True)
    logq = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    ne = entropy_term(p) if neg_entropy is None else neg_entropy
    loss = float(w @ (ne - (p * logq).sum(axis=1)))        # sum_v p (log p - log q)
    gz = w[:, None] * (np.exp(logq) - p)                   # d loss / d z = w (q - p)
    gh = gz @ U                                            # (N, d)
    grad = np.empty_like(theta)
    gE1, gE2, gU, gb = shape.split(grad)
    V1 = shape.vocab + 1
    for j in range(shape.rank):                            # scatter-add into the embedding rows
        gE1[:, j] = np.bincount(a, weights=gh[:, j], minlength=V1)
        gE2[:, j] = np.bincount(b, weights=gh[:, j], minlength=V1)
    gU[:] = gz.T @ h
    gb[:] = gz.sum(axis=0)
    return loss, grad


def sample_contexts(target: BlockTarget, domain_weights: np.ndarray, sequences: int, length: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Contexts met when the target generates ``length`` tokens after domain prompts.

    Each sequence picks a domain from ``domain_weights``, starts from two tokens of that domain's
    block (uniform) and is sampled from the target (plain ancestral sampling). Returns the
    context arrays ``a, b`` of every generated position, shape ``(sequences * length,)``.
    """
    tokens = domain_prompts(target, domain_weights, sequences, rng)
    V = target.vocab
    out = np.empty((sequences, length + 2), dtype=np.int64)
    out[:, :2] = tokens
    for t in range(length):
        p = target.rows(out[:, t], out[:, t + 1])
        u = rng.random(sequences)[:, None]
        out[:, t + 2] = np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), V - 1)
    return out[:, :-2].ravel(), out[:, 1:-1].ravel()


def domain_prompts(target: BlockTarget, domain_weights: np.ndarray, sequences: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Two-token prompts: a domain per sequence from ``domain_weights``, tokens uniform in its block."""
    w = np.asarray(domain_weights, dtype=float)
    if w.shape != (len(target.blocks),) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"domain_weights must be a distribution over {len(target.blocks)} domains, got {w}")
    dom = rng.choice(len(w), size=sequences, p=w)
    sizes = np.array([len(b) for b in target.blocks])
    starts = np.array([b[0] for b in target.blocks])
    return starts[dom, None] + (rng.random((sequences, 2)) * sizes[dom, None]).astype(np.int64)


def unique_contexts(a: np.ndarray, b: np.ndarray, vocab: int):
    """Distinct contexts with their frequencies: ``(a_u, b_u, weights)``, weights summing to 1."""
    key = a * (vocab + 1) + b
    uniq, counts = np.unique(key, return_counts=True)
    return uniq // (vocab + 1), uniq % (vocab + 1), counts / counts.sum()


def fit_offline(target: BlockTarget, shape: DraftShape, theta0: np.ndarray, a: np.ndarray, b: np.ndarray,
                max_iterations: int = 300) -> tuple[np.ndarray, dict]:
    """Train the draft to convergence on the contexts ``(a, b)`` (L-BFGS on the mean KL).

    Returns the parameters and ``{'loss', 'iterations', 'converged'}``.
    """
    au, bu, w = unique_contexts(a, b, target.vocab)
    p = target.rows(au, bu)
    ne = entropy_term(p)
    res = scipy.optimize.minimize(lambda th: kl_loss_and_grad(shape, th, au, bu, p, w, ne), theta0, jac=True,
                                  method="L-BFGS-B", options={"maxiter": max_iterations, "gtol": 1e-7})
    return res.x, {"loss": float(res.fun), "iterations": int(res.nit), "converged": bool(res.success)}


def expected_acceptance(target: BlockTarget, shape: DraftShape, theta: np.ndarray, a: np.ndarray,
                        b: np.ndarray) -> float:
    """Mean exact acceptance ``sum_v min(p, q)`` over the contexts ``(a, b)``."""
    from ...speculative import acceptance_rate

    return float(acceptance_rate(target.rows(a, b), draft_probs(shape, theta, a, b)).mean())
