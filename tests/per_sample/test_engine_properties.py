"""Properties of the engine: owner masking, independence, empty/zero-length/non-finite records,
aux-loss policy, unsupported parameters, multi-use parameters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from per_sample_helpers import batch_for, tiny
from torch import nn

from raptor.audit.engine_check import clip_norms_between
from raptor.errors import ConfigError, UnsupportedModelError
from raptor.moe.models import FAMILIES
from raptor.per_sample.engine import PerRecordEngine
from raptor.per_sample.reference import reference_compute
from raptor.roles.groups import GroupKey


def _max_rel(a, b):
    scale = b.abs().max()
    return float((a - b).abs().max() / scale) if float(scale) > 0 else float((a - b).abs().max())


@pytest.mark.parametrize("family", ["switch_transformers", "olmoe", "qwen2_moe", "deepseek_v3"])
def test_record_gradient_lands_only_in_owner_group(family, inf_clip):
    model = tiny(family)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=6)
    res = engine.compute(batch, inf_clip(engine))
    owner_B = res.owners[1]
    num_experts = sum(1 for k in engine.group_keys if k.is_expert)
    for e in range(num_experts):
        norms = res.norms[GroupKey.expert(1, e)]
        assert torch.all(norms[owner_B != e] == 0)
    # unowned experts get an exactly-zero sum
    owned = set(owner_B.tolist())
    for name, p in engine.group_map.params.items():
        if p.ndim == 3:
            for e in range(p.shape[0]):
                if e not in owned:
                    assert torch.all(res.clipped_sums[name][e] == 0)
    # Switch pools every token, so a record with tokens always reaches its owner; in the causal
    # families only the last token reaches the loss from the last layer, so the owner may get 0.
    for r in range(6 if family == "switch_transformers" else 0):
        if int(batch["attention_mask"][r].sum()) > 0:
            assert res.norms[GroupKey.expert(1, int(owner_B[r]))][r] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_per_record_independence(family, inf_clip):
    """Record 0's norms, owner and gradient do not change when the other records change."""
    model = tiny(family)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    a = batch_for(model, batch_size=4, seed=1)
    b = batch_for(model, batch_size=4, seed=2)
    for key in ("input_ids", "attention_mask", "labels"):
        b[key][0] = a[key][0]
    ra, rb = engine.compute(a, inf_clip(engine)), engine.compute(b, inf_clip(engine))
    for k in engine.group_keys:
        torch.testing.assert_close(ra.norms[k][0], rb.norms[k][0], rtol=1e-6, atol=1e-12)
    for layer in ra.owners:
        assert int(ra.owners[layer][0]) == int(rb.owners[layer][0])
    # additivity: the batch sum equals the sum of one-record engine calls
    singles = [engine.compute({k: v[r:r + 1] for k, v in a.items()}, inf_clip(engine)) for r in range(4)]
    for name in ra.clipped_sums:
        total = sum(s.clipped_sums[name] for s in singles)
        assert _max_rel(ra.clipped_sums[name], total) < 1e-6  # DeepSeek routers compute in float32


def test_empty_batch(inf_clip):
    model = tiny("olmoe")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = {"input_ids": torch.zeros(0, 8, dtype=torch.long), "attention_mask": torch.zeros(0, 8, dtype=torch.long),
             "labels": torch.zeros(0, dtype=torch.long)}
    res = engine.compute(batch, inf_clip(engine))
    assert res.num_nonfinite == 0 and res.loss_B.shape == (0,)
    assert set(res.clipped_sums) == set(engine.group_map.params)
    assert all(float(v.abs().sum()) == 0 for v in res.clipped_sums.values())
    assert all(v.shape == (0,) for v in res.norms.values())


