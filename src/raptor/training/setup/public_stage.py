"""The public stage: everything fixed before training from the PUBLIC corpus, as one frozen object.

Routing of the public records (owners per MoE layer), the layer choice
(:func:`raptor.roles.layer_choice.choose_from_owners`, ``layers="auto"``), the smoothed public owner
shares, the public denominators n_hat_g (computed by
:func:`raptor.roles.public_stats.group_denominators`, called here once), the clip norms C_g
(per-expert ones from public gradient norms under ``clip_rule``) and the report that goes into results.json (built from the same numbers).

Privacy: public corpus only; the private training records are never handed to anything here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.moe.adapters import MoELayerInfo, get_adapter
from raptor.roles import public_stats as ps
from raptor.roles.layer_choice import LayerChoice, choose_from_owners
from raptor.training.config import TrainConfig
from raptor.training.methods import MethodSpec
from raptor.training.step.release import stream_of

Records = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class PublicStage:
    """The public statistics a run uses (see the module docstring); keys of ``denominators`` and
    ``clip_norms`` are the engine's group keys."""

    owners: Mapping[int, torch.Tensor]          # {MoE layer: owner expert of each public record}
    layer_choice: LayerChoice
    trained_layers: tuple[int, ...]
    shares: Mapping[int, tuple[float, ...]]     # {trained layer: smoothed public owner shares}
    denominators: Mapping[object, float]        # {group key: n_hat_g}
    clip_norms: Mapping[object, float]          # {group key: C_g}
    public_records: int

    @property
    def report(self) -> dict:
        """The public statistics for results.json (the same numbers the plan uses)."""
        return {"layer_choice": self.layer_choice.to_dict(), "public_records": self.public_records,
                "shares": {str(k): list(v) for k, v in self.shares.items()},
                "denominators": {str(k): v for k, v in self.denominators.items() if stream_of(k) == "expert"}}


def public_needs(config: TrainConfig, spec: MethodSpec, *, trains_tokenizer: bool = False) -> tuple[str, ...]:
    """What a run computes from public data, each with the flag that avoids it (empty: nothing, and
    a DP run may go without a public corpus: :mod:`raptor.data.public_source`, kind ``none``).

    ``trains_tokenizer``: a tiny random-init family whose WordPiece is trained on the public corpus.
    """
    needs = []
    if trains_tokenizer:
        needs.append("the tokenizer of a tiny random-init model (or give a tokenizer: model.tokenizer)")
    if spec.uses_layers and config.layers == "auto":
        needs.append("the automatic layer choice (--layers auto; or give --layers, e.g. --layers 1)")
    if config.privacy.shared_split != "none":
        needs.append(f"the clip norms of the shared stream's groups (privacy.shared_split={config.privacy.shared_split}; "
                     "or none)")
    if spec.grouping == "roles" and "expert" in spec.streams:
        if config.privacy.denominator == "public":
            needs.append("the public expert denominators (privacy.denominator=public; or privacy.denominator=uniform)")
        if config.privacy.clip_rule != "uniform":
            needs.append(f"the per-expert clip norms (privacy.clip_rule={config.privacy.clip_rule}; or uniform)")
    return tuple(needs)


def check_labelled(labelled: bool, config: TrainConfig, spec: MethodSpec) -> None:
    """An unlabelled public corpus (a model's ``public.txt``) gives routing statistics but no
    public gradient norms: refuse the public per-expert clip rules with it."""
    if not labelled and config.privacy.shared_split != "none":
        raise ConfigError(f"privacy.shared_split={config.privacy.shared_split} needs labelled public records (public "
                          "gradient norms) but the public corpus is unlabelled text; use privacy.shared_split=none or give "
                          "--public-file with labels")
    if not labelled and spec.grouping == "roles" and "expert" in spec.streams and \
            config.privacy.clip_rule != "uniform":
        raise ConfigError(f"privacy.clip_rule={config.privacy.clip_rule} needs labelled public records (public gradient "
                          "norms) but the public corpus is unlabelled text; use privacy.clip_rule=uniform or give "
                          "--public-file with labels")


def batches(records: Records, size: int, device) -> list[dict[str, torch.Tensor]]:
    n = int(records["labels"].shape[0])
    return [{k: v[s:s + size].to(device) for k, v in records.items()} for s in range(0, n, size)]


def public_routing(model: nn.Module, public: Records, config: TrainConfig) -> dict[int, torch.Tensor]:
    """{MoE layer: owner_N} of every public record, natural routing, no gradients.

    Privacy: public corpus only.
    """
    from raptor.per_sample.engine import PerRecordEngine

    if int(public["labels"].shape[0]) == 0:  # no public corpus: every layer's owner list is empty
        return {info.index: torch.zeros(0, dtype=torch.long) for info in get_adapter(model).moe_layers(model)}
    saved = {n: p.requires_grad for n, p in model.named_parameters()}
    router_engine = PerRecordEngine(model, trained_layers=(), grouping="dense")
    owners = ps.concat_owners(router_engine.route(b) for b in
                              batches(public, config.performance.eval_batch_size, config.performance.device))
    for n, p in model.named_parameters():
        p.requires_grad_(saved[n])
    return owners


