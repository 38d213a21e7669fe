"""The runtime page states the machine and the versions that built the book."""

import importlib.metadata
import platform

from compendium.book import KEY_PACKAGES, cpu_features, runtime_page
from compendium.registry import load_registry


def test_runtime_page_lists_versions_cpu_flags_and_the_aten_capability():
    registry = load_registry()
    page = runtime_page(registry, [], "smoke", "local")
    assert f"| python | {platform.python_version()} |" in page
    for name in ("torch", "numpy", "scipy", "snakemake", "papermill", "jupyter-book", "sympy", "cvxpy", "transformers"):
        assert name in KEY_PACKAGES
        assert f"| {name} | {importlib.metadata.version(name)} |" in page
    cpu = cpu_features()
    assert f"ATen CPU capability): `{cpu['aten']}`" in page and cpu["model"] in page
    assert cpu["aten"] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", "SVE"} or "forced" in cpu["aten"]
    flags = open("/proc/cpuinfo").read().split()
    if "avx2" in flags:
        assert "avx2" in cpu["simd"]
    assert "requirements.lock" in page


def test_runtime_page_says_kernels_are_interpreter_only_until_a_gpu_report_exists(tmp_path, monkeypatch):
    from compendium import book, paths

    monkeypatch.setattr(paths, "ROOT", tmp_path)
    text = "\n".join(book.gpu_kernel_lines())
    assert "only under Triton's interpreter" in text and "gpu_check.sh" in text
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / book.GPU_REPORT).write_text("# GPU check report\n\n| kernel | ratio |\n|---|---|\n| sparse | 3.1 |\n")
    text = "\n".join(book.gpu_kernel_lines())
    assert "| sparse | 3.1 |" in text and "interpreter" not in text
