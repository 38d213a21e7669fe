"""Write ``requirements.lock``: the exact installed versions of ``compendium[dev]`` and everything it needs.

``make lock`` runs ``python -m compendium.lockfile``. The set is the transitive closure of
``pyproject.toml``'s requirements (with the ``dev`` extra) over the *installed* distributions, so a package
installed by hand for an experiment (and not declared in ``pyproject.toml``) stays out of the lock,
while every version is the one the environment that passed CI actually has. torch keeps its local
label (``2.13.0+cpu``: the CPU build). torchvision, torchaudio and timm are refused: with the CPU
torch they break transformers and friends.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from . import paths

FORBIDDEN = ("torchvision", "torchaudio", "timm")
HEADER = """\
# Exact versions of the environment the book was built and tested with (CI passed with these).
# pyproject.toml keeps the ranges; this file is what `make setup` and environment.yml install.
# Regenerate from a .venv that passed CI with `make lock` (python -m compendium.lockfile; never edit by hand).
# torch is the CPU build (2.13.0+cpu): pip finds it on a local wheel folder (--find-links) or at
# https://download.pytorch.org/whl/cpu. torchvision, torchaudio and timm must stay out (see .ci/run).
"""


def project_requirements(extras: tuple[str, ...] = ("dev",), pyproject: str | Path | None = None) -> list[str]:
    """The requirement strings of ``pyproject.toml`` (the source of the ranges), with ``extras``."""
    import tomllib

    project = tomllib.loads(Path(pyproject or paths.ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    return list(project.get("dependencies", [])) + [r for e in extras for r in optional.get(e, [])]


def closure(extras: tuple[str, ...] = ("dev",)) -> dict[str, str]:
    """``{distribution name: installed version}`` of everything the project (with ``extras``) requires, transitively.

    Raises
    ------
    RuntimeError
        A required distribution is not installed, or a forbidden one is.
    """
    installed = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}
    for name in FORBIDDEN:
        if name in installed:
            raise RuntimeError(f"{name} is installed: it breaks the CPU torch stack; uninstall it before locking")
    seen: set[tuple[str, frozenset]] = set()
    stack: list = [(None, frozenset(extras))]  # None: the project itself, read from pyproject.toml
    out: dict[str, str] = {}
    base_env = default_environment()
    while stack:
        name, wanted = stack.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        if name is None:
            requires = project_requirements(extras)
        else:
            dist = installed.get(name)
            if dist is None:
                raise RuntimeError(f"{name} is required but not installed: run `make setup` first")
            out[dist.metadata["Name"]] = dist.version
            requires = dist.requires or []
        for line in requires:
            req = Requirement(line)
            envs = [dict(base_env, extra=e) for e in (wanted or {""})]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            stack.append((canonicalize_name(req.name), frozenset(req.extras)))
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items())


def read_lock(path: str | Path | None = None) -> dict[str, str]:
    """``{canonical name: version}`` of a lock file."""
    out = {}
    for line in Path(path or paths.LOCK).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(paths.LOCK), help="where to write (default requirements.lock)")
    args = parser.parse_args(argv)
    try:
        pins = closure()
    except RuntimeError as err:
        print(f"lock: error: {err}", file=sys.stderr)
        return 1
    out = Path(args.output)
    tmp = out.with_name(out.name + ".new")
    tmp.write_text(render(pins), encoding="utf-8")
    tmp.replace(out)
    print(f"{out.name}: {len(pins)} pinned packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
