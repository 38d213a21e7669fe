"""compendium.hostspeed: the probe that scales CI's wall-clock budget gate by the host's speed."""

import pytest

from compendium import hostspeed


def test_reference_is_the_measured_probe_scaled_by_the_book_times():
    assert hostspeed.reference_probe_s() == pytest.approx(0.822 * 1608 / 2752)


def test_probe_times_real_work():
    first, second = hostspeed.probe_once(), hostspeed.probe_once()
    assert 0.05 < first < 60 and 0.05 < second < 60


def test_slowdown_is_never_below_one(monkeypatch):
    monkeypatch.setattr(hostspeed, "probe", lambda repeats=5: 0.01)
    assert hostspeed.slowdown() == 1.0
    monkeypatch.setattr(hostspeed, "probe", lambda repeats=5: 2 * hostspeed.reference_probe_s())
    assert hostspeed.slowdown() == pytest.approx(2.0)


def test_probe_leaves_torch_threads_as_they_were():
    import torch

    before = torch.get_num_threads()
    hostspeed.probe_once()
    assert torch.get_num_threads() == before
