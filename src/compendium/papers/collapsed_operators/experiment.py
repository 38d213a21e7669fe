"""The chapter's experiment: ``Config``, ``Result`` and ``run``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...runtime import make_rng
from ...stats import mean_interval, paired_difference
from . import symbolic
from .complexes import SimplicialComplex, make_complex, random_clique_complex, triangle_planted_complex, vietoris_rips_complex
from .operators import (
    collapsed_family,
    collapsed_matvec,
    collapsed_operator,
    graded_operator,
    higher_order_minimum,
    normalized_laplacian,
    triangle_expansion_laplacian,
)
from .baselines import COUPLING_GRID, STREAMS, tuned_comparison
from .tasks import sign_test, spectral_clustering, tau_for_dof, tikhonov_smooth
from ...validation import require_int as _require_int, require_number as _require_number

EPS_GRID = (0.0, 0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4)  # Loewner monotonicity is checked along this grid
EPS_LIMIT = 1e8  # S_eps -> L0: distance measured here
EDGE_PROB_RANGE = (0.15, 0.5)  # G(n, p) complexes
RIPS_RADIUS_RANGE = (0.25, 0.5)  # Vietoris-Rips complexes of uniform points in the unit square
NUM_TEST_VECTORS = 5  # random x per complex for the variational form
ZERO_TOL = 1e-12  # |S_ij| <= ZERO_TOL ||L0|| counts as a zero entry
METHODS = ("L0", "normalized L0", "L0 + triangle expansion", "collapsed S")
SPECTRUM_EPS = (0.0, 1.0, 10.0, 100.0)  # eps values of the spectrum figure






@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell and the registry).

    Parameters
    ----------
    num_complexes : int in [10, 1000]
        Random complexes for the exact checks (even index: clique complex of G(n, p); odd:
        Vietoris-Rips complex of uniform points in the unit square).
    max_vertices : int in [8, 60]
        Their number of vertices is uniform in ``[8, max_vertices]``.
    coupling_cost : float in (0, 100]
        ``c`` in ``M = G G^T + diag(0, c I)``.
    num_seeds : int in [5, 100]
        Paired seeds of the clustering and smoothing experiments.
    num_communities, community_size, triangles_per_community, noise_edge_prob :
        The triangle-planted complex (see :func:`triangle_planted_complex`).
    smoothing_dof : float in (1, 50]
        Effective degrees of freedom of both Tikhonov smoothers; below the number of vertices.
    smoothing_noise : float in (0, 10]
        Standard deviation of the observation noise.
    num_dev_seeds : int in [3, 100]
        Dev complexes per regime on which ``c`` of S and the fusion weight are tuned (disjoint
        from the ``num_seeds`` test complexes).
    seed : int
    """

    num_complexes: int = 200
    max_vertices: int = 30
    coupling_cost: float = 1.0
    num_seeds: int = 20
    num_communities: int = 3
    community_size: int = 20
    triangles_per_community: int = 20
    noise_edge_prob: float = 0.2
    smoothing_dof: float = 6.0
    smoothing_noise: float = 1.0
    num_dev_seeds: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        _require_int("num_complexes", self.num_complexes, 10, 1000)
        _require_int("max_vertices", self.max_vertices, 8, 60)
        _require_number("coupling_cost", self.coupling_cost, 0, 100, low_open=True)
        _require_int("num_seeds", self.num_seeds, 5, 100)
        _require_int("num_communities", self.num_communities, 2, 6)
        _require_int("community_size", self.community_size, 6, 100)
        _require_int("triangles_per_community", self.triangles_per_community, 1, 500)
        _require_number("noise_edge_prob", self.noise_edge_prob, 0, 0.5)
        _require_number("smoothing_dof", self.smoothing_dof, 1, 50, low_open=True)
        _require_number("smoothing_noise", self.smoothing_noise, 0, 10, low_open=True)
        _require_int("num_dev_seeds", self.num_dev_seeds, 3, 100)
        _require_int("seed", self.seed, 0, 2**32 - 1)
        if self.smoothing_dof >= self.num_communities * self.community_size:
            raise ValueError("smoothing_dof must be below the number of vertices num_communities * community_size")


