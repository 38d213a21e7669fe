"""Adapters that turn four real tables shipped inside statsmodels into ``.data`` / ``.target`` arrays.

They are the manifest's loaders (``data/manifest.yaml``): :func:`tables._real_sources` calls
``compendium.data.load``, which runs one of these and checks the checksum of what it returns.
Each returns ``data`` (float64, (n, d)), ``target`` (int64 class codes or float64 values, (n,))
and ``feature_names``. Every table here is marked public domain in statsmodels' own metadata.

=============  ============================================================  ===========
name           table and target                                              task type
=============  ============================================================  ===========
anes96         1996 American National Election Study: vote (0 Clinton,        binary
               1 Dole) from 9 attitudes and demographics (``logpopul``, a
               transform of ``popul``, dropped)
randhie        RAND Health Insurance Experiment: any doctor visit             binary
               (``mdvis > 0``) from 9 plan and health variables
modechoice     Greene and Hensher's intercity travel choice (Sydney to        categorical
               Melbourne), one row per traveller (long format pivoted to
               wide): chosen mode (air, train, bus, car) from each mode's
               terminal time (none by car), in-vehicle cost and time, and
               household income and party size
grunfeld       Grunfeld's investment data (11 US firms, 1935-1954): gross     quartile
               investment from firm value, capital stock and year
=============  ============================================================  ===========
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

MODES = ("air", "train", "bus", "car")  # modechoice's mode codes 1..4


def _pack(frame, target, target_names=()) -> SimpleNamespace:
    data = np.ascontiguousarray(frame.to_numpy(dtype=np.float64))
    if not np.all(np.isfinite(data)):
        raise ValueError("real table contains non-finite values")
    return SimpleNamespace(data=data, target=np.asarray(target), feature_names=[str(c) for c in frame.columns],
                           target_names=list(target_names))


def anes96_vote() -> SimpleNamespace:
    """ANES 1996: 944 respondents, 9 features, vote for Dole (1) or Clinton (0)."""
    from statsmodels.datasets import anes96

    frame = anes96.load_pandas().data
    target = frame["vote"].to_numpy().astype(np.int64)
    return _pack(frame.drop(columns=["vote", "logpopul"]), target, ("clinton", "dole"))


def randhie_any_visit() -> SimpleNamespace:
    """RAND HIE: 20190 person-years, 9 features, any doctor visit in the year (``mdvis > 0``)."""
    from statsmodels.datasets import randhie

    frame = randhie.load_pandas().data
    target = (frame["mdvis"].to_numpy() > 0).astype(np.int64)
    return _pack(frame.drop(columns=["mdvis"]), target, ("no_visit", "visit"))


def modechoice_wide() -> SimpleNamespace:
    """Travel-mode choice: 210 travellers, 13 features (terminal time of air, train, bus; cost and time of all 4 modes; income, party size)."""
    from statsmodels.datasets import modechoice

    frame = modechoice.load_pandas().data
    wide = frame.pivot(index="individual", columns="mode", values=["ttme", "invc", "invt"])
    wide.columns = [f"{var}_{MODES[int(mode) - 1]}" for var, mode in wide.columns]
    wide = wide.drop(columns="ttme_car")  # no terminal time by car: the column is 0 for everyone
    per_person = frame.groupby("individual")[["hinc", "psize"]].first()
    chosen = frame[frame["choice"] == 1].set_index("individual")["mode"]
    wide = wide.join(per_person).sort_index()
    target = chosen.loc[wide.index].to_numpy().astype(np.int64) - 1  # 0 air .. 3 car
    return _pack(wide, target, MODES)


def grunfeld_investment() -> SimpleNamespace:
    """Grunfeld: 220 firm-years, 3 features (value, capital, year), gross investment (regression target)."""
    from statsmodels.datasets import grunfeld

    frame = grunfeld.load_pandas().data
    target = frame["invest"].to_numpy(dtype=np.float64)
    return _pack(frame[["value", "capital", "year"]], target)
