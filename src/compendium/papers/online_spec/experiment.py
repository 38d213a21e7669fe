"""The chapter's experiments: the acceptance formulas and losslessness on random pairs, the online
runs on three streams over several replicates (each a fresh target, draft and stream), and the
statistics every ledger row uses.
:func:`run` returns data and metrics and never plots."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ...runtime import make_rng
from ...speculative import acceptance_rate, categorical, expected_tokens, modeled_speedup, spec_verify
from ...stats import Estimate, mean_interval, paired_difference
from ...validation import require_int, require_number
from ...ngram import pooled_chisquare
from . import online as ol
from .model import (DraftShape, block_target, entropy_term, expected_acceptance, fit_offline, sample_contexts,
                    transformer_target)

DOMAINS = 3
#: Share of the vocabulary common to every domain, fixed before any run of the overlapping
#: targets: the domains overlap through these tokens, so a draft trained on one keeps some
#: acceptance on the others (:func:`~.model.block_law`).
SHARED_SHARE = 0.25
CHECK_VOCAB = 16  # vocabulary of the random (p, q) pairs of the formula and losslessness checks
SINGLE = ("ogd", "optimistic", "momentum")  # single-step-size learners: all at the middle step size
UNIT = "replicates (target, draft, stream)"
TARGETS = ("ngram", "transformer")  # the two settings: the n-gram table and the random-init GPT-2
TRANSFORMER_HEADS = 4
TRANSFORMER_STREAMS = ("piecewise", "stationary")  # the online-vs-offline comparison and its control
#: The floor: mean acceptance a learned draft must gain over the uniform draft on the same verified
#: positions (lower paired 95% bound), fixed before the floor was computed.
FLOOR_MARGIN = 0.05
#: The overlap precondition: the offline draft's mean acceptance over the B and C segments of the
#: piecewise stream must stay above this (lower 95% bound over replicates), fixed before the
#: online runs of the overlapping targets.
DRIFT_MARGIN = 0.02
#: The power of the per-context losslessness rows is stated at this probability of failing.
LOSSLESS_POWER = 0.8


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry).

    Parameters
    ----------
    vocab, gamma, draft_rank : int
        Tokens ``V``, drafts per target call, rank ``d`` of the draft's embeddings.
    target_sharpness, target_interaction, target_smoothing : float
        The target's ``beta``, non-additive part and in-block smoothing (:func:`~.model.block_target`).
    offline_sequences : int
        Sequences the offline draft (and each oracle draft) is trained on.
    prompts_per_chunk, tokens_per_prompt, chunks_per_segment : int
        A chunk's prompts and tokens per prompt; a stream has four segments of this many chunks.
    replicates : int
        Independent replicates (target, draft, stream): the unit of every interval.
    learning_rates : tuple of float
        The three step sizes fixed in advance (single-lr runs, ensembles, the dev grid).
    momentum, hedge_rate, hedge_share, cost_ratio : float
        Carried momentum; Hedge's learning rate and fixed share; draft / target cost ``c``.
    check_pairs, check_rounds, pinsker_pairs : int
        Random (p, q) pairs and verify rounds per pair for the formula and losslessness checks;
        pairs for the Pinsker check.
    transformer_temperature, transformer_init : float
        The second target (:func:`~.model.transformer_target`): sampling temperature and the
        random init's standard deviation.
    transformer_width, transformer_rank : int
        Its width, and the rank of the draft used against it (its capacity: sets the offline
        acceptance on domain A).
    seed : int
    """

    vocab: int = 64
    gamma: int = 4
    draft_rank: int = 3
    target_sharpness: float = 1.0
    target_interaction: float = 1.0
    target_smoothing: float = 0.03
    offline_sequences: int = 256
    prompts_per_chunk: int = 32
    tokens_per_prompt: int = 24
    chunks_per_segment: int = 8
    replicates: int = 5
    learning_rates: tuple = (1.0, 3.0, 10.0)
    momentum: float = 0.9
    hedge_rate: float = 5.0
    hedge_share: float = 0.02
    cost_ratio: float = 0.1
    check_pairs: int = 50
    check_rounds: int = 20000
    pinsker_pairs: int = 10000
    transformer_temperature: float = 0.7
    transformer_init: float = 0.3
    transformer_width: int = 32
    transformer_rank: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "learning_rates", tuple(float(x) for x in self.learning_rates))
        require_int("vocab", self.vocab, 2 * DOMAINS, 128)
        require_int("gamma", self.gamma, 1, 16)
        require_int("draft_rank", self.draft_rank, 1, 32)
        require_number("target_sharpness", self.target_sharpness, 0.0, 10.0, low_open=True)
        require_number("target_interaction", self.target_interaction, 0.0, 10.0)
        require_number("target_smoothing", self.target_smoothing, 0.0, 1.0, high_open=True)
        require_int("offline_sequences", self.offline_sequences, 8, 100_000)
        require_int("prompts_per_chunk", self.prompts_per_chunk, 1, 4096)
        require_int("tokens_per_prompt", self.tokens_per_prompt, 1, 1024)
        require_int("chunks_per_segment", self.chunks_per_segment, 1, 1000)
        require_int("replicates", self.replicates, 2, 50)
        if len(self.learning_rates) != 3 or any(not 0 < x <= 1000 for x in self.learning_rates):
            raise ValueError(f"learning_rates must be three numbers in (0, 1000], got {self.learning_rates}")
        if list(self.learning_rates) != sorted(set(self.learning_rates)):
            raise ValueError(f"learning_rates must be increasing and distinct, got {self.learning_rates}")
        require_number("momentum", self.momentum, 0.0, 1.0, high_open=True)
        require_number("hedge_rate", self.hedge_rate, 0.0, 1000.0, low_open=True)
        require_number("hedge_share", self.hedge_share, 0.0, 1.0, high_open=True)
        require_number("cost_ratio", self.cost_ratio, 0.0, 10.0)
        require_int("check_pairs", self.check_pairs, 2, 10_000)
        require_int("check_rounds", self.check_rounds, 100, 1_000_000)
        require_int("pinsker_pairs", self.pinsker_pairs, 10, 1_000_000)
        require_number("transformer_temperature", self.transformer_temperature, 0.0, 10.0, low_open=True)
        require_number("transformer_init", self.transformer_init, 0.0, 10.0, low_open=True)
        require_int("transformer_width", self.transformer_width, 4, 256)
        if self.transformer_width % TRANSFORMER_HEADS:
            raise ValueError(f"transformer_width must be a multiple of {TRANSFORMER_HEADS}, got {self.transformer_width}")
        require_int("transformer_rank", self.transformer_rank, 1, 32)
        require_int("seed", self.seed, 0, 2**32 - 1)

    @property
    def chunks(self) -> int:
        return 4 * self.chunks_per_segment