@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`run` returns (``N = num_complexes``, ``R = num_seeds``, ``K = len(EPS_GRID)``).

    Attributes
    ----------
    symbolic : dict of sympy residuals (0 when the identity holds) and ``scalar_psd`` (bool).
    complex_kind : (N,) str, 'clique' or 'rips'; complex_size : (N, 3) int, (V, E, T).
    psd_margin : (N,) ``min(lambda_min(S), lambda_min(L0 - S)) / ||L0||``.
    eigen_excess : (N,) ``max_i (lambda_i(S) - lambda_i(L0)) / ||L0||``.
    top_drop : (N,) ``(lambda_max(L0) - lambda_max(S)) / ||L0||``.
    variational_error : (N,) max relative gap between ``x^T S x`` and the least-squares minimum.
    implicit_error : (N,) relative error of the CG mat-vec against the dense ``S x``.
    monotone_margin : (N,) ``min_k lambda_min(S_{eps_{k+1}} - S_{eps_k}) / ||L0||``.
    limit_distance : (N, K + 1) ``||L0 - S_eps||_2 / ||L0||_2`` on ``EPS_GRID + (EPS_LIMIT,)``.
    offdiag_nonzeros : (N, 2) off-diagonal nonzeros of (L0, S).
    ari : dict method -> (R,) ARI on the triangle-planted complexes.
    ari_triangle_free, ari_misaligned : dict 'L0'/'collapsed S' -> (R,) for the two controls.
    mse, mse_misaligned : dict 'L0'/'collapsed S' -> (R,) Tikhonov smoothing MSE at equal dof.
    taus : (R, 2) ``tau`` of (L0, S) at ``smoothing_dof``.
    spectrum_example : dict 'L0' -> (V,) and eps -> (V,) sorted eigenvalues on the first planted complex.
    example_complex, example_labels, example_clusters : the first planted complex, its communities
        and the clusters found by each method (for the drawing).
    pitfall : dict of numbers showing the trivial collapse and the orientation dependence.
    tuned : dict regime ('planted', 'graph') -> :func:`baselines.score_regime` output (the single
        dev-tuned c and fusion weight, the triangle-only operator and the c sweep, on test complexes).
    tuning : the single picks on the mixed dev split (:func:`baselines.tuned_comparison` without
        the regimes: ``tuned_c``, ``tuned_w``, ``c_interior``, ``w_interior``, ``dev_means``,
        ``own_c``, ``own_w``).
    """

    symbolic: dict
    complex_kind: np.ndarray
    complex_size: np.ndarray
    psd_margin: np.ndarray
    eigen_excess: np.ndarray
    top_drop: np.ndarray
    variational_error: np.ndarray
    implicit_error: np.ndarray
    monotone_margin: np.ndarray
    limit_distance: np.ndarray
    offdiag_nonzeros: np.ndarray
    ari: dict
    ari_triangle_free: dict
    ari_misaligned: dict
    mse: dict
    mse_misaligned: dict
    taus: np.ndarray
    spectrum_example: dict
    example_complex: SimplicialComplex
    example_labels: np.ndarray
    example_clusters: dict
    pitfall: dict
    tuned: dict
    tuning: dict


def random_complex(index: int, max_vertices: int, rng: np.random.Generator) -> tuple[str, SimplicialComplex]:
    """The ``index``-th complex of the exact checks: clique complex (even) or Vietoris-Rips (odd)."""
    n = int(rng.integers(8, max_vertices + 1))
    if index % 2 == 0:
        return "clique", random_clique_complex(n, float(rng.uniform(*EDGE_PROB_RANGE)), rng)
    return "rips", vietoris_rips_complex(rng.random((n, 2)), float(rng.uniform(*RIPS_RADIUS_RANGE)))


def exact_checks(cx: SimplicialComplex, coupling_cost: float, rng: np.random.Generator) -> dict:
    """Every numerical property of one complex (see :class:`Result` for the definitions)."""
    op = graded_operator(cx, "triangle_shift", coupling_cost)
    L0 = op.blocks()[0]
    S = collapsed_operator(op)
    lam0, lam_s = np.linalg.eigvalsh(L0), np.linalg.eigvalsh(S)
    scale = max(lam0[-1], 1.0)
    family = collapsed_family(op, EPS_GRID + (EPS_LIMIT,))
    steps = [np.linalg.eigvalsh(family[k + 1] - family[k])[0] for k in range(len(EPS_GRID) - 1)]
    X = rng.standard_normal((cx.num_vertices, NUM_TEST_VECTORS))
    quad = np.einsum("ij,ik,kj->j", X, S, X)
    minima = higher_order_minimum(op, X)
    x = rng.standard_normal(cx.num_vertices)
    dense = S @ x
    offdiag = ~np.eye(cx.num_vertices, dtype=bool)
    return {
        "psd_margin": min(lam_s[0], np.linalg.eigvalsh(L0 - S)[0]) / scale,
        "eigen_excess": np.max(lam_s - lam0) / scale,
        "top_drop": (lam0[-1] - lam_s[-1]) / scale,
        "variational_error": np.max(np.abs(quad - minima) / np.maximum(np.maximum(np.abs(quad), np.abs(minima)), 1e-300)),
        "implicit_error": np.linalg.norm(collapsed_matvec(op, x) - dense) / max(np.linalg.norm(dense), 1e-300),
        "monotone_margin": min(steps) / scale,
        "limit_distance": np.array([np.linalg.norm(L0 - s, 2) for s in family]) / scale,
        "offdiag_nonzeros": (int(np.sum(np.abs(L0[offdiag]) > ZERO_TOL * scale)), int(np.sum(np.abs(S[offdiag]) > ZERO_TOL * scale))),
    }


def signed_edge_fill(config: Config) -> np.ndarray:
    """Off-diagonal nonzeros of ``(L0, S)`` under the ``signed_edge`` coupling, on the exact-check complexes.

    There ``B1 B2 = 0`` makes ``S = c/(1+c) L0`` (Exercise 1): a Schur complement that is *not*
    denser than ``L0``. The negative control of ``generally-dense``: the same fill-in count (entries
    above ``ZERO_TOL ||L0||``) must not call it denser. Returns an (N, 2) int array.
    """
    nnz = []
    for i in range(config.num_complexes):
        _, cx = random_complex(i, config.max_vertices, make_rng(config.seed, 1, i))
        op = graded_operator(cx, "signed_edge", config.coupling_cost)
        L0, S = op.blocks()[0], collapsed_operator(op)
        scale = max(np.linalg.eigvalsh(L0)[-1], 1.0)
        off = ~np.eye(cx.num_vertices, dtype=bool)
        nnz.append((int(np.sum(np.abs(L0[off]) > ZERO_TOL * scale)), int(np.sum(np.abs(S[off]) > ZERO_TOL * scale))))
    return np.array(nnz)


def operators_for(cx: SimplicialComplex, coupling_cost: float) -> dict:
    """The four vertex operators compared in the experiments, keyed by :data:`METHODS`."""
    op = graded_operator(cx, "triangle_shift", coupling_cost)
    L0 = op.blocks()[0]
    return {
        "L0": L0,
        "normalized L0": normalized_laplacian(L0),
        "L0 + triangle expansion": L0 + triangle_expansion_laplacian(cx),
        "collapsed S": collapsed_operator(op),
    }


def smoothing_mse(ops: dict, labels: np.ndarray, config: Config, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    """MSE of Tikhonov smoothing with L0 and S at ``smoothing_dof``, for a community-constant signal."""
    truth = rng.standard_normal(config.num_communities)[labels]  # constant on every planted triangle
    noisy = truth + config.smoothing_noise * rng.standard_normal(truth.size)
    mse, taus = {}, []
    for name in ("L0", "collapsed S"):
        tau = tau_for_dof(np.linalg.eigvalsh(ops[name]), config.smoothing_dof)
        mse[name] = float(np.mean((tikhonov_smooth(ops[name], noisy, tau) - truth) ** 2))
        taus.append(tau)
    return mse, np.array(taus)


def pitfall_numbers(cx: SimplicialComplex, coupling_cost: float, rng: np.random.Generator) -> dict:
    """How the signed couplings collapse trivially, and how the unsigned one depends on orientation."""
    L0 = graded_operator(cx, "triangle_shift", coupling_cost).blocks()[0]
    scale = np.linalg.norm(L0, 2)
    eps = 0.5
    c = coupling_cost + eps
    s_edge = collapsed_operator(graded_operator(cx, "signed_edge", coupling_cost), eps)
    s_tri = collapsed_operator(graded_operator(cx, "signed_triangle", coupling_cost), eps)
    perm = rng.permutation(cx.num_vertices)  # relabel: vertex v becomes perm[v]
    relabelled = make_complex(cx.num_vertices, perm[cx.edges], perm[cx.triangles])

    def spectral_gap(scheme):
        a = np.linalg.eigvalsh(collapsed_operator(graded_operator(cx, scheme, coupling_cost)))
        b = np.linalg.eigvalsh(collapsed_operator(graded_operator(relabelled, scheme, coupling_cost)))
        return float(np.max(np.abs(a - b)) / scale)

    return {
        "signed_edge_gap": float(np.linalg.norm(s_edge - c / (1 + c) * L0, 2) / scale),
        "signed_triangle_gap": float(np.linalg.norm(s_tri - L0, 2) / scale),
        "unsigned_relabel_gap": spectral_gap("unsigned_triangle"),
        "shift_relabel_gap": spectral_gap("triangle_shift"),
        "eps": eps,
    }


def run(config: Config) -> Result:
    """Run every experiment of the chapter for ``config`` (deterministic given ``config.seed``).

    BLAS and OpenMP run single-threaded inside: the matrices are small, so threads only add
    overhead (and contention when several chapters run side by side).
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _run(config)


