"""raptor._hashing.sha256_file: the streamed digest equals hashlib over the whole file."""

from __future__ import annotations

import hashlib

import pytest

from raptor import _hashing


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 100])
def test_sha256_file_matches_whole_file_digest_across_block_boundaries(tmp_path, monkeypatch, size):
    monkeypatch.setattr(_hashing, "_BLOCK", 8)  # tiny blocks: sizes straddle, hit and miss a boundary
    data = bytes(range(256))[:size]
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert _hashing.sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert _hashing.sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
