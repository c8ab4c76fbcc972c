"""The public routing cache returns exactly what the public routing computes, is keyed by every input
it depends on (a router weight, the public records, the batching) but not by the head, and never
breaks a run: a damaged entry is recomputed, an unwritable cache is skipped."""

from __future__ import annotations

import torch

from raptor.moe.models import TinySize, build_model
from raptor.training.config import PerformanceConfig, TrainConfig
from raptor.training.setup.public_stage import public_routing
from raptor.training.setup.routing_cache import cached_public_routing, routing_cache_dir, routing_key


def _model():
    size = TinySize(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, num_experts=4, top_k=1,
                    expert_intermediate=32, max_positions=32)
    return build_model("switch_transformers", num_labels=2, generator=torch.Generator().manual_seed(0), size=size)


def _public(seed=1, n=12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 50, (n, 10), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.zeros(n, dtype=torch.long)}


CONFIG = TrainConfig(performance=PerformanceConfig(eval_batch_size=5))


def _counting(model, public):
    calls = []

    def compute():
        calls.append(1)
        return public_routing(model, public, CONFIG)
    return compute, calls


def test_a_cached_routing_equals_the_computed_one_and_is_read_back(tmp_path):
    model, public = _model(), _public()
    compute, calls = _counting(model, public)
    first = cached_public_routing(model, public, CONFIG, compute, tmp_path)
    second = cached_public_routing(model, public, CONFIG, compute, tmp_path)
    assert len(calls) == 1 and len(list(tmp_path.glob("*.pt"))) == 1
    direct = public_routing(model, public, CONFIG)
    assert first.keys() == second.keys() == direct.keys()
    for layer in direct:
        assert torch.equal(first[layer], direct[layer]) and torch.equal(second[layer], direct[layer])


def test_the_key_follows_the_routing_inputs_but_not_the_head():
    model, public = _model(), _public()
    key = routing_key(model, public, batch_size=5, device="cpu", dtype="float32")
    assert routing_key(model, _public(seed=2), batch_size=5, device="cpu", dtype="float32") != key
    assert routing_key(model, public, batch_size=6, device="cpu", dtype="float32") != key
    with torch.no_grad():
        model.classifier.weight.add_(1.0)  # the head: after the routers, not an input of the routing
    assert routing_key(model, public, batch_size=5, device="cpu", dtype="float32") == key
    router = next(p for n, p in model.named_parameters() if "router" in n)
    with torch.no_grad():
        router.view(-1)[0] += 1e-3
    assert routing_key(model, public, batch_size=5, device="cpu", dtype="float32") != key


def test_a_damaged_entry_is_recomputed_and_replaced(tmp_path):
    model, public = _model(), _public()
    compute, calls = _counting(model, public)
    cached_public_routing(model, public, CONFIG, compute, tmp_path)
    (entry,) = tmp_path.glob("*.pt")
    entry.write_bytes(entry.read_bytes()[:20])  # truncated
    again = cached_public_routing(model, public, CONFIG, compute, tmp_path)
    assert len(calls) == 2
    direct = public_routing(model, public, CONFIG)
    assert all(torch.equal(again[k], direct[k]) for k in direct)
    cached_public_routing(model, public, CONFIG, compute, tmp_path)
    assert len(calls) == 2  # the replaced entry is good


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    import errno

    import raptor.training.setup.routing_cache as rc

    def read_only(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(rc.torch, "save", read_only)
    model, public = _model(), _public()
    compute, calls = _counting(model, public)
    out = cached_public_routing(model, public, CONFIG, compute, tmp_path)
    assert len(calls) == 1 and out.keys() == public_routing(model, public, CONFIG).keys()
    assert not list(tmp_path.iterdir())  # no temporary file left behind


def test_a_cache_that_is_a_file_is_skipped(tmp_path):
    model, public = _model(), _public()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    compute, calls = _counting(model, public)
    cached_public_routing(model, public, CONFIG, compute, blocker / "public_routing")
    assert len(calls) == 1 and blocker.read_text() == "not a directory"


def test_only_models_loaded_from_a_directory_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "cache"))
    assert routing_cache_dir(None) is None and routing_cache_dir("switch_transformers") is None  # new weights per run
    assert routing_cache_dir("minilm-moe") == tmp_path / "cache" / "public_routing"
    assert routing_cache_dir(str(tmp_path)) == tmp_path / "cache" / "public_routing"