# ------------------------------------------------------------------------------------------ checks
def run_formula_checks(config: Config) -> dict:
    """Tokens per call vs the formula, losslessness and its control, on random (p, q) pairs.

    For each pair, ``check_rounds`` verify calls with ``gamma`` drafts, every position with the
    same ``(p, q)``. ``z`` = (mean tokens per call - formula) / SE. The emitted first token of each
    call is tested against ``p`` (Pearson); the control replaces the residual draw by a draw from
    ``p`` and is tested on the first ``control_draws`` calls only (set by the caller to the
    online test's sample size, so the control shows power at that size).
    """
    rng = make_rng(config.seed, 1)
    V, g, N = CHECK_VOCAB, config.gamma, config.check_rounds
    z, alphas, sim, formula, p_ref, p_ctrl_full = [], [], [], [], [], []
    first_ctrl = []
    for _ in range(config.check_pairs):
        conc = rng.choice([0.3, 1.0, 3.0])
        p1, q1 = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
        p = np.broadcast_to(p1, (N, g + 1, V))
        q = np.broadcast_to(q1, (N, g, V))
        d = categorical(q, rng)
        n_acc, nxt = spec_verify(p, q, d, rng.random((N, g)), rng.exponential(size=(N, V)))
        tokens = n_acc + 1
        a = float(acceptance_rate(p1, q1))
        f = expected_tokens(a, g)
        se = tokens.std(ddof=1) / np.sqrt(N)
        z.append((tokens.mean() - f) / se if se > 0 else 0.0)
        alphas.append(a)
        sim.append(tokens.mean())
        formula.append(f)
        first = np.where(n_acc > 0, d[:, 0], nxt)  # the emitted token at the first position
        p_ref.append(pooled_chisquare(np.bincount(first, minlength=V), p1)[2])
        # control: on a rejection draw again from p (wrong: the residual is what makes it exact)
        wrong = np.where(n_acc > 0, d[:, 0], categorical(np.broadcast_to(p1, (N, V)), rng))
        first_ctrl.append((wrong, p1))
    return {"z": np.array(z), "alpha": np.array(alphas), "simulated": np.array(sim), "formula": np.array(formula),
            "lossless_p": np.array(p_ref), "control_samples": first_ctrl}