def _run(config: Config) -> Result:
    sym = {
        "boundary": symbolic.boundary_composition_residual(),
        "block_factorisation": symbolic.block_factorisation_residual(),
        "completion_of_square": symbolic.completion_of_square_residual(),
        "schur_psd": symbolic.schur_psd_witness_residual(),
        "scalar_psd": symbolic.scalar_schur_is_nonnegative(),
        "woodbury": symbolic.woodbury_residual(),
    }

    kinds, sizes, rows = [], [], []
    for i in range(config.num_complexes):
        rng = make_rng(config.seed, 1, i)
        kind, cx = random_complex(i, config.max_vertices, rng)
        kinds.append(kind)
        sizes.append((cx.num_vertices, cx.num_edges, cx.num_triangles))
        rows.append(exact_checks(cx, config.coupling_cost, rng))
    col = lambda key: np.array([r[key] for r in rows])  # noqa: E731

    planted = dict(num_communities=config.num_communities, community_size=config.community_size,
                   triangles_per_community=config.triangles_per_community, noise_edge_prob=config.noise_edge_prob)
    # misaligned control: triangles ignore the communities; the 1-skeleton carries them instead, with
    # the within-community edge density the planted triangles would have added (no overlaps counted)
    pairs = config.community_size * (config.community_size - 1) / 2
    rho = min(1.0, 3 * config.triangles_per_community / pairs)
    within = 1 - (1 - config.noise_edge_prob) * (1 - rho)

    ari = {m: [] for m in METHODS}
    ari_free = {"L0": [], "collapsed S": []}
    ari_mis = {"L0": [], "collapsed S": []}
    mse = {"L0": [], "collapsed S": []}
    mse_mis = {"L0": [], "collapsed S": []}
    taus, example = [], None
    for r in range(config.num_seeds):
        rng = make_rng(config.seed, 2, r)
        cx, labels = triangle_planted_complex(**planted, rng=rng)
        km_seed = int(rng.integers(2**31 - 1))
        ops = operators_for(cx, config.coupling_cost)
        clusters = {m: spectral_clustering(ops[m], config.num_communities, km_seed) for m in METHODS}
        for m in METHODS:
            ari[m].append(_ari(labels, clusters[m]))
        if example is None:
            example = (cx, labels, clusters, ops)
        # control 1: the same 1-skeleton with every triangle left hollow
        free = operators_for(make_complex(cx.num_vertices, cx.edges), config.coupling_cost)
        for m in ari_free:
            ari_free[m].append(_ari(labels, spectral_clustering(free[m], config.num_communities, km_seed)))
        # control 2: triangles placed without regard to the communities
        rng_mis = make_rng(config.seed, 3, r)
        cx_mis, _ = triangle_planted_complex(**planted, rng=rng_mis, aligned=False, within_edge_prob=within)
        mis = operators_for(cx_mis, config.coupling_cost)
        for m in ari_mis:
            ari_mis[m].append(_ari(labels, spectral_clustering(mis[m], config.num_communities, km_seed)))
        one, tau = smoothing_mse(ops, labels, config, make_rng(config.seed, 4, r))
        two, _ = smoothing_mse(mis, labels, config, make_rng(config.seed, 4, r))
        taus.append(tau)
        for m in mse:
            mse[m].append(one[m])
            mse_mis[m].append(two[m])

    cx0, labels0, clusters0, ops0 = example
    op0 = graded_operator(cx0, "triangle_shift", config.coupling_cost)
    spectrum = {"L0": np.linalg.eigvalsh(ops0["L0"])}
    for eps, s in zip(SPECTRUM_EPS, collapsed_family(op0, SPECTRUM_EPS)):
        spectrum[eps] = np.linalg.eigvalsh(s)
    arr = lambda d: {k: np.array(v) for k, v in d.items()}  # noqa: E731
    tuned = tuned_comparison(config)
    return Result(
        symbolic=sym,
        complex_kind=np.array(kinds),
        complex_size=np.array(sizes),
        psd_margin=col("psd_margin"),
        eigen_excess=col("eigen_excess"),
        top_drop=col("top_drop"),
        variational_error=col("variational_error"),
        implicit_error=col("implicit_error"),
        monotone_margin=col("monotone_margin"),
        limit_distance=np.stack(col("limit_distance")),
        offdiag_nonzeros=col("offdiag_nonzeros"),
        ari=arr(ari),
        ari_triangle_free=arr(ari_free),
        ari_misaligned=arr(ari_mis),
        mse=arr(mse),
        mse_misaligned=arr(mse_mis),
        taus=np.array(taus),
        spectrum_example=spectrum,
        example_complex=cx0,
        example_labels=labels0,
        example_clusters=clusters0,
        pitfall=pitfall_numbers(cx0, config.coupling_cost, make_rng(config.seed, 5)),
        # planted test stream 2 = the complexes above; dev streams 6 and 7, graph-regime test stream 8
        tuned={r: tuned[r] for r in STREAMS},
        tuning={k: v for k, v in tuned.items() if k not in STREAMS},
    )


