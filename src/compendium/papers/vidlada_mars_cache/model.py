"""Token videos, the tiny transformer with explicit masks and a per-layer K/V cache, the LLaDA
loss, low-confidence remasking, the caches and the analytic FLOP model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F_

# ---------------------------------------------------------------- vocabulary and token videos
N_OBJECTS = 8            # object codes 1..8 (0 is background)
NUM = 16                 # number tokens NUM + n, n = 0..40
Q_FIRST, Q_COUNT, Q_BEFORE, Q_PRESENT = 58, 59, 60, 61
YES, NO, PAD, MASK = 62, 63, 64, 65
VOCAB = 66
PROMPT_LEN = 3
OBJECTS_PER_VIDEO = 3


@dataclass(frozen=True)
class Questions:
    """A batch of token-video questions: ``tokens`` [N, T] = video | prompt | answer."""

    tokens: torch.Tensor
    key_frame: np.ndarray      # [N] frame that holds the deciding evidence
    qtype: np.ndarray          # [N] 0..3
    frames: int
    patches: int
    answer_len: int

    @property
    def n_visual(self) -> int:
        return self.frames * self.patches

    @property
    def answer_start(self) -> int:
        return self.n_visual + PROMPT_LEN

    def tercile(self) -> np.ndarray:
        return (3 * self.key_frame) // self.frames

    def subset(self, idx) -> "Questions":
        idx = np.asarray(idx)
        return Questions(self.tokens[torch.as_tensor(idx)], self.key_frame[idx], self.qtype[idx],
                         self.frames, self.patches, self.answer_len)


def make_questions(n: int, frames: int, patches: int, answer_len: int,
                   rng: np.random.Generator) -> Questions:
    """``n`` videos of ``frames`` x ``patches`` tokens, three objects each on a contiguous run of
    frames (one random patch per frame), and one question per video that needs several frames.

    Question types: first frame of object k; number of frames containing k; does k first appear
    strictly before j (yes/no); which objects are present at frame f (sorted, 1-3 tokens, ``NO``
    if none). Answers are padded with ``PAD`` to ``answer_len``."""
    if patches < OBJECTS_PER_VIDEO or frames < 3 or frames + NUM > Q_FIRST or answer_len < 3:
        raise ValueError("need patches >= 3, 3 <= frames <= 42 and answer_len >= 3")
    obj = np.argsort(rng.random((n, N_OBJECTS)), axis=1)[:, :OBJECTS_PER_VIDEO] + 1   # [n, 3]
    start = rng.integers(0, frames, size=(n, OBJECTS_PER_VIDEO))
    length = rng.integers(1, max(2, frames // 3) + 1, size=(n, OBJECTS_PER_VIDEO))
    end = np.minimum(start + length - 1, frames - 1)
    f = np.arange(frames)[None, :, None]
    present = (f >= start[:, None, :]) & (f <= end[:, None, :])                     # [n, F, 3]
    patch = np.argsort(rng.random((n, frames, patches)), axis=2)[:, :, :OBJECTS_PER_VIDEO]
    video = np.zeros((n, frames, patches), dtype=np.int64)
    rows = np.arange(n)[:, None, None]
    video[rows, np.arange(frames)[None, :, None], patch] = np.where(present, obj[:, None, :], 0)
    qtype = rng.integers(0, 4, size=n)
    a, b = rng.integers(0, OBJECTS_PER_VIDEO, size=n), rng.integers(1, OBJECTS_PER_VIDEO, size=n)
    b = (a + b) % OBJECTS_PER_VIDEO                                                   # b != a
    ar = np.arange(n)
    fq = rng.integers(0, frames, size=n)
    prompt = np.full((n, PROMPT_LEN), PAD, dtype=np.int64)
    answer = np.full((n, answer_len), PAD, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    prompt[:, 0] = Q_FIRST + qtype
    prompt[:, 1] = np.where(qtype == 3, NUM + fq, obj[ar, a])
    prompt[:, 2] = np.where(qtype == 2, obj[ar, b], PAD)
    sa, sb = start[ar, a], start[ar, b]
    # 0: first frame of k
    answer[:, 0] = np.where(qtype == 0, NUM + sa, answer[:, 0])
    # 1: count of frames containing k (decided at its last frame)
    answer[:, 0] = np.where(qtype == 1, NUM + (end[ar, a] - sa + 1), answer[:, 0])
    # 2: k strictly before j
    answer[:, 0] = np.where(qtype == 2, np.where(sa < sb, YES, NO), answer[:, 0])
    key = np.select([qtype == 0, qtype == 1, qtype == 2], [sa, end[ar, a], np.maximum(sa, sb)], fq)
    # 3: objects present at frame f, sorted
    pres_f = present[ar, fq]                                                          # [n, 3]
    codes = np.where(pres_f, obj, 99)
    codes.sort(axis=1)
    is3 = qtype == 3
    for i in range(OBJECTS_PER_VIDEO):
        answer[:, i] = np.where(is3 & (codes[:, i] != 99), codes[:, i], answer[:, i])
    answer[:, 0] = np.where(is3 & (codes[:, 0] == 99), NO, answer[:, 0])
    tokens = np.concatenate([video.reshape(n, -1), prompt, answer], axis=1)
    return Questions(torch.as_tensor(tokens), key, qtype, frames, patches, answer_len)


# ---------------------------------------------------------------- masks (Prop. 3.1)
def causal_mask(T: int) -> torch.Tensor:
    """bool [T, T]: query i may attend key j iff j <= i."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def bidirectional_mask(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool)


