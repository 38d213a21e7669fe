"""requirements.lock: exact pins that satisfy pyproject.toml's ranges, the CPU torch, no torchvision."""

import importlib.metadata as md

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from compendium import lockfile


def test_lock_pins_every_declared_requirement_within_its_range():
    lock = lockfile.read_lock()
    for line in lockfile.project_requirements(("dev",)):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is in pyproject.toml but not in requirements.lock: run `make lock`"
        version = Version(lock[name])
        public = Version(version.public)  # torch 2.13.0+cpu satisfies ==2.13.0
        assert req.specifier.contains(version, prereleases=True) or req.specifier.contains(public, prereleases=True), \
            f"{req.name}=={lock[name]} is outside pyproject.toml's {req.specifier}"


def test_lock_has_the_cpu_torch_and_none_of_the_packages_that_break_it():
    lock = lockfile.read_lock()
    assert lock["torch"] == "2.13.0+cpu"
    assert not set(lockfile.FORBIDDEN) & set(lock)
    assert not any(name.startswith("nvidia-") for name in lock), "the CUDA stack must stay out"


def test_the_environment_is_the_locked_one():
    """What CI installs from the lock is what runs: every pin installed at exactly that version."""
    lock = lockfile.read_lock()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}
    wrong = {n: (v, installed.get(n)) for n, v in lock.items() if installed.get(n) != v}
    assert not wrong, f"installed versions differ from requirements.lock (run `make setup`): {wrong}"
    needed = {canonicalize_name(n) for n in lockfile.closure()}
    assert needed <= set(lock), f"required but not locked (run `make lock`): {sorted(needed - set(lock))}"