def ledger_estimates(result: Result) -> dict:
    """The interval estimates the ledger decides on (t intervals over the paired test complexes).

    Keys: ``clustering_gain`` (ARI(S) - ARI(L0), planted), ``misaligned_gain`` (the same with
    misaligned triangles), ``smoothing_gain`` (MSE(L0) - MSE(S)), ``misaligned_smoothing``
    (mean relative MSE change of S over L0, misaligned), ``vs_tuned_fusion`` (ARI(S, tuned c) -
    ARI(fusion, tuned w), planted), ``vs_triangle_only`` (ARI(S, tuned c) - ARI(L_tri), planted),
    ``graph_regime`` (ARI(S, tuned c) - ARI(L0), graph regime), ``graph_triangle_only``
    (ARI(L_tri) - ARI(L0), graph regime) and ``planted_single_c`` (ARI(S, tuned c) - ARI(L0),
    planted). ``c`` is the single value picked on the mixed dev split.
    """
    unit = "test complexes"
    pd = lambda a, b: paired_difference(a, b, unit=unit)  # noqa: E731
    planted, graph = result.tuned["planted"]["ari"], result.tuned["graph"]["ari"]
    mis = result.mse_misaligned
    return {
        "clustering_gain": pd(result.ari["collapsed S"], result.ari["L0"]),
        "misaligned_gain": pd(result.ari_misaligned["collapsed S"], result.ari_misaligned["L0"]),
        "smoothing_gain": pd(result.mse["L0"], result.mse["collapsed S"]),
        "misaligned_smoothing": mean_interval((mis["collapsed S"] - mis["L0"]) / mis["L0"], unit=unit),
        "vs_tuned_fusion": pd(planted["collapsed S (tuned c)"], planted["fusion (tuned w)"]),
        "vs_triangle_only": pd(planted["collapsed S (tuned c)"], planted["triangle only"]),
        "graph_regime": pd(graph["collapsed S (tuned c)"], graph["L0"]),
        "graph_triangle_only": pd(graph["triangle only"], graph["L0"]),
        "planted_single_c": pd(planted["collapsed S (tuned c)"], planted["L0"]),
    }