def visibility_counts(mask: torch.Tensor) -> torch.Tensor:
    """Column sums: how many queries see key j (T - j + 1 for a causal mask, 1-based j)."""
    return mask.sum(0)


def frame_chunk_mask(n_frames: int, per_frame: int, n_text: int, anchors) -> torch.Tensor:
    """bool [..., T, T], T = n_frames*per_frame + n_text: visual queries see their own frame, the
    anchor tokens and every text token; text queries see everything. ``anchors``: a bool
    [..., V] vector (batched or not) of visual anchor positions."""
    V = n_frames * per_frame
    anchors = torch.as_tensor(anchors, dtype=torch.bool)
    T = V + n_text
    frame = torch.arange(V) // per_frame
    m = torch.ones(*anchors.shape[:-1], T, T, dtype=torch.bool)
    vv = (frame[:, None] == frame[None, :]) | anchors[..., None, :]
    m[..., :V, :V] = vv
    return m


# ---------------------------------------------------------------- the model
class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))


class VideoLM(torch.nn.Module):
    """A pre-LN transformer (d, layers, heads) whose attention takes an explicit bool mask and
    whose layers read/write a per-layer K/V cache. Attention probabilities are computed densely;
    masked pairs are excluded (the FLOP model counts only allowed pairs)."""

    def __init__(self, d: int, layers: int, heads: int, max_len: int, n_visual: int = 0, patches: int = 1):
        super().__init__()
        self.d, self.n_layers, self.heads, self.max_len = d, layers, heads, max_len
        self.n_visual, self.patches = n_visual, patches
        self.tok = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Embedding(max_len, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, VOCAB)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Full pass: ids [B, T], mask bool [T, T] or [B, T, T] -> logits [B, T, VOCAB]."""
        T = ids.shape[1]
        logits, _, _ = self.partial(ids, torch.arange(T), None, lambda layer, kv: mask)
        return logits

    def partial(self, ids, active, cache, mask_fn, text_start: int | None = None):
        """Recompute the ``active`` positions only, reading the other positions' K/V from
        ``cache`` (a list per layer of (K, V), each [B, H, T, dh]; None: all positions active).

        ``mask_fn(layer, scores_text)`` returns the bool mask [Tq, T] or [B, Tq, T] of the active
        queries; ``scores_text`` are the head-summed attention probabilities of the active text
        queries (positions >= ``text_start``) over all keys under full attention, [B, T], which
        MARS-Cache uses to choose anchors (None if ``text_start`` is None).
        Returns (logits of active positions, the updated cache, list of anchor masks or None)."""
        B, T = ids.shape
        H, dh = self.heads, self.d // self.heads
        active = torch.as_tensor(active)
        h = self.tok(ids[:, active]) + self.pos(active)[None]
        if self.n_visual:   # a visual token also carries the embedding of its frame's number token
            vis = active < self.n_visual
            frame_tok = self.tok(NUM + active.clamp(max=self.n_visual - 1) // self.patches)
            h = h + (frame_tok * vis[:, None])[None]
            # the last prompt position and the answer positions also carry the embeddings of the
            # question's tokens (its type, the first argument: object k or frame f, and the second
            # argument: object j of "k before j", PAD otherwise), so the position that predicts an
            # answer holds the query itself and reading the video is one attention hop; without it
            # a 2-layer model must first route k (and j) there, and in the training budget it
            # answered from question-type priors (the wrong-video control failed; see Limits).
            # Prompt tokens only: legal under the causal mask, and the video's K/V are untouched.
            s_q = self.n_visual + PROMPT_LEN - 1
            if ids.shape[1] > s_q:
                query = self.tok(ids[:, self.n_visual:self.n_visual + PROMPT_LEN]).sum(1)         # [B, d]
                h = h + query[:, None] * (active >= s_q)[None, :, None]
        new_cache, masks = [], []
        for layer, blk in enumerate(self.blocks):
            q, k, v = blk.qkv(blk.ln1(h)).view(B, -1, 3, H, dh).permute(2, 0, 3, 1, 4)
            if cache is None:
                K, V = k, v
            else:
                K, V = cache[layer][0].clone(), cache[layer][1].clone()
                K[:, :, active], V[:, :, active] = k, v
            new_cache.append((K, V))
            s = q @ K.transpose(-1, -2) / math.sqrt(dh)                           # [B, H, Tq, T]
            text_mass = None
            if text_start is not None:
                rows = active >= text_start
                text_mass = s[:, :, rows].softmax(-1).sum((1, 2))                   # [B, T]
            m = mask_fn(layer, text_mass)
            masks.append(m)
            m = m if m.dim() == 2 else m[:, None]
            s = s.masked_fill(~m, float("-inf"))
            a = (s.softmax(-1) @ V).transpose(1, 2).reshape(B, -1, self.d)
            h = h + blk.out(a)
            h = h + blk.mlp(blk.ln2(h))
        return self.head(self.ln(h)), new_cache, masks


# ---------------------------------------------------------------- the LLaDA loss and AR loss
def mdm_forward_mask(answer: torch.Tensor, eps: float, gen: torch.Generator):
    """t ~ U(0,1), p_mask = (1-eps) t + eps per sample; each answer token masked w.p. p_mask.
    Returns (masked bool [B, L], p_mask [B])."""
    B, L = answer.shape
    t = torch.rand(B, generator=gen)
    p = (1 - eps) * t + eps
    return torch.rand(B, L, generator=gen) < p[:, None], p


def mdm_loss(logits: torch.Tensor, answer: torch.Tensor, masked: torch.Tensor,
             p_mask: torch.Tensor) -> torch.Tensor:
    """(1/B) sum_b sum_{i masked} CE(logits_bi, x0_bi) / p_mask_b / L  (L answer tokens)."""
    B, L = answer.shape
    ce = F_.cross_entropy(logits.reshape(B * L, -1), answer.reshape(-1), reduction="none").view(B, L)
    return ((ce * masked) / p_mask[:, None]).sum() / (B * L)


def mdm_noised(q: Questions, eps: float, gen: torch.Generator):
    """The MDM input: answer tokens masked by :func:`mdm_forward_mask`, video and prompt kept.
    Returns (ids [B, T], masked [B, L], p_mask [B])."""
    s = q.answer_start
    answer = q.tokens[:, s:]
    masked, p = mdm_forward_mask(answer, eps, gen)
    ids = q.tokens.clone()
    ids[:, s:] = torch.where(masked, MASK, answer)
    return ids, masked, p


def mdm_batch_loss(model: VideoLM, q: Questions, eps: float, gen: torch.Generator) -> torch.Tensor:
    s = q.answer_start
    answer = q.tokens[:, s:]
    ids, masked, p = mdm_noised(q, eps, gen)
    logits = model(ids, bidirectional_mask(ids.shape[1]))[:, s:]
    return mdm_loss(logits, answer, masked, p)


def ar_batch_loss(model: VideoLM, q: Questions) -> torch.Tensor:
    s = q.answer_start
    logits = model(q.tokens, causal_mask(q.tokens.shape[1]))[:, s - 1:-1]
    return F_.cross_entropy(logits.reshape(-1, VOCAB), q.tokens[:, s:].reshape(-1))


# ---------------------------------------------------------------- decoding
def num_transfer_tokens(mask_count: int, steps: int) -> list[int]:
    """Even split of ``mask_count`` over ``steps``, the remainder to the first steps."""
    base, rem = divmod(mask_count, steps)
    return [base + (i < rem) for i in range(steps)]


@torch.no_grad()
def ar_generate(model: VideoLM, q: Questions) -> torch.Tensor:
    s, L = q.answer_start, q.answer_len
    ids = q.tokens.clone()
    ids[:, s:] = PAD
    mask = causal_mask(ids.shape[1])
    for i in range(L):
        ids[:, s + i] = model(ids, mask)[:, s + i - 1].argmax(-1)
    return ids[:, s:]


@dataclass(frozen=True)
class CachePolicy:
    """How the MDM decoder reuses K/V. ``kind``: 'none' (full pass every step), 'dllm' (video +
    prompt cached, refreshed every ``period`` steps by a full pass; answer recomputed each step),
    'visual' (video cached, refreshed every ``period``; prompt + answer recomputed; full
    attention), 'mars' (as 'visual', but every pass over the video uses frame-chunk attention
    plus ``anchors`` anchors per layer, chosen by the text queries' attention mass; ``anchors``
    >= V means every visual token is an anchor)."""

    kind: str = "none"
    period: int = 1
    anchors: int = 0

    def __post_init__(self):
        if self.kind not in ("none", "dllm", "visual", "mars") or self.period < 1 or self.anchors < 0:
            raise ValueError(f"bad cache policy {self}")


def _mars_mask_fn(frames, patches, n_text, anchors, B):
    V = frames * patches

    def fn(layer, text_mass):
        if anchors >= V:
            sel = torch.ones(B, V, dtype=torch.bool)
        else:
            sel = torch.zeros(B, V, dtype=torch.bool)
            if anchors > 0:
                sel.scatter_(1, text_mass[:, :V].topk(anchors, dim=1).indices, True)
        return frame_chunk_mask(frames, patches, n_text, sel)
    return fn


@torch.no_grad()
def mdm_generate(model: VideoLM, q: Questions, policy: CachePolicy = CachePolicy(),
                 steps: int | None = None, visual_from: Questions | None = None):
    """Low-confidence remasking (temperature 0, one block = the answer): at each step commit the
    most confident masked positions, ``num_transfer_tokens`` of them. Returns (answers [B, L],
    attention-pair counts per step as a list of (n_query_tokens, n_allowed_pairs) per sample).

    ``visual_from``: the negative control, the video K/V are computed from these videos instead
    (the step-0 pass sees the wrong video; later steps read its cache)."""
    s, L = q.answer_start, q.answer_len
    steps = L if steps is None else steps
    V, T = q.n_visual, q.tokens.shape[1]
    ids = q.tokens.clone()
    ids[:, s:] = MASK
    B = ids.shape[0]
    full = bidirectional_mask(T)
    n_text = T - V
    quota = num_transfer_tokens(L, steps)
    cost: list[tuple[int, int]] = []
    cache = None
    for step in range(steps):
        refresh = policy.kind == "none" or step % policy.period == 0
        src = ids if visual_from is None else torch.cat([visual_from.tokens[:, :V], ids[:, V:]], 1)
        if policy.kind == "mars" and refresh:
            fn = _mars_mask_fn(q.frames, q.patches, n_text, policy.anchors, B)
            logits, cache, masks = model.partial(src, torch.arange(T), None, fn, text_start=V)
            cost.append((T, int(masks[0][0].sum())))
            logits = logits[:, s:]
        elif refresh:
            logits, cache, _ = model.partial(src, torch.arange(T), None, lambda l, m: full)
            cost.append((T, T * T))
            logits = logits[:, s:]
        else:
            first = s if policy.kind == "dllm" else V
            logits, cache, _ = model.partial(ids, torch.arange(first, T), cache, lambda l, m: full[first:])
            cost.append((T - first, (T - first) * T))
            logits = logits[:, s - first:]
        probs = logits.softmax(-1)
        conf, x0 = probs.max(-1)
        still = ids[:, s:] == MASK
        conf = torch.where(still, conf, torch.tensor(-1.0))
        pick = conf.topk(quota[step], dim=1).indices
        chosen = torch.zeros_like(still).scatter_(1, pick, True) & still
        ids[:, s:] = torch.where(chosen, x0, ids[:, s:])
    return ids[:, s:], cost


# ---------------------------------------------------------------- analytic FLOPs
def pass_flops(n_query: int, n_pairs: int, d: int, layers: int, n_logits: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one pass: QKV + output projections (8 d^2 per query
    token), MLP with ratio 4 (16 d^2), attention 4 d per allowed (query, key) pair, and the LM
    head on the ``n_logits`` answer positions (vocabulary ``VOCAB``)."""
    return layers * (24 * d * d * n_query + 4 * d * n_pairs) + 2 * d * VOCAB * n_logits


def policy_flops(policy: CachePolicy, frames: int, patches: int, answer_len: int, steps: int,
                 d: int, layers: int, anchors_text: int | None = None) -> int:
    """Analytic FLOPs of one answer under ``policy`` (the first full pass counted). MARS's visual
    queries each attend their frame (``patches``), the anchors and the text; anchor selection
    (a top-A over one vector per layer) is not counted."""
    V = frames * patches
    n_text = PROMPT_LEN + answer_len
    T = V + n_text
    A = min(policy.anchors, V)
    total = 0
    for step in range(steps):
        refresh = policy.kind == "none" or step % policy.period == 0
        if refresh and policy.kind == "mars":
            per_vis = T if A >= V else min(T, patches + A + n_text)   # at most (anchor may be in-frame)
            total += pass_flops(T, V * per_vis + n_text * T, d, layers, answer_len)
        elif refresh:
            total += pass_flops(T, T * T, d, layers, answer_len)
        else:
            nq = answer_len if policy.kind == "dllm" else n_text
            total += pass_flops(nq, nq * T, d, layers, answer_len)
    return total