def kernel_checks(config: Config, device: str = "cpu", shapes: int = 200) -> dict:
    """The batched verify of :mod:`compendium.kernels.spec_verify` against :func:`spec_verify`.

    Through the dispatcher: the Triton kernel on a CUDA device, the PyTorch reference elsewhere
    (``backend`` in the result says which ran). (1) Token-for-token equality with matched uniforms
    and exponentials on ``shapes`` random float32 cases; (2) the first emitted token of
    ``min(check_rounds, 4000)`` calls on each of ``check_pairs`` random pairs, tested against ``p``.
    """
    import torch

    from ...kernels import spec_verify as sv
    from ...kernels import use_triton

    rng = make_rng(config.seed, 3)

    def tensors(*arrays):
        return [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in arrays]

    backend = "triton" if use_triton("auto", torch.empty(0, device=device)) else "reference"
    mismatches = 0
    for _ in range(shapes):
        B, g, V = int(rng.integers(1, 17)), int(rng.integers(1, 9)), int(rng.integers(2, 129))
        conc = float(rng.choice([0.1, 0.5, 1.0, 3.0]))
        p = rng.dirichlet(np.full(V, conc), size=(B, g + 1)).astype(np.float32)
        q = rng.dirichlet(np.full(V, conc), size=(B, g)).astype(np.float32)
        d = categorical(q.astype(float), rng)
        u, e = rng.random((B, g)).astype(np.float32), rng.exponential(size=(B, V)).astype(np.float32)
        ref_n, ref_t = spec_verify(p, q, d, u, e)
        n, t = sv.spec_verify(*tensors(p, q, d, u, e))
        mismatches += int((n.cpu().numpy() != ref_n).sum() + (t.cpu().numpy() != ref_t).sum())
    V, g, N = CHECK_VOCAB, config.gamma, min(config.check_rounds, 4000)
    p_values = []
    for _ in range(config.check_pairs):
        conc = rng.choice([0.3, 1.0, 3.0])
        p1, q1 = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
        p = np.broadcast_to(p1, (N, g + 1, V)).astype(np.float32)
        q = np.broadcast_to(q1, (N, g, V)).astype(np.float32)
        d = categorical(q.astype(float), rng)
        n, t = sv.spec_verify(*tensors(p, q, d, rng.random((N, g)).astype(np.float32),
                                       rng.exponential(size=(N, V)).astype(np.float32)))
        first = np.where(n.cpu().numpy() > 0, d[:, 0], t.cpu().numpy())
        p_values.append(pooled_chisquare(np.bincount(first, minlength=V), p1)[2])
    return {"backend": backend, "shapes": shapes, "mismatches": mismatches, "lossless_p": np.array(p_values), "draws": N}


