"""Tests for compendium.papers.continuized_hippo: shapes, properties, references, tiny run."""

import dataclasses

import numpy as np
import pytest
import scipy.linalg
import scipy.special
import sympy

from compendium.papers import continuized_hippo as paper

TINY = dict(symbolic_order=3, orders=(16, 32, 64), num_modes=2, tau_max=4.0)


# ---------------------------------------------------------------- shapes
def test_shapes():
    A, B = paper.legs_matrices(7)
    S, B2 = paper.legs_nplr(7)
    assert A.shape == S.shape == (7, 7) and B.shape == B2.shape == (7,)
    assert paper.legs_impulse_closed_form(7, 0.3).shape == (1, 7)
    assert paper.legs_impulse_closed_form(7, [0.0, 0.1, 1.0]).shape == (3, 7)
    assert paper.continuum_impulse(np.linspace(0, 1, 5), [0.0, 1.0]).shape == (2, 5)
    assert paper.continuum_scalar_kernel(np.zeros(4)).shape == (4,)
    x = np.linspace(0, 1, 11)
    assert paper.volterra_apply(np.ones((2, 11)), x).shape == (2, 11)
    assert paper.skew_eigenvalues(32, 3).shape == (3,)


# ---------------------------------------------------------------- properties
def test_legs_structure_and_nplr_identity():
    for N in (1, 2, 9, 64):
        A, B = paper.legs_matrices(N)
        S, _ = paper.legs_nplr(N)
        assert np.array_equal(A, np.tril(A)), "A must be lower triangular"
        assert np.array_equal(np.diag(A), -np.arange(1.0, N + 1)), "diagonal is -(n+1)"
        assert np.array_equal(S, -S.T), "S must be skew-symmetric"
        assert np.abs(A - (S - 0.5 * np.eye(N) - 0.5 * np.outer(B, B))).max() <= 1e-12


def test_skew_eigenvalues_are_sorted_positive_and_match_full_spectrum():
    N = 48
    omega = paper.skew_eigenvalues(N, 5)
    S, _ = paper.legs_nplr(N)
    full = np.sort(np.linalg.eigvals(S).imag)[::-1][:5]  # S is normal: plain eig is fine here
    assert np.all(np.diff(omega) < 0) and omega[-1] > 0
    np.testing.assert_allclose(omega, full, rtol=1e-10)


def test_skew_law_beats_leading_term():
    N = np.array([64, 128])
    omega = np.array([paper.skew_eigenvalues(int(n), 2) for n in N])
    err1 = np.abs(omega - paper.skew_eigs_asymptotic(N[:, None], np.arange(2), terms=1))
    err2 = np.abs(omega - paper.skew_eigs_asymptotic(N[:, None], np.arange(2), terms=2))
    assert np.all(err2 < 0.05 * err1)
    assert np.all(err2[1] < err2[0])  # the remainder shrinks with N


def test_quadrature_operators_relation_and_eigenfunction():
    x = np.linspace(0, 1, 4001)
    phi = np.cos(3 * x)
    # K = T - sqrt(x) <sqrt(y), phi>: the two operators differ by the rank-one read-out
    inner = paper._weighted_cumulative(phi, x)[-1]
    np.testing.assert_allclose(paper.volterra_apply(phi, x), paper.skew_apply(phi, x) - np.sqrt(x) * inner, atol=1e-14)
    for m in (0, 2):
        c = (2 * m + 1) * np.pi
        eig = np.sqrt(x) * np.exp(1j * c * x**2)
        assert np.abs(paper.skew_apply(eig, x) - 1j / c * eig).max() < 1e-5


def test_closed_form_is_bounded_and_starts_at_b():
    t = np.array([0.0, 1e-3, 1.0, 20.0])
    K = paper.legs_impulse_closed_form(200, t)
    assert np.all(np.isfinite(K))
    np.testing.assert_array_equal(K[0], np.sqrt(2 * np.arange(200) + 1.0))
    assert np.abs(K).max() <= np.sqrt(401)  # |P_n| <= 1 on [-1, 1] and e^{-t} <= 1


