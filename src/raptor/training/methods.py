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

The trainable sets are a table too, :data:`TRAINABLE_SETS` (one :class:`TrainableSet` per key):

| set        | parameters trained (routers and the family's frozen prefixes never)   | own layers | LoRA     | LoRA on            |
|------------|------------------------------------------------------------------------|------------|----------|--------------------|
| roles      | everything but the experts, plus the experts of the trained layers    | none       | optional | shared + trained   |
| shared     | everything but the experts                                             | none       | optional | shared             |
| experts    | the experts of the trained layers                                      | none       | optional | trained            |
| all        | everything                                                             | every      | optional | shared + every     |
| last-block | the last MoE block (its experts included) and the head                 | last       | never    | (full weights)     |
| lora       | LoRA adapters only (and the head)                                      | none       | always   | shared + every     |

"Own layers" are the trained MoE layers of a method that does not choose them
(``MethodSpec.uses_layers`` False). A new baseline is a row of :data:`METHOD_SPECS` naming a row of
:data:`TRAINABLE_SETS`; nothing else branches on their names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from raptor.errors import ConfigError

GROUPINGS: tuple[str | None, ...] = ("roles", "dense", None)
#: how a trainable set takes ``TrainConfig.lora``: LoRA whatever it says, LoRA when it says so, never LoRA
LORA_RULES: tuple[str, ...] = ("always", "optional", "never")
#: which MoE layers a set's rule picks: every one, the last one, the trained ones, none
LAYER_RULES: tuple[str, ...] = ("all", "last", "trained", "none")


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@dataclass(frozen=True)
class ParamRoles:
    """What a trainable set's parameter rule reads about a model: parameter names by role.

    ``experts``: every MoE layer's expert parameters; ``trained_experts``: those of the trained MoE
    layers; ``last_block``: the module name of the last MoE block; ``last_experts``: the last MoE
    layer's expert parameters; ``heads``: the output head's module names.
    """

    experts: frozenset[str]
    trained_experts: frozenset[str]
    last_block: str
    last_experts: frozenset[str]
    heads: tuple[str, ...]

    def in_head(self, name: str) -> bool:
        return any(_under(name, h) for h in self.heads)


def _roles_rule(name: str, roles: ParamRoles) -> bool:
    return name not in roles.experts or name in roles.trained_experts


def _shared_rule(name: str, roles: ParamRoles) -> bool:
    return name not in roles.experts


def _experts_rule(name: str, roles: ParamRoles) -> bool:
    return name in roles.trained_experts


def _all_rule(name: str, roles: ParamRoles) -> bool:
    return True


def _last_block_rule(name: str, roles: ParamRoles) -> bool:
    in_block = _under(name, roles.last_block) or roles.in_head(name)
    return in_block and (name not in roles.experts or name in roles.last_experts)


@dataclass(frozen=True)
class TrainableSet:
    """Which parameters a method trains, and how LoRA replaces them.

    ``params(name, roles) -> bool``: whether the full-weight parameter ``name`` is trained (routers
    and the family's frozen prefixes are frozen whatever it says); None: the set is LoRA adapters
    only (``lora="always"``). ``own_layers``: the trained MoE layers of a method that does not choose
    them (``MethodSpec.uses_layers`` False): ``"all"``, ``"last"`` or ``"none"``. ``lora``: how it
    takes ``TrainConfig.lora`` (:data:`LORA_RULES`). Under LoRA, ``lora_shared``: whether the
    family's LoRA targets outside the experts (attention) are adapted; ``lora_experts``: the MoE
    layers whose experts get LoRA (``"all"``, ``"trained"`` or ``"none"``).
    """

    params: Callable[[str, ParamRoles], bool] | None
    own_layers: str = "none"
    lora: str = "optional"
    lora_shared: bool = False
    lora_experts: str = "none"

    def __post_init__(self) -> None:
        if self.own_layers not in ("all", "last", "none"):
            raise ConfigError(f"TrainableSet.own_layers must be 'all', 'last' or 'none', got {self.own_layers!r}")
        if self.lora not in LORA_RULES:
            raise ConfigError(f"TrainableSet.lora must be one of {LORA_RULES}, got {self.lora!r}")
        if self.lora_experts not in ("all", "trained", "none"):
            raise ConfigError("TrainableSet.lora_experts must be 'all', 'trained' or 'none', "
                              f"got {self.lora_experts!r}")
        if (self.params is None) != (self.lora == "always"):
            raise ConfigError("TrainableSet: a set with no full-weight rule (params None) is LoRA only "
                              f"(lora='always'), and only such a set is; got lora={self.lora!r}")
        if (self.lora == "never") == (self.lora_shared or self.lora_experts != "none"):
            raise ConfigError("TrainableSet: a set that takes LoRA adapts something (lora_shared or "
                              f"lora_experts), one that never does adapts nothing; got lora={self.lora!r}, "
                              f"lora_shared={self.lora_shared!r}, lora_experts={self.lora_experts!r}")

    def trained_layers(self, layers: Sequence[int]) -> tuple[int, ...]:
        """The set's own trained MoE layers among ``layers`` (indices in model order), for a method
        that does not choose them."""
        return _pick_layers(self.own_layers, layers, ())

    def expert_lora_layers(self, layers: Sequence[int], trained: Sequence[int]) -> set[int]:
        """The MoE layers whose experts get LoRA, given the run's ``trained`` layers."""
        return set(_pick_layers(self.lora_experts, layers, trained))


def _pick_layers(rule: str, layers: Sequence[int], trained: Sequence[int]) -> tuple[int, ...]:
    """The MoE layers a layer rule (:data:`LAYER_RULES`) picks among ``layers``."""
    if rule == "all":
        return tuple(layers)
    if rule == "last":
        return (layers[-1],)
    return tuple(trained) if rule == "trained" else ()


#: the trainable sets, by the key a method names (``MethodSpec.trainable``)
TRAINABLE_SETS: dict[str, TrainableSet] = {
    "roles": TrainableSet(_roles_rule, lora_shared=True, lora_experts="trained"),
    "shared": TrainableSet(_shared_rule, lora_shared=True),
    "experts": TrainableSet(_experts_rule, lora_experts="trained"),
    "all": TrainableSet(_all_rule, own_layers="all", lora_shared=True, lora_experts="all"),
    "last-block": TrainableSet(_last_block_rule, own_layers="last", lora="never"),
    "lora": TrainableSet(None, lora="always", lora_shared=True, lora_experts="all"),
}


def trainable_set(name: str) -> TrainableSet:
    """The row of :data:`TRAINABLE_SETS` named ``name`` (ConfigError if there is none)."""
    found = TRAINABLE_SETS.get(name)
    if found is None:
        raise ConfigError(f"unknown trainable set {name!r}; the trainable sets are {tuple(TRAINABLE_SETS)}")
    return found


@dataclass(frozen=True)
class MethodSpec:
    """How a method maps onto the machinery. ``grouping=None`` with ``streams=()`` is ordinary
    autograd without clipping or noise (the non-private path).

    What the rest of raptor asks of a method is read from here, never from its name: ``private``
    (it releases a stream), ``lora_rule`` and :meth:`uses_lora` (from its trainable set),
    ``alternates`` (whether an alternating schedule applies)."""

    trainable: str            # a key of TRAINABLE_SETS
    grouping: str | None      # "roles" | "dense" | None (plain autograd)
    streams: tuple[str, ...]  # released streams, for the noise plan
    uses_layers: bool         # whether layers/"auto" picks the trained MoE layers

    def __post_init__(self) -> None:
        if self.trainable not in TRAINABLE_SETS:
            raise ConfigError(f"MethodSpec.trainable must be one of {tuple(TRAINABLE_SETS)}, got {self.trainable!r}")
        if self.grouping not in GROUPINGS:
            raise ConfigError(f"MethodSpec.grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if (self.grouping is None) != (self.streams == ()):
            raise ConfigError("MethodSpec: the plain path (grouping None) releases no stream, and a DP grouping "
                              f"releases at least one; got grouping={self.grouping!r}, streams={self.streams!r}")

    @property
    def trainable_set(self) -> TrainableSet:
        return trainable_set(self.trainable)

    @property
    def private(self) -> bool:
        """Whether the method releases a stream (is differentially private): False only on the plain
        path, which has no epsilon."""
        return bool(self.streams)

    @property
    def lora_rule(self) -> str:
        """How the method takes ``TrainConfig.lora`` (:data:`LORA_RULES`): ``"always"`` (LoRA by its
        trainable set, e.g. dp-lora), ``"optional"`` (LoRA on the same set when asked), ``"never"``
        (full weights by its set, e.g. last-layer: ``lora=True`` is refused)."""
        return self.trainable_set.lora

    def uses_lora(self, lora: bool) -> bool:
        """Whether a run of the method with ``TrainConfig.lora=lora`` trains LoRA adapters."""
        return self.lora_rule == "always" or (lora and self.lora_rule == "optional")

    @property
    def alternates(self) -> bool:
        """Whether an alternating schedule applies: the method releases both streams."""
        return set(self.streams) == {"shared", "expert"}

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
