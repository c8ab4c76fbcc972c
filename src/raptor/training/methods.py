"""The method table: every method on the same machinery (trainable set, grouping, released streams).

| method        | trainable set                                   | grouping | streams released        |
|---------------|-------------------------------------------------|----------|-------------------------|
| nonprivate    | shared + experts of the chosen layers           | (plain)  | no clipping, no noise   |
| dpsgd         | shared + experts of the chosen layers           | dense    | one block, one C, one σ |
| dpsgd-full    | shared + the experts of EVERY MoE layer          | dense    | one block, one C, one σ |
| dp-lora       | LoRA adapters (attention, experts) + head        | dense    | one block               |
| shared-only   | shared parameters (all experts frozen)           | roles    | shared                  |
| expert-only   | experts of the chosen layers (shared frozen)     | roles    | expert                  |
| last-layer    | last MoE block (attention, experts) + head       | dense    | one block               |
| raptor        | shared + experts of the chosen layers            | roles    | shared + expert         |

Every method uses the same Poisson sampling (q = B/N), the same planned number of updates, the
same ledger and accountant. Routers stay frozen in every method (the reference's setting);
``TrainConfig``'s clip norms, learning rate and batch size apply to all methods alike.

``dpsgd`` trains exactly RAPTOR's set under one clip and one sigma: the reference's matched
baseline (``baseline_a_global_matched``). ``dpsgd-full`` is its naive baseline: every layer's
experts and the shared parameters under one clip. With ``TrainConfig.lora`` every method whose
trainable set comes from roles (roles, shared, experts, all) trains LoRA adapters on that same
set instead (attention LoRA in the shared part, one LoRA per expert in the expert part), so the
matching holds under LoRA too; with ``TrainConfig.freeze_head`` no method trains the head.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from raptor.errors import ConfigError

TRAINABLE_SETS: tuple[str, ...] = ("roles", "shared", "experts", "all", "last-block", "lora")
GROUPINGS: tuple[str | None, ...] = ("roles", "dense", None)


@dataclass(frozen=True)
class MethodSpec:
    """How a method maps onto the machinery. ``grouping=None`` with ``streams=()`` is ordinary
    autograd without clipping or noise (the non-private path)."""

    trainable: str            # one of TRAINABLE_SETS
    grouping: str | None      # "roles" | "dense" | None (plain autograd)
    streams: tuple[str, ...]  # released streams, for the noise plan
    uses_layers: bool         # whether layers/"auto" picks the trained MoE layers

    def __post_init__(self) -> None:
        if self.trainable not in TRAINABLE_SETS:
            raise ConfigError(f"MethodSpec.trainable must be one of {TRAINABLE_SETS}, got {self.trainable!r}")
        if self.grouping not in GROUPINGS:
            raise ConfigError(f"MethodSpec.grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if (self.grouping is None) != (self.streams == ()):
            raise ConfigError("MethodSpec: the plain path (grouping None) releases no stream, and a DP grouping "
                              f"releases at least one; got grouping={self.grouping!r}, streams={self.streams!r}")

    def to_dict(self) -> dict:
        return asdict(self)


METHOD_SPECS: dict[str, MethodSpec] = {
    "nonprivate": MethodSpec("roles", None, (), True),
    "dpsgd": MethodSpec("roles", "dense", ("shared",), True),
    "dpsgd-full": MethodSpec("all", "dense", ("shared",), False),
    "dp-lora": MethodSpec("lora", "dense", ("shared",), False),
    "shared-only": MethodSpec("shared", "roles", ("shared",), False),
    "expert-only": MethodSpec("experts", "roles", ("expert",), True),
    "last-layer": MethodSpec("last-block", "dense", ("shared",), False),
    "raptor": MethodSpec("roles", "roles", ("shared", "expert"), True),
}