# ---------------------------------------------------------------- references
@pytest.mark.parametrize("N", [4, 16, 64])
def test_closed_form_matches_expm(N):
    A, B = paper.legs_matrices(N)
    for t in (0.1, 0.7, 2.0):
        ref = scipy.linalg.expm(A * t) @ B
        assert np.abs(ref - paper.legs_impulse_closed_form(N, t)[0]).max() <= 1e-10


def test_closed_form_matches_scipy_legendre():
    t = np.array([0.05, 0.5, 3.0])
    n = np.arange(30)
    ref = np.sqrt(2 * n + 1) * np.exp(-t)[:, None] * scipy.special.eval_legendre(n, 2 * np.exp(-t)[:, None] - 1)
    np.testing.assert_allclose(paper.legs_impulse_closed_form(30, t), ref, atol=1e-12)


def test_quadrature_operator_vs_matrix_limit():
    errors = []
    for N in (64, 256):
        A, _ = paper.legs_matrices(N)
        x = paper.continuum_grid(N)
        grid = np.concatenate([[0.0], x, [1.0]])
        phi = np.cos(3 * grid)
        errors.append(np.abs(A @ phi[1:-1] / N**2 - paper.volterra_apply(phi, grid)[1:-1]).max())
    assert errors[0] < 0.05 / 64 and errors[1] < errors[0] / 2.5


def test_volterra_exact_on_sqrt():
    # phi = sqrt(2x): K phi = -sqrt(2) x^{5/2}; the sqrt weight is integrated exactly, so the
    # trapezoid rule in u = y^{3/2} is second order on this smooth-in-u integrand
    x = np.linspace(0, 1, 2001)
    assert np.abs(paper.volterra_apply(np.sqrt(2 * x), x) + np.sqrt(2) * x**2.5).max() < 1e-6


def test_scalar_kernel_small_tau_and_quadrature():
    assert paper.continuum_scalar_kernel(0.0) == 1.0
    np.testing.assert_allclose(paper.continuum_scalar_kernel(np.array([1e-12, 1e-9, 1e-7])), 1.0, atol=1e-7)
    # continuous across the switch to the series branch
    tau = np.array([(1e-4 - 1e-9) ** 2, (1e-4 + 1e-9) ** 2])
    assert abs(np.diff(paper.continuum_scalar_kernel(tau))[0]) < 1e-10
    # K(tau) = int_0^1 2x J0(2x sqrt(tau)) dx
    x = np.linspace(0, 1, 20001)
    for tau in (0.3, 5.0):
        integrand = 2 * x * scipy.special.j0(2 * x * np.sqrt(tau))
        assert abs(np.trapezoid(integrand, x) - paper.continuum_scalar_kernel(tau)) < 1e-7


def test_discrete_impulse_approaches_continuum():
    errs = []
    taus = np.linspace(0, 4, 21)
    for N in (64, 128):
        states = paper.legs_impulse_closed_form(N, taus / N**2) / np.sqrt(N)
        errs.append(np.abs(states - paper.continuum_impulse(paper.continuum_grid(N), taus)).max())
    assert errs[0] * 64**2 < 3 and 3.5 < errs[0] / errs[1] < 4.5


# ---------------------------------------------------------------- sympy
def test_symbolic_residuals_vanish():
    for N in (1, 2, 4):
        assert sympy.simplify(paper.legs_eigenvalue_residual(N)) == 0
        assert sympy.simplify(paper.closed_form_ode_residual(N)) == 0
    assert sympy.simplify(paper.continuum_impulse_residual()) == 0
    assert sympy.simplify(paper.eigenfunction_residual()) == 0


def test_symbolic_residual_detects_a_wrong_matrix(monkeypatch):
    # a residual that cannot fail proves nothing: perturb the diagonal and expect a non-zero residual
    original = paper._sympy_legs

    def perturbed(order):
        A, B = original(order)
        A[0, 0] = -2
        return A, B

    monkeypatch.setattr(paper, "_sympy_legs", perturbed)
    assert sympy.simplify(paper.legs_eigenvalue_residual(3)) != 0
    assert sympy.simplify(paper.closed_form_ode_residual(3)) != 0


