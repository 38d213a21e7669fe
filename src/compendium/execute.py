"""Execute one chapter notebook with Papermill (called by the Snakemake ``chapter`` rule).

The MyST notebook is converted with jupytext, executed under the project kernelspec
(``kernels/compendium``, found through JUPYTER_PATH) with the resolved parameters, and its
outputs are checked before they count as finished:

* the executed notebook is written to a temporary file and moved into place only on success;
* ``claims.json`` must exist, validate against the schema and name this chapter, scale and seed;
* on a failing cell, ``FAILED.json`` (cell, error, traceback tail) and ``failed.ipynb`` are left
  beside the outputs for the dashboard and for debugging, and a :class:`ChapterFailed` is raised
  whose message names the cell and the error;
* the assets it reads are checked against the sha256 recorded when they were built, before the
  kernel starts: a corrupted asset fails the run in one line, it is never used;
* on success ``provenance.json`` (the fingerprint of the inputs, taken before the run, and the
  sha256 of every output) is written beside ``claims.json`` and every output is copied to
  ``last_good/``, which Snakemake does not know about and so never deletes: a failed rerun leaves
  the last good result for the book.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import jsonschema
import yaml

from . import paths
from .provenance import LAST_GOOD, Fingerprinter, asset_problem, hash_outputs, make_record, write_provenance


class ChapterFailed(RuntimeError):
    """A chapter notebook raised, timed out, or did not write a valid ledger."""


def kernel_environment(output_dir: Path, threads: int) -> dict[str, str]:
    """Environment variables for the kernel: project kernelspec, offline, outputs, threads."""
    jupyter_path = os.pathsep.join([str(paths.ROOT)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])
    env = {
        "JUPYTER_PATH": jupyter_path,
        "COMPENDIUM_OUTPUT_DIR": str(output_dir.resolve()),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    return env


def _failure_record(slug: str, scale: str, err: Exception) -> dict:
    record = {"chapter": slug, "scale": scale, "error": type(err).__name__, "message": str(err).strip()}
    # PapermillExecutionError carries the failing cell
    for attr in ("cell_index", "exec_count", "ename", "evalue"):
        if hasattr(err, attr):
            record[attr] = getattr(err, attr)
    if hasattr(err, "traceback"):
        import re

        tail = "\n".join(err.traceback[-6:])
        record["traceback"] = re.sub(r"\x1b\[[0-9;]*m", "", tail)
    return record


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never a partial file.

    On a full disk the temporary file is removed and the ``OSError`` (naming ``path``) re-raised,
    so a reader finds the old file or none, never a truncated one.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a record is as readable as the outputs
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None


def describe_failure(record: dict) -> str:
    if "ename" in record:
        cell = record.get("cell") or record.get("exec_count") or record.get("cell_index")
        return f"chapter {record['chapter']!r} failed in cell {cell}: {record['ename']}: {record['evalue']}"
    return f"chapter {record['chapter']!r} failed: {record['error']}: {record['message']}"


def validate_claims(path: Path, slug: str, scale: str, seed: int) -> dict:
    """Check ``claims.json`` against the schema and the run it should come from."""
    if not path.is_file():
        raise ChapterFailed(f"chapter {slug!r} finished without writing {path.name}: call ch.finish() at the end")
    data = json.loads(path.read_text(encoding="utf-8"))
    schema = json.loads(paths.CLAIMS_SCHEMA.read_text(encoding="utf-8"))
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as err:
        raise ChapterFailed(f"chapter {slug!r}: claims.json does not match the schema: {err.message}") from None
    expected = {"chapter": slug, "scale": scale, "seed": seed}
    actual = {k: data[k] for k in expected}
    if actual != expected:
        raise ChapterFailed(f"chapter {slug!r}: claims.json is from another run: {actual} != {expected}")
    return data


class _Timeout(Exception):
    pass


def execute_chapter(
    *,
    slug: str,
    scale: str,
    notebook: str | Path,
    parameters: dict,
    output_notebook: str | Path,
    claims: str | Path,
    params_file: str | Path,
    figures: str | Path,
    timeout_s: int,
    threads: int = 1,
    assets=(),
    log=None,
) -> dict:
    """Run the chapter; return its claims. Raise :class:`ChapterFailed` with the cell's error."""
    import jupytext
    import nbformat
    import papermill

    output_notebook, claims, params_file, figures = map(Path, (output_notebook, claims, params_file, figures))
    out_dir = claims.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    # the fingerprint of what this run reads, taken before it starts (an edit during the run makes it
    # stale); never a corrupted asset
    for name in assets:
        problem = asset_problem(name, scale)
        if problem:
            raise ChapterFailed(f"chapter {slug!r} not run: {problem} (`compendium build` rebuilds it)")
    fp = Fingerprinter()
    provenance = make_record(fp.chapter_inputs(Path(notebook), parameters, scale, list(assets)), fp.environment())
    for stale in (claims, out_dir / "FAILED.json", out_dir / "failed.ipynb", out_dir / "provenance.json"):
        stale.unlink(missing_ok=True)
    shutil.rmtree(figures, ignore_errors=True)

    nb = jupytext.read(str(notebook))
    nb.metadata["kernelspec"] = {"name": paths.KERNEL_NAME, "display_name": "Python 3 (compendium)", "language": "python"}
    nb.metadata.pop("jupytext", None)
    # scratch beside the outputs (same file system: the finished notebook is renamed into place,
    # never copied, and a full disk is reported for the real file); a killed run's scratch is removed
    # at the next build's start (compendium.locks.clean_leftovers)
    with tempfile.TemporaryDirectory(prefix=".run-", dir=out_dir) as tmp:
        src = Path(tmp) / f"{slug}.ipynb"
        dst = Path(tmp) / f"{slug}.executed.ipynb"
        real = {str(src): Path(notebook), str(dst): output_notebook}
        try:
            nbformat.write(nb, str(src))
        except OSError as err:
            raise ChapterFailed(_fail(slug, scale, out_dir, _renamed(err, real), output_notebook)) from None
        env_updates = kernel_environment(out_dir, threads)
        saved_env = {k: os.environ.get(k) for k in env_updates}
        os.environ.update(env_updates)

        def on_alarm(signum, frame):  # the whole-notebook limit from the scale
            raise _Timeout()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(int(timeout_s))
        start = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(src),
                str(dst),
                parameters=parameters,
                kernel_name=paths.KERNEL_NAME,
                cwd=str(paths.ROOT),
                execution_timeout=int(timeout_s),
                progress_bar=False,
                log_output=log is not None,
                stdout_file=log,
                stderr_file=log,
                report_mode=False,
            )
        except BaseException as err:  # noqa: BLE001 - every failure is recorded, then re-raised
            if isinstance(err, _Timeout):
                err = ChapterFailed(f"chapter {slug!r} exceeded the {scale} timeout of {timeout_s} s")
            elif isinstance(err, OSError):  # here only the executed notebook is written in this process
                err = _renamed(err, real, default=output_notebook)
                dst.unlink(missing_ok=True)  # a partial notebook: free its space for the failure record
            claims.unlink(missing_ok=True)
            message = _fail(slug, scale, out_dir, err, output_notebook, dst=dst, start=start)
            raise ChapterFailed(message) from None
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        data = validate_claims(claims, slug, scale, parameters["seed"])
        outputs = [output_notebook, claims, params_file, figures]
        try:
            figures.mkdir(parents=True, exist_ok=True)
            write_atomic(params_file, yaml.safe_dump({"chapter": slug, "scale": scale, "parameters": parameters},
                                                     sort_keys=True))
            os.replace(dst, output_notebook)
            provenance["outputs"] = hash_outputs(out_dir, outputs, fp.hashes)
            write_provenance(out_dir, provenance)
            fp.save()
            keep_last_good(out_dir, [*outputs, out_dir / "provenance.json"])
        except OSError as err:
            # a full disk while finishing: nothing of this run counts (no claims, no record), the last
            # good result stays as it was, and FAILED.json says which file could not be written
            for path in (claims, output_notebook, params_file, out_dir / "provenance.json"):
                path.unlink(missing_ok=True)
            raise ChapterFailed(_fail(slug, scale, out_dir, _renamed(err, real), output_notebook, start=start)) from None
    return data


