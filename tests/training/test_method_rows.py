"""A new baseline is one row in the method table and one in the trainable-set table: a throwaway
method added to both tables (and nowhere else) trains through ``raptor.fine_tune``."""

from __future__ import annotations

import pytest
import torch

import raptor
from raptor.data import train_wordpiece
from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.moe.models import TinySize, build_model
from raptor.training import methods
from raptor.training.methods import METHOD_SPECS, TRAINABLE_SETS, MethodSpec, TrainableSet

WORDS = ["good", "bad", "great", "awful", "fine", "poor"]
ROWS = [{"sentence": f"the {WORDS[i % 6]} plot", "label": i % 2} for i in range(60)]


def _head_and_last_experts(name, roles):
    """The output head and the experts of the last MoE layer (nothing else)."""
    return roles.in_head(name) or name in roles.last_experts


@pytest.fixture
def throwaway_rows(monkeypatch):
    monkeypatch.setitem(TRAINABLE_SETS, "head-and-last-experts",
                        TrainableSet(_head_and_last_experts, own_layers="last", lora="never"))
    monkeypatch.setitem(METHOD_SPECS, "head-probe",
                        MethodSpec("head-and-last-experts", "dense", ("shared",), uses_layers=False))


def _model_and_tokenizer():
    tok = train_wordpiece([f"the {w} plot movie" for w in WORDS], vocab_size=60)
    model = build_model("switch_transformers", generator=torch.Generator().manual_seed(0),
                        size=TinySize(vocab_size=len(tok), hidden_size=16, num_experts=4, top_k=1))
    return model, tok


def test_a_method_added_to_the_tables_trains_through_fine_tune(throwaway_rows, tmp_path):
    model, tok = _model_and_tokenizer()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = raptor.tiny_recipe("head-probe", steps=2, output_dir=str(tmp_path / "run"))
    out = raptor.fine_tune(model, tok, ROWS[:40], ROWS[40:], config, public=ROWS[40:], progress=False)

    infos = get_adapter(out.model).moe_layers(out.model)
    assert out.trainer.plan.trained_layers == (infos[-1].index,)  # the set's own layer: the last
    expert_prefix = f"{infos[-1].name}.{infos[-1].experts_attr}."
    changed = {n for n, p in out.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed, "the run updated nothing"
    assert all(n.startswith(("classifier", expert_prefix)) for n in changed), sorted(changed)
    assert any(n.startswith(expert_prefix) for n in changed)
    assert out.results["steps"] == 2 and 0 < out.results["epsilon"] <= 8.0
    assert len(out.trainer.ledger) == 2  # every update recorded, one stream at one sigma
    assert set(out.trainer.plan.noise.sigmas) == {"shared"}
    assert out.results["method_spec"]["trainable"] == "head-and-last-experts"

    with pytest.raises(ConfigError, match="does not apply to head-probe"):  # its set: lora="never"
        model, tok = _model_and_tokenizer()
        raptor.fine_tune(model, tok, ROWS[:40], ROWS[40:], raptor.tiny_recipe("head-probe", lora=True,
                         output_dir=str(tmp_path / "lora")), public=ROWS[40:], progress=False)


def test_the_spec_answers_for_the_method_names():
    specs = METHOD_SPECS
    assert [m for m, s in specs.items() if not s.private] == ["nonprivate"]
    assert [m for m, s in specs.items() if s.lora_rule == "always"] == ["dp-lora"]
    assert [m for m, s in specs.items() if s.lora_rule == "never"] == ["last-layer"]
    assert [m for m, s in specs.items() if s.alternates] == ["raptor"]
    assert {s.trainable for s in specs.values() if s.lora_rule == "optional"} == {"roles", "shared", "experts", "all"}
    assert not specs["last-layer"].uses_lora(True) and specs["dp-lora"].uses_lora(False)
    assert specs["raptor"].uses_lora(True) and not specs["raptor"].uses_lora(False)


def test_a_trainable_set_row_is_checked():
    with pytest.raises(ConfigError, match="LoRA only"):
        TrainableSet(None)
    with pytest.raises(ConfigError, match="adapts nothing"):
        TrainableSet(methods._shared_rule, lora="never", lora_shared=True)
    with pytest.raises(ConfigError, match="adapts something"):
        TrainableSet(methods._shared_rule)
    with pytest.raises(ConfigError, match="MethodSpec.trainable"):
        MethodSpec("no-such-set", "dense", ("shared",), False)
