r"""Collapsed effective operators: the Schur complement of a graded Laplacian.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 8 (Krahn, Bastian, Garg, Schuller,
Birdal). Only the abstract and short summaries were available: the paper's exact graded Laplacian is
unknown. The construction below is ours (research card ``collapsed_operators``), chosen so that the
claimed properties can be checked and the triangles actually reach the vertices.

Equations implemented
---------------------
Complexes (``complexes.py``): clique and Vietoris-Rips complexes up to triangles, a
triangle-planted complex, signed boundaries ``B1`` (V x E), ``B2`` (E x T) with ``B1 B2 = 0``,
``L0 = B1 B1^T``, ``L1 = B1^T B1 + B2 B2^T``, and the unsigned vertex-triangle incidence ``H`` (V x T).

Graded operator on ``C^0 (+) C^2`` (``operators.py``, scheme ``"triangle_shift"``)::

    M = G G^T + diag(0, c I),   G = [B1; -H^T B1]
      = [[L0,          -L0 H        ],
         [-H^T L0,      H^T L0 H + c I]]          (M >= 0 and M00 = L0 by construction)

Collapsed operator (Schur complement, dense or implicit by CG)::

    S_eps = M00 - M0h (Mhh + eps I)^{-1} Mh0
          = B1 (I + B1^T H H^T B1 / (c + eps))^{-1} B1^T                (Woodbury)
    x^T S x = min_y ||B1^T (x - H y)||^2 + (c + eps) ||y||^2              (variational form)
    S^+ = L0^+ + P H H^T P / (c + eps)  on a connected graph, P = I - 11^T/n

Hence ``0 <= S <= L0``, ``lambda_i(S) <= lambda_i(L0)``, ``S 1 = 0`` and ``S_eps`` increases to ``L0``
as ``eps -> infinity``. Three other schemes show the pitfalls: couplings through the signed
boundary alone give ``S = L0`` or ``S = c/(1+c) L0``; the unsigned ``|B2|`` coupling depends on the
arbitrary orientation.

Uses (``tasks.py``): spectral clustering (k-means on row-normalised lowest eigenvectors), Tikhonov
smoothing ``(I + tau A)^{-1} y`` at equal effective degrees of freedom ``tr((I + tau A)^{-1})``, and a
one-sided sign test. Tuned baselines (``baselines.py``): ``c`` of S and the weight ``w`` of the
fusion ``L0 + w L_tri`` picked by one rule on a dev split, the triangle-only operator ``L_tri``, and a
regime where the graph, not the triangles, carries the communities; one ``c`` serves both regimes,
picked on a dev split that mixes them, and must lie strictly inside its grid. Sympy proofs: ``symbolic.py``.
The experiment and the ledger's interval estimates: ``experiment.py``.

Small-scale deviations
----------------------
- The graded operator is our reconstruction (``triangle_shift``), not the authors' (unknown).
- Only triangles are used as higher-order cells; no tetrahedra, cell complexes or hypergraphs.
- Exact checks on complexes with at most ``max_vertices`` (30 smoke, 40 full) vertices; dense
  eigendecompositions throughout. The CG mat-vec is checked against the dense operator, not used
  at large scale.
- Clustering and smoothing on synthetic triangle-planted complexes (60 vertices at smoke scale,
  120 at full scale), not on the paper's data (proteins and other real complexes).
- The positional-encoding experiment (a GNN) is not run.
"""

from .complexes import (
    SimplicialComplex,
    boundary_matrices,
    clique_complex,
    hodge_laplacians,
    make_complex,
    random_clique_complex,
    triangle_planted_complex,
    triangles_of_graph,
    vertex_triangle_incidence,
    vietoris_rips_complex,
)
from .experiment import (
    EPS_GRID,
    EPS_LIMIT,
    METHODS,
    SPECTRUM_EPS,
    NONINFERIORITY_MARGIN,
    Config,
    Result,
    exact_checks,
    one_c_serves_both,
    signed_edge_fill,
    ledger_estimates,
    operators_for,
    pitfall_numbers,
    random_complex,
    run,
    smoothing_mse,
)
from .operators import (
    SCHEMES,
    GradedOperator,
    collapsed_family,
    collapsed_linear_operator,
    collapsed_matvec,
    collapsed_operator,
    collapsed_operator_factor_form,
    graded_operator,
    higher_order_minimum,
    normalized_laplacian,
    triangle_expansion_laplacian,
)
from .symbolic import (
    block_factorisation_residual,
    boundary_composition_residual,
    completion_of_square_residual,
    scalar_schur_is_nonnegative,
    schur_psd_witness_residual,
    woodbury_residual,
)
from .baselines import COUPLING_GRID, FUSION_GRID, STREAMS, TUNED_METHODS, candidate_operators, is_interior, select, tuned_comparison
from .tasks import effective_dof, sign_test, spectral_clustering, spectral_embedding, tau_for_dof, tikhonov_smooth
