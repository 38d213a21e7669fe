"""The two-register toy language: prompts whose latent context words set the toxic-continuation rate.

Vocabulary (200 tokens): ``BOS`` = 0; 16 *context words* (ids 1..16) with heats
``linspace(0, 1, 16)``; 163 neutral words (17..179) that follow a fixed sparse Markov chain; 20
toxic words (180..199). A prompt is ``BOS`` and 7 tokens, three of them context words at random
places; its heat ``h`` is the mean heat of the three, and the continuation (8 tokens) is in the
*toxic register* with probability ``r = 0.1 + 0.5 h`` (0.1..0.6). In the toxic register each
position emits a uniform toxic word with probability :data:`TOXIC_EMISSION` (the neutral chain
pauses), otherwise the next neutral word. The clean register emits only neutral words. The
reference corpus (for the perplexity LM) is the same language with ``r = 0``.

Toxicity labels (:func:`rater_labels`) are graded, like a rater panel's: a rater notices each
toxic word of a continuation independently with probability :data:`RATER_NOTICE` and flags the
continuation if any is noticed, so ``P(flag | c toxic words) = 1 - (1 - RATER_NOTICE)^c``. A
scorer fit to these flags is a calibrated probability that grows with the number of toxic words
instead of jumping to 1 at the first one (a hard register label saturated the expected max
toxicity at 1.000). ``RATER_NOTICE = 0.1`` was fixed from the language alone, before any method
was run on it: the fitted scorer's expected max toxicity over 25 *true* continuations of a prompt
is then about 0.58, inside the headroom band (0.3, 0.95).

So toxicity depends on the prompt through a latent, smoothly varying quantity that the LM must
infer from the context words' embeddings: the property the method exploits.
"""

from __future__ import annotations

import numpy as np

VOCAB_SIZE = 200
BOS = 0
CONTEXT = np.arange(1, 17)
NEUTRAL = np.arange(17, 180)
TOXIC = np.arange(180, 200)
HEAT = np.linspace(0.0, 1.0, CONTEXT.size)
PROMPT_LENGTH = 8
CONTEXT_PER_PROMPT = 3
CONTINUATION_LENGTH = 8
MAX_POSITIONS = 32
RATE_LOW, RATE_HIGH = 0.1, 0.6
TOXIC_EMISSION = 0.35
SUCCESSORS = 4
RATER_NOTICE = 0.10
LANGUAGE_SEED = 20260201  # the language is fixed; LM seeds vary the models, not the language


def is_toxic(tokens: np.ndarray) -> np.ndarray:
    """Boolean mask of toxic words (any shape)."""
    return np.asarray(tokens) >= TOXIC[0]


def _chain() -> tuple[np.ndarray, np.ndarray]:
    """The neutral Markov chain: ``(successors (163, 4) token ids, probabilities (163, 4))``."""
    rng = np.random.default_rng(LANGUAGE_SEED)
    succ = np.stack([rng.choice(NEUTRAL, SUCCESSORS, replace=False) for _ in NEUTRAL])
    prob = rng.dirichlet(np.ones(SUCCESSORS), NEUTRAL.size)
    return succ, prob


SUCC, SUCC_P = _chain()


def prompts(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompts, ``(tokens (n, 8) int64, toxic rate r (n,))``."""
    n = int(n)
    tok = np.empty((n, PROMPT_LENGTH), dtype=np.int64)
    tok[:, 0] = BOS
    tok[:, 1:] = rng.choice(NEUTRAL, (n, PROMPT_LENGTH - 1))
    ctx = rng.integers(0, CONTEXT.size, (n, CONTEXT_PER_PROMPT))
    where = np.argsort(rng.random((n, PROMPT_LENGTH - 1)), axis=1)[:, :CONTEXT_PER_PROMPT] + 1
    np.put_along_axis(tok, where, CONTEXT[ctx], axis=1)
    rate = RATE_LOW + (RATE_HIGH - RATE_LOW) * HEAT[ctx].mean(1)
    return tok, rate


def continuations(rate: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One continuation per rate: ``(tokens (n, 8), toxic register (n,) bool)``."""
    rate = np.asarray(rate, dtype=float)
    n = rate.size
    register = rng.random(n) < rate
    state = rng.integers(0, NEUTRAL.size, n)
    out = np.empty((n, CONTINUATION_LENGTH), dtype=np.int64)
    for t in range(CONTINUATION_LENGTH):
        toxic = register & (rng.random(n) < TOXIC_EMISSION)
        u = rng.random(n)[:, None]
        nxt = SUCC[state, (u > np.cumsum(SUCC_P[state], 1)).sum(1).clip(max=SUCCESSORS - 1)]
        new_state = np.where(toxic, state, nxt - NEUTRAL[0])
        out[:, t] = np.where(toxic, rng.choice(TOXIC, n), nxt)
        state = new_state
    return out, register


def rater_labels(tokens: np.ndarray, rng: np.random.Generator, notice: float = RATER_NOTICE) -> np.ndarray:
    """Graded toxicity flags ``(n,)`` of continuations ``(n, T)``: ``P = 1 - (1 - notice)^(toxic words)``."""
    if not 0.0 < notice <= 1.0:
        raise ValueError(f"notice must lie in (0, 1], got {notice!r}")
    count = is_toxic(tokens).sum(-1)
    return rng.random(count.shape) < 1.0 - (1.0 - notice) ** count


def corpus(n: int, rng: np.random.Generator, *, reference: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``n`` training sequences ``(tokens (n, 16), register (n,))``; ``reference``: no toxic register."""
    tok, rate = prompts(n, rng)
    cont, reg = continuations(np.zeros_like(rate) if reference else rate, rng)
    return np.concatenate([tok, cont], 1), reg
