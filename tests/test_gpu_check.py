"""benchmarks/gpu_check.sh: its CPU dry run detects no CUDA, says so, writes its report and exits 0."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_gpu_check_dry_run_without_cuda(tmp_path):
    report = tmp_path / "report.md"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--report", str(report)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "No CUDA device found" in proc.stdout
    # the plan comes first: every CUDA step with its planned seconds, summing to the 8-minute budget
    planned = [int(m) for m in re.findall(r"^  \S+\s+(\d+) s   \(running total", proc.stdout, re.MULTILINE)]
    assert len(planned) == 8 and sum(planned) <= 480
    assert f"planned total: {sum(planned)} s" in proc.stdout
    text = report.read_text()
    assert text.startswith("# GPU check report")
    assert "interpreter only" in text
    assert "## benchmark-cpu-reference" in text and "exit status: 0" in text
    assert "planned total:" in text  # the plan is in the report too
    assert "timing the PyTorch references on the CPU only" in text


def test_gpu_check_is_executable_and_documents_its_steps():
    text = SCRIPT.read_text()
    assert os.access(SCRIPT, os.X_OK)
    for needle in ("COMPENDIUM_KERNEL_DEVICE=cuda", "benchmarks/async_spade_kernels.py", "device=cuda", "--dry-run"):
        assert needle in text


def test_median_time_warms_up_then_takes_the_median():
    from compendium.kernels.bench import median_time

    calls = []
    assert median_time(lambda: calls.append(1), reps=5, cuda=False) >= 0.0
    assert len(calls) == 6  # one untimed warm-up, then the timed calls
    with pytest.raises(ValueError, match="reps"):
        median_time(lambda: None, reps=0, cuda=False)


def test_checked_time_refuses_a_kernel_that_disagrees_and_times_one_that_agrees():
    import torch

    from compendium.kernels.bench import checked_time

    ref = torch.arange(4.0)
    seconds, worst = checked_time(lambda: ref + 1e-7, lambda: ref, 1e-6, reps=2, cuda=False)
    assert seconds >= 0.0 and 0.0 < worst <= 1e-6
    with pytest.raises(SystemExit, match="kernel and loop disagree: max abs error 1.000e-03"):
        checked_time(lambda: ref + 1e-3, lambda: ref, 1e-6, reps=2, cuda=False, against="loop")
    with pytest.raises(SystemExit):   # a NaN never passes as agreement
        checked_time(lambda: ref * float("nan"), lambda: ref, 1e-6, reps=2, cuda=False)
