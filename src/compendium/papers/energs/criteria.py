"""The criteria of the per-setting headline rows, shared by the notebook's ledger and the
training-seed sweep (so both decide a row by the same rule).

Kept out of ``experiment`` so that the asset builder does not import the ledger's criteria.
"""
from __future__ import annotations

from compendium.claims import at_least, at_most
from compendium.stability import describe_differences, scale_differences  # noqa: F401 (used by the notebook)

#: row -> (key of ``experiment.headline``'s per-setting dict, criterion); fixed by the issue.
ROWS = {
    "headroom": ("vanilla_psnr", at_most(30.0)),
    "overfit": ("vanilla_gap", at_least(1.0)),
    "nobarrier-leak": ("nobarrier_leak_excess", at_least(0.0)),
    "leak-halved": ("leak_excess", at_most(0.0)),
    "psnr-noninferior": ("psnr_diff", at_least(-0.1)),
    "gap-smaller": ("gap_diff", at_most(0.0)),
    "blind-chamfer": ("blind_chamfer_diff", at_most(0.0)),
    "blind-psnr": ("blind_psnr_diff", at_least(0.0)),
    "energy-beats-pruning": ("leak_vs_prune", at_most(0.0)),
    # the hard constraint alone: hard prior against the LiDAR-init-only arm (same init, same seeds)
    "blind-chamfer-constraint": ("constraint_chamfer", at_least(0.0)),
    "blind-psnr-constraint": ("constraint_blind_psnr", at_least(0.0)),
}

#: rows gated on another row of the same setting (``requires``): a smaller gap counts only where the
#: test PSNR is not worse (not through underfitting), and "hard constraints hurt" only where the
#: constraint, not the LiDAR initialisation, is what separates the hard prior.
REQUIRES = {
    "gap-smaller": ("psnr-noninferior",),
    "blind-chamfer": ("blind-chamfer-constraint",),
    "blind-psnr": ("blind-psnr-constraint",),
}


def row(H, setting, name):
    """(measured Estimate, criterion) of row ``name`` in ``setting``."""
    key, crit = ROWS[name]
    return H[setting][key], crit


def required(setting, name):
    """Ids of the rows that row ``name`` of ``setting`` requires (see ``REQUIRES``)."""
    return [f"{r}-{setting}" for r in REQUIRES.get(name, ())]


def verdicts(H):
    """{f"{row}-{setting}": computed verdict} of every per-setting row (controls not applied)."""
    return {f"{name}-{s}": crit.decide(H[s][key]) for s in H for name, (key, crit) in ROWS.items()}


def training_seed_sweep(asset_seeds, scale="smoke", test_seed=0, work_dir=None):
    """Rebuild the asset at each of ``asset_seeds`` (new training, dev and tuning seeds), score it
    on the test views of ``test_seed`` and return {asset seed: verdicts}: the sweep that varies the
    training, which a chapter-seed sweep (test views only) does not."""
    import tempfile
    from pathlib import Path

    from . import experiment as ex

    out = {}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for s in asset_seeds:
            d = Path(tmp) / f"seed-{s}"
            ex.build_asset(d, scale, int(s))
            t = ex.load_asset(d)
            H = ex.headline(ex.evaluate(t, test_seed, t.config.n_test_views), t.config.settings)
            out[int(s)] = verdicts(H)
    return out


