"""The shipped pre-trained model: present, intact, attributed, hashed in the docs, in the wheel, loadable."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from raptor.data import ClassificationData, load_tokenizer
from raptor.data.model_corpus import model_public_corpus
from raptor.moe.models import load_model
from raptor.shipped import PUBLIC_CORPUS_FILE, SHIPPED, available, public_corpus, shipped_dir

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "pretrain.json",
            "ATTRIBUTION.md", PUBLIC_CORPUS_FILE, "SHA256SUMS")
SHIPPABLE = {"wikitext-2.valid.txt", "wikitext-2.test.txt", "tinystories.valid.txt", "wikipedia.sample.txt",
             "gutenberg.sample.txt"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=sorted(SHIPPED))
def name(request) -> str:
    return request.param


def test_every_shipped_name_is_present_with_its_files(name):
    assert name in available()
    folder = shipped_dir() / name
    for fname in REQUIRED:
        assert (folder / fname).is_file(), fname
    assert sum(p.stat().st_size for p in folder.iterdir()) < 10 * 2**20, "keep the package a few MB"


def test_checksums_match_and_the_readme_quotes_the_weights_hash(name):
    folder = shipped_dir() / name
    sums = dict(reversed(line.split("  ", 1)) for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {p.name for p in folder.iterdir()} - {"SHA256SUMS"}
    for fname, digest in sums.items():
        assert _sha256(folder / fname) == digest, fname
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert sums["model.safetensors"] in readme, "README must quote the shipped weights' sha256"


def test_trained_on_shippable_public_text_only_and_attributed(name):
    folder = shipped_dir() / name
    report = json.loads((folder / "pretrain.json").read_text())
    files = {f["name"] for f in report["files"]}
    assert files and files <= SHIPPABLE, f"not shippable: {files - SHIPPABLE}"
    assert "imdb" in report["config"]["exclude"]
    attribution = (folder / "ATTRIBUTION.md").read_text()
    for f in report["files"]:
        assert f"`{f['name']}`" in attribution and f["sha256"][:16] in attribution
    for licence in ("CC BY-SA 3.0", "CDLA-Sharing-1.0", "public domain"):
        assert licence in attribution


def test_package_data_globs_cover_every_shipped_file():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["raptor"]
    package = ROOT / "src" / "raptor"
    for path in shipped_dir().rglob("*"):
        if path.is_file():
            rel = path.relative_to(package).as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} is not package data"


def test_the_licence_is_an_spdx_expression():
    """``project.license`` as a TOML table is deprecated by setuptools (PEP 639): an SPDX string,
    which needs setuptools >= 77 to build (and in the dev extra, for the wheel test below)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["license"] == "Apache-2.0"
    for requirements in (config["build-system"]["requires"], config["project"]["optional-dependencies"]["dev"]):
        assert "setuptools>=77" in requirements


@pytest.mark.slow
def test_the_wheel_contains_the_shipped_model(tmp_path):
    """Build a wheel from a copy of the project (no network: setuptools from this environment)."""
    import shutil

    src = tmp_path / "project"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for fname in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / fname, src / fname)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w",
                          str(tmp_path / "dist"), str(src)], check=True, capture_output=True, text=True, timeout=600)
    assert "`project.license` as a TOML table is deprecated" not in out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    for name in SHIPPED:
        for fname in REQUIRED:
            assert f"raptor/data/pretrained/{name}/{fname}" in names, fname
    assert "raptor/data/bundled/SST-2/train.tsv.gz" in names


def test_loads_by_name_as_a_float32_classifier_with_a_matching_tokenizer(name):
    model = load_model(name, num_labels=2, generator=torch.Generator().manual_seed(0))
    tokenizer = load_tokenizer(name)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.config.vocab_size >= len(tokenizer)
    enc = tokenizer(["a gripping , funny film"], return_tensors="pt")
    with torch.no_grad():
        assert model(**enc).logits.shape == (1, 2)


def test_public_corpus_of_a_shipped_model_and_of_other_models(name, tmp_path):
    path = public_corpus(name)
    assert path == shipped_dir() / name / PUBLIC_CORPUS_FILE
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 200 and all(line.strip() for line in lines)
    assert public_corpus(shipped_dir() / name) == path  # a directory works too
    assert public_corpus("switch_transformers") is None  # a tiny family has none
    assert public_corpus(tmp_path) is None  # a directory without the file


def test_model_public_corpus_takes_the_shape_of_the_private_data(name):
    from raptor.data.model_corpus import PLACEHOLDER_LABEL
    from raptor.errors import DataError

    single = ClassificationData(("a", "b"), (0, 1), ("negative", "positive"))
    pub, source = model_public_corpus(name, single)
    n = len(public_corpus(name).read_text(encoding="utf-8").splitlines())
    assert len(pub) == n and not pub.is_pair and pub.label_names == single.label_names
    assert set(pub.labels) == {PLACEHOLDER_LABEL}  # placeholder labels: nothing reads them (model_corpus docstring)
    assert source.kind == "model-corpus" and not source.labelled
    pair = ClassificationData(("a",), (0,), ("no", "yes"), text_pairs=("b",))
    with pytest.raises(DataError, match="sentence-pair"):  # single lines are not pairs (as in `raptor train`)
        model_public_corpus(name, pair)
    assert model_public_corpus("switch_transformers", single) is None


def test_the_early_model_check_accepts_a_shipped_name_and_lists_it_for_an_unknown_one():
    from raptor.errors import ConfigError
    from raptor.moe.names import FAMILY_NAMES
    from raptor.shipped import available
    from raptor.training.run.preflight import check_model_name

    names = available()
    assert names, "the package ships at least one model"
    check_model_name(names[0], FAMILY_NAMES, names)  # no error
    with pytest.raises(ConfigError, match=names[0]):
        check_model_name("no-such-model", FAMILY_NAMES, names)
