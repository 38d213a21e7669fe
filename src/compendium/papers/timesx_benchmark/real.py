"""Adapters that turn three real series shipped with statsmodels into ``.data`` / ``.target`` arrays.

They are the manifest's loaders (``data/manifest.yaml``): chapters call ``compendium.data.load``,
which runs one of these and checks the checksum of what it returns. ``data`` is the series
(float64, shape (n,)), ``target`` the month index 0..n-1 (int64).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


def _pack(values) -> SimpleNamespace:
    values = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError("real series contains non-finite values after cleaning")
    return SimpleNamespace(data=values, target=np.arange(values.size, dtype=np.int64))


def co2_monthly() -> SimpleNamespace:
    """Mauna Loa weekly CO2 (ppm, 1958-2001), averaged per calendar month, gaps interpolated: 526 months."""
    from statsmodels.datasets import co2

    frame = co2.load_pandas().data
    monthly = frame["co2"].resample("MS").mean().interpolate(limit_direction="both")
    return _pack(monthly.to_numpy())


def elnino_monthly() -> SimpleNamespace:
    """Nino 1+2 sea-surface temperature (deg C), 1950-2010, twelve months a row, flattened: 732 months."""
    from statsmodels.datasets import elnino

    frame = elnino.load_pandas().data
    return _pack(frame.drop(columns="YEAR").to_numpy().ravel())


def elec_equip_monthly() -> SimpleNamespace:
    """Euro-area electrical equipment orders (index), monthly from 1995: 257 months."""
    from statsmodels.datasets import elec_equip

    frame = elec_equip.load().data
    return _pack(frame.iloc[:, 0].to_numpy())