@pytest.mark.parametrize("family", ["switch_transformers", "mixtral"])
def test_zero_length_record_alone(family, inf_clip):
    model = tiny(family)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = {"input_ids": torch.zeros(1, 6, dtype=torch.long), "attention_mask": torch.zeros(1, 6, dtype=torch.long),
             "labels": torch.zeros(1, dtype=torch.long)}
    res = engine.compute(batch, inf_clip(engine))
    assert res.owners[1].tolist() == [0]
    ref = reference_compute(model, batch, inf_clip(engine), [1], "roles")
    for k in engine.group_keys:
        torch.testing.assert_close(res.norms[k], ref.norms[k], rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_nonfinite_record_is_zeroed_and_counted(family, inf_clip):
    model = tiny(family)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=4)
    bad = 2

    def poison(module, args, output):
        output = output.clone()
        output[bad] = float("nan")
        return output

    first_block = model.get_submodule(engine.layers[0].name)
    handle = first_block.register_forward_hook(poison)
    try:
        clean = {k: torch.cat([v[:bad], v[bad + 1:]]) for k, v in batch.items()}
        clip = clip_norms_between(engine.compute(clean, inf_clip(engine)))
        res = engine.compute(batch, clip)
    finally:
        handle.remove()
    assert res.num_nonfinite == 1 and bool(res.nonfinite_B[bad])
    ref = reference_compute(model, clean, clip, [1], "roles")
    for name, value in res.clipped_sums.items():
        assert bool(torch.isfinite(value).all()), name
        assert _max_rel(value, ref.clipped_sums[name]) < 1e-6, name  # DeepSeek routers run in float32
    for k in engine.group_keys:
        assert float(res.clip_factors[k][bad]) == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_every_record_nonfinite_gives_zero_sums(family, inf_clip):
    """A micro-batch whose records are ALL non-finite (e.g. after lr >= 1e3) is zeroed and counted,
    never a crash (it used to raise 'cannot reshape tensor of 0 elements')."""
    model = tiny(family)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=3)

    def poison(module, args, output):
        return torch.full_like(output, float("nan"))

    handle = model.get_submodule(engine.layers[0].name).register_forward_hook(poison)
    try:
        res = engine.compute(batch, {k: 1.0 for k in engine.group_keys})
    finally:
        handle.remove()
    assert res.num_nonfinite == 3 and bool(res.nonfinite_B.all())
    for name, value in res.clipped_sums.items():
        assert value.shape == engine.group_map.params[name].shape, name
        assert bool((value == 0).all()), name


@pytest.mark.parametrize("family", FAMILIES)
def test_aux_policy_is_what_runs(family):
    """Aux losses off, no router logits, and the engine's loss is plain per-record cross-entropy."""
    model = tiny(family)
    model.config.router_aux_loss_coef = 0.5  # the adapter must switch it off
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    policy = engine.adapter.aux_policy(model)
    assert policy.get("router_aux_loss_coef", 0.0) == 0.0
    assert policy.get("output_router_logits", False) is False
    assert policy.get("router_jitter_noise", 0.0) in (0.0, None)
    batch = batch_for(model, batch_size=3)
    model.config._experts_implementation_internal = "eager"  # float64 plain forward
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert getattr(out, "aux_loss", None) is None
    expected = F.cross_entropy(out.logits, batch["labels"], reduction="none")
    res = engine.compute(batch, {k: 1.0 for k in engine.group_keys})
    torch.testing.assert_close(res.loss_B, expected.detach(), rtol=1e-10, atol=1e-12)


def test_unsupported_parameter_is_named():
    model = tiny("olmoe")
    model.model.norm.extra = nn.Parameter(torch.zeros(model.config.hidden_size, dtype=torch.float64))
    model.model.norm.register_forward_hook(lambda m, a, o: o + torch.sin(m.extra))  # sin: no per-record rule
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    with pytest.raises(UnsupportedModelError, match="model.norm.extra"):
        engine.compute(batch_for(model), {k: 1.0 for k in engine.group_keys})


def test_untrained_expert_parameters_must_be_frozen():
    model = tiny("mixtral", trained=(0, 1))
    with pytest.raises(ConfigError, match="layers.0.mlp.experts"):
        PerRecordEngine(model, trained_layers=[1], grouping="roles")


def test_missing_clip_norm_is_an_error():
    model = tiny("qwen3_moe")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    with pytest.raises(ConfigError, match="expert/1/0"):
        engine.compute(batch_for(model), {GroupKey.shared(): 1.0})


