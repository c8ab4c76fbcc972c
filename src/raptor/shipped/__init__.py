"""Pre-trained models shipped inside the package, by short name.

Each lives in ``raptor/data/pretrained/<name>/`` (``config.json``, ``model.safetensors`` in
float16, ``tokenizer.json``, ``pretrain.json``, ``ATTRIBUTION.md``), was made by the
``raptor pretrain`` command in its ``pretrain.json`` and README entry, and saw PUBLIC text only.
``--model NAME`` and ``--tokenizer NAME`` accept these names.
"""

from __future__ import annotations

from pathlib import Path

#: short name -> one-line description
SHIPPED: dict[str, str] = {}


def shipped_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "pretrained"


def available() -> tuple[str, ...]:
    """Names of the shipped models present in this installation."""
    return tuple(n for n in SHIPPED if (shipped_dir() / n / "config.json").is_file())


def resolve(name_or_path):
    """The directory of a shipped model when ``name_or_path`` is one's short name, else the input unchanged."""
    if isinstance(name_or_path, str) and name_or_path in SHIPPED and not Path(name_or_path).exists():
        return shipped_dir() / name_or_path
    return name_or_path
