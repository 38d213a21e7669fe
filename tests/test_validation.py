"""Shared input checks used by every Config."""

import numpy as np
import pytest

from compendium.validation import require_int, require_number


@pytest.mark.parametrize("value", [1, 5, np.int64(10)])
def test_require_int_accepts(value):
    require_int("k", value, 1, 10)


@pytest.mark.parametrize("value", [0, 11, 2.0, True, "3", None])
def test_require_int_rejects_with_the_name(value):
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 10\]"):
        require_int("k", value, 1, 10)


def test_require_number_bounds_and_open_ends():
    require_number("x", 0.0, 0.0, 1.0)
    require_number("x", np.float64(1.0), 0.0, 1.0)
    with pytest.raises(ValueError, match=r"\(0.0, 1.0\]"):
        require_number("x", 0.0, 0.0, 1.0, low_open=True)
    with pytest.raises(ValueError, match=r"\[0.0, 1.0\)"):
        require_number("x", 1.0, 0.0, 1.0, high_open=True)
    for bad in (float("nan"), float("inf"), True, "0.5"):
        with pytest.raises(ValueError):
            require_number("x", bad, 0.0, 1.0)
