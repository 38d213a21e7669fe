"""The locks that keep two runs from writing the same outputs, held by whoever does the work.

* ``.snakemake/compendium-build.lock``: a build holds it exclusively, ``compendium execute`` and
  ``compendium asset`` hold it shared. A build hands its open lock to the Snakemake process it
  starts (the same open file, inherited), so killing the ``compendium`` process alone leaves the
  lock held by Snakemake for as long as Snakemake runs.
* ``.snakemake/compendium-work.lock``: every job a build starts (chapter, asset, claims table,
  book) holds it shared for its lifetime (:func:`hold_work`). A starting build, once it holds the
  build lock, must also get this one exclusively for an instant (:func:`no_work_left`): a job
  orphaned by a killed build (its Snakemake killed too) still holds it, and the build is refused
  until that job ends.
* A chapter job also holds ``compendium-execute-<scale>-<slug>.lock`` (what ``compendium
  execute`` of that chapter holds) and an asset job ``compendium-asset-<scale>-<name>.lock``.

All are ``flock`` locks: the kernel releases them when the last process holding them ends, so
none goes stale. :func:`clean_leftovers` removes what killed runs left behind; a build calls it
when it holds both locks (nobody else is writing).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

from . import paths

_HELD: list = []  # open lock files kept for the life of the process


class LockBusy(RuntimeError):
    """Another run holds the lock."""


def lock_path(root: Path, name: str) -> Path:
    return Path(root) / ".snakemake" / f"compendium-{name}.lock"


def _open(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")


def hold(root: Path, name: str, *, shared: bool = False, wait: bool = False, what: str | None = None):
    """Take ``compendium-<name>.lock`` for the rest of this process; raise :class:`LockBusy` if
    another process holds it (``wait=True``: block until it is free)."""
    path = lock_path(root, name)
    fh = _open(path)
    try:
        fcntl.flock(fh, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        fh.close()
        raise LockBusy(f"{what or name} is already running in {Path(root)} (lock {path})") from None
    _HELD.append(fh)
    return fh


def hold_work(root: Path | None = None) -> None:
    """Mark this process as doing a build's work until it ends (see the module docstring)."""
    hold(root or paths.ROOT, "work", shared=True, wait=True)


def no_work_left(root: Path) -> None:
    """Raise :class:`LockBusy` when a job of an earlier build is still running (orphaned)."""
    path = lock_path(root, "work")
    fh = _open(path)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LockBusy(
            f"a job of an earlier build is still running in {Path(root)} (lock {path}): "
            "wait for it to finish or stop it"
        ) from None
    finally:
        fh.close()


def clean_leftovers(root: Path, results: Path, min_age_s: float = 0.0) -> list[Path]:
    """Remove what a killed run leaves: run configs in ``.snakemake/``, half-copied ``last_good``
    folders, the temporary files of atomic writes and the scratch folders of chapter runs."""
    now = time.time()
    found: list[Path] = list((Path(root) / ".snakemake").glob("compendium-run-*.yaml"))
    if Path(results).is_dir():
        for pattern in ("*/*/.last_good-*", "*/*/.run-*", "*/*/.*.tmp", "*/*/variants/*/.last_good-*",
                        "*/*/variants/*/.run-*", "*/*/variants/*/.*.tmp", "*/.*.tmp", "*/*/figures/.*.tmp"):
            found += Path(results).glob(pattern)
    removed = []
    for path in found:
        try:
            if now - path.lstat().st_mtime < min_age_s:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        except OSError:
            continue
    return removed


def inheritable(fh) -> int:
    """The descriptor of an open lock, made inheritable: a child started with ``pass_fds`` holds
    the same lock (one open file) for as long as it runs."""
    fd = fh.fileno()
    os.set_inheritable(fd, True)
    return fd
