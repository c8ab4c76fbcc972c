"""The generative objective: answer-only loss, metrics, greedy decoding, engine vs one-record loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from raptor.audit.engine_check import compare, freeze_untrained_experts, to_float64
from raptor.data.qa import IGNORE_INDEX, GenerationEval, QAData, encode_qa, qa_generation_eval, read_qa_jsonl
from raptor.errors import DataError
from raptor.moe.causal import build_causal_lm
from raptor.training.generate import (
    answer_loss_per_record,
    evaluate_generation,
    exact_match,
    greedy_generate,
    normalize_answer,
    token_f1,
)


def test_answer_loss_is_mean_over_answer_tokens_per_record():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=g, dtype=torch.float64)
    labels = torch.full((3, 6), IGNORE_INDEX)
    labels[0, 3:5] = torch.tensor([4, 7])
    labels[1, 1:6] = torch.tensor([1, 2, 3, 4, 5])
    # record 2 has no answer token: loss 0
    got = answer_loss_per_record(logits, labels)
    want0 = (F.cross_entropy(logits[0, 2], torch.tensor(4), reduction="sum")
             + F.cross_entropy(logits[0, 3], torch.tensor(7), reduction="sum")) / 2
    want1 = sum(F.cross_entropy(logits[1, t - 1], labels[1, t]) for t in range(1, 6)) / 5
    assert torch.allclose(got, torch.stack([want0, want1, torch.zeros((), dtype=torch.float64)]))


def test_metrics_normalise_case_whitespace_punctuation():
    assert normalize_answer("  The  Red!  ") == "the red"
    assert exact_match("Red.", "red") == 1.0
    assert exact_match("dark red", "red") == 0.0
    assert token_f1("dark red", "red") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


class _Tok:
    """A stand-in tokenizer: ids are characters' code points (decode joins them)."""

    bos_token_id, eos_token_id, pad_token_id, cls_token_id, sep_token_id = 1, 2, 0, None, None

    def encode(self, text, add_special_tokens=False):
        return [3 + (ord(c) % 60) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def test_encode_qa_labels_only_answer_and_eos(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"q": "ab", "a": "c"}\n{"q": "abcdefghij", "a": "de"}\n')
    data = read_qa_jsonl(path, prompt_field="q", answer_field="a")
    rec = encode_qa(_Tok(), data, max_length=8)
    assert rec["input_ids"].shape == (2, 8)
    # record 0: [bos] a b ' ' c [eos] pad pad
    assert rec["labels"][0].tolist() == [IGNORE_INDEX] * 3 + [3 + ord(" ") % 60, 3 + ord("c") % 60, 2] \
        + [IGNORE_INDEX] * 2
    assert rec["attention_mask"][0].tolist() == [1] * 6 + [0, 0]
    # record 1 is cut from the left of its prompt; the answer stays whole
    assert rec["input_ids"][1, 0] == 1 and rec["labels"][1, -4:].tolist() == [3 + ord(c) % 60 for c in " de"] + [2]


def test_read_qa_jsonl_names_the_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"prompt": "x", "answer": "y"}\n{"prompt": "x"}\n')
    with pytest.raises(DataError, match="line 2.*'answer'"):
        read_qa_jsonl(path)


@pytest.mark.parametrize("family", ["olmoe", "qwen2_moe"])
@pytest.mark.parametrize("grouping", ["roles", "dense"])
def test_engine_matches_one_record_loop_on_generative_loss(family, grouping):
    model = to_float64(build_causal_lm(family, generator=torch.Generator().manual_seed(0)))
    freeze_untrained_experts(model, [1])
    g = torch.Generator().manual_seed(3)
    B, T = 5, 9
    ids = torch.randint(3, model.config.vocab_size, (B, T), generator=g)
    lengths = torch.tensor([9, 0, 6, 4, 8])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids = ids * mask
    labels = torch.full((B, T), IGNORE_INDEX)
    for r, n in enumerate(lengths.tolist()):
        if n >= 3:
            labels[r, n - 2:n] = ids[r, n - 2:n]
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    report = compare(model, batch, trained_layers=[1] if grouping == "roles" else [], grouping=grouping,
                     loss_fn=answer_loss_per_record, tolerance=1e-6)
    assert report.passed, report
    assert report.clipped_groups > 0


def test_greedy_generation_and_evaluation_on_a_tiny_lm():
    model = build_causal_lm("olmoe", generator=torch.Generator().manual_seed(0))
    prompt = {"input_ids": torch.tensor([[1, 5, 6, 7]])}
    out = greedy_generate(model, prompt, max_new_tokens=4, eos_id=2)
    # the loop's first token is the argmax of the plain forward
    first = int(model(input_ids=prompt["input_ids"]).logits[0, -1].argmax())
    assert len(out) <= 4 and (not out or out[0] == first)
    tok = _Tok()
    data = QAData(("ab",), ("zz",))
    ev = qa_generation_eval(tok, data, max_length=16, max_new_tokens=3)
    assert isinstance(ev, GenerationEval)
    res = evaluate_generation(model, ev, tok)
    assert set(res) >= {"exact_match", "token_f1", "records"} and res["records"] == 1
