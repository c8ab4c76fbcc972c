"""Parameter roles: which clipping group every trainable parameter (or fused-expert slice) belongs to.

Groups (METHOD.md, "One update", step 3):

* ``shared``: embeddings, attention, norms, routers, dense MLPs, shared experts, the head, and any
  LoRA adapter attached to those;
* ``expert/l/e``: the parameters of expert ``e`` of MoE layer ``l`` (a block index of the
  transformer), for the *trained* layers only. For fused 3-D expert weights (``gate_up_proj``
  ``[E, 2I, D]``, ``down_proj`` ``[E, D, I]``) a group holds one slice ``index=e`` on dim 0;
* ``dense``: one block holding every trainable parameter (dense DP-SGD and its baselines);
* ``head``: with a shared split (``PrivacyConfig.shared_split="head"``), the output head's
  parameters, a second group of the shared stream with its own clip norm (the rest stays
  ``shared``: the backbone).

Expert parameters of MoE layers that are *not* trained must be frozen by the caller
(``requires_grad_(False)``); :func:`build_group_map` raises :class:`ConfigError` otherwise, so an
expert parameter never silently lands in the shared group.

Privacy: the map depends on the model structure and the caller's choice of trained layers only,
never on data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from torch import nn

from raptor.errors import ConfigError

_SHARED = "shared"
_DENSE = "dense"
_EXPERT = "expert"
_HEAD = "head"


@dataclass(frozen=True, order=True)
class GroupKey:
    """A clipping group: ``shared``, ``dense`` or ``expert`` (with its layer and expert ids)."""

    kind: str
    layer: int | None = None
    expert_id: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in (_SHARED, _DENSE, _EXPERT, _HEAD):
            raise ConfigError(f"GroupKey.kind must be 'shared', 'head', 'dense' or 'expert', got {self.kind!r}")
        if self.kind == _EXPERT:
            for name in ("layer", "expert_id"):
                value = getattr(self, name)
                if not isinstance(value, int) or value < 0:
                    raise ConfigError(f"GroupKey.{name} must be an integer >= 0 for an expert group, got {value!r}")
        elif self.layer is not None or self.expert_id is not None:
            raise ConfigError(f"GroupKey({self.kind!r}) takes no layer/expert, got {self.layer!r}/{self.expert_id!r}")

    @classmethod
    def shared(cls) -> GroupKey:
        return cls(_SHARED)

    @classmethod
    def dense(cls) -> GroupKey:
        return cls(_DENSE)

    @classmethod
    def head(cls) -> GroupKey:
        return cls(_HEAD)

    @classmethod
    def expert(cls, layer: int, expert: int) -> GroupKey:
        return cls(_EXPERT, int(layer), int(expert))

    @classmethod
    def parse(cls, text: str) -> GroupKey:
        """Inverse of ``str(key)``: ``"shared"``, ``"dense"`` or ``"expert/L/E"``."""
        parts = text.split("/")
        if parts == [_SHARED]:
            return cls.shared()
        if parts == [_DENSE]:
            return cls.dense()
        if parts == [_HEAD]:
            return cls.head()
        if len(parts) == 3 and parts[0] == _EXPERT and parts[1].isdigit() and parts[2].isdigit():
            return cls.expert(int(parts[1]), int(parts[2]))
        raise ConfigError(f"cannot parse group {text!r}; expected 'shared', 'head', 'dense' or 'expert/LAYER/EXPERT'")

    @property
    def is_expert(self) -> bool:
        return self.kind == _EXPERT

    def __str__(self) -> str:
        if self.kind == _EXPERT:
            return f"{_EXPERT}/{self.layer}/{self.expert_id}"
        return self.kind


@dataclass(frozen=True)
class ParamSlice:
    """A parameter, or one expert slot (``index`` on dim 0) of a fused 3-D expert weight."""

    name: str
    index: int | None = None


@dataclass(frozen=True)
class GroupMap:
    """Groups -> parameter slices, and parameter name -> parameter.

    ``groups`` is ordered: shared (or dense) first, then expert groups by (layer, expert).
    """

    groups: Mapping[GroupKey, tuple[ParamSlice, ...]]
    params: Mapping[str, nn.Parameter]
    _by_slice: dict[ParamSlice, GroupKey] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key, slices in self.groups.items():
            for s in slices:
                if s.name not in self.params:
                    raise ConfigError(f"group {key} names parameter {s.name!r} that is not in the map")
                if s in self._by_slice:
                    raise ConfigError(f"{s} is in two groups: {self._by_slice[s]} and {key}")
                self._by_slice[s] = key

    @property
    def keys(self) -> tuple[GroupKey, ...]:
        return tuple(self.groups)

    def group_of(self, name: str, index: int | None = None) -> GroupKey:
        """The group of parameter ``name`` (slice ``index`` for a fused expert weight)."""
        key = self._by_slice.get(ParamSlice(name, index))
        if key is None and index is not None:
            key = self._by_slice.get(ParamSlice(name, None))
        if key is None:
            raise KeyError(f"{name!r} (slice {index}) is not in the group map")
        return key

    def is_sliced(self, name: str) -> bool:
        """True when ``name`` is a fused expert weight split into per-expert slices."""
        return ParamSlice(name, None) not in self._by_slice and name in self.params

    def summary(self) -> dict[str, int]:
        """Number of scalars per group (for reports)."""
        out: dict[str, int] = {}
        for key, slices in self.groups.items():
            total = 0
            for s in slices:
                p = self.params[s.name]
                total += p[s.index].numel() if s.index is not None else p.numel()
            out[str(key)] = total
        return out


@dataclass(frozen=True)
class ExpertParams:
    """Where the experts of one MoE layer live, as the adapters describe it.

    ``fused``: names of 3-D parameters whose dim 0 is the expert slot. ``per_expert_prefixes``:
    module-name prefix of each expert's own submodule (``ModuleList``/``ModuleDict`` experts),
    indexed by expert id; every parameter under that prefix (LoRA adapters included) belongs to it.
    """

    layer: int
    num_experts: int
    fused: tuple[str, ...] = ()
    per_expert_prefixes: tuple[str, ...] = ()
    prefix: str = ""


def _expert_of(name: str, layers: Iterable[ExpertParams]) -> tuple[ExpertParams, int | None] | None:
    for info in layers:
        if name in info.fused:
            return info, None
        for e, prefix in enumerate(info.per_expert_prefixes):
            if name.startswith(prefix + "."):
                return info, e
        if info.prefix and name.startswith(info.prefix + "."):
            raise ConfigError(
                f"parameter {name!r} lives in the experts of layer {info.layer} but is neither a fused expert "
                "weight nor under one expert's module; the engine cannot assign it to an expert group"
            )
    return None


def build_group_map(
    model: nn.Module,
    expert_layers: Sequence[ExpertParams],
    *,
    trained_layers: Sequence[int],
    grouping: str,
    head_params: Iterable[str] = (),
) -> GroupMap:
    """The group map of ``model``'s trainable parameters (``requires_grad``) for ``grouping``.

    ``grouping="roles"``: shared + one group per (trained layer, expert). Trainable expert
    parameters of an untrained layer raise :class:`ConfigError`. ``grouping="dense"``: a single
    ``dense`` group over everything (``trained_layers`` is then ignored). ``head_params``
    (roles grouping only): trainable parameter names that form the ``head`` group of the shared
    stream instead of being in ``shared``.
    """
    if grouping not in ("roles", "dense"):
        raise ConfigError(f"grouping must be 'roles' or 'dense', got {grouping!r}")
    known = {info.layer: info for info in expert_layers}
    trained = tuple(int(x) for x in trained_layers)
    if grouping == "roles":
        for layer in trained:
            if layer not in known:
                raise ConfigError(
                    f"trained_layers contains {layer}, which is not an MoE layer; MoE layers are {sorted(known)}"
                )
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    head_set = frozenset(head_params)
    if head_set and grouping != "roles":
        raise ConfigError("a head group (shared split) needs the roles grouping; the dense grouping has one group")
    if grouping == "dense":
        slices = tuple(ParamSlice(name) for name in params)
        return GroupMap(groups={GroupKey.dense(): slices}, params=params)

    shared: list[ParamSlice] = []
    head: list[ParamSlice] = []
    experts: dict[GroupKey, list[ParamSlice]] = {}
    for layer in sorted(trained):
        for e in range(known[layer].num_experts):
            experts[GroupKey.expert(layer, e)] = []
    for name in params:
        hit = _expert_of(name, expert_layers)
        if hit is None:
            (head if name in head_set else shared).append(ParamSlice(name))
            continue
        info, e = hit
        if info.layer not in trained:
            raise ConfigError(
                f"expert parameter {name!r} of MoE layer {info.layer} is trainable but layer {info.layer} is not in "
                f"trained_layers={list(trained)}; freeze it with requires_grad_(False) or add the layer"
            )
        if e is None:
            for slot in range(info.num_experts):
                experts[GroupKey.expert(info.layer, slot)].append(ParamSlice(name, slot))
        else:
            experts[GroupKey.expert(info.layer, e)].append(ParamSlice(name))
    groups: dict[GroupKey, tuple[ParamSlice, ...]] = {GroupKey.shared(): tuple(shared)}
    if head_set:
        groups[GroupKey.head()] = tuple(head)
    groups.update({k: tuple(v) for k, v in experts.items()})
    return GroupMap(groups=groups, params=params)
