"""The criteria of the per-setting headline rows, shared by the notebook's ledger and the
training-seed sweep (so both decide a row by the same rule).

Kept out of ``experiment`` so that the asset builder does not import the ledger's criteria.
"""
from __future__ import annotations

from compendium.claims import at_least, at_most

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
}


def row(H, setting, name):
    """(measured Estimate, criterion) of row ``name`` in ``setting``."""
    key, crit = ROWS[name]
    return H[setting][key], crit


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


def _point(measured):
    if isinstance(measured, dict):
        return measured.get("point")
    return getattr(measured, "point", measured)


def scale_differences(rows, other_claims_path):
    """Rows whose verdict differs from the other scale's ``claims.json`` (None if it was not run).

    ``rows``: {id: (verdict, measured)} of this run; returns [(id, verdict here, verdict there,
    point here, point there)] in ``rows`` order, not_checkable rows and ids missing there skipped."""
    import json
    from pathlib import Path
    path = Path(other_claims_path)
    if not path.is_file():
        return None
    other = {c["id"]: c for c in json.loads(path.read_text())["claims"]}
    out = []
    for cid, (verdict, measured) in rows.items():
        o = other.get(cid)
        if o is None or verdict == "not_checkable" or o["verdict"] == verdict:
            continue
        out.append((cid, verdict, o["verdict"], _point(measured), _point(o.get("measured"))))
    return out


def describe_differences(diffs, here, there):
    """One sentence for the notebook's Limits (computed, so it stays true at any run)."""
    def num(v):
        return "n/a" if v is None or isinstance(v, bool) else f"{float(v):.3g}"
    if diffs is None:
        return f"no {there}-scale run of this chapter is in this results folder, so no comparison is made"
    if not diffs:
        return f"every ledger row has the same verdict at {here} and {there} scale"
    parts = [f"{cid} ({here}: {a}, {num(pa)}; {there}: {b}, {num(pb)})" for cid, a, b, pa, pb in diffs]
    return f"{len(diffs)} rows differ between {here} and {there} scale: " + "; ".join(parts)
