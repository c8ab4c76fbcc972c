"""Property test of ``raptor.fine_tune``'s records and arguments (issue 35): drawn record lists,
label types and options either train, with a label map that round-trips to the labels given, or
raise a raptor error (:class:`~raptor.errors.RaptorError`); never any other exception. Tiny
models, one step, few examples: this stays within seconds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import raptor
from raptor.data.user_files import canonical_label
from raptor.errors import RaptorError

WORDS = ["good", "bad", "great", "awful", "fine", "poor"]
LABELS = {
    "ints 0/1": [0, 1],
    "ints 0..2": [0, 1, 2],
    "ints 1/2": [1, 2],
    "strings": ["neg", "pos"],
    "three strings": ["a", "b", "c"],
    "whole floats": [0.0, 1.0],
    "ints and floats": [0, 1, 0.0, 1.0],
    "scores": [0.1, 0.7, 1.3, 2.9, 3.3, 4.8],
    "ints and a string": [1, 2, "x"],
    "floats and a NaN": [0.0, 1.0, math.nan],
    "booleans": [True, False],
    "ints and a negative": [0, 1, -1],
}


@pytest.fixture(scope="module")
def tok():
    from raptor.data import train_wordpiece

    return train_wordpiece([f"{a} film {b}" for a in WORDS for b in WORDS], vocab_size=40)


def _records(kind: str, n: int, offset: int) -> list[dict]:
    pool = LABELS[kind]
    return [{"sentence": f"{WORDS[(i + offset) % 6]} film {WORDS[(i * 5) % 6]}", "label": pool[i % len(pool)]}
            for i in range(n)]


def _name(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return canonical_label(value) if isinstance(value, str) else str(value)


OPTIONS = st.fixed_dictionaries({
    "kind": st.sampled_from(sorted(LABELS)),
    "validation_kind": st.sampled_from([None, "same", "strings", "ints 0/1"]),
    "n": st.integers(min_value=1, max_value=24),
    "num_labels": st.sampled_from([1, 2, 3]),
    "text_columns": st.sampled_from([None, "sentence", ["sentence"], ["sentence", "label"], ["missing"]]),
    "task_type": st.sampled_from(["auto", "classification", "regression"]),
    "max_length": st.sampled_from([8, 16, 300, 100_000]),
    "metrics": st.sampled_from([None, ["accuracy"], ["f1"], ["pearson"], "matthews_correlation"]),
    "public": st.sampled_from(["records", "size", "none"]),
})


def _example(**kw):
    return example(options={"kind": "ints 0/1", "validation_kind": None, "n": 20, "num_labels": 3,
                            "text_columns": None, "task_type": "auto", "max_length": 8, "metrics": None,
                            "public": "records", **kw})


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(options=OPTIONS)
@_example(kind="ints and floats")  # before: int 1 trained as class '0.0'
@_example(kind="ints and a string")  # before: label-1 records trained as '2'
@_example(kind="strings", validation_kind="ints 0/1", num_labels=2)
def test_fine_tune_trains_with_a_round_tripping_label_map_or_raises_a_raptor_error(options, tok, tmp_path_factory):
    from raptor.moe.models import TinySize, build_model

    o = options
    train = _records(o["kind"], o["n"], 0)
    vkind = o["kind"] if o["validation_kind"] == "same" else o["validation_kind"]
    validation = _records(vkind, 8, 3) if vkind else None
    model = build_model("olmoe", generator=torch.Generator().manual_seed(0), num_labels=o["num_labels"],
                        size=TinySize(vocab_size=len(tok), hidden_size=16))
    out = tmp_path_factory.mktemp("run")
    config = raptor.tiny_recipe("dpsgd", steps=1, output_dir=str(out), max_length=o["max_length"])
    config = replace(config, privacy=replace(config.privacy, noise_multipliers=(1.0, 1.0)))  # no calibration: fast
    public = {"records": {"public": _records(o["kind"], 6, 1)}, "size": {"public_size": 4}, "none": {}}[o["public"]]
    try:
        result = raptor.fine_tune(model, tok, train, validation, config, text_columns=o["text_columns"],
                                  task_type=o["task_type"], metrics=o["metrics"], progress=False, **public)
    except RaptorError:
        return  # a refusal that says what to do (the message is checked by the sweep tests)
    results = result.results
    assert results["steps"] == 1
    if results["data"]["task_type"] == "regression":
        assert results["labels"] == []
        return
    names = [e["label"] for e in results["labels"]]
    assert [e["id"] for e in results["labels"]] == list(range(len(names)))
    assert results["label_map"] == {str(i): n for i, n in enumerate(names)}
    if o["public"] != "size":  # every private record is a training record, in order: its id names its label
        ids = result.trainer.train["labels"].tolist()
        assert [names[i] for i in ids] == [_name(r["label"]) for r in train]
    given = {_name(r["label"]) for r in train}
    assert given <= set(names)  # every training label is a class of the map, under its own name
    if all(isinstance(r["label"], str) for r in train):
        assert set(names) == given  # string labels: exactly the classes given
    assert len(names) <= o["num_labels"]  # a head with fewer outputs is refused