# ---------------------------------------------------------------- config and run
@pytest.mark.parametrize(
    "bad",
    [
        dict(symbolic_order=1),
        dict(symbolic_order=13),
        dict(symbolic_order=3.0),
        dict(orders=(64, 128)),
        dict(orders=(64, 32, 128)),
        dict(orders=(8, 16, 32)),
        dict(orders=(64, 128, 5000)),
        dict(num_modes=0),
        dict(num_modes=9),
        dict(tau_max=0.0),
        dict(tau_max=40.0),
        dict(tau_max=True),
        dict(seed=-1),
    ],
)
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        paper.Config(**bad)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        paper.legs_matrices(0)
    with pytest.raises(ValueError):
        paper.legs_impulse_closed_form(4, -1.0)
    with pytest.raises(ValueError):
        paper.volterra_apply(np.ones(5), np.linspace(0.1, 1, 5))
    with pytest.raises(ValueError):
        paper.skew_eigenvalues(8, 5)
    with pytest.raises(ValueError):
        paper.skew_eigs_asymptotic(8, 0, terms=3)


def test_config_converts_orders_to_tuple():
    config = paper.Config(orders=[16, 32, 64])
    assert config.orders == (16, 32, 64)
    hash(config)  # frozen and hashable


def test_tiny_run_is_deterministic():
    config = paper.Config(**TINY)
    first, second = paper.run(config), paper.run(config)
    for field in dataclasses.fields(paper.Result):
        a, b = getattr(first, field.name), getattr(second, field.name)
        if field.name == "profiles":
            assert all(np.array_equal(u, v) for u, v in zip(a, b))
        elif isinstance(a, np.ndarray):
            assert np.array_equal(a, b), field.name
        elif field.name == "secular":
            assert a.keys() == b.keys()
            for k in a:
                assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])) if isinstance(a[k], np.ndarray) else a[k] == b[k], k
        else:
            assert a == b, field.name
    assert first.secular["eigh_error"] < 1e-12 and first.secular["remainder_ratio"].shape == (2,)
    assert first.skew_eigenvalues.shape == (3, 2)
    assert first.second_order_ratio.shape == (3, 2)
    assert first.kernel_discrete.shape == (3, first.taus.size)
    assert [p.shape for p in first.profiles] == [(3, 16), (3, 32), (3, 64)]
    assert all(sympy.simplify(v) == 0 for v in first.symbolic.values())
    assert -2.2 <= first.slopes["impulse"] <= -1.8
    assert first.richardson.shape == (2,) and first.richardson_orders == (32, 64)
    assert first.control_slopes["impulse_wrong_grid"] > -1.8


# ---------------------------------------------------------------- hardening: independent checks and controls
def test_richardson_recovers_a_known_constant_and_the_law():
    # synthetic d(N) = C + a/N^2 + b/N^4: Richardson removes a exactly, leaves O(b/N^4)
    orders = np.array([64, 128, 256])
    c = 3 * np.pi  # mode 1
    omega = orders**2 / c - 1.25 + 7.0 / orders**2
    est, pair = paper.richardson_constant(orders, omega, 1)
    assert pair == (128, 256) and abs(est + 1.25) < 1e-10
    # on the real spectrum it recovers -c_m/6 (no card constants used)
    orders = np.array([128, 256])
    omega = np.array([paper.skew_eigenvalues(int(n), 2) for n in orders])
    for m in range(2):
        est, _ = paper.richardson_constant(orders, omega[:, m], m)
        assert abs(est / (-(2 * m + 1) * np.pi / 6) - 1) < 1e-4
    with pytest.raises(ValueError):
        paper.richardson_constant([64, 96], [1.0, 2.0], 0)


