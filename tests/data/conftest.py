"""Shared fixtures of the raptor.data tests: the real GLUE files and small temp-file writers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The real GLUE TSVs (SST-2, MRPC, RTE) live beside the clone, in ../shared/data/glue.
GLUE_DIR = REPO_ROOT.parent / "shared" / "data" / "glue"


@pytest.fixture(scope="session")
def glue_dir() -> Path:
    if not (GLUE_DIR / "SST-2" / "train.tsv").is_file():
        pytest.skip(f"real GLUE files not found at {GLUE_DIR} (expected ../shared/data/glue beside the clone)")
    return GLUE_DIR


@pytest.fixture
def write(tmp_path):
    """write(name, text_or_bytes) -> path of a new file under tmp_path."""

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return path

    return _write