def control_p_values(control_samples: list, draws: int) -> np.ndarray:
    """Pearson p-values of the resample-from-p control on its first ``draws`` calls per pair."""
    V = CHECK_VOCAB
    return np.array([pooled_chisquare(np.bincount(x[:draws], minlength=V), p)[2] for x, p in control_samples])


def geometric_identity():
    """sympy: ``sum_{k=0..gamma} alpha^k - (1 - alpha^(gamma+1)) / (1 - alpha)`` for symbolic ``gamma``.

    ``summation`` returns a Piecewise (``gamma + 1`` at ``alpha = 1``); the returned expression
    adds the simplified gap of both branches to their closed forms, so it is 0 exactly when the
    formula of :func:`compendium.speculative.expected_tokens` holds for every ``gamma``.
    """
    import sympy as sp

    alpha, k, gamma = sp.symbols("alpha k gamma", positive=True)
    total = sp.summation(alpha**k, (k, 0, gamma))
    closed = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    branches = {bool(cond == sp.true): expr for expr, cond in total.args}
    return sp.simplify(branches[True] - closed) + sp.simplify(branches[False] - (gamma + 1))


def pinsker_check(config: Config) -> dict:
    """``1 - alpha <= sqrt(KL(p || q) / 2)`` on random pairs of mixed concentrations."""
    rng = make_rng(config.seed, 2)
    n = config.pinsker_pairs
    conc = rng.choice([0.1, 0.5, 1.0, 5.0], size=n)[:, None]
    p = rng.gamma(np.broadcast_to(conc, (n, CHECK_VOCAB)))
    q = rng.gamma(np.broadcast_to(conc, (n, CHECK_VOCAB)))
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    q = np.maximum(q, 1e-12)
    q /= q.sum(1, keepdims=True)
    kl = entropy_term(p) - (p * np.log(q)).sum(1)
    gap = np.sqrt(kl / 2) - (1 - acceptance_rate(p, q))
    return {"violations": int((gap < -1e-12).sum()), "min_gap": float(gap.min()), "pairs": n}


def cumulative_pinsker(run: ol.StreamRun) -> tuple[np.ndarray, np.ndarray]:
    """``sum_{s<=t} (1 - alpha_s)`` and the bound ``sqrt(t/2 * sum_{s<=t} l_s)`` along a run."""
    t = np.arange(1, len(run.alpha) + 1)
    return np.cumsum(1 - run.alpha), np.sqrt(t / 2 * np.cumsum(run.loss))


