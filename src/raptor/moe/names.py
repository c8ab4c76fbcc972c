"""The supported family names, importable without torch or transformers (for fast CLI start-up).

:data:`raptor.moe.models.FAMILIES` (the adapter table's classifier families) is the source;
``tests/test_registries.py`` fails when the two disagree."""

from __future__ import annotations

FAMILY_NAMES: tuple[str, ...] = (
    "switch_transformers",
    "olmoe",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "bert_moe",
)
