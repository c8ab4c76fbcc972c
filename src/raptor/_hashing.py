"""The SHA-256 of a file, read in 1 MiB blocks: the one implementation raptor and its scripts use.

This module is a leaf: it imports only the standard library and no other raptor module, so every
sub-package (and ``experiments/``) may import it; the layering test checks both.
"""

from __future__ import annotations

import hashlib
import os

_BLOCK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the bytes of ``path``, streamed (the file is never held whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()