def context_lossless_p(emitted: np.ndarray, target, contexts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-context Pearson tests of the emitted tokens against ``p(. | a, b)``.

    ``emitted`` is ``(M, 3)`` rows ``(a, b, x)``; the ``contexts`` most frequent contexts are
    tested. Returns their p-values and sample sizes.
    """
    V = target.vocab
    key = emitted[:, 0] * (V + 1) + emitted[:, 1]
    uniq, counts = np.unique(key, return_counts=True)
    top = uniq[np.argsort(-counts, kind="stable")[:contexts]]
    pvals, sizes = [], []
    for k in top:
        x = emitted[key == k, 2]
        a, b = divmod(int(k), V + 1)
        pvals.append(pooled_chisquare(np.bincount(x, minlength=V), target.rows(a, b))[2])
        sizes.append(len(x))
    return np.array(pvals), np.array(sizes)


# ------------------------------------------------------------------------------------------ online
@dataclass
class Replicate:
    """One target with its offline draft, oracle drafts and the learners' runs on each stream."""

    runs: dict            # stream -> method -> StreamRun
    offline_fit: dict     # loss, iterations, converged
    offline_alpha_a: float  # exact acceptance of the offline draft on domain-A contexts
    hedge_weights: dict   # stream -> final Hedge weights of the two ensembles
    target: object = field(repr=False, default=None)


def shared_tokens(vocab: int) -> int:
    """Tokens common to every domain: :data:`SHARED_SHARE` of the vocabulary (at least two per domain left)."""
    return max(0, min(int(SHARED_SHARE * vocab), vocab - 2 * DOMAINS))


def make_target(config: Config, replicate: int, kind: str = "ngram"):
    """The target of one replicate: the n-gram table or the random-init transformer."""
    shared = shared_tokens(config.vocab)
    if kind == "ngram":
        return block_target(config.vocab, DOMAINS, config.target_smoothing, config.target_sharpness,
                            config.target_interaction, make_rng(config.seed, 10, replicate), shared=shared)
    if kind == "transformer":
        init_seed = int(make_rng(config.seed, 20, replicate).integers(2**31))
        return transformer_target(config.vocab, DOMAINS, config.target_smoothing, config.transformer_temperature,
                                  config.transformer_init, config.transformer_width, init_seed, heads=TRANSFORMER_HEADS,
                                  shared=shared)
    raise ValueError(f"target kind must be one of {TARGETS}, got {kind!r}")


def _setup(config: Config, replicate: int, kind: str = "ngram"):
    target = make_target(config, replicate, kind)
    shape = DraftShape(config.vocab, config.draft_rank if kind == "ngram" else config.transformer_rank)
    rng = make_rng(config.seed, 11 if kind == "ngram" else 21, replicate)
    theta0 = shape.init(rng)
    drafts, fits = [], []
    for k in range(DOMAINS):  # k = 0: the offline draft (domain A); all three: the oracle's
        a, b = sample_contexts(target, np.eye(DOMAINS)[k], config.offline_sequences, config.tokens_per_prompt, rng)
        theta, info = fit_offline(target, shape, theta0, a, b)
        drafts.append(theta)
        fits.append(info)
        if k == 0:
            alpha_a = expected_acceptance(target, shape, theta, a, b)
    return target, shape, drafts, fits[0], alpha_a


def _learners(config: Config, shape, drafts, stream: str, lr: float, full: bool = True) -> dict:
    """The learners of one stream; ``full=False`` keeps Offline, OGD at each step size and the oracle."""
    off = drafts[0]
    L = {"offline": ol.Fixed(shape, off)}
    if stream == "stationary":
        L["ogd"] = ol.OGD(shape, off, lr)
        return L
    for eta in config.learning_rates:
        L[f"ogd@{eta:g}"] = ol.OGD(shape, off, eta)
    if full:
        L["optimistic"] = ol.Optimistic(shape, off, lr)
        L["momentum"] = ol.Momentum(shape, off, lr, config.momentum)
        L["hedge-average"] = ol.HedgeAverage(shape, off, config.learning_rates, config.hedge_rate, config.hedge_share)
        L["hedge-mixture"] = ol.HedgeMixture(shape, off, config.learning_rates, config.hedge_rate, config.hedge_share)
    if stream == "piecewise":
        L["oracle"] = ol.Fixed(shape, off, schedule=[drafts[k] for k in ol.segment_domains(config.chunks)])
    return L


def run_replicate(config: Config, replicate: int, keep_emitted: bool = False, kind: str = "ngram") -> Replicate:
    """Every learner on the streams of one replicate.

    OGD, optimistic OGD and momentum all use the middle step size of ``learning_rates`` (the same
    for each, fixed in advance); OGD also runs at the other two for the ensemble comparisons.
    ``kind="transformer"``: the second target, with Offline, OGD at the three step sizes and the
    oracle on the piecewise stream, Offline and OGD at the middle step size on the stationary one
    (:data:`TRANSFORMER_STREAMS`).
    """
    from threadpoolctl import threadpool_limits

    ngram = kind == "ngram"
    with threadpool_limits(1):
        target, shape, drafts, fit, alpha_a = _setup(config, replicate, kind)
        runs, weights = {}, {}
        for s, stream in enumerate(ol.STREAMS if ngram else TRANSFORMER_STREAMS):
            learners = _learners(config, shape, drafts, stream, config.learning_rates[1], full=ngram)
            names = list(learners)
            keep = tuple(i for i, n in enumerate(names) if n not in ("offline", "oracle")) if keep_emitted else ()
            out = ol.run_streams(target, list(learners.values()), ol.stream_weights(stream, config.chunks, DOMAINS),
                                 config.prompts_per_chunk, config.tokens_per_prompt, config.gamma,
                                 make_rng(config.seed, 12 if ngram else 22, replicate, s), keep_emitted=keep)
            runs[stream] = dict(zip(names, out))
            weights[stream] = {n: learners[n].weights.tolist() for n in ("hedge-average", "hedge-mixture") if n in learners}
    return Replicate(runs, fit, alpha_a, weights, target)


# ------------------------------------------------------------------------------------------ result
@dataclass
class Result:
    """What :func:`run` returns: data and metrics, never plots."""

    config: Config
    replicates: list                # Replicate per replicate
    formula: dict                   # run_formula_checks
    pinsker: dict                   # pinsker_check
    online_lossless_p: np.ndarray   # per-context p-values (updating learners, replicate 0)
    online_lossless_n: np.ndarray   # their sample sizes
    control_lossless_p: np.ndarray  # resample-from-p control at the online sample size
    control_draws: int
    # the second setting (random-init transformer target): the same records for its replicates
    transformer_replicates: list = field(default_factory=list)
    transformer_lossless_p: np.ndarray = None
    transformer_lossless_n: np.ndarray = None
    transformer_control_lossless_p: np.ndarray = None
    transformer_control_draws: int = 0

    def setting(self, kind: str) -> "Result":
        """The result restricted to one target: ``"ngram"`` (this result) or ``"transformer"``.

        The transformer view has the transformer's replicates and losslessness records in the
        fields every helper reads (``replicates``, ``online_lossless_*``, ``control_*``), so the
        statistics below apply to either setting unchanged.
        """
        if kind == "ngram":
            return self
        if kind != "transformer":
            raise ValueError(f"setting must be one of {TARGETS}, got {kind!r}")
        if not self.transformer_replicates:
            raise ValueError("this result has no transformer setting")
        return dataclasses.replace(self, replicates=self.transformer_replicates,
                                   online_lossless_p=self.transformer_lossless_p,
                                   online_lossless_n=self.transformer_lossless_n,
                                   control_lossless_p=self.transformer_control_lossless_p,
                                   control_draws=self.transformer_control_draws, transformer_replicates=[])

    def alpha(self, stream: str, method: str) -> np.ndarray:
        """Mean acceptance per replicate, shape ``(replicates,)``."""
        return np.array([r.runs[stream][method].mean_alpha for r in self.replicates])

    def curve(self, stream: str, method: str, what: str = "alpha") -> np.ndarray:
        """Per-chunk values, shape ``(replicates, chunks)``."""
        return np.stack([getattr(r.runs[stream][method], what) for r in self.replicates])

    def uniform_alpha(self, stream: str, method: str) -> np.ndarray:
        """Mean acceptance of the uniform draft on ``method``'s own verified positions, per replicate."""
        return np.array([r.runs[stream][method].mean_uniform_alpha for r in self.replicates])

    def methods(self, stream: str) -> list:
        return list(self.replicates[0].runs[stream])

    @property
    def step_size(self) -> float:
        """The step size of OGD, optimistic OGD and momentum: the middle one of the grid."""
        return self.config.learning_rates[1]

    def ogd(self, stream: str) -> str:
        """Name of the OGD run at :attr:`step_size` on ``stream``."""
        return "ogd" if stream == "stationary" else f"ogd@{self.step_size:g}"

    def single_lr_alpha(self, stream: str) -> np.ndarray:
        """``(replicates, 3)``: OGD at each fixed step size."""
        return np.stack([self.alpha(stream, f"ogd@{eta:g}") for eta in self.config.learning_rates], axis=1)


def ensemble_comparison(result: Result, stream: str, method: str, margin: float = 0.01) -> dict:
    """The ensemble against the single step sizes, paired over replicates.

    ``best`` is the step size with the highest mean acceptance over the replicates (chosen in
    hindsight: the strongest single comparator), ``median`` the middle one by that mean. Returns
    the t intervals of ``ensemble - best`` and ``ensemble - median``.
    """
    singles = result.single_lr_alpha(stream)
    order = np.argsort(singles.mean(0))
    ens = result.alpha(stream, method)
    best, median = singles[:, order[-1]], singles[:, order[1]]
    return {"vs_best": paired_difference(ens, best, unit=UNIT), "vs_median": paired_difference(ens, median, unit=UNIT),
            "best_lr": result.config.learning_rates[order[-1]], "median_lr": result.config.learning_rates[order[1]],
            "margin": margin}


def every_replicate_difference(a: np.ndarray, b: np.ndarray) -> dict:
    """Smallest per-replicate difference ``a - b`` (``> 0`` means ``a`` wins in every replicate)."""
    d = np.asarray(a) - np.asarray(b)
    return {"smallest": float(d.min()), "differences": d.tolist(), "wins": int((d > 0).sum()), "n": int(d.size)}


def uniform_floor(result: Result, stream: str, method: str) -> Estimate:
    """Paired t interval over replicates of ``method``'s acceptance minus the uniform draft's.

    Both are exact acceptances on the same verified positions of ``method``'s run (the uniform
    draft's is recorded by :func:`~.online.run_streams`), so the difference is what the learned
    draft adds over a constant prediction that needs no training.
    """
    return paired_difference(result.alpha(stream, method), result.uniform_alpha(stream, method), unit=UNIT)


def offline_alpha_estimate(result: Result) -> Estimate:
    """t interval of the offline draft's exact acceptance on domain A over replicates."""
    return mean_interval([r.offline_alpha_a for r in result.replicates], unit=UNIT)


def offline_drift_alpha(result: Result) -> Estimate:
    """t interval over replicates of the offline draft's mean acceptance on the B and C segments
    of the piecewise stream (what the draft trained on A keeps after the drift)."""
    bc = np.isin(ol.segment_domains(result.config.chunks), [1, 2])
    return mean_interval(result.curve("piecewise", "offline")[:, bc].mean(1), unit=UNIT)


def lossless_power(draws: float, df: int, contexts: int, allowed_share: float = 0.10, level: float = 0.05,
                   power: float = LOSSLESS_POWER) -> dict:
    """What a per-context losslessness row can detect.

    The row tests ``contexts`` contexts at ``level`` with ``draws`` emitted tokens each and fails
    when more than ``allowed_share`` of them reject. Under an exact sampler each rejects with
    probability ``level``: ``false_alarm`` is the row's chance of failing anyway. A biased sampler
    whose emitted law ``p'`` is at chi-square divergence ``delta2 = sum_v (p' - p)^2 / p`` from the
    target row makes each Pearson test reject with the noncentral chi-square probability at
    noncentrality ``draws * delta2`` (``df`` degrees of freedom). Returns the per-context rejection
    probability ``reject_needed`` at which the row fails with probability ``power``, the
    divergence ``delta2`` that gives it, and ``tv_bound = sqrt(delta2) / 2``, the largest total
    variation such a divergence allows (a deviation spread evenly over the tokens has about that TV).
    """
    import scipy.optimize
    from scipy import stats

    allowance = int(np.floor(allowed_share * contexts + 1e-9))
    false_alarm = float(stats.binom.sf(allowance, contexts, level))
    r = scipy.optimize.brentq(lambda x: stats.binom.sf(allowance, contexts, x) - power, level, 1 - 1e-12)
    crit = stats.chi2.ppf(1 - level, df)
    lam = scipy.optimize.brentq(lambda nc: stats.ncx2.sf(crit, df, nc) - r, 1e-9, 1e6)
    delta2 = lam / draws
    return {"false_alarm": false_alarm, "reject_needed": float(r), "noncentrality": float(lam), "delta2": float(delta2),
            "tv_bound": float(np.sqrt(delta2) / 2), "allowance": allowance, "contexts": contexts, "draws": float(draws),
            "df": int(df), "power": power}


def cumulative_bound_ratio(result: Result) -> dict:
    """Largest ``sum_t (1 - alpha_t) / sqrt(T/2 sum_t l_t)`` over every run and every prefix."""
    worst, where = 0.0, None
    for i, rep in enumerate(result.replicates):
        for stream, runs in rep.runs.items():
            for name, run in runs.items():
                lhs, rhs = cumulative_pinsker(run)
                ratio = float((lhs / rhs).max())
                if ratio > worst:
                    worst, where = ratio, (i, stream, name)
    return {"max_ratio": worst, "where": where}


def speedups(result: Result, stream: str, methods: list) -> dict:
    """Modeled speed-up ``E[tokens](alpha) / (gamma c + 1)`` at each method's mean acceptance."""
    c = result.config
    return {m: float(np.mean(modeled_speedup(result.alpha(stream, m), c.gamma, c.cost_ratio))) for m in methods}


def dynamic_regret(result: Result, stream: str = "piecewise") -> dict:
    """``sum_t l_t(theta_t) - sum_t l_t(oracle_t)`` per method, mean over replicates.

    The oracle plays the draft trained offline on each segment's domain; its losses are measured
    on its own verified contexts, so this is a proxy of the dynamic regret, not the exact one.
    """
    oracle = result.curve(stream, "oracle", "loss").sum(1)
    return {m: float((result.curve(stream, m, "loss").sum(1) - oracle).mean()) for m in result.methods(stream)}


def pooled_context_lossless_p(replicates: list, contexts: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`context_lossless_p` over several replicates, each context tested against its own target.

    The updating learners' emitted tokens of every replicate are grouped by (replicate, context);
    the ``contexts`` most frequent groups are tested. Returns their p-values and sample sizes.
    """
    tests = []
    for rep in replicates:
        emitted = [run.emitted for runs in rep.runs.values() for run in runs.values() if run.emitted is not None]
        if emitted:
            p, n = context_lossless_p(np.concatenate(emitted), rep.target, contexts)
            tests += list(zip(n, p))
    if not tests:
        raise ValueError("no replicate kept its emitted tokens")
    top = sorted(tests, key=lambda t: -t[0])[:contexts]  # stable: ties keep replicate order
    return np.array([p for _, p in top]), np.array([n for n, _ in top])


def _online_lossless(reps: list, config: Config, formula: dict):
    """Per-context tests of the updating learners of ``reps``, and the control at their median size."""
    p_online, n_online = pooled_context_lossless_p(reps, config.check_pairs)
    draws = int(min(config.check_rounds, np.median(n_online)))
    return p_online, n_online, control_p_values(formula["control_samples"], draws), draws


def run(config: Config, transformer: bool = True) -> Result:
    """Every experiment of the chapter (``transformer=False`` leaves out the second target)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        replicates = [run_replicate(config, r, keep_emitted=(r == 0)) for r in range(config.replicates)]
        formula = run_formula_checks(config)
        pinsker = pinsker_check(config)
        tf = [run_replicate(config, r, keep_emitted=True, kind="transformer")
              for r in range(config.replicates)] if transformer else []
    p_online, n_online, p_control, draws = _online_lossless(replicates[:1], config, formula)
    extra = {}
    if tf:
        tp, tn, tc, td = _online_lossless(tf, config, formula)
        extra = dict(transformer_replicates=tf, transformer_lossless_p=tp, transformer_lossless_n=tn,
                     transformer_control_lossless_p=tc, transformer_control_draws=td)
    return Result(config, replicates, {k: v for k, v in formula.items() if k != "control_samples"}, pinsker,
                  p_online, n_online, p_control, draws, **extra)
