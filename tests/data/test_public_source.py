"""Privacy rule 2: public data is only what the user declared; a user's file is never sliced by default."""

from __future__ import annotations

import pytest

from raptor.data.loaders import DataSource, load_data
from raptor.data.public_source import GLUE_PUBLIC_FRACTION, resolve_public_source
from raptor.errors import ConfigError, DataError


def _write_tsv(path, n=40, pair=False):
    head = "sentence1\tsentence2\tlabel\n" if pair else "sentence\tlabel\n"
    rows = "".join((f"a{i} film\tb{i}\t{i % 2}\n" if pair else f"a{i} film\t{i % 2}\n") for i in range(n))
    path.write_text(head + rows)
    return path


def test_a_user_file_without_a_declared_source_is_an_error_naming_the_flags():
    with pytest.raises(ConfigError) as err:
        resolve_public_source(user_data=True, needs=("the automatic layer choice (--layers auto)",))
    msg = str(err.value)
    assert "--public-file" in msg and "--public-size" in msg and "public.jsonl" in msg
    assert "the automatic layer choice" in msg and "never makes private records public" in msg


@pytest.mark.parametrize(("kwargs", "kind"), [
    (dict(public_file="p.csv"), "file"),
    (dict(public_size=20.0), "slice"),
    (dict(public_size=0.1), "slice"),
    (dict(nonprivate=True), "training-data"),
    (dict(needs=()), "none"),
])
def test_each_declared_source(kwargs, kind):
    source = resolve_public_source(user_data=True, **kwargs)
    assert source.kind == kind and source.to_dict()["kind"] == kind
    if kind == "slice":
        assert source.size == kwargs["public_size"] and isinstance(source.size, int if source.size >= 1 else float)


def test_glue_and_the_bundled_sample_follow_the_documented_convention():
    source = resolve_public_source(user_data=False)
    assert source.kind == "glue-convention" and source.size == GLUE_PUBLIC_FRACTION


@pytest.mark.parametrize("bad", [0.0, -3.0, 2.5])
def test_bad_public_size(bad):
    with pytest.raises(ConfigError, match="--public-size"):
        resolve_public_source(user_data=True, public_size=bad)


def test_file_and_size_together_are_refused():
    with pytest.raises(ConfigError, match="either --public-file or --public-size"):
        resolve_public_source(user_data=True, public_file="p.csv", public_size=10.0)


def test_user_file_is_never_sliced_by_default(tmp_path):
    train = _write_tsv(tmp_path / "train.tsv")
    with pytest.raises(ConfigError, match="--public-file"):
        load_data(DataSource(train_file=str(train)))
    data = load_data(DataSource(train_file=str(train), needs_public=()))  # a method that needs nothing public
    assert data.public_source.kind == "none" and len(data.public) == 0 and len(data.private) == 40
    data = load_data(DataSource(train_file=str(train), nonprivate=True))
    assert data.public_source.kind == "training-data" and len(data.private) == 40
    data = load_data(DataSource(train_file=str(train), public_file=str(_write_tsv(tmp_path / "pub.tsv", 10))))
    assert data.public_source.kind == "file" and len(data.private) == 40 and len(data.public) == 10
    data = load_data(DataSource(train_file=str(train), public_size=8))
    assert data.public_source.kind == "slice" and len(data.private) == 32 and len(data.public) == 8


def test_the_model_directory_public_corpus_hook(tmp_path):
    train = _write_tsv(tmp_path / "train.tsv")
    model = tmp_path / "model"
    model.mkdir()
    (model / "public.txt").write_text("first public text\n\nsecond public text\n")
    data = load_data(DataSource(train_file=str(train), model=str(model)))
    assert data.public_source.kind == "model-corpus" and not data.public_source.labelled
    assert data.public.texts == ("first public text", "second public text") and len(data.private) == 40
    _write_tsv(model / "public.tsv", 6)  # a labelled corpus is preferred to the text one
    data = load_data(DataSource(train_file=str(train), model=str(model)))
    assert data.public_source.labelled and len(data.public) == 6 and data.public_source.path.endswith("public.tsv")
    # An explicit flag wins over the model's corpus.
    assert load_data(DataSource(train_file=str(train), model=str(model), public_size=4)).public_source.kind == "slice"


def test_an_unlabelled_model_corpus_refuses_a_pair_task(tmp_path):
    train = _write_tsv(tmp_path / "train.tsv", pair=True)
    model = tmp_path / "model"
    model.mkdir()
    (model / "public.txt").write_text("some public text\n")
    with pytest.raises(DataError, match="sentence-pair"):
        load_data(DataSource(train_file=str(train), model=str(model)))


def test_glue_bundled_sample_keeps_its_convention():
    data = load_data(DataSource())
    assert data.public_source.kind == "glue-convention" and len(data.public) > 0
    assert "PCG64" in data.split.rule
