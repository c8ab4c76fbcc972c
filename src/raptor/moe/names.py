"""The supported family names, importable without torch or transformers (for fast CLI start-up).

:data:`raptor.moe.models.FAMILIES` lists the same names (a test checks it)."""

from __future__ import annotations

FAMILY_NAMES: tuple[str, ...] = (
    "switch_transformers",
    "olmoe",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
)
