"""Input checks shared by the paper modules' ``Config.__post_init__`` (clear ``ValueError``s)."""

from __future__ import annotations

import math
import numbers


def require_int(name: str, value, low: int, high: int) -> None:
    """``value`` is an integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def require_number(name: str, value, low: float, high: float, low_open: bool = False,
                   high_open: bool = False) -> None:
    """``value`` is a finite real number (not a bool) in ``[low, high]``; ends open on request."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    ok = ok and (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    if not ok:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be a number in {left}{low}, {high}{right}, got {value!r}")
