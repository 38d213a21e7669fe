r"""Continuized-HiPPO operator: the continuum limit of the HiPPO-LegS matrix.

Paper card
----------
ICML 2026, seed file ``000_f69ae4f9f6fb29da.txt``, abstract 14. The paper itself was not
available; only its abstract. Background: HiPPO (Gu et al., NeurIPS 2020) and the linear
state-space layer LSSL (Gu et al., NeurIPS 2021). The operator, the eigenvalue law and the Bessel
solution below are our own derivations (research card ``continuized_hippo``), checked here.

Equations implemented
---------------------
HiPPO-LegS, state size ``N``, ``n, k = 0..N-1`` (:func:`legs_matrices`)::

    A[n, k] = -sqrt((2n+1)(2k+1)) (n > k),  -(n+1) (n = k),  0 (n < k);   B[n] = sqrt(2n+1)

Normal plus low rank (:func:`legs_nplr`): ``A = S - I/2 - B B^T / 2`` with ``S`` skew-symmetric,
``S[n, k] = -sqrt((2n+1)(2k+1)) sign(n-k) / 2``.

Closed-form impulse response of the LTI system ``x' = A x + B u``
(:func:`legs_impulse_closed_form`)::

    (e^{At} B)_n = sqrt(2n+1) e^{-t} P_n(2 e^{-t} - 1)

Continuum limit on the grid ``x_n = (n + 1/2)/N`` with time ``tau = N^2 t`` (:func:`volterra_apply`,
:func:`skew_apply`): ``A / N^2 -> K`` and ``S / N^2 -> T`` on smooth functions, where::

    (K phi)(x) = -2 sqrt(x) int_0^x sqrt(y) phi(y) dy                       (Volterra)
    (T phi)(x) = -sqrt(x) (int_0^x - int_x^1) sqrt(y) phi(y) dy              (skew-adjoint)

and ``B / sqrt(N) -> b(x) = sqrt(2x)``. The continuum LSSL ``h_tau = K h + b u`` has the impulse
response ``h(tau, x) = sqrt(2x) J0(2x sqrt(tau))`` (:func:`continuum_impulse`) and, with the read-out
``C = b``, the scalar kernel ``J1(2 sqrt(tau)) / sqrt(tau)`` (:func:`continuum_scalar_kernel`).

Spectrum of ``T``: eigenfunctions ``sqrt(x) exp(i c_m x^2)`` with eigenvalues ``i / c_m``,
``c_m = (2m+1) pi``. Hence the positive imaginary parts ``omega_m(N)`` of the eigenvalues of ``S``
follow the two-term law (:func:`skew_eigs_asymptotic`)::

    omega_m(N) = N^2 / c_m - c_m / 6 + O(N^-2)

The O(1) term ``-c_m/6`` follows from the secular equation (:func:`secular_omega`). It is checked by an
estimate that uses no reference constants (:func:`richardson_constant`): with
``d(N) = omega_m(N) - N^2/c_m = C_m + a_m N^-2 + O(N^-4)``, the Richardson combination
``(4 d(2N) - d(N)) / 3`` removes the ``N^-2`` term and estimates ``C_m`` to ``O(N^-4)``.

Controls (:func:`law_error_slope`, :func:`convergence_errors`): the same slope criterion applied to
the leading law ``N^2/c_m`` alone and to the S4D-Inv heuristic ``(N/pi)(N/(2m+1) - 1)`` (whose
errors do not fall like ``N^-2``), and the convergence orders recomputed on a wrong grid
(``x_n = n/N``) and on a wrong time scale (``tau = N (N - 1) t``), which must lose the ``N^-2`` rate.

Small-scale deviations
----------------------
- The paper's normalisation of the operator is unknown; we use the grid ``(n + 1/2)/N`` and the
  time scale ``tau = N^2 t``. Another grid changes the O(1) term of the law, not the leading one.
- Which "matrix related to the HiPPO matrix" the paper analyses is unknown; we use the skew part
  ``S``. Eigenvalues of ``S`` come from the Hermitian matrix ``-i S`` (``eigvalsh``), never from a
  dense matrix similar to the highly non-normal ``A``.
- Sizes: ``N <= 512`` at smoke scale, ``N <= 2048`` at full scale; the sympy proofs use
  ``N <= symbolic_order`` (5 at smoke, 12 at full). The second-order eigenvalue check uses ``N <= 1024`` (beyond, the
  O(N^-2) remainder is below the round-off of ``eigvalsh``) and the modes ``m <= 3``; beyond
  ``N = 1024`` the secular equation (in mpmath) takes over from the eigensolver.
- No training: the optional LSSL layer experiment of the research card is not run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.special
from ..stats import loglog_slope as _loglog_slope_estimate
from ..validation import require_int as _require_int

# Limits of N^2 |omega_m - (N^2/c_m - c_m/6)| for m = 0..3: c_m^3/90 + c_m/12 (see secular_omega).
SECOND_ORDER_CONSTANTS = tuple(float(c**3 / 90.0 + c / 12.0) for c in (2 * np.arange(4) + 1) * np.pi)
SECOND_ORDER_MAX_ORDER = 1024  # beyond this the remainder is below eigvalsh round-off
EXPM_ORDERS = (8, 16, 32, 64)  # state sizes for the expm reference check
EXPM_TIMES = (0.1, 0.7, 2.0)
PROFILE_TAUS = (0.5, 2.0, 8.0)  # continuum times shown in the impulse-response figure
NUM_TAUS = 161  # tau grid of the impulse-response comparison
KERNEL_TAU_MAX = 16.0  # the card states the scalar-kernel bound 1/N^2 for tau <= 16


@dataclass(frozen=True)
class Config:
    """Parameters of one run (names match the notebook's parameters cell).

    Parameters
    ----------
    symbolic_order : int in [2, 12], largest state size ``N`` for the exact sympy proofs.
    orders : tuple of int, strictly increasing, at least 3, each in [16, 4096] (a doubling grid).
    num_modes : int in [1, 8], skew-part eigenvalues compared with the asymptotic law.
    tau_max : float in (0, 32], largest continuum time ``tau = N^2 t`` compared.
    seed : int, recorded for the ledger; the computation has no randomness.
    """

    symbolic_order: int = 5
    orders: tuple = (64, 128, 256, 512)
    num_modes: int = 4
    tau_max: float = 8.0
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "orders", tuple(self.orders))
        _require_int("symbolic_order", self.symbolic_order, 2, 12)
        _require_int("num_modes", self.num_modes, 1, 8)
        _require_int("seed", self.seed, 0, 2**32 - 1)
        if len(self.orders) < 3:
            raise ValueError(f"orders needs at least 3 state sizes, got {self.orders!r}")
        for n in self.orders:
            _require_int("every entry of orders", n, 16, 4096)
        if any(b <= a for a, b in zip(self.orders, self.orders[1:])):
            raise ValueError(f"orders must be strictly increasing, got {self.orders!r}")
        if isinstance(self.tau_max, bool) or not isinstance(self.tau_max, (int, float)) or not 0 < self.tau_max <= 32:
            raise ValueError(f"tau_max must be a number in (0, 32], got {self.tau_max!r}")




@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`run` returns: arrays and metrics, never plots.

    Shapes use ``K = len(orders)``, ``M = num_modes``, ``M4 = min(M, 4)`` (modes with reference
    constants), ``K2`` = number of orders ``<= 1024``, ``T`` = number of ``taus``.

    Attributes
    ----------
    skew_eigenvalues : (K, M) ``omega_m(N)``, largest positive imaginary parts of eig(S).
    leading_ratio : (K, M4) ``N^2 |omega_m/N^2 - 1/c_m| / (c_m/6)``.
    second_order_scaled : (K, M) ``N^2 |omega_m - (N^2/c_m - c_m/6)|``.
    second_order_ratio : (K2, M4) ``second_order_scaled`` over :data:`SECOND_ORDER_CONSTANTS`.
    closed_form_error : (len(EXPM_ORDERS),) ``max_t ||expm(A t) B - closed form||_inf``.
    impulse_error : (K,) max over ``tau <= tau_max`` and n of discrete minus continuum.
    kernel_error : (K,) max over ``tau <= max(tau_max, 16)`` of discrete minus continuum kernel.
    richardson : (M4,) Richardson estimates of the O(1) term ``C_m`` from the two largest orders
        ``<= 1024`` (``N`` and ``2N``); richardson_orders : the pair used.
    law_slopes : dict, log-log slope over orders ``<= 1024`` of the worst mode ``m <= 3`` of
        ``|omega_m - law|`` for 'two_term', 'leading' and 's4d_inv' laws.
    control_slopes : dict, convergence slopes on a wrong grid ('impulse_wrong_grid') and a wrong
        time scale ('kernel_wrong_time').
    kernel_discrete : (K, T) ``B^T expm(A tau/N^2) B / N^2``; kernel_continuum : (T,).
    profiles : tuple of (P, N_k) ``expm(A tau/N^2) B / sqrt(N)`` at ``profile_taus`` (P,).
    operator_error : (K,) ``max_n |(A/N^2) b - K b|`` on the grid, ``K b`` by quadrature.
    slopes : dict, log-log slopes vs N ('impulse', 'kernel', 'operator', 'eigen_leading').
    symbolic : dict of sympy residuals that vanish when the identities hold.
    secular : dict, the secular equation: ``eigh_error`` (largest relative gap to ``eigvalsh``
        over the orders ``<= 1024`` and modes ``m <= 3``), ``wrong_offset_error`` (the same with
        ``n`` for ``n + 1/2``, smallest order only), ``remainder_slope`` (:func:`secular_remainder_slope`) and
        ``remainder_slope_wrong`` (its control, constants 1% off), ``remainder_ratio`` (M4,) the
        relative gap to ``c^3/90 + c/12`` at the largest of :data:`SECULAR_ORDERS`, and
        ``expansion`` / ``expansion_wrong`` (sympy residual pairs of
        :func:`secular_two_term_residual`).
    """

    orders: np.ndarray
    skew_eigenvalues: np.ndarray
    leading_ratio: np.ndarray
    second_order_scaled: np.ndarray
    second_order_ratio: np.ndarray
    closed_form_error: np.ndarray
    taus: np.ndarray
    impulse_error: np.ndarray
    kernel_error: np.ndarray
    kernel_discrete: np.ndarray
    kernel_continuum: np.ndarray
    profile_taus: np.ndarray
    profiles: tuple
    operator_error: np.ndarray
    slopes: dict
    symbolic: dict
    richardson: np.ndarray
    richardson_orders: tuple
    law_slopes: dict
    control_slopes: dict
    secular: dict


def _check_order(order: int) -> None:
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"the state size must be a positive integer, got {order!r}")