def choose_trained_layers(layers: Sequence[MoELayerInfo], owners: Mapping[int, torch.Tensor], config: TrainConfig,
                          spec: MethodSpec) -> tuple[tuple[int, ...], LayerChoice]:
    """(trained MoE layers, the public layer table): ``config.layers`` or the "auto" rule for
    methods that pick layers ("last": the last MoE layer; "all": every MoE layer); otherwise the
    trainable set's own layers (``TrainableSet.own_layers``: the last MoE block for last-layer,
    every MoE layer for dpsgd-full, none for the rest)."""
    num_experts = {info.index: info.num_experts for info in layers}
    if spec.uses_layers and config.layers == "auto" and config.num_auto_layers > len(layers):
        raise ConfigError(f"--layers auto:{config.num_auto_layers} (num_auto_layers): the model has only {len(layers)} "
                          f"MoE layers ({sorted(num_experts)}); give at most {len(layers)}")
    choice = choose_from_owners(owners, num_experts, count=min(config.num_auto_layers, len(layers)),
                                pseudo_count=config.privacy.pseudo_count)
    if not spec.uses_layers:
        return spec.trainable_set.trained_layers([info.index for info in layers]), choice
    if config.layers == "auto":
        return tuple(choice.chosen), choice
    if config.layers == "last":
        return (layers[-1].index,), choice
    if config.layers == "all":
        return tuple(info.index for info in layers), choice
    unknown = sorted(set(config.layers) - set(num_experts))
    if unknown:
        raise ConfigError(f"--layers {unknown} are not MoE layers; the MoE layers are {sorted(num_experts)}")
    return tuple(config.layers), choice


def public_group_norms(engine, public: Records, config: TrainConfig) -> dict:
    """{group key: unclipped per-record norms of the public records}, in one pass of the engine;
    an expert group's norms are those of the records it owns.

    Privacy: public corpus only.
    """
    keys = list(engine.group_map.keys)
    inf = {k: math.inf for k in keys}
    collected: dict = {k: [] for k in keys}
    for batch in batches(public, config.performance.micro_batch_size, config.performance.device):
        res = engine.compute(batch, inf)
        for k in keys:
            n = res.norms[k]
            collected[k].append((n[res.owners[k.layer] == k.expert_id] if k.is_expert else n).detach().double().cpu())
    return {k: torch.cat(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in collected.items()}


def public_clip_norms(norms: Mapping, config: TrainConfig) -> dict:
    """Per-expert clip norms C_e from the public norms (:func:`public_group_norms`) under the
    config's rule."""
    return ps.expert_clip_norms({k: v for k, v in norms.items() if k.is_expert}, config.privacy.clip_expert,
                                rule=config.privacy.clip_rule, quantile=config.privacy.clip_quantile)


def split_clip_norms(engine, norms: Mapping, config: TrainConfig) -> dict:
    """Clip norms of the shared stream's groups when it is split (backbone ``shared`` and ``head``):
    C_g = C_s m_g / ||m||, m_g the median public per-record norm of group g (:func:`public_group_norms`),
    so each group is clipped at its own scale (the head cannot eat the backbone's clip) and the
    stream's total sensitivity stays C_s. A group with no positive public norm gets C_s / sqrt(G).
    """
    keys = [k for k in engine.group_map.keys if stream_of(k) == "shared" and engine.group_map.groups[k]]
    medians = {}
    for k in keys:
        n = norms[k]
        n = n[torch.isfinite(n) & (n > 0)]
        medians[k] = float(n.median()) if n.numel() else 0.0
    total = math.sqrt(sum(m * m for m in medians.values()))
    c_s = float(config.privacy.clip_shared)
    if total == 0:
        return {k: c_s / math.sqrt(len(keys)) for k in keys}
    return {k: (c_s * m / total if m > 0 else c_s / math.sqrt(len(keys))) for k, m in medians.items()}


def public_stage(engine, layers: Sequence[MoELayerInfo], public: Records, config: TrainConfig, spec: MethodSpec, *,
                 owners: Mapping[int, torch.Tensor], choice: LayerChoice,
                 trained_layers: Sequence[int]) -> PublicStage:
    """The frozen public stage of a run whose engine (and trainable set) is built.

    Clip norms: infinite on the plain path (grouping None, no clipping); C_s for the shared or
    dense group (split between backbone and head by :func:`split_clip_norms` under
    ``shared_split``); for experts C (``clip_rule="uniform"``) or the public per-expert rule.
    """
    priv = config.privacy
    num_experts = {info.index: info.num_experts for info in layers}
    shares = {layer: tuple(ps.owner_shares(owners[layer], num_experts[layer], priv.pseudo_count).tolist())
              for layer in trained_layers}
    keys = list(engine.group_map.groups)
    if spec.grouping is None:
        clips: dict = {k: math.inf for k in keys}
    else:
        rule = spec.grouping == "roles" and bool(trained_layers) and priv.clip_rule != "uniform"
        split = priv.shared_split != "none"
        norms = public_group_norms(engine, public, config) if rule or split else {}  # one pass for both
        expert_clips = public_clip_norms(norms, config) if rule else None
        clips = {k: (float(priv.clip_shared) if stream_of(k) == "shared" else
                     float(priv.clip_expert if expert_clips is None else expert_clips[k])) for k in keys}
        if split:
            clips.update(split_clip_norms(engine, norms, config))
    dens = ps.group_denominators(keys, batch_size=config.batch_size, shares=shares, kind=priv.denominator)
    return PublicStage(owners=dict(owners), layer_choice=choice, trained_layers=tuple(trained_layers),
                       shares=shares, denominators=dens, clip_norms=clips,
                       public_records=int(public["labels"].shape[0]))
