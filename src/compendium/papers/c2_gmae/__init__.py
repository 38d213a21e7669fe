r"""C2-GMAE: consistent context use and even mask coverage in graph masked autoencoders.

Paper card
----------
ICML 2026, seed file ``002_d926b147087f7228.txt``, abstract 2: *Reconstruction Outcomes Look
Similar but Processes Differ: Improving Context Consistency and Coverage in Graph Masked
Auto-Encoder* (ICML poster 63013). Neither the paper's text nor its code was available: **every
C2 formula below is inferred** from the abstract. Only the GraphMAE baseline follows a released
code base (THUDM/GraphMAE, as described in the chapter's research card); no code is copied.

Equations implemented
---------------------
GraphMAE (``model.py``): mask :math:`M`, :math:`|M| = \lfloor \rho n \rfloor`; of :math:`M`, a fraction
``replace_rate`` gets random nodes' features, the rest :math:`\tilde x_i = 0 + t` (learnable token);
:math:`h = \mathrm{GAT}_2(\tilde x)`, :math:`r = W h`, :math:`r_M = 0`, :math:`z = \mathrm{GAT}_{\rm dec}(r)`,
:math:`L_{\rm SCE} = \mathrm{mean}_{i \in M} (1 - \cos(x_i, z_i))^{\alpha}`, :math:`\alpha = 3`.

C2 (all inferred, each switchable, ``model.ArmSpec``):

- PE: input :math:`[\tilde x \| P]`, :math:`P` the first ``k`` non-trivial eigenvectors of
  :math:`I - D^{-1/2} A D^{-1/2}` (random column signs while training), never masked
  (``graphs.laplacian_pe``); variant: RWSE :math:`[\mathrm{diag}((D^{-1}A)^r)]_{r=1..k}` (``graphs.rwse``, no sign flips).
- Consistency: two masks per step, :math:`L = \bar L_{\rm SCE} + \mu\,\mathrm{mean}_{M_1 \cap M_2}(1 - \cos(h^{(1)}_i, h^{(2)}_i))`;
  variant: :math:`\mu_{\rm JS}\,\mathrm{mean}_{M_1 \cap M_2} \mathrm{JS}(a^{(1)}_i \| a^{(2)}_i)` on the last encoder
  layer's attention (per head, before dropout).
- DPM: degree-quantile bins :math:`P_q` (Q = 4; variants: k-core number or local clustering, ``graphs.node_density``), exactly :math:`\mathrm{round}(\rho |P_q|)` masked per
  bin, drawn :math:`\propto \exp(-\tau c_i)` with :math:`c_i` the node's past mask count.
- HEA: :math:`w_{ij} = 1 + \beta (1 - \cos(x_i, x_j))/2`, :math:`\log w_{ij}` added to the GAT logits.

Metrics: linear probe on frozen encoder outputs (60/20/20 split), per degree quartile; context
consistency = JS divergence of the last encoder layer's attention for the same node under two
fixed masks; paired intervals over training seeds, Mantel permutation test for pair gaps
(``experiment.py``, ``compendium.stats``).

What is ours and what is a library's
------------------------------------
GAT layers: ``torch_geometric.nn.GATConv`` (``BiasedGATConv`` overrides only ``edge_update`` to add
the HEA bias; ``SegmentGATConv`` routes softmax + aggregation through
``compendium.kernels.segment_softmax``, used by the kernel training check). k-core numbers and
clustering coefficients: ``networkx``. Training: ``compendium.training.fit`` with ``torch.optim.Adam``. Probe: sklearn's
``LogisticRegression``. Ours: the masking and SCE loss (GraphMAE's, as its code describes them),
every C2 part, the CSBM and digits-kNN generators, the metrics.

Small-scale deviations
----------------------
- Graphs of 300 (smoke) / 500 (full) nodes, encoder 4 heads x 16 (GraphMAE on Cora: hidden 512 over 4 heads),
  20 / 60 epochs with lr 5e-3 (GraphMAE: 1500 epochs, lr 1e-3); 3 / 10 training seeds.
- The probe is sklearn's L2 logistic regression (C = 1) on standardised embeddings, not
  GraphMAE's 300-epoch Adam probe with validation-epoch selection.
- One graph per dataset and chapter seed: intervals are over training seeds on that graph; a
  seed sweep redraws the graphs.
- Every encoder layer has a self path (a bias-free linear skip from its input, ``self_path``):
  GraphMAE's has none; without it the two-layer GAT averaged a node's own features away at
  h = 0.2 and did not beat its own random initialisation.
- GCNConv is not used: GraphMAE's encoder and decoder are GATs and HEA acts on GAT logits.
- The arms train on ``GATConv``; the segment-softmax kernel module is trained through only in the
  ledger's check (its reference on the CPU; the Triton kernel in the interpreter in the tests)
  and is not timed (no GPU here; ``benchmarks/c2_gmae_kernels.py`` times it on one).
- The four C2-full variants (RWSE, JS consistency, k-core and clustering densities) run at full
  scale only (``variants``); the smoke run has no room for them within 60 s.
- Mean degree 4 (a first build at 10 saturated GraphMAE at h = 0.8, failing the headroom control).
"""

from .experiment import (
    DEV_SEED,
    DIGITS,
    FEATURE_FLOOR,
    HEADLINE_HALF_WIDTH,
    LEVEL_CI,
    VARIANTS,
    Config,
    Result,
    bit_for_bit_gap,
    calibrate_noise,
    coverage_by_density,
    coverage_histograms,
    deciding_level,
    dev_baseline,
    dev_feature_probe,
    dev_graphs,
    hea_weight_violations,
    kernel_equals_reference,
    kernel_training_gap,
    laplacian_pe_error,
    levels_passing,
    make_datasets,
    mask_count_checks,
    measurements,
    noise_floor_fraction,
    reference_graphmae_losses,
    run,
    rwse_error,
    segment_conv,
    select_beta_mu,
)
from .graphs import (
    DENSITIES,
    Graph,
    csbm_dc,
    degree_quartiles,
    digits_knn,
    edge_homophily,
    feature_probe_accuracy,
    hetero_edge_weights,
    laplacian_pe,
    node_density,
    probe_accuracy,
    rwse,
    rwse_spectral,
    split_nodes,
)
from .model import (
    ArmSpec,
    BiasedGATConv,
    SegmentGATConv,
    CoverageMemory,
    GraphMAE,
    TrainSettings,
    arms,
    attach,
    attention_js,
    density_partition_mask,
    embed,
    final_sce,
    js_per_target,
    random_mask,
    sce_loss,
    split_mask,
    train_gmae,
    with_self_loops,
)
