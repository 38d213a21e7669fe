"""Backpropagation-free test-time adaptation on a stream: zero-shot, PTA and TDA.

Every method sees one sample at a time, as a unit image feature ``f`` (d,) and its zero-shot
logits ``s`` (C,), and returns adapted logits (C,). Nothing depends on labels. The state of PTA and
of TDA's caches depends only on the zero-shot outputs of past samples, never on adapted logits.

Each method also counts the arithmetic it does per sample (:func:`step_cost`, a multiply-add
counted as one operation), so throughput can be compared without a stopwatch.
"""

from __future__ import annotations

import math

import numpy as np

# TDA's published settings (ImageNet): cache sizes, entropy band of the negative cache, mask band.
TDA_POS_CAPACITY = 3
TDA_NEG_CAPACITY = 2
TDA_NEG_ALPHA = 0.117
TDA_NEG_BETA = 1.0
TDA_ENTROPY_BAND = (0.2, 0.5)
TDA_MASK_BAND = (0.03, 1.0)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(..., C)`` logits."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats of ``(..., C)`` probabilities."""
    return -(probs * np.log(np.clip(probs, 1e-300, None))).sum(axis=-1)


def affinity_logits(cosine: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Tip-Adapter/TDA affinity ``alpha * exp(-beta (1 - cos))``."""
    return alpha * np.exp(-beta * (1.0 - cosine))


class ZeroShot:
    """The frozen dual encoder: adapted logits are the zero-shot logits."""

    name = "zero-shot"

    def __init__(self, num_classes: int, dim: int):
        self.num_classes, self.dim = num_classes, dim

    def observe(self, feature, logits) -> None:
        pass

    def step(self, feature: np.ndarray, logits: np.ndarray) -> np.ndarray:
        return logits

    def cost(self) -> int:
        return step_cost("zero-shot", self.num_classes, self.dim)


class PTA:
    r"""Prototype-based test-time adaptation: one knowledge prototype per class.

    For each sample, with zero-shot probabilities ``p = softmax(s)`` and update weight ``lam``::

        w_c = lam * p_c                      (soft)   or   lam * p_max * [c = argmax p]  (hard)
        P_c <- P_c + w_c f,   m_c <- m_c + w_c          (before predicting, as TDA does)
        logits_c = s_c + alpha * exp(-beta (1 - cos(f, P_c)))   if m_c > 0, else s_c

    ``P`` starts at zero, so after ``t`` samples ``P_c = sum_i w_ic f_i`` whatever the order, and
    ``lam = 0`` leaves the logits equal to the zero-shot ones bit for bit. Per sample this costs
    two ``C x d`` products (read-out and rank-one update): the squared norms of the prototypes are
    updated in O(C) from the read-out, never recomputed.

    Parameters
    ----------
    num_classes, dim : int
        ``C`` and ``d``.
    alpha, beta : float
        Residual weight and sharpness of the read-out.
    mode : {"soft", "hard", "uniform"}
        ``uniform`` is the control without confidence weighting: weight ``lam`` on the predicted class.
    update_weight : float
        ``lam`` >= 0; with zero-initialised prototypes any positive value gives the same logits.
    """

    name = "PTA"

    def __init__(self, num_classes: int, dim: int, alpha: float = 2.0, beta: float = 5.0,
                 mode: str = "soft", update_weight: float = 1.0):
        if mode not in ("soft", "hard", "uniform"):
            raise ValueError(f"mode must be 'soft', 'hard' or 'uniform', got {mode!r}")
        if update_weight < 0 or alpha < 0 or beta < 0:
            raise ValueError("alpha, beta and update_weight must be non-negative")
        self.num_classes, self.dim = num_classes, dim
        self.alpha, self.beta, self.mode, self.update_weight = alpha, beta, mode, update_weight
        self.prototypes = np.zeros((num_classes, dim))   # P (C, d)
        self.sq_norms = np.zeros(num_classes)             # ||P_c||^2 (C,)
        self.mass = np.zeros(num_classes)                 # m (C,)

    def _weights(self, logits: np.ndarray) -> np.ndarray:
        p = softmax(logits)
        if self.mode == "soft":
            return self.update_weight * p
        w = np.zeros_like(p)
        c = int(p.argmax())
        w[c] = self.update_weight * (p[c] if self.mode == "hard" else 1.0)  # uniform: no confidence
        return w

    def observe(self, feature: np.ndarray, logits: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Update the prototypes with one sample; return ``P_c . f`` after the update (C,).

        ``weights`` (C,) replaces the confidence weights (used for the label oracle only).
        """
        w = self._weights(logits) if weights is None else np.asarray(weights, dtype=np.float64)
        dot = self.prototypes @ feature                          # P_c . f before the update
        ff = float(feature @ feature)
        self.prototypes += w[:, None] * feature[None, :]          # rank-one update, (C, d)
        self.sq_norms += 2.0 * w * dot + w * w * ff               # ||P_c + w_c f||^2
        self.mass += w
        return dot + w * ff

    def step(self, feature: np.ndarray, logits: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        dot = self.observe(feature, logits, weights)
        live = self.mass > 0
        adapted = np.array(logits, dtype=np.float64, copy=True)
        if live.any():
            cos = dot[live] / np.sqrt(np.maximum(self.sq_norms[live], 1e-300))
            adapted[live] += affinity_logits(cos, self.alpha, self.beta)
        return adapted

    def cost(self) -> int:
        return step_cost("PTA-" + self.mode, self.num_classes, self.dim)


def pta_weights(logits: np.ndarray, mode: str = "soft", update_weight: float = 1.0) -> np.ndarray:
    """PTA's update weights ``W`` ``(n, C)`` for a stream of zero-shot logits ``(n, C)``."""
    p = softmax(logits)
    if mode in ("hard", "uniform"):
        w = np.zeros_like(p)
        rows, top = np.arange(p.shape[0]), p.argmax(1)
        w[rows, top] = p[rows, top] if mode == "hard" else 1.0
        p = w
    elif mode != "soft":
        raise ValueError(f"mode must be 'soft', 'hard' or 'uniform', got {mode!r}")
    return update_weight * p


def pta_prototypes(features: np.ndarray, logits: np.ndarray, mode: str = "soft",
                   update_weight: float = 1.0) -> np.ndarray:
    """Closed form of PTA's prototypes after a whole stream: ``P = W^T F`` ``(C, d)``."""
    return pta_weights(logits, mode, update_weight).T @ features


class TDA:
    r"""Training-free dynamic adapter with positive and negative caches (array implementation).

    Per sample: ``p = softmax(s)``, ``H`` its entropy (nats), ``c* = argmax p``.

    * positive cache, ``K_pos`` entries per predicted class: insert ``(f, H)`` if there is room,
      else replace the highest-entropy entry when ``H`` is lower;
    * negative cache, ``K_neg`` per class, only when ``H / log2(C)`` lies in the entropy band
      (TDA normalises natural-log entropy by ``log2 C``; kept as released), storing ``(f, H, p)``;
    * logits ``s + a_pos exp(-b_pos (1 - f K_pos)) Y_pos - a_neg exp(-b_neg (1 - f K_neg)) M``,
      ``Y_pos`` one-hot labels of the cached entries and ``M = 1[0.03 < p < 1]`` of the stored ``p``.

    The caches are updated before the read-out. ``retrieval="released"`` forms the dense one-hot
    ``Y_pos`` (N_pos x C) and recomputes ``M`` on each call, as TDA's code does;
    ``retrieval="vectorised"`` scatters the positive affinities into their classes and keeps the
    masks from insertion time. Both give the same logits up to round-off.
    """

    name = "TDA"

    def __init__(self, num_classes: int, dim: int, alpha: float = 2.0, beta: float = 5.0,
                 retrieval: str = "vectorised", pos_capacity: int = TDA_POS_CAPACITY,
                 neg_capacity: int = TDA_NEG_CAPACITY, neg_alpha: float = TDA_NEG_ALPHA,
                 neg_beta: float = TDA_NEG_BETA, entropy_band=TDA_ENTROPY_BAND, mask_band=TDA_MASK_BAND):
        if retrieval not in ("released", "vectorised"):
            raise ValueError(f"retrieval must be 'released' or 'vectorised', got {retrieval!r}")
        if pos_capacity < 1 or neg_capacity < 0:
            raise ValueError("pos_capacity must be >= 1 and neg_capacity >= 0")
        C, d = num_classes, dim
        self.num_classes, self.dim, self.retrieval = C, d, retrieval
        self.alpha, self.beta, self.neg_alpha, self.neg_beta = alpha, beta, neg_alpha, neg_beta
        self.entropy_band, self.mask_band = entropy_band, mask_band
        self.pos_keys = np.zeros((C, pos_capacity, d))
        self.pos_entropy = np.full((C, pos_capacity), np.inf)
        self.pos_count = np.zeros(C, dtype=np.int64)
        self.neg_keys = np.zeros((C, neg_capacity, d))
        self.neg_entropy = np.full((C, neg_capacity), np.inf)
        self.neg_probs = np.zeros((C, neg_capacity, C))
        self.neg_mask = np.zeros((C, neg_capacity, C))
        self.neg_count = np.zeros(C, dtype=np.int64)
        self.occupancy: list[tuple[int, int]] = []   # (N_pos, N_neg) at each read-out

    @staticmethod
    def _insert(keys, ent, count, cls, feature, h) -> int | None:
        capacity = keys.shape[1]
        if capacity == 0:
            return None
        if count[cls] < capacity:
            slot = int(count[cls])
            count[cls] += 1
        else:
            slot = int(ent[cls].argmax())
            if not h < ent[cls, slot]:
                return None
        keys[cls, slot] = feature
        ent[cls, slot] = h
        return slot

    def observe(self, feature: np.ndarray, logits: np.ndarray) -> None:
        """Update both caches with one sample (no read-out)."""
        p = softmax(logits)
        h = float(entropy(p))
        cls = int(p.argmax())
        self._insert(self.pos_keys, self.pos_entropy, self.pos_count, cls, feature, h)
        normalised = h / math.log2(self.num_classes)
        if self.entropy_band[0] < normalised < self.entropy_band[1]:
            slot = self._insert(self.neg_keys, self.neg_entropy, self.neg_count, cls, feature, h)
            if slot is not None:
                self.neg_probs[cls, slot] = p
                lo, hi = self.mask_band
                self.neg_mask[cls, slot] = (p > lo) & (p < hi)

    def _occupied(self, count: np.ndarray, capacity: int) -> np.ndarray:
        return np.arange(capacity)[None, :] < count[:, None]           # (C, K) bool

    def step(self, feature: np.ndarray, logits: np.ndarray) -> np.ndarray:
        self.observe(feature, logits)
        C = self.num_classes
        adapted = np.array(logits, dtype=np.float64, copy=True)
        pos = self._occupied(self.pos_count, self.pos_keys.shape[1])
        neg = self._occupied(self.neg_count, self.neg_keys.shape[1])
        n_pos, n_neg = int(pos.sum()), int(neg.sum())
        self.occupancy.append((n_pos, n_neg))
        if n_pos:
            keys = self.pos_keys[pos]                                   # (N_pos, d), class-major
            a = affinity_logits(keys @ feature, 1.0, self.beta)         # (N_pos,)
            classes = np.nonzero(pos)[0]
            if self.retrieval == "released":
                values = np.zeros((n_pos, C))
                values[np.arange(n_pos), classes] = 1.0                 # one-hot Y_pos (N_pos, C)
                adapted += self.alpha * (a @ values)
            else:
                adapted += self.alpha * np.bincount(classes, weights=a, minlength=C)
        if n_neg:
            keys = self.neg_keys[neg]
            a = affinity_logits(keys @ feature, 1.0, self.neg_beta)
            if self.retrieval == "released":
                probs = self.neg_probs[neg]
                lo, hi = self.mask_band
                mask = ((probs > lo) & (probs < hi)).astype(np.float64)  # (N_neg, C)
            else:
                mask = self.neg_mask[neg]
            adapted -= self.neg_alpha * (a @ mask)
        return adapted

    def cost(self) -> float:
        """Mean operations per sample over the read-outs so far (occupancy-dependent)."""
        if not self.occupancy:
            return float(step_cost("TDA-" + self.retrieval, self.num_classes, self.dim, 0, 0))
        occ = np.array(self.occupancy)
        return float(np.mean([step_cost("TDA-" + self.retrieval, self.num_classes, self.dim, int(a), int(b))
                              for a, b in occ]))


def tda_reference_logits(features: np.ndarray, logits: np.ndarray, alpha: float = 2.0, beta: float = 5.0,
                         pos_capacity: int = TDA_POS_CAPACITY, neg_capacity: int = TDA_NEG_CAPACITY,
                         neg_alpha: float = TDA_NEG_ALPHA, neg_beta: float = TDA_NEG_BETA,
                         entropy_band=TDA_ENTROPY_BAND, mask_band=TDA_MASK_BAND) -> np.ndarray:
    """Slow reference for :class:`TDA`: caches as dicts of entropy-sorted lists, a loop per sample.

    Returns the adapted logits ``(n, C)`` of the whole stream.
    """
    n, C = logits.shape
    pos: dict[int, list] = {}
    neg: dict[int, list] = {}

    def update(cache, cls, item, capacity):
        entries = cache.setdefault(cls, [])
        if len(entries) < capacity:
            entries.append(item)
        elif item[1] < entries[-1][1]:
            entries[-1] = item
        entries.sort(key=lambda e: e[1])

    out = np.zeros((n, C))
    for i in range(n):
        f, s = features[i], logits[i]
        p = softmax(s)
        h = float(entropy(p))
        cls = int(p.argmax())
        update(pos, cls, (f, h), pos_capacity)
        if neg_capacity and entropy_band[0] < h / math.log2(C) < entropy_band[1]:
            update(neg, cls, (f, h, p), neg_capacity)
        total = s.astype(np.float64).copy()
        for c in sorted(pos):
            for key, _ in pos[c]:
                total[c] += alpha * math.exp(-beta * (1.0 - float(key @ f)))
        for c in sorted(neg):
            for key, _, prob in neg[c]:
                weight = neg_alpha * math.exp(-neg_beta * (1.0 - float(key @ f)))
                total -= weight * ((prob > mask_band[0]) & (prob < mask_band[1]))
        out[i] = total
    return out


def step_cost(method: str, num_classes: int, dim: int, n_pos: int = 0, n_neg: int = 0) -> int:
    """Arithmetic operations per sample after the image encoder (a multiply-add counts as one).

    ``zero-shot``: the head ``s = scale f T^T`` (C d + C). Every adaptive method adds a softmax
    (3C). ``PTA-soft``: read-out ``P f`` (C d), rank-one update (C d), norms, mass, cosine and
    affinity (15 C). ``PTA-hard``: the update touches one row (d). ``TDA-*``: entropy (2C), cache
    insertion (O(K), taken as 4), then per cached entry a key product (d) and an affinity (3); the
    released read-out multiplies by dense values (N C) and recomputes the masks (2 N_neg C), the
    vectorised one scatters positives (N_pos) and keeps the masks (N_neg C for the product, C per
    insertion, counted as C).
    """
    C, d = int(num_classes), int(dim)
    head = C * d + C
    if method == "zero-shot":
        return head
    adaptive = head + 3 * C
    if method == "PTA-soft":
        return adaptive + 2 * C * d + 15 * C
    if method == "PTA-hard":
        return adaptive + C * d + d + 15 * C
    if method in ("TDA-released", "TDA-vectorised"):
        base = adaptive + 2 * C + 4 + (n_pos + n_neg) * (d + 3) + 2 * C * (n_pos > 0) + 2 * C * (n_neg > 0)
        if method == "TDA-released":
            return base + n_pos * C + n_neg * C + 2 * n_neg * C
        return base + n_pos + n_neg * C + C
    raise ValueError(f"unknown method {method!r}")


def pta_trace(features: np.ndarray, logits: np.ndarray, mode: str = "soft") -> tuple[np.ndarray, np.ndarray]:
    """PTA's state along a stream, independent of ``alpha`` and ``beta``.

    Returns ``cos (n, C)``, the cosine of each sample with each prototype after its update, and
    ``live (n, C)``, whether the prototype has mass. :func:`pta_logits` turns them into logits.
    """
    n, C = logits.shape
    pta = PTA(C, features.shape[1], mode=mode)
    cos, live = np.zeros((n, C)), np.zeros((n, C), dtype=bool)
    for i in range(n):
        dot = pta.observe(features[i], logits[i])
        live[i] = pta.mass > 0
        cos[i, live[i]] = dot[live[i]] / np.sqrt(np.maximum(pta.sq_norms[live[i]], 1e-300))
    return cos, live


def pta_logits(logits: np.ndarray, cos: np.ndarray, live: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """PTA's adapted logits ``(n, C)`` from a :func:`pta_trace`."""
    return logits + np.where(live, affinity_logits(cos, alpha, beta), 0.0)


def tda_trace(features: np.ndarray, logits: np.ndarray, betas) -> tuple[np.ndarray, np.ndarray]:
    """TDA's cache read-outs along a stream for several ``beta`` at once (the caches do not depend on them).

    Returns ``pos (len(betas), n, C)``, the positive affinities summed per class (``alpha = 1``),
    and ``neg (n, C)``, the negative-cache term with TDA's fixed constants. Then
    ``logits = s + alpha * pos[b] - neg`` (:func:`tda_logits`).
    """
    n, C = logits.shape
    betas = np.asarray(betas, dtype=np.float64)
    tda = TDA(C, features.shape[1])
    pos, neg = np.zeros((betas.size, n, C)), np.zeros((n, C))
    for i in range(n):
        f = features[i]
        tda.observe(f, logits[i])
        occupied = np.arange(tda.pos_keys.shape[1])[None, :] < tda.pos_count[:, None]
        sims = tda.pos_keys[occupied] @ f
        classes = np.nonzero(occupied)[0]
        for b, beta in enumerate(betas):
            pos[b, i] = np.bincount(classes, weights=np.exp(-beta * (1.0 - sims)), minlength=C)
        occupied = np.arange(tda.neg_keys.shape[1])[None, :] < tda.neg_count[:, None]
        if occupied.any():
            a = affinity_logits(tda.neg_keys[occupied] @ f, tda.neg_alpha, tda.neg_beta)
            neg[i] = a @ tda.neg_mask[occupied]
    return pos, neg


def tda_logits(logits: np.ndarray, pos: np.ndarray, neg: np.ndarray, alpha: float) -> np.ndarray:
    """TDA's adapted logits ``(n, C)`` from one ``beta`` slice ``pos (n, C)`` of a :func:`tda_trace`."""
    return logits + alpha * pos - neg


def run_stream(method, features: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """Adapted logits ``(n, C)`` of ``method`` over a stream of features ``(n, d)`` and logits ``(n, C)``."""
    if features.shape[0] != logits.shape[0]:
        raise ValueError(f"features ({features.shape[0]}) and logits ({logits.shape[0]}) differ in length")
    out = np.empty(logits.shape)
    for i in range(features.shape[0]):
        out[i] = method.step(features[i], logits[i])
    return out
