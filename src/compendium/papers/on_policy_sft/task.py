"""The synthetic reasoning language: multi-operand modular addition with a partial-sum chain of thought.

Vocabulary (``VOCAB_SIZE`` = 18): the residues ``0 .. MODULUS-1`` are tokens ``0 .. 6``, then
``PAD BOS EOS Q H + - = , ; #``. Every sequence of one kind has one length, so batches never pad.

* plain prompt      ``BOS Q a1 + a2 + ... + an =``                     (2 + 2n tokens)
* hinted prompt     ``BOS H h Q a1 + ... + an =``  (``h`` = the answer)  (4 + 2n tokens)
* style A response  ``s1 c s2 c ... s_{n-1} # y EOS``: left-to-right partial sums
  ``s_k = a1 + ... + a_{k+1} (mod 7)``, separators ``c`` = ``,`` (probability 0.9) or ``;``
* style B response  ``r1 ; r2 ; ... r_{n-1} # y EOS``: right-to-left partial sums
  ``r_k = a_n + ... + a_{n-k}``, always ``;``. Equally correct: ``r_{n-1} = s_{n-1} = y``.
* subtraction       ``BOS Q a - b =`` then ``d EOS`` with ``d = a - b (mod 7)`` (the forgetting probe)

Responses have ``2n`` tokens; the answer is the token after the first ``#``.
"""

from __future__ import annotations

import numpy as np

MODULUS = 7
PAD, BOS, EOS, Q, HINT, PLUS, MINUS, EQUALS, COMMA, SEMI, MARK = range(MODULUS, MODULUS + 11)
VOCAB_SIZE = MODULUS + 11
MAX_POSITIONS = 32
SEP_A_PROBS = (0.9, 0.1)  # style A separator: ',' then ';'
IN_RANGE = (0, 4)      # operands of the in-domain / fine-tuning problems (inclusive)
OOD_RANGE = (0, 6)     # operands of the 4-operand OOD test: all residues (5 and 6 never occur in fine-tuning)
TOKEN_NAMES = [str(i) for i in range(MODULUS)] + ["PAD", "BOS", "EOS", "Q", "H", "+", "-", "=", ",", ";", "#"]


def problems(count: int, operands: int, rng: np.random.Generator, value_range=(0, MODULUS - 1)) -> np.ndarray:
    """``(count, operands)`` integer operands drawn uniformly from ``value_range`` (inclusive)."""
    low, high = value_range
    if count < 0 or operands < 2 or not 0 <= low <= high < MODULUS:
        raise ValueError(f"need count >= 0, operands >= 2 and 0 <= low <= high < {MODULUS}")
    return rng.integers(low, high + 1, size=(count, operands)).astype(np.int64)


def answers(ops: np.ndarray) -> np.ndarray:
    """The final answer ``sum(ops) mod 7`` per row."""
    return np.asarray(ops).sum(1) % MODULUS


def plain_prompt(ops: np.ndarray) -> np.ndarray:
    """``BOS Q a1 + ... + an =``, shape ``(B, 2 + 2n)``."""
    ops = np.asarray(ops)
    B, n = ops.shape
    out = np.full((B, 2 + 2 * n), PLUS, dtype=np.int64)
    out[:, 0], out[:, 1], out[:, -1] = BOS, Q, EQUALS
    out[:, 2:-1:2] = ops
    return out


def hinted_prompt(ops: np.ndarray, hints: np.ndarray | None = None) -> np.ndarray:
    """``BOS H h Q a1 + ... =`` with hint ``h`` (default: the true answer), shape ``(B, 4 + 2n)``."""
    ops = np.asarray(ops)
    hints = answers(ops) if hints is None else np.asarray(hints)
    plain = plain_prompt(ops)
    head = np.stack([np.full(len(ops), BOS), np.full(len(ops), HINT), hints], 1)
    return np.concatenate([head, plain[:, 1:]], 1).astype(np.int64)


def _response(partial: np.ndarray, separators: np.ndarray) -> np.ndarray:
    B, k = partial.shape  # k = n - 1 partial sums
    out = np.empty((B, 2 * k + 2), dtype=np.int64)
    out[:, 0:2 * k - 1:2] = partial
    if k > 1:
        out[:, 1:2 * k - 2:2] = separators
    out[:, 2 * k - 1] = MARK
    out[:, 2 * k] = partial[:, -1]
    out[:, 2 * k + 1] = EOS
    return out


def response_a(ops: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Style A (left to right); separators drawn from ``SEP_A_PROBS`` (all ``,`` without ``rng``)."""
    ops = np.asarray(ops)
    partial = np.cumsum(ops, 1)[:, 1:] % MODULUS
    shape = (len(ops), max(ops.shape[1] - 2, 0))
    seps = np.full(shape, COMMA) if rng is None else np.where(rng.random(shape) < SEP_A_PROBS[0], COMMA, SEMI)
    return _response(partial, seps)


def response_b(ops: np.ndarray) -> np.ndarray:
    """Style B (right to left, ``;`` separators): the off-policy demonstrations."""
    ops = np.asarray(ops)
    partial = np.cumsum(ops[:, ::-1], 1)[:, 1:] % MODULUS
    return _response(partial, np.full((len(ops), max(ops.shape[1] - 2, 0)), SEMI))


def subtraction(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Subtraction prompts ``(count, 6)`` and responses ``(count, 2)`` = ``d EOS``."""
    ab = rng.integers(0, MODULUS, size=(count, 2))
    prompt = np.stack([np.full(count, BOS), np.full(count, Q), ab[:, 0], np.full(count, MINUS), ab[:, 1],
                       np.full(count, EQUALS)], 1)
    resp = np.stack([(ab[:, 0] - ab[:, 1]) % MODULUS, np.full(count, EOS)], 1)
    return prompt.astype(np.int64), resp.astype(np.int64)


def parse_answer(responses: np.ndarray) -> np.ndarray:
    """The token after the first ``#`` of each row, or -1 when there is none or it is not a residue."""
    responses = np.asarray(responses)
    is_mark = responses[:, :-1] == MARK
    has = is_mark.any(1)
    first = is_mark.argmax(1)
    tok = responses[np.arange(len(responses)), first + 1]
    return np.where(has & (tok < MODULUS), tok, -1)


def is_style_b(ops: np.ndarray, responses: np.ndarray) -> np.ndarray:
    """Whether a response's first partial sum is the right-to-left one (and differs from style A's)."""
    ops = np.asarray(ops)
    a1 = (ops[:, 0] + ops[:, 1]) % MODULUS
    b1 = (ops[:, -1] + ops[:, -2]) % MODULUS
    return (responses[:, 0] == b1) & (a1 != b1)