def test_law_error_slopes_separate_right_and_wrong_laws():
    orders = np.array([64, 128, 256])
    omega = np.array([paper.skew_eigenvalues(int(n), 2) for n in orders])
    assert -2.2 <= paper.law_error_slope(orders, omega, "two_term") <= -1.8
    assert abs(paper.law_error_slope(orders, omega, "leading")) < 0.1  # error tends to c_m/6
    assert 0.8 < paper.law_error_slope(orders, omega, "s4d_inv") < 1.2  # error grows like N/pi
    np.testing.assert_allclose(paper.s4d_inv_heuristic(10, 0), 10 / np.pi * 9)
    with pytest.raises(ValueError):
        paper.law_error_slope(orders, omega, "cubic")


def test_convergence_errors_controls_lose_the_rate():
    taus = np.linspace(0, 8, 41)
    right = [paper.convergence_errors(n, taus) for n in (64, 128)]
    grid = [paper.convergence_errors(n, taus, grid_offset=0.0)[0] for n in (64, 128)]
    time = [paper.convergence_errors(n, taus, time_scale=n * (n - 1))[1] for n in (64, 128)]
    assert 3.5 < right[0][0] / right[1][0] < 4.5 and 3.5 < right[0][1] / right[1][1] < 4.5
    assert grid[0] / grid[1] < 1.6 and time[0] / time[1] < 2.5
    assert right[0][2].shape == (41,)


def test_kernel_bound_holds_to_tau_16():
    taus = np.linspace(0, 16, 81)
    for n in (64, 128):
        assert n**2 * paper.convergence_errors(n, taus)[1] <= 1.0


def test_secular_equation_matches_eigh_and_constants():
    import numpy as np
    from compendium.papers import continuized_hippo as ch

    for order in (16, 64):
        omega = ch.skew_eigenvalues(order, 4)
        for m in range(4):
            assert abs(ch.secular_omega(order, m) - omega[m]) < 1e-9
    c = (2 * np.arange(4) + 1) * np.pi
    np.testing.assert_allclose(ch.SECOND_ORDER_CONSTANTS, (0.606, 10.09, 44.37, 120.0), rtol=2e-3)
    np.testing.assert_allclose(ch.SECOND_ORDER_CONSTANTS, c**3 / 90 + c / 12)


def test_secular_expansion_gives_two_term_law_and_remainder():
    from compendium.papers import continuized_hippo as ch

    assert ch.secular_two_term_residual() == (0, 0)


def test_wrong_candidates_leave_nonzero_residuals():
    import sympy

    assert sympy.simplify(paper.continuum_impulse_residual(argument_scale=1)) != 0
    assert sympy.simplify(paper.scalar_kernel_residual(target_scale=1)) != 0
    assert sympy.simplify(paper.eigenfunction_residual(eigenvalue_sign=-1)) != 0


def test_secular_equation_gap_and_its_wrong_offset_control():
    orders = (16, 32)
    omega = np.array([paper.skew_eigenvalues(n, 2) for n in orders])
    assert paper.secular_eigh_error(orders, omega) < 1e-12
    assert paper.secular_eigh_error(orders, omega, offset=0.0) > 1e-3


def test_secular_wrong_remainder_target_leaves_a_residual():
    a_res, b_res = paper.secular_two_term_residual(drop_linear_remainder=True)
    assert a_res == 0 and b_res != 0


def test_secular_remainder_slope_is_minus_two_for_a_right_constant_and_flat_when_off():
    orders = np.array(paper.SECULAR_ORDERS, dtype=float)
    ratios = np.stack([-0.5 / orders**2, -3.0 / orders**2], axis=1)  # gap falling like N^-2 in both modes
    assert abs(paper.secular_remainder_slope(ratios) + 2.0) < 1e-9
    assert paper.secular_remainder_slope(ratios, scale=1.01) > -0.1
    # one true root: the relative gap at N = 64, mode 0, is small and negative (the N^-4 term is negative)
    assert -1e-3 < paper.secular_remainder_ratio(64, 0) < 0