NONINFERIORITY_MARGIN = 0.05  # ARI: graph-regime-preserved's margin (fixed with the first tuned design)


def one_c_serves_both(result: Result, c: float) -> dict:
    """Whether ``S`` at coupling ``c`` passes both halves of the single-c claim on the test complexes.

    The halves are the ledger's tests: the planted gain ARI(S) - ARI(L0) with its whole 95%
    interval above 0, and the graph regime's ARI(S) - ARI(L0) with its whole interval above
    ``-NONINFERIORITY_MARGIN``. The far end of :data:`COUPLING_GRID` (S close to L0) passes the
    second trivially and must fail the first; its near end must fail the second.

    Returns a dict with ``c``, ``planted_gain`` and ``graph_change`` (paired estimates), their
    verdicts ``planted_verdict`` and ``graph_verdict``, and ``passes`` (both 'pass').
    """
    from ...claims import at_least, greater_than

    unit = "test complexes"
    planted, graph = result.tuned["planted"], result.tuned["graph"]
    gain = paired_difference(planted["sweep"][c], planted["ari"]["L0"], unit=unit)
    change = paired_difference(graph["sweep"][c], graph["ari"]["L0"], unit=unit)
    pv, gv = greater_than(0.0).decide(gain), at_least(-NONINFERIORITY_MARGIN).decide(change)
    return {"c": float(c), "planted_gain": gain, "graph_change": change, "planted_verdict": pv, "graph_verdict": gv,
            "passes": pv == "pass" and gv == "pass"}


def _ari(truth, found) -> float:
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(truth, found))


__all__ = ["Config", "Result", "run", "ledger_estimates", "one_c_serves_both", "NONINFERIORITY_MARGIN", "COUPLING_GRID", "exact_checks", "random_complex", "operators_for", "smoothing_mse",
           "pitfall_numbers", "sign_test", "EPS_GRID", "EPS_LIMIT", "METHODS", "SPECTRUM_EPS"]