class _TwiceHead(nn.Module):
    """Applies the same Linear twice: a multi-use parameter (ghost norms are not additive)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, x):
        return self.linear(x) + self.linear(x * 0.5 + 1.0)


@pytest.mark.parametrize("grouping", ["roles", "dense"])
def test_multi_use_parameter_matches_reference(grouping, inf_clip):
    model = tiny("olmoe")
    model.score = _TwiceHead(model.score)
    engine = PerRecordEngine(model, trained_layers=[1], grouping=grouping)
    batch = batch_for(model, batch_size=4)
    clip = clip_norms_between(engine.compute(batch, inf_clip(engine)))
    res = engine.compute(batch, clip)
    ref = reference_compute(model, batch, clip, [1], grouping)
    for k in engine.group_keys:
        torch.testing.assert_close(res.norms[k], ref.norms[k], rtol=1e-8, atol=1e-12)
    for name in ref.clipped_sums:
        assert _max_rel(res.clipped_sums[name], ref.clipped_sums[name]) < 1e-8


def test_route_matches_compute_owners(inf_clip):
    model = tiny("deepseek_v2")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model)
    routed = engine.route(batch)
    res = engine.compute(batch, inf_clip(engine))
    for layer, owner in res.owners.items():
        assert torch.equal(routed[layer], owner)


def test_engine_leaves_grad_and_implementation_untouched(inf_clip):
    model = tiny("qwen2_moe")
    before = model.config._experts_implementation
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    engine.compute(batch_for(model), inf_clip(engine))
    assert all(p.grad is None for p in model.parameters())
    assert model.config._experts_implementation == before


def test_switch_with_tokens_dropped_by_capacity_matches_reference(inf_clip):
    """Switch capacity is per sequence: with capacity 2 (< T) tokens are dropped, records stay independent."""
    from raptor.audit.engine_check import compare, freeze_untrained_experts, to_float64
    from raptor.moe.models import build_model

    model = to_float64(build_model("switch_transformers", expert_capacity=2,
                                   generator=torch.Generator().manual_seed(4)))
    freeze_untrained_experts(model, [1])
    report = compare(model, batch_for(model, batch_size=4, seq_len=8), trained_layers=[1], grouping="roles")
    assert report.passed, report


def test_peft_lora_on_fused_expert_parameters_is_refused_loudly():
    """LoRA on fused 3-D expert weights (PEFT target_parameters) is not supported yet: it must raise."""
    from raptor.moe.peft_lora import peft_lora

    model = tiny("olmoe", trained=(0, 1))
    peft_model = peft_lora(model, r=2, lora_alpha=4, target_parameters=["mlp.experts.gate_up_proj"])
    with pytest.raises(UnsupportedModelError, match="target_parameters"):
        PerRecordEngine(peft_model, trained_layers=[0, 1], grouping="roles")
    with pytest.raises(UnsupportedModelError, match="target_parameters"):
        PerRecordEngine(peft_model, grouping="dense")


class _TiedHead(nn.Module):
    """Logits from the input-embedding matrix (a tied LM head), first K vocabulary rows as labels."""

    def __init__(self, embedding: nn.Embedding, num_labels: int):
        super().__init__()
        self.embedding = embedding
        self.num_labels = num_labels

    def forward(self, x):
        return F.linear(x, self.embedding.weight)[..., : self.num_labels]


def test_tied_embedding_matches_reference(inf_clip):
    model = tiny("qwen3_moe")
    model.score = _TiedHead(model.get_input_embeddings(), 2)
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=4)
    clip = clip_norms_between(engine.compute(batch, inf_clip(engine)))
    res = engine.compute(batch, clip)
    ref = reference_compute(model, batch, clip, [1], "roles")
    for k in engine.group_keys:
        torch.testing.assert_close(res.norms[k], ref.norms[k], rtol=1e-8, atol=1e-12)
    name = "model.embed_tokens.weight"
    assert _max_rel(res.clipped_sums[name], ref.clipped_sums[name]) < 1e-8


def test_compute_under_no_grad_gives_the_same_result_as_outside(inf_clip):
    """Once returned all-zero norms and sums in silence: the engine now runs its own autograd pass."""
    model = tiny("switch_transformers")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=4)
    clip = {k: 0.5 for k in engine.group_keys}
    want = engine.compute(batch, clip)
    with torch.no_grad():
        got = engine.compute(batch, clip)
        assert not torch.is_grad_enabled()  # the caller's mode is restored on return
    assert float(want.norms[GroupKey.shared()].min()) > 0
    for k in engine.group_keys:
        torch.testing.assert_close(got.norms[k], want.norms[k], rtol=0, atol=0)
    for name in want.clipped_sums:
        torch.testing.assert_close(got.clipped_sums[name], want.clipped_sums[name], rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())
    assert not any(t.requires_grad for t in [*got.norms.values(), *got.clipped_sums.values(), got.loss_B])


def test_compute_under_inference_mode_is_a_clear_error(inf_clip):
    model = tiny("olmoe")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles")
    batch = batch_for(model, batch_size=2)
    with torch.inference_mode(), pytest.raises(ConfigError, match="inference_mode"):
        engine.compute(batch, inf_clip(engine))


def test_a_loss_that_reaches_no_trainable_parameter_is_an_error_not_zeros(inf_clip):
    model = tiny("olmoe")
    engine = PerRecordEngine(model, trained_layers=[1], grouping="roles",
                             loss_fn=lambda logits, labels: F.cross_entropy(logits.detach().float(), labels,
                                                                           reduction="none"))
    with pytest.raises(UnsupportedModelError, match="does not depend on the"):
        engine.compute(batch_for(model, batch_size=2), inf_clip(engine))