def legs_matrices(order: int) -> tuple[np.ndarray, np.ndarray]:
    """HiPPO-LegS matrices ``A`` (shape (N, N), lower triangular) and ``B`` (shape (N,))."""
    _check_order(order)
    q = np.sqrt(2.0 * np.arange(order) + 1.0)  # sqrt(2n+1)
    A = -np.tril(np.outer(q, q), k=-1) - np.diag(np.arange(1.0, order + 1.0))
    return A, q.copy()


def legs_nplr(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Skew part ``S`` (shape (N, N)) and ``B`` (shape (N,)) with ``A = S - I/2 - B B^T / 2``."""
    _check_order(order)
    q = np.sqrt(2.0 * np.arange(order) + 1.0)
    n = np.arange(order)
    S = -0.5 * np.sign(n[:, None] - n[None, :]) * np.outer(q, q)  # built from its formula, not from A
    return S, q


def legs_impulse_closed_form(order: int, t) -> np.ndarray:
    """``expm(A t) B`` from the Legendre closed form: ``order`` = N, ``t`` scalar or shape (T,) -> (T, N)."""
    _check_order(order)
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if t.ndim != 1 or np.any(t < 0) or not np.all(np.isfinite(t)):
        raise ValueError("t must be a finite, non-negative scalar or 1-D array")
    z = 2.0 * np.exp(-t) - 1.0  # in (-1, 1]: the three-term recurrence is stable there
    P = np.empty((t.size, order))
    P[:, 0] = 1.0
    if order > 1:
        P[:, 1] = z
    for n in range(1, order - 1):  # (n+1) P_{n+1} = (2n+1) z P_n - n P_{n-1}
        P[:, n + 1] = ((2 * n + 1) * z * P[:, n] - n * P[:, n - 1]) / (n + 1)
    return np.sqrt(2.0 * np.arange(order) + 1.0) * np.exp(-t)[:, None] * P


def continuum_grid(order: int) -> np.ndarray:
    """Grid ``x_n = (n + 1/2) / N``, shape (N,): then ``sqrt(2n+1) = sqrt(2 N x_n)`` exactly."""
    _check_order(order)
    return (np.arange(order) + 0.5) / order


def continuum_impulse(x, tau) -> np.ndarray:
    """``h(tau, x) = sqrt(2x) J0(2 x sqrt(tau))``; ``x`` shape (X,), ``tau`` shape (T,) -> (T, X)."""
    x = np.atleast_1d(np.asarray(x, dtype=float))
    tau = np.atleast_1d(np.asarray(tau, dtype=float))
    if np.any(x < 0) or np.any(tau < 0):
        raise ValueError("x and tau must be non-negative")
    return np.sqrt(2.0 * x) * scipy.special.j0(2.0 * x * np.sqrt(tau)[:, None])


def continuum_scalar_kernel(tau) -> np.ndarray:
    """``J1(2 sqrt(tau)) / sqrt(tau)`` with its limit 1 at ``tau = 0``; shape of ``tau``."""
    tau = np.asarray(tau, dtype=float)
    if np.any(tau < 0):
        raise ValueError("tau must be non-negative")
    s = np.sqrt(tau)
    small = s < 1e-4  # series J1(2s)/s = 1 - s^2/2 + s^4/12 - ...: exact to round-off here
    safe = np.where(small, 1.0, s)
    return np.where(small, 1.0 - tau / 2.0, scipy.special.j1(2.0 * safe) / safe)


def _weighted_cumulative(phi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``int_0^{x_j} sqrt(y) phi(y) dy`` by the trapezoid rule in ``u = y^{3/2}``, shape (..., X)."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size < 2 or x[0] != 0.0 or x[-1] != 1.0 or np.any(np.diff(x) <= 0):
        raise ValueError("x must be a strictly increasing 1-D grid from 0 to 1 (both included)")
    phi = np.asarray(phi)
    if phi.shape[-1] != x.size:
        raise ValueError(f"phi has {phi.shape[-1]} values on its last axis, the grid has {x.size}")
    du = np.diff(x**1.5)  # sqrt(y) dy = (2/3) du: the square-root weight is integrated exactly
    steps = (2.0 / 3.0) * 0.5 * (phi[..., 1:] + phi[..., :-1]) * du
    return np.concatenate([np.zeros_like(phi[..., :1]), np.cumsum(steps, axis=-1)], axis=-1)


def volterra_apply(phi, x) -> np.ndarray:
    """Continuized-HiPPO operator ``(K phi)(x) = -2 sqrt(x) int_0^x sqrt(y) phi(y) dy`` by quadrature.

    ``phi`` has shape (..., X) (real or complex) on the strictly increasing grid ``x``, shape (X,),
    with ``x[0] = 0`` and ``x[-1] = 1``; returns shape (..., X).
    """
    x = np.asarray(x, dtype=float)
    return -2.0 * np.sqrt(x) * _weighted_cumulative(phi, x)


def skew_apply(phi, x) -> np.ndarray:
    """Skew continuum operator ``(T phi)(x) = -sqrt(x) (int_0^x - int_x^1) sqrt(y) phi(y) dy``.

    Same shapes as :func:`volterra_apply`.
    """
    x = np.asarray(x, dtype=float)
    F = _weighted_cumulative(phi, x)
    return -np.sqrt(x) * (2.0 * F - F[..., -1:])


def skew_eigenvalues(order: int, num_modes: int) -> np.ndarray:
    """The ``num_modes`` largest ``omega`` with ``i omega`` an eigenvalue of ``S``, shape (num_modes,).

    ``-i S`` is Hermitian, so ``eigh`` gives its real eigenvalues ``omega`` stably.
    """
    _check_order(order)
    if not 1 <= num_modes <= order // 2:
        raise ValueError(f"num_modes must lie in [1, {order // 2}] for N = {order}, got {num_modes}")
    S, _ = legs_nplr(order)
    omega = scipy.linalg.eigh(-1j * S, eigvals_only=True, subset_by_index=[order - num_modes, order - 1])
    return omega[::-1].copy()  # descending: omega_0 > omega_1 > ...


def secular_omega(order: int, mode: int, dps: int = 30, offset: float = 0.5) -> float:
    """``omega_m(N)`` from the secular equation ``sum_{n<N} arctan((n + 1/2)/omega) = (2m+1) pi/2``.

    Partial sums of ``w = D v`` obey ``Y_{n+1}/Y_n = (i omega - n - 1/2)/(i omega + n + 1/2)`` with
    ``Y_N = -Y_0``; the phase condition is the equation above. Expanding the arctan in
    ``1/omega`` gives ``omega_m = N^2/c_m - c_m/6 + (c_m^3/90 + c_m/12)/N^2 + O(N^-4)``.
    Solved with mpmath ``findroot`` from the two-term law. ``offset`` replaces the ``1/2`` of
    ``n + 1/2`` (the wrong value 0 is the control of :func:`secular_eigh_error`).
    """
    import mpmath

    _check_order(order)
    with mpmath.workdps(dps):
        return float(_secular_root(order, mode, mpmath.mpf(offset) if offset != 0.5 else mpmath.mpf(1) / 2))


def _secular_root(order: int, mode: int, half):
    """The mpmath root of the secular equation at the current working precision."""
    import mpmath

    c = (2 * mode + 1) * mpmath.pi

    def f(w):
        return mpmath.fsum(mpmath.atan((n + half) / w) for n in range(order)) - c / 2

    return mpmath.findroot(f, order**2 / c - c / 6)


def secular_eigh_error(orders, omega, *, offset: float = 0.5) -> float:
    """Largest relative gap ``|omega_sec - omega_eigh| / omega_eigh`` over ``orders`` (K,) and the
    modes of ``omega`` (K, M): the secular equation against the eigensolver (no asymptotics)."""
    omega = np.asarray(omega, dtype=float)
    gaps = [abs(secular_omega(int(N), m, offset=offset) - omega[k, m]) / omega[k, m]
            for k, N in enumerate(orders) for m in range(omega.shape[1])]
    return float(max(gaps))


SECULAR_ORDERS = (64, 128, 256, 512, 1024)  # the secular equation in 40 digits, beyond eigvalsh round-off


def secular_remainder_ratio(order: int, mode: int, *, scale: float = 1.0, dps: int = 40) -> float:
    """``N^2 (omega_m - N^2/c_m + c_m/6) / (scale (c_m^3/90 + c_m/12)) - 1`` with ``omega_m`` from the
    secular equation in ``dps`` digits (no eigensolver). Falls like ``N^-2`` when the derived
    remainder constant is right (``scale = 1``) and levels off otherwise."""
    import mpmath

    _check_order(order)
    with mpmath.workdps(dps):
        c = (2 * mode + 1) * mpmath.pi
        w = _secular_root(order, mode, mpmath.mpf(1) / 2)
        scaled = mpmath.mpf(order) ** 2 * (w - mpmath.mpf(order) ** 2 / c + c / 6)
        return float(scaled / (mpmath.mpf(scale) * (c**3 / 90 + c / 12)) - 1)


def secular_remainder_ratios(modes: int) -> np.ndarray:
    """(len(SECULAR_ORDERS), modes) array of :func:`secular_remainder_ratio` (``scale = 1``)."""
    return np.array([[secular_remainder_ratio(int(N), m) for m in range(modes)] for N in SECULAR_ORDERS])


def secular_remainder_slope(ratios, *, scale: float = 1.0) -> float:
    """Worst (closest to 0) log-log slope over the modes of the relative gap to ``scale (c^3/90 + c/12)``,
    from ``ratios`` of :func:`secular_remainder_ratios`: ``-2`` when the third term is right, about 0
    when the constant is off by a fixed factor."""
    gaps = np.abs((1.0 + np.asarray(ratios, dtype=float)) / scale - 1.0)
    orders = np.array(SECULAR_ORDERS)
    return float(max(loglog_slope(orders, gaps[:, m]) for m in range(gaps.shape[1])))


def richardson_predicted_deviation(order: int, mode: int, probe: int = 1024) -> float:
    """Relative error ``|b_m| / (4 N^4) / (c_m/6)`` that the secular equation predicts for the
    Richardson estimate from the pair ``(N, 2N)``, with ``b_m`` the ``N^-4`` coefficient of
    ``omega_m`` measured at ``probe`` in 40-digit arithmetic (no eigensolver involved)."""
    import mpmath

    with mpmath.workdps(40):
        c = (2 * mode + 1) * mpmath.pi
        half = mpmath.mpf(1) / 2
        w = mpmath.findroot(lambda x: mpmath.fsum(mpmath.atan((n + half) / x) for n in range(probe)) - c / 2,
                            probe**2 / c - c / 6)
        b = probe**4 * (w - probe**2 / c + c / 6 - (c**3 / 90 + c / 12) / probe**2)
        return float(abs(b) / (4 * mpmath.mpf(order) ** 4) / (c / 6))


def skew_eigs_asymptotic(order, mode, terms: int = 2):
    """Asymptotic law ``N^2/c_m`` (``terms=1``) or ``N^2/c_m - c_m/6`` (``terms=2``), ``c_m = (2m+1) pi``.

    ``order`` and ``mode`` broadcast against each other.
    """
    if terms not in (1, 2):
        raise ValueError(f"terms must be 1 or 2, got {terms!r}")
    N = np.asarray(order, dtype=float)
    c = (2.0 * np.asarray(mode, dtype=float) + 1.0) * np.pi
    return N**2 / c - (c / 6.0 if terms == 2 else 0.0)


def loglog_slope(orders, errors) -> float:
    """Least-squares slope of ``log(errors)`` against ``log(orders)`` (both shape (K,), K >= 3).

    The point value of :func:`compendium.stats.loglog_slope`: the curves here are deterministic,
    so the regression interval would only say how straight they are.
    """
    orders, errors = np.asarray(orders, dtype=float), np.asarray(errors, dtype=float)
    if orders.shape != errors.shape:
        raise ValueError("loglog_slope needs two equal-length arrays")
    return _loglog_slope_estimate(orders, errors, unit="state sizes").point


def s4d_inv_heuristic(order, mode):
    """The S4D-Inv imaginary parts ``(N/pi)(N/(2m+1) - 1) = N^2/c_m - N/pi``; broadcasts."""
    N = np.asarray(order, dtype=float)
    return N / np.pi * (N / (2.0 * np.asarray(mode, dtype=float) + 1.0) - 1.0)


def richardson_constant(orders, omega, mode) -> tuple[float, tuple[int, int]]:
    """Richardson estimate of ``C_m`` in ``omega_m(N) - N^2/c_m = C_m + a N^-2 + O(N^-4)``.

    Parameters
    ----------
    orders : (K,) increasing state sizes; the estimate uses the largest pair ``(N, 2N)`` with
        ``2N <= 1024`` (above, the remainder approaches the round-off of ``eigvalsh``).
    omega : (K,) ``omega_m(N)`` at those orders.
    mode : int, the mode ``m``.

    Returns
    -------
    (float, (N, 2N)) : ``(4 d(2N) - d(N)) / 3`` with ``d = omega - N^2/c_m``, and the pair used.
    """
    orders = np.asarray(orders, dtype=int)
    omega = np.asarray(omega, dtype=float)
    if orders.shape != omega.shape:
        raise ValueError("orders and omega must have the same shape")
    index = {int(n): i for i, n in enumerate(orders)}
    pairs = [(int(n), 2 * int(n)) for n in orders if 2 * int(n) in index and 2 * int(n) <= SECOND_ORDER_MAX_ORDER]
    if not pairs:
        raise ValueError("richardson_constant needs two orders N and 2N with 2N <= 1024")
    small, large = pairs[-1]
    c = (2 * mode + 1) * np.pi
    d_small = omega[index[small]] - small**2 / c
    d_large = omega[index[large]] - large**2 / c
    return float((4.0 * d_large - d_small) / 3.0), (small, large)


def law_error_slope(orders, omega, law: str) -> float:
    """Worst (largest) log-log slope over modes of ``|omega_m(N) - law_m(N)|`` against ``N``.

    ``orders`` (K,), ``omega`` (K, M); ``law`` is 'two_term' (``N^2/c_m - c_m/6``), 'leading'
    (``N^2/c_m``) or 's4d_inv' (:func:`s4d_inv_heuristic`). A law whose error falls like
    ``N^-2`` gives about -2 for every mode.
    """
    orders = np.asarray(orders, dtype=float)
    omega = np.asarray(omega, dtype=float)
    modes = np.arange(omega.shape[1])
    laws = {
        "two_term": lambda: skew_eigs_asymptotic(orders[:, None], modes, terms=2),
        "leading": lambda: skew_eigs_asymptotic(orders[:, None], modes, terms=1),
        "s4d_inv": lambda: s4d_inv_heuristic(orders[:, None], modes),
    }
    if law not in laws:
        raise ValueError(f"law must be one of {sorted(laws)}, got {law!r}")
    err = np.abs(omega - laws[law]())
    return max(loglog_slope(orders, err[:, m]) for m in modes)


def convergence_errors(order: int, taus, *, grid_offset: float = 0.5, time_scale: float | None = None):
    """Max errors of the finite-N impulse response and scalar kernel against the continuum.

    Parameters
    ----------
    order : int, the state size N.
    taus : (T,) continuum times.
    grid_offset : float, the grid is ``x_n = (n + grid_offset)/N`` (0.5 is the right one).
    time_scale : float, optional, ``t = tau / time_scale`` (default ``N^2``, the right one).

    Returns
    -------
    (impulse_error, kernel_error, kernel_discrete (T,))
    """
    _check_order(order)
    taus = np.asarray(taus, dtype=float)
    scale = float(order) ** 2 if time_scale is None else float(time_scale)
    x = (np.arange(order) + grid_offset) / order
    _, B = legs_matrices(order)
    states = legs_impulse_closed_form(order, taus / scale)  # (T, N)
    impulse = float(np.abs(states / np.sqrt(order) - continuum_impulse(x, taus)).max())
    kernel_discrete = states @ B / order**2
    kernel = float(np.abs(kernel_discrete - continuum_scalar_kernel(taus)).max())
    return impulse, kernel, kernel_discrete


# ---------------------------------------------------------------------- sympy residuals
def _sympy_legs(order: int):
    import sympy as sp

    def entry(n, k):
        if n > k:
            return -sp.sqrt((2 * n + 1) * (2 * k + 1))
        return -(n + 1) if n == k else sp.Integer(0)

    return sp.Matrix(order, order, entry), sp.Matrix([sp.sqrt(2 * n + 1) for n in range(order)])


def legs_eigenvalue_residual(order: int):
    """``det(lambda I - A) - prod_n (lambda + n + 1)``, expanded: 0 iff the spectrum is ``-(n+1)``."""
    import sympy as sp

    _check_order(order)
    lam = sp.Symbol("lambda")
    A, _ = _sympy_legs(order)
    return sp.expand(A.charpoly(lam).as_expr() - sp.prod([lam + n + 1 for n in range(order)]))


def closed_form_ode_residual(order: int):
    """Sum of squares of ``K' - A K`` and ``K(0) - B`` for the Legendre closed form ``K(t)``."""
    import sympy as sp

    _check_order(order)
    t = sp.Symbol("t", nonnegative=True)
    A, B = _sympy_legs(order)
    z = sp.exp(-t)
    K = sp.Matrix([sp.sqrt(2 * n + 1) * z * sp.legendre(n, 2 * z - 1) for n in range(order)])
    parts = [sp.expand(e) for e in list(K.diff(t) - A * K) + list(K.subs(t, 0) - B)]
    return sp.expand(sum(p**2 for p in parts))


def continuum_impulse_residual(argument_scale: int = 2):
    """``h_tau - K h`` for ``h = sqrt(2x) J0(2x sqrt(tau))``, plus ``h(0, x) - sqrt(2x)``.

    ``argument_scale`` other than 2 gives the wrong candidate ``sqrt(2x) J0(a x sqrt(tau))``, whose
    residual does not vanish (the negative control of the symbolic check).
    """
    import sympy as sp

    x, y, tau = sp.symbols("x y tau", positive=True)
    h = sp.sqrt(2 * x) * sp.besselj(0, argument_scale * x * sp.sqrt(tau))
    Kh = -2 * sp.sqrt(x) * sp.integrate(sp.sqrt(y) * h.subs(x, y), (y, 0, x))
    return sp.simplify(sp.diff(h, tau) - Kh) + sp.simplify(h.subs(tau, 0) - sp.sqrt(2 * x))


def scalar_kernel_residual(target_scale: int = 2):
    """``int_0^1 b(x) h(tau, x) dx - J1(2 sqrt(tau)) / sqrt(tau)``: the read-out ``C = b``.

    ``target_scale`` other than 2 compares with the wrong target ``J1(a sqrt(tau)) / sqrt(tau)``
    (the negative control).
    """
    import sympy as sp

    x, tau = sp.symbols("x tau", positive=True)
    h = sp.sqrt(2 * x) * sp.besselj(0, 2 * x * sp.sqrt(tau))
    kernel = sp.integrate(sp.sqrt(2 * x) * h, (x, 0, 1))
    return sp.simplify(kernel - sp.besselj(1, target_scale * sp.sqrt(tau)) / sp.sqrt(tau))


def eigenfunction_residual(eigenvalue_sign: int = 1):
    """``T phi_m - (i / c_m) phi_m`` for ``phi_m = sqrt(x) exp(i c_m x^2)``, symbolic integer ``m >= 0``.

    ``eigenvalue_sign=-1`` tests the wrong eigenvalue ``-i / c_m`` (the negative control).
    """
    import sympy as sp

    x, y = sp.symbols("x y", positive=True)
    m = sp.Symbol("m", integer=True, nonnegative=True)
    c = (2 * m + 1) * sp.pi
    phi = sp.sqrt(x) * sp.exp(sp.I * c * x**2)
    weighted = sp.sqrt(y) * phi.subs(x, y)
    T_phi = -sp.sqrt(x) * (sp.integrate(weighted, (y, 0, x)) - sp.integrate(weighted, (y, x, 1)))
    return sp.simplify(T_phi - eigenvalue_sign * sp.I / c * phi)


# ---------------------------------------------------------------------- the experiment
def run(config: Config) -> Result:
    """Compute every array, metric and sympy residual the chapter shows (deterministic)."""
    orders = np.array(config.orders, dtype=int)
    checked = min(config.num_modes, len(SECOND_ORDER_CONSTANTS))
    modes = np.arange(config.num_modes)

    # skew-part eigenvalues vs the asymptotic law
    omega = np.array([skew_eigenvalues(int(N), config.num_modes) for N in orders])  # (K, M)
    c = (2 * modes + 1) * np.pi
    N2 = orders[:, None].astype(float) ** 2
    leading_ratio = (N2 * np.abs(omega / N2 - 1 / c) / (c / 6))[:, :checked]
    second_scaled = N2 * np.abs(omega - skew_eigs_asymptotic(orders[:, None], modes, terms=2))
    second_ratio = (second_scaled[:, :checked] / np.array(SECOND_ORDER_CONSTANTS[:checked]))[
        orders <= SECOND_ORDER_MAX_ORDER
    ]

    # closed form vs the matrix exponential
    closed_err = []
    for N in EXPM_ORDERS:
        A, B = legs_matrices(N)
        closed = legs_impulse_closed_form(N, EXPM_TIMES)  # (len(EXPM_TIMES), N)
        closed_err.append(max(np.abs(scipy.linalg.expm(A * t) @ B - row).max() for t, row in zip(EXPM_TIMES, closed)))
    closed_err = np.array(closed_err)

    # discrete -> continuum impulse responses (exact discrete values from the closed form)
    taus = np.linspace(0.0, config.tau_max, NUM_TAUS)
    kernel_taus = np.linspace(0.0, max(config.tau_max, KERNEL_TAU_MAX), NUM_TAUS)
    profile_taus = np.array([t for t in PROFILE_TAUS if t < config.tau_max] + [config.tau_max])
    kernel_continuum = continuum_scalar_kernel(taus)
    impulse_err, kernel_err, kernel_disc, profiles, operator_err = [], [], [], [], []
    wrong_grid, wrong_time = [], []
    for N in orders:
        N = int(N)
        x = continuum_grid(N)
        A, B = legs_matrices(N)
        impulse_err.append(convergence_errors(N, taus)[0])
        kernel_err.append(convergence_errors(N, kernel_taus)[1])
        kernel_disc.append(legs_impulse_closed_form(N, taus / N**2) @ B / N**2)
        wrong_grid.append(convergence_errors(N, taus, grid_offset=0.0)[0])
        wrong_time.append(convergence_errors(N, kernel_taus, time_scale=N * (N - 1))[1])
        profiles.append(legs_impulse_closed_form(N, profile_taus / N**2) / np.sqrt(N))
        grid = np.concatenate([[0.0], x, [1.0]])  # A / N^2 acting on b(x) = sqrt(2x) vs K b
        operator_err.append(np.abs(A @ np.sqrt(2 * x) / N**2 - volterra_apply(np.sqrt(2 * grid), grid)[1:-1]).max())
    impulse_err, kernel_err, operator_err = map(np.array, (impulse_err, kernel_err, operator_err))
    control_slopes = {"impulse_wrong_grid": loglog_slope(orders, np.array(wrong_grid)),
                      "kernel_wrong_time": loglog_slope(orders, np.array(wrong_time))}

    # the O(1) term without reference constants, and the law's error slope with its controls
    below = orders <= SECOND_ORDER_MAX_ORDER
    richardson = [richardson_constant(orders, omega[:, m], m) for m in range(checked)]
    law_slopes = {law: law_error_slope(orders[below], omega[below, :checked], law)
                  for law in ("two_term", "leading", "s4d_inv")}

    leading_err = np.abs(omega / N2 - 1 / c)[:, :checked]  # (K, checked)
    leading_slopes = [loglog_slope(orders, leading_err[:, m]) for m in range(checked)]
    slopes = {
        "impulse": loglog_slope(orders, impulse_err),
        "kernel": loglog_slope(orders, kernel_err),
        "operator": loglog_slope(orders, operator_err),
        "eigen_leading": max(leading_slopes, key=lambda s: abs(s + 2.0)),  # the worst mode
    }

    symbolic = {
        "legs_eigenvalues": sum(legs_eigenvalue_residual(n) ** 2 for n in range(1, config.symbolic_order + 1)),
        "closed_form_ode": sum(closed_form_ode_residual(n) for n in range(1, config.symbolic_order + 1)),
        "continuum_impulse": continuum_impulse_residual(),
        "scalar_kernel": scalar_kernel_residual(),
        "eigenfunction": eigenfunction_residual(),
    }
    ratios = secular_remainder_ratios(checked)
    secular = {
        "eigh_error": secular_eigh_error(orders[below], omega[below, :checked]),
        "wrong_offset_error": secular_eigh_error(orders[:1], omega[:1, :checked], offset=0.0),  # smallest order suffices
        "remainder_slope": secular_remainder_slope(ratios),
        "remainder_slope_wrong": secular_remainder_slope(ratios, scale=1.01),
        "remainder_ratio": ratios[-1],
        "expansion": secular_two_term_residual(),
        "expansion_wrong": secular_two_term_residual(drop_linear_remainder=True),
    }
    return Result(
        orders=orders,
        skew_eigenvalues=omega,
        leading_ratio=leading_ratio,
        second_order_scaled=second_scaled,
        second_order_ratio=second_ratio,
        closed_form_error=closed_err,
        taus=taus,
        impulse_error=impulse_err,
        kernel_error=kernel_err,
        kernel_discrete=np.array(kernel_disc),
        kernel_continuum=kernel_continuum,
        profile_taus=profile_taus,
        profiles=tuple(profiles),
        operator_error=operator_err,
        slopes=slopes,
        symbolic=symbolic,
        richardson=np.array([r for r, _ in richardson]),
        richardson_orders=richardson[0][1],
        law_slopes=law_slopes,
        control_slopes=control_slopes,
        secular=secular,
    )


def secular_two_term_residual(drop_linear_remainder: bool = False):
    """sympy: with ``omega = N^2/c + a + b/N^2``, the secular equation's arctan series
    (terms to ``omega^-5``, power sums of ``n + 1/2`` in closed form) vanishes to ``O(N^-4)``
    exactly when ``a = -c/6`` and ``b = c^3/90 + c/12``. Returns the residual solution (0, 0).

    ``drop_linear_remainder=True`` compares with the wrong target ``b = c^3/90`` (the control:
    its residual does not vanish)."""
    import sympy as sp

    N, c, n, eps = sp.symbols("N c n epsilon", positive=True)
    a, b = sp.symbols("a b", real=True)
    omega = N**2 / c + a + b / N**2
    total = sum((-1) ** k * sp.summation((n + sp.Rational(1, 2)) ** (2 * k + 1), (n, 0, N - 1)) / ((2 * k + 1) * omega ** (2 * k + 1))
                for k in range(3))
    expr = sp.expand(sp.series((total - c / 2).subs(N, 1 / eps), eps, 0, 5).removeO())
    eqs = [sp.simplify(expr.coeff(eps, k)) for k in (2, 4)]
    sol = sp.solve(eqs, [a, b], dict=True)[0]
    target_b = c**3 / 90 + (0 if drop_linear_remainder else c / 12)
    return sp.simplify(sol[a] + c / 6), sp.simplify(sol[b] - target_b)