def _renamed(err: OSError, real: dict, default: Path | None = None) -> OSError:
    """``err`` naming the file the user knows (the output) instead of a scratch file; ``default``
    when it names none (a failed ``write`` into an open file)."""
    name = real.get(str(err.filename), err.filename) if err.filename else default
    return OSError(err.errno, err.strerror or str(err), str(name) if name else None)


def _fail(slug: str, scale: str, out_dir: Path, err: BaseException, output_notebook: Path, dst: Path | None = None,
          start: float | None = None) -> str:
    """Write ``FAILED.json`` (and ``failed.ipynb``) for a failed run; return the one-line message."""
    message = None
    if isinstance(err, OSError):
        where = f": {err.filename}" if err.filename else ""
        message = f"chapter {slug!r} could not write its outputs: {err.strerror or err}{where}"
        err = ChapterFailed(message)
    record = _failure_record(slug, scale, err)
    if "cell_index" in record and dst is not None:
        own = own_cell_number(dst, record["cell_index"])
        if own is not None:
            record["cell"] = own
    if start is not None:
        record["elapsed_s"] = round(time.perf_counter() - start, 2)
    message = message or describe_failure(record)
    try:
        write_atomic(out_dir / "FAILED.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
        if dst is not None and dst.is_file():
            tmp = out_dir / ".failed.ipynb.tmp"
            shutil.copyfile(dst, tmp)
            os.replace(tmp, out_dir / "failed.ipynb")
    except OSError as write_err:  # a full disk: say so in one line, leave no partial record
        (out_dir / ".failed.ipynb.tmp").unlink(missing_ok=True)
        message += f" (and the failure record could not be written: {write_err.strerror}: {write_err.filename})"
    return message


def own_cell_number(executed: Path, cell_index: int) -> int | None:
    """The failing cell as the chapter numbers it: its place among the notebook's own code cells
    (1-based), not counting the parameters cell Papermill injects (``cell_index`` counts every cell
    of the executed notebook, the execution count the injected one too). None if unreadable."""
    try:
        cells = json.loads(Path(executed).read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(cell_index, int) or not 0 <= cell_index < len(cells):
        return None
    own = [c for c in cells[:cell_index + 1]
           if c.get("cell_type") == "code" and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    return len(own) or None


def keep_last_good(out_dir: Path, outputs: list[Path]) -> Path:
    """Copy a successful run's outputs to ``out_dir/last_good`` (replacing the previous copy whole)."""
    target = out_dir / LAST_GOOD
    tmp = Path(tempfile.mkdtemp(prefix=f".{LAST_GOOD}-", dir=out_dir))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the copy is as readable as the outputs
    try:
        for path in outputs:
            if path.is_dir():
                shutil.copytree(path, tmp / path.name)
            elif path.is_file():
                shutil.copy2(path, tmp / path.name)
    except OSError as err:  # a full disk: the previous copy stays whole; name the copy that failed
        shutil.rmtree(tmp, ignore_errors=True)
        failed = err.filename2 or err.filename  # shutil names the source first, the copy second
        name = str(failed).replace(str(tmp), str(target)) if failed and str(tmp) in str(failed) else str(target)
        raise OSError(err.errno, err.strerror or str(err), name) from None
    old = out_dir / f".{LAST_GOOD}-old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target
