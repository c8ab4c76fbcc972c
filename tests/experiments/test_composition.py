"""Gradient composition (issue 22): the roles partition the whole gradient, the owner expert is a
slice of its layer's experts, and the head's norm matches its closed form ||h|| ||softmax - onehot||."""

from __future__ import annotations

import math

import torch

from raptor.analysis.composition import gradient_composition, parameter_roles
from raptor.moe.models import TinySize, build_model


def _records(n=6, T=8, vocab=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, vocab, (n, T), generator=g),
            "attention_mask": torch.ones(n, T, dtype=torch.long),
            "labels": torch.randint(0, 2, (n,), generator=g)}


def test_roles_partition_the_gradient_and_owner_is_a_slice():
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(1),
                        size=TinySize(num_experts=4, top_k=1), num_labels=2)
    roles = parameter_roles(model)
    assert {r for r, _ in roles.values()} == {"head", "embeddings", "attention", "routers", "experts"}
    recs = _records()
    res = gradient_composition(model, recs, clip=1e9)
    r = res["roles"]
    assert res["median_clip_factor"] == 1.0  # C huge: nothing clipped
    for L in (0, 1):
        assert r[f"owner/{L}"]["median"] <= r[f"experts/{L}"]["median"] + 1e-12
    # per record, the role squares add up to the whole: check through a one-record run
    one = gradient_composition(model, {k: v[:1] for k, v in recs.items()}, clip=1e9)
    parts = sum(v["median"] ** 2 for k, v in one["roles"].items() if not k.startswith("owner/"))
    assert math.isclose(parts, one["total"]["median"] ** 2, rel_tol=1e-6)
    assert math.isclose(one["roles"]["head"]["median_sq_share"] * one["total"]["median"] ** 2,
                        one["roles"]["head"]["median"] ** 2, rel_tol=1e-6)


def test_head_norm_has_its_closed_form():
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(2),
                        size=TinySize(num_experts=4, top_k=1), num_labels=2)
    recs = _records(n=1, seed=3)
    res = gradient_composition(model, recs, trainable=[n for n, _ in model.named_parameters()
                                                       if n.startswith("classifier")])
    # a linear head: ||dL/dW|| = ||h|| ||softmax(z) - onehot(y)|| (h the pooled vector), ||dL/db|| = ||err||
    captured = {}
    handle = model.classifier.register_forward_hook(lambda m, a, o: captured.update(h=a[0].detach()))  # returns None
    with torch.no_grad():
        logits = model(input_ids=recs["input_ids"], attention_mask=recs["attention_mask"]).logits
    handle.remove()
    h = captured["h"][0]  # the pooled vector the head reads
    err = torch.softmax(logits[0].double(), -1) - torch.nn.functional.one_hot(recs["labels"][0], 2).double()
    expected = float(err.norm() * math.sqrt(float(h.double().norm()) ** 2 + 1.0))
    assert math.isclose(res["roles"]["head"]["median"], expected, rel_tol=1e-4)
    assert res["trainable_parameters"] == 2 and not res["roles"]["attention"]["trained"]
