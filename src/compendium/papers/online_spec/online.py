r"""Draft-then-verify decoding of a chunk of prompts, the drifting prompt streams and the online
learners that update the draft from what verification revealed.

Protocol (one *chunk* = one round of online learning, as in the paper's pipelines):

1. the stream hands over ``B`` prompts; each is decoded to ``length`` tokens by speculative
   sampling with the current draft (``gamma`` drafts per target call, :func:`decode_chunk`);
2. every draft-verified position on the committed path gives a context ``(a, b)``, the target's
   row ``p(. | a, b)`` (computed by the verification anyway) and the exact acceptance
   ``alpha = sum_v min(p, q)`` of the draft that was played;
3. the learner pays ``l_t(theta_t)`` = the mean ``KL(p || q_theta)`` over those contexts and
   updates its draft (:class:`OGD`, :class:`Optimistic`, :class:`Momentum`, the two Hedge
   ensembles, or nothing: :class:`Fixed`).

Nothing the learner does can change the output law: within a chunk the draft is fixed, and every
verify step is exact (:func:`compendium.speculative.spec_verify`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...speculative import acceptance_rate, categorical, spec_verify
from .model import (BlockTarget, DraftShape, domain_prompts, draft_probs, draft_table, entropy_term,
                    kl_loss_and_grad)


# ------------------------------------------------------------------------------------------ decoding
@dataclass
class Chunk:
    """What verification revealed in one chunk (for one learner, or for all learners at once).

    Attributes
    ----------
    row : ndarray of int, shape ``(N,)``
        Sequence of each draft-verified position on the committed path.
    a, b : ndarray of int, shape ``(N,)``
        Their contexts.
    p, q : ndarray, shape ``(N, V)``
        Target rows there, and the played draft's rows.
    alpha : ndarray, shape ``(N,)``
        Exact acceptance ``sum_v min(p, q)`` of the played draft at each of them.
    accepted : ndarray of int, shape ``(calls,)``; call_row : ndarray of int, shape ``(calls,)``
        Drafts accepted at each target call, and its sequence.
    tokens : ndarray of int, shape ``(B, 2 + length)``
        Prompts and emitted tokens.
    """

    row: np.ndarray
    a: np.ndarray
    b: np.ndarray
    p: np.ndarray
    q: np.ndarray
    alpha: np.ndarray
    accepted: np.ndarray
    call_row: np.ndarray
    tokens: np.ndarray

    @property
    def tokens_per_call(self) -> float:
        return float(np.mean(self.accepted + 1))

    def rows(self, lo: int, hi: int) -> "Chunk":
        """The part of the chunk that belongs to sequences ``lo .. hi - 1``."""
        pos = (self.row >= lo) & (self.row < hi)
        call = (self.call_row >= lo) & (self.call_row < hi)
        return Chunk(self.row[pos] - lo, self.a[pos], self.b[pos], self.p[pos], self.q[pos], self.alpha[pos],
                     self.accepted[call], self.call_row[call] - lo, self.tokens[lo:hi])


def decode_chunk(target: BlockTarget, draft, prompts: np.ndarray, length: int, gamma: int,
                 rng: np.random.Generator) -> Chunk:
    """Speculative decoding of ``length`` tokens after each prompt, all prompts in lockstep.

    Parameters
    ----------
    target : BlockTarget
    draft : callable
        ``draft(rows, a, b) -> q``: the draft of sequences ``rows`` at contexts ``a, b`` (all of
        shape ``(R,)``), ``q`` of shape ``(R, V)``.
    prompts : ndarray of int, shape ``(B, 2)``
    length, gamma : int
        Tokens to emit per prompt; drafts per target call.
    rng : numpy.random.Generator
    """
    B, V = len(prompts), target.vocab
    end = 2 + length
    tokens = np.zeros((B, end + gamma + 1), dtype=np.int64)
    tokens[:, :2] = prompts
    n = np.full(B, 2)
    rec = {k: [] for k in ("row", "a", "b", "p", "q", "alpha", "accepted", "call_row")}
    steps = np.arange(gamma + 1)
    while (active := np.flatnonzero(n < end)).size:
        R = active.size
        ca = np.empty((R, gamma + 1), dtype=np.int64)
        cb = np.empty((R, gamma + 1), dtype=np.int64)
        drafts = np.empty((R, gamma), dtype=np.int64)
        qs = np.empty((R, gamma, V))
        a, b = tokens[active, n[active] - 2], tokens[active, n[active] - 1]
        for j in range(gamma):                      # gamma draft calls, each on its own last draft
            ca[:, j], cb[:, j] = a, b
            qs[:, j] = draft(active, a, b)
            drafts[:, j] = categorical(qs[:, j], rng)
            a, b = b, drafts[:, j]
        ca[:, gamma], cb[:, gamma] = a, b
        p = target.rows(ca, cb)                     # one target call: gamma + 1 rows per sequence
        n_acc, nxt = spec_verify(p, qs, drafts, rng.random((R, gamma)), rng.exponential(size=(R, V)))
        out = np.where(steps[None, :gamma] < n_acc[:, None], drafts, nxt[:, None])
        tokens[active[:, None], n[active, None] + steps[:gamma]] = out
        tokens[active, n[active] + gamma] = nxt     # only kept when every draft passed
        verified = steps[None, :gamma] <= np.minimum(n_acc, gamma - 1)[:, None]
        pv, qv = p[:, :gamma][verified], qs[verified]
        rec["row"].append(np.broadcast_to(active[:, None], verified.shape)[verified])
        rec["a"].append(ca[:, :gamma][verified])
        rec["b"].append(cb[:, :gamma][verified])
        rec["p"].append(pv)
        rec["q"].append(qv)
        rec["alpha"].append(acceptance_rate(pv, qv))
        rec["accepted"].append(n_acc)
        rec["call_row"].append(active)
        n[active] += n_acc + 1
    return Chunk(**{k: np.concatenate(v) for k, v in rec.items()}, tokens=tokens[:, :end])


# ------------------------------------------------------------------------------------------ streams
STREAMS = ("piecewise", "smooth", "stationary")


def stream_weights(kind: str, chunks: int, domains: int) -> np.ndarray:
    """Domain mixture of each chunk, shape ``(chunks, domains)``.

    ``piecewise``: four equal segments A -> B -> C -> A (domains 0, 1, 2, 0); ``smooth``: the
    weights ``softmax(4 cos(2 pi (t / chunks - k / K)))`` rotate once through the domains;
    ``stationary``: always domain A.
    """
    if kind not in STREAMS:
        raise ValueError(f"stream must be one of {STREAMS}, got {kind!r}")
    if chunks < 4 or domains < 3:
        raise ValueError(f"need chunks >= 4 and domains >= 3, got {chunks}, {domains}")
    w = np.zeros((chunks, domains))
    if kind == "piecewise":
        w[np.arange(chunks), segment_domains(chunks)] = 1.0
    elif kind == "smooth":
        t = np.arange(chunks)[:, None] / chunks
        z = 4.0 * np.cos(2 * np.pi * (t - np.arange(domains)[None, :] / domains))
        w = np.exp(z - z.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
    else:
        w[:, 0] = 1.0
    return w


def segment_domains(chunks: int) -> np.ndarray:
    """Domain of each chunk of the piecewise stream: A, B, C, A in four (near-)equal segments."""
    return np.array([0, 1, 2, 0])[np.minimum(np.arange(chunks) * 4 // chunks, 3)]


# ------------------------------------------------------------------------------------------ learners
class Learner:
    """Base class: one draft played per chunk, updated after its verification.

    A learner's draft is a mixture ``sum_k w_k q_{theta_k}`` of :meth:`components` (one
    component with weight 1 for every learner but :class:`HedgeMixture`).
    """

    def __init__(self, shape: DraftShape, theta: np.ndarray):
        self.shape = shape
        self.theta = np.array(theta, dtype=float)

    def components(self) -> tuple[list, np.ndarray]:
        return [self.theta], np.ones(1)

    def draft(self, a, b):
        thetas, w = self.components()
        return sum(wk * draft_probs(self.shape, th, a, b) for wk, th in zip(w, thetas))

    @staticmethod
    def loss(chunk: Chunk, neg_entropy) -> float:
        """``l_t`` of the played draft: mean ``KL(p || q)`` over the chunk's verified contexts."""
        return float(np.mean(neg_entropy - (chunk.p * np.log(np.maximum(chunk.q, 1e-300))).sum(1)))

    def _grad(self, theta, chunk, neg_entropy):
        return kl_loss_and_grad(self.shape, theta, chunk.a, chunk.b, chunk.p, neg_entropy=neg_entropy)

    def update(self, chunk: Chunk, neg_entropy, chunk_index: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Fixed(Learner):
    """No update (the offline draft); ``schedule`` switches among fixed drafts by chunk (the oracle)."""

    def __init__(self, shape, theta, schedule: list | None = None):
        super().__init__(shape, theta if schedule is None else schedule[0])
        self.schedule = schedule

    def update(self, chunk, neg_entropy, chunk_index):
        if self.schedule is not None and chunk_index + 1 < len(self.schedule):
            self.theta = np.asarray(self.schedule[chunk_index + 1], dtype=float)


class OGD(Learner):
    """Online gradient descent: ``theta <- theta - eta * grad l_t(theta)``."""

    def __init__(self, shape, theta, learning_rate: float):
        super().__init__(shape, theta)
        self.learning_rate = float(learning_rate)

    def update(self, chunk, neg_entropy, chunk_index):
        self.theta = self.theta - self.learning_rate * self._grad(self.theta, chunk, neg_entropy)[1]


class Optimistic(Learner):
    r"""Optimistic OGD with the last gradient as hint: ``theta <- theta - eta (2 g_t - g_{t-1})``.

    This is the one-sequence form of ``x_t = y_{t-1} - eta M_t``, ``y_t = y_{t-1} - eta g_t`` with
    ``M_t = g_{t-1}`` (``g_0 = 0``).
    """

    def __init__(self, shape, theta, learning_rate: float):
        super().__init__(shape, theta)
        self.learning_rate = float(learning_rate)
        self.last = np.zeros_like(self.theta)

    def update(self, chunk, neg_entropy, chunk_index):
        g = self._grad(self.theta, chunk, neg_entropy)[1]
        self.theta = self.theta - self.learning_rate * (2 * g - self.last)
        self.last = g


class Momentum(Learner):
    """Heavy-ball SGD whose velocity is carried across chunks (the Opt-Hydra recipe).

    ``v <- mu v + g``, ``theta <- theta - (1 - mu) eta v``: the factor ``1 - mu`` makes ``eta``
    the long-run step size, comparable with OGD's.
    """

    def __init__(self, shape, theta, learning_rate: float, momentum: float = 0.9):
        super().__init__(shape, theta)
        self.learning_rate, self.momentum = float(learning_rate), float(momentum)
        self.velocity = np.zeros_like(self.theta)

    def update(self, chunk, neg_entropy, chunk_index):
        self.velocity = self.momentum * self.velocity + self._grad(self.theta, chunk, neg_entropy)[1]
        self.theta = self.theta - (1 - self.momentum) * self.learning_rate * self.velocity


def hedge_step(log_w: np.ndarray, losses: np.ndarray, rate: float, share: float) -> np.ndarray:
    """Exponential weights with fixed share, in log space.

    ``w <- (1 - share) w e^{-rate l} / Z + share / K``.
    """
    z = log_w - rate * np.asarray(losses, dtype=float)
    w = np.exp(z - z.max())
    w = (1 - share) * w / w.sum() + share / len(w)
    return np.log(w)


class HedgeAverage(Learner):
    """Hedge over step sizes, parameter average (the Ens-EAGLE form).

    Each chunk every base learner ``k`` proposes ``theta - eta_k g`` from the *shared* played
    parameters; once the next chunk is verified, each proposal's loss on it updates the weights
    (out of sample: the proposals were made before that chunk), and the played draft is the
    weighted average of the new proposals.
    """

    def __init__(self, shape, theta, learning_rates, rate: float, share: float):
        super().__init__(shape, theta)
        self.learning_rates = np.asarray(learning_rates, dtype=float)
        self.rate, self.share = float(rate), float(share)
        self.log_w = np.full(len(self.learning_rates), -np.log(len(self.learning_rates)))
        self.proposals = None

    @property
    def weights(self) -> np.ndarray:
        return np.exp(self.log_w)

    def update(self, chunk, neg_entropy, chunk_index):
        if self.proposals is not None:  # score last chunk's proposals on this chunk
            losses = [kl_loss_and_grad(self.shape, th, chunk.a, chunk.b, chunk.p, neg_entropy=neg_entropy)[0]
                      for th in self.proposals]
            self.log_w = hedge_step(self.log_w, losses, self.rate, self.share)
        g = self._grad(self.theta, chunk, neg_entropy)[1]
        self.proposals = [self.theta - eta * g for eta in self.learning_rates]
        self.theta = np.tensordot(self.weights, np.stack(self.proposals), axes=1)


class HedgeMixture(Learner):
    """Hedge over independent OGD learners, prediction mixture ``q = sum_k w_k q_k``.

    Each base learner runs its own OGD at its own step size; the weights follow each learner's
    loss on the chunk it was played on. Drafting evaluates all base drafts (``K`` times the draft
    cost).
    """

    def __init__(self, shape, theta, learning_rates, rate: float, share: float):
        super().__init__(shape, theta)
        self.learning_rates = np.asarray(learning_rates, dtype=float)
        self.rate, self.share = float(rate), float(share)
        self.log_w = np.full(len(self.learning_rates), -np.log(len(self.learning_rates)))
        self.thetas = [self.theta.copy() for _ in self.learning_rates]

    @property
    def weights(self) -> np.ndarray:
        return np.exp(self.log_w)

    def components(self):
        return self.thetas, self.weights

    def update(self, chunk, neg_entropy, chunk_index):
        losses, grads = zip(*(self._grad(th, chunk, neg_entropy) for th in self.thetas))
        self.log_w = hedge_step(self.log_w, losses, self.rate, self.share)
        self.thetas = [th - eta * g for th, eta, g in zip(self.thetas, self.learning_rates, grads)]


class StackedDraft:
    """The drafts of several learners as one batched function ``(rows, a, b) -> q``.

    Sequence ``r`` belongs to learner ``r // prompts``. Each learner's draft is tabulated once per
    chunk over all ``(V+1)^2`` contexts (it does not change within a chunk), so a draft call is a
    table look-up.
    """

    def __init__(self, shape: DraftShape, learners: list, prompts: int):
        tables = []
        for learner in learners:
            thetas, w = learner.components()
            tables.append(sum(wk * draft_table(shape, th) for wk, th in zip(w, thetas)))
        self.table = np.stack(tables)  # (M, V+1, V+1, V)
        self.prompts = prompts

    def __call__(self, rows, a, b):
        return self.table[rows // self.prompts, a, b]


def uniform_acceptance(p: np.ndarray) -> np.ndarray:
    """Exact acceptance ``sum_v min(p_v, 1/V)`` of the uniform draft at each target row ``p`` (shape ``(N, V)``).

    The uniform draft is the constant prediction that needs no training and knows nothing of the
    domains: the trivial baseline a learned draft must beat.
    """
    p = np.asarray(p, dtype=float)
    return acceptance_rate(p, np.full_like(p, 1.0 / p.shape[-1]))


# ------------------------------------------------------------------------------------------ a run
@dataclass
class StreamRun:
    """Per-chunk record of one learner on one stream."""

    alpha: np.ndarray            # (chunks,) mean exact acceptance over verified positions
    loss: np.ndarray             # (chunks,) l_t(theta_t): mean KL over the same positions
    tokens_per_call: np.ndarray  # (chunks,) measured
    positions: np.ndarray        # (chunks,) verified positions
    emitted: np.ndarray = field(repr=False, default=None)  # (M, 3): context (a, b) and the emitted token
    uniform_alpha: np.ndarray = None  # (chunks,) exact acceptance of the uniform draft on the same positions

    @property
    def mean_uniform_alpha(self) -> float:
        """Mean over chunks of the uniform draft's acceptance on this run's verified positions."""
        return float(self.uniform_alpha.mean())

    @property
    def mean_alpha(self) -> float:
        return float(self.alpha.mean())


def run_streams(target: BlockTarget, learners: list, weights: np.ndarray, prompts_per_chunk: int, length: int,
                gamma: int, rng: np.random.Generator, keep_emitted: tuple = ()) -> list[StreamRun]:
    """Play every learner along one stream; chunk ``t`` draws its prompts from ``weights[t]``.

    All learners get the same prompts (equal information) and are decoded together in one
    lockstep batch, learner ``m`` owning sequences ``m B .. (m+1) B - 1``; each then updates on
    its own verified positions. On those same positions the run also records the exact acceptance
    of the uniform draft ``q = 1/V`` (:func:`uniform_acceptance`), the trivial baseline of the
    chapter's floor; it draws no random numbers. ``keep_emitted`` lists the learners whose emitted tokens (with
    their contexts) are returned, for the losslessness test.
    """
    chunks, M, B = len(weights), len(learners), prompts_per_chunk
    shape = learners[0].shape
    out = {k: np.zeros((M, chunks)) for k in ("alpha", "loss", "tpc", "npos", "uniform")}
    emitted = {m: [] for m in keep_emitted}
    for t in range(chunks):
        prompts = domain_prompts(target, weights[t], B, rng)
        chunk = decode_chunk(target, StackedDraft(shape, learners, B), np.tile(prompts, (M, 1)), length, gamma, rng)
        for m, learner in enumerate(learners):
            own = chunk.rows(m * B, (m + 1) * B)
            ne = entropy_term(own.p)
            out["alpha"][m, t] = own.alpha.mean()
            out["loss"][m, t] = learner.loss(own, ne)
            out["tpc"][m, t] = own.tokens_per_call
            out["npos"][m, t] = len(own.a)
            out["uniform"][m, t] = uniform_acceptance(own.p).mean()
            if m in emitted:
                tok = own.tokens
                emitted[m].append(np.stack([tok[:, :-2].ravel(), tok[:, 1:-1].ravel(), tok[:, 2:].ravel()], axis=1))
            learner.update(own, ne, t)
    return [StreamRun(out["alpha"][m], out["loss"][m], out["tpc"][m], out["npos"][m],
                      np.concatenate(emitted[m]) if m in emitted else None, uniform_alpha=out["uniform"][m])
            for m in range(M)]
