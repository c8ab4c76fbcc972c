"""One reader of a declared public corpus file (raptor.data.model_corpus.read_public_corpus) behind both
`raptor train` (load_data) and `raptor demo` (model_public_corpus): the same records from the same file,
placeholder labels that nothing reads, and an unlabelled corpus marked as such (clip rules refuse it)."""

from __future__ import annotations

import pytest

from raptor.data import ClassificationData
from raptor.data import model_corpus as mc
from raptor.data.loaders import DataSource, load_data
from raptor.errors import ConfigError, DataError

SINGLE = ClassificationData(("a", "b", "c"), (0, 1, 1), ("negative", "positive"))


def _model_dir(tmp_path, text="first public text\n\nsecond public text\nthird one\n"):
    model = tmp_path / "model"
    model.mkdir()
    (model / "public.txt").write_text(text)
    return model


def _train_tsv(tmp_path, pair=False):
    path = tmp_path / "train.tsv"
    head = "sentence1\tsentence2\tlabel\n" if pair else "sentence\tlabel\n"
    names = SINGLE.label_names
    path.write_text(head + "".join((f"a{i}\tb{i}\t{names[i % 2]}\n" if pair else f"a{i} film\t{names[i % 2]}\n")
                                   for i in range(20)))
    return path


def test_train_and_demo_read_the_same_records_through_the_one_reader(tmp_path, monkeypatch):
    model = _model_dir(tmp_path)
    calls = []
    real = mc.read_public_corpus

    def spy(path, like, **kwargs):
        calls.append(str(path))
        return real(path, like, **kwargs)

    monkeypatch.setattr(mc, "read_public_corpus", spy)
    train = load_data(DataSource(train_file=str(_train_tsv(tmp_path)), model=str(model))).public
    demo, source = mc.model_public_corpus(str(model), SINGLE)
    assert calls == [str(model / "public.txt")] * 2
    assert train.texts == demo.texts == ("first public text", "second public text", "third one")
    assert train.labels == demo.labels == (mc.PLACEHOLDER_LABEL,) * 3
    assert train.label_names == demo.label_names == SINGLE.label_names
    assert source.kind == "model-corpus" and not source.labelled and source.path == str(model / "public.txt")


def test_placeholder_labels_are_constants_for_classification_and_regression(tmp_path):
    path = _model_dir(tmp_path) / "public.txt"
    data = mc.read_public_corpus(path, SINGLE)
    assert data.labels == (0, 0, 0) and data.label_names == SINGLE.label_names and not data.is_pair
    scores = ClassificationData(("a",), (0.5,), (), task_type="regression")
    reg = mc.read_public_corpus(path, scores)
    assert reg.is_regression and reg.labels == (0.0, 0.0, 0.0)


def test_an_unlabelled_corpus_refuses_a_pair_task_for_both_callers(tmp_path):
    model = _model_dir(tmp_path)
    pair = ClassificationData(("a",), (0,), ("no", "yes"), text_pairs=("b",))
    with pytest.raises(DataError, match="sentence-pair"):
        mc.model_public_corpus(str(model), pair)
    with pytest.raises(DataError, match="sentence-pair"):
        load_data(DataSource(train_file=str(_train_tsv(tmp_path, pair=True)), model=str(model)))


def test_a_labelled_model_corpus_keeps_its_labels_for_both_callers(tmp_path):
    model = _model_dir(tmp_path)
    (model / "public.tsv").write_text("sentence\tlabel\nx good\tpositive\ny bad\tnegative\n")
    data, source = mc.model_public_corpus(str(model), SINGLE)
    assert data.labels == (1, 0) and source.labelled
    train = load_data(DataSource(train_file=str(_train_tsv(tmp_path)), model=str(model))).public
    assert train.labels == (1, 0) and train.texts == data.texts


def test_the_demos_model_corpus_refuses_the_public_clip_rules(tmp_path):
    """The demo passes the corpus's PublicSource to fine_tune: a clip rule on public gradient norms
    would read the placeholder labels, so it is refused, as in `raptor train`."""
    from raptor.training.config import PrivacyConfig, TrainConfig
    from raptor.training.methods import METHOD_SPECS
    from raptor.training.setup.public_stage import check_labelled

    _, source = mc.model_public_corpus(str(_model_dir(tmp_path)), SINGLE)
    config = TrainConfig(method="raptor", privacy=PrivacyConfig(clip_rule="median-ratio"))
    with pytest.raises(ConfigError, match="needs labelled public records"):
        check_labelled(source.labelled, config, METHOD_SPECS["raptor"])
    check_labelled(source.labelled, TrainConfig(method="raptor"), METHOD_SPECS["raptor"])  # uniform: fine
