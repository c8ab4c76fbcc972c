"""User CSV / TSV / JSON Lines files (run_glue.py style): formats, label sets, every bad input."""

from __future__ import annotations

import json

import pytest

from raptor.data import load_glue_dir, load_user_files
from raptor.errors import DataError


def jsonl(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


# --------------------------------------------------------------------------------------------
# Formats and label sets
# --------------------------------------------------------------------------------------------


def test_csv_with_quotes_and_string_labels(write):
    train = write("train.csv", 'text,label\n"good, really",pos\nbad,neg\n"multi\nline",pos\n')
    dev = write("dev.csv", "text,label\nfine,pos\n")
    splits = load_user_files(train, dev, text_columns=["text"])
    assert splits.train.texts == ("good, really", "bad", "multi\nline")
    assert splits.train.label_names == ("neg", "pos")  # sorted
    assert splits.train.labels == (1, 0, 1)
    assert splits.validation.labels == (1,)


def test_tsv_is_quote_none(write):
    train = write("train.tsv", 'sentence\tlabel\nhe said " hi\t1\n" quoted "\t0\n')
    splits = load_user_files(train)
    assert splits.train.texts == ('he said " hi', '" quoted "')


def test_jsonl_int_labels_sorted_numerically(write):
    train = write("train.jsonl", jsonl({"sentence1": "a", "sentence2": "b", "label": 10},
                                       {"sentence1": "c", "sentence2": "d", "label": 2},
                                       {"sentence1": "e", "sentence2": "f", "label": 2}))
    splits = load_user_files(train)  # default columns: sentence1, sentence2
    assert splits.train.is_pair
    assert splits.train.label_names == ("2", "10")
    assert splits.train.labels == (1, 0, 0)
    assert splits.train.text_pairs == ("b", "d", "f")


def test_csv_integer_strings_sorted_numerically(write):
    train = write("train.csv", "sentence,label\na,10\nb,9\nc,9\n")
    assert load_user_files(train).train.label_names == ("9", "10")


def test_task_fixes_labels_and_accepts_names(write):
    train = write("train.jsonl", jsonl({"p": "a", "h": "b", "y": "entailment"}, {"p": "c", "h": "d", "y": "not_entailment"}))
    splits = load_user_files(train, text_columns=["p", "h"], label_column="y", task="rte")
    assert splits.train.labels == (0, 1)
    assert splits.train.label_names == ("entailment", "not_entailment")
    sst = write("sst.csv", "sentence,label\na,positive\nb,0\n")
    assert load_user_files(sst, task="sst2").train.labels == (1, 0)


def test_fixed_label_names(write):
    train = write("train.csv", "sentence,label\na,yes\nb,yes\n")
    splits = load_user_files(train, label_names=["no", "yes"])
    assert splits.train.labels == (1, 1)


def test_real_glue_files_through_the_user_loader(glue_dir):
    """The real RTE / MRPC / SST-2 TSVs read as user files give what the GLUE loader gives."""
    rte = load_user_files(glue_dir / "RTE" / "train.tsv", glue_dir / "RTE" / "dev.tsv",
                          text_columns=["sentence1", "sentence2"], task="rte")
    ref = load_glue_dir(glue_dir, "rte")
    assert rte.train == type(rte.train)(ref.train.texts, ref.train.labels, ref.train.label_names,
                                        ref.train.text_pairs, source=rte.train.source)
    assert rte.validation.labels == ref.validation.labels
    mrpc = load_user_files(glue_dir / "MRPC" / "dev.tsv", text_columns=["#1 String", "#2 String"],
                           label_column="Quality")
    assert mrpc.train.label_names == ("0", "1")
    assert mrpc.train.labels == load_glue_dir(glue_dir, "mrpc").validation.labels
    sst = load_user_files(glue_dir / "SST-2" / "dev.tsv")
    assert len(sst.train) == 872


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"train.csv: file not found"):
        load_user_files(tmp_path / "train.csv")


def test_missing_validation_file(tmp_path, write):
    train = write("train.csv", "sentence,label\na,0\nb,1\n")
    with pytest.raises(DataError, match=r"dev.csv: file not found"):
        load_user_files(train, tmp_path / "dev.csv")


def test_missing_text_column(write):
    train = write("train.csv", "sentence,label\na,0\nb,1\n")
    with pytest.raises(DataError, match=r"train.csv: missing text column 'review'; the header has 'sentence', 'label'"):
        load_user_files(train, text_columns=["review"])


def test_missing_label_column(write):
    train = write("train.csv", "sentence,y\na,0\nb,1\n")
    with pytest.raises(DataError, match=r"train.csv: missing label column 'label'"):
        load_user_files(train)


def test_missing_key_in_a_later_jsonl_line(write):
    train = write("train.jsonl", jsonl({"sentence": "a", "label": 0}, {"sentence": "b"}))
    with pytest.raises(DataError, match=r"train.jsonl: line 2: missing label column 'label'"):
        load_user_files(train)


def test_no_default_text_column(write):
    train = write("train.csv", "review,label\na,0\nb,1\n")
    with pytest.raises(DataError, match=r"no --text-column given.*pass --text-column NAME"):
        load_user_files(train)


def test_unknown_validation_label(write):
    train = write("train.csv", "sentence,label\na,neg\nb,pos\n")
    dev = write("dev.csv", "sentence,label\nc,pos\nd,neutral\n")
    with pytest.raises(DataError, match=r"dev.csv: line 3: class 'neutral' \(column 'label'\) is in the validation "
                                        r"file but not in the train file .*train.csv, whose classes are \['neg', 'pos'\]"):
        load_user_files(train, dev)


def test_unknown_label_for_task(write):
    train = write("train.jsonl", jsonl({"sentence": "a", "label": 0}, {"sentence": "b", "label": 3}))
    with pytest.raises(DataError, match=r"train.jsonl: line 2: unknown label '3'.*task sst2"):
        load_user_files(train, task="sst2")


def test_single_label_value(write):
    train = write("train.csv", "sentence,label\na,1\nb,1\n")
    with pytest.raises(DataError, match=r"single label value '1'"):
        load_user_files(train)


@pytest.mark.parametrize("name, content", [
    ("train.csv", ""),
    ("train.csv", "sentence,label\n"),
    ("train.tsv", "\n"),
    ("train.jsonl", "\n  \n"),
])
def test_empty_file(write, name, content):
    with pytest.raises(DataError, match=rf"{name}: file is empty"):
        load_user_files(write(name, content))


@pytest.mark.parametrize("name, line", [("train.csv", 3), ("train.jsonl", 2)])
def test_undecodable_bytes(write, name, line):
    body = b"sentence,label\nok,1\nna\xefve,0\n" if name.endswith("csv") else \
        b'{"sentence": "ok", "label": 1}\n{"sentence": "na\xefve", "label": 0}\n'
    offset = body.index(b"\xef")
    with pytest.raises(DataError, match=rf"{name}: line {line}: undecodable bytes .* at byte offset {offset}"):
        load_user_files(write(name, body))


def test_pair_task_given_one_column(write):
    train = write("train.csv", "sentence1,sentence2,label\na,b,0\n")
    with pytest.raises(DataError, match=r"task mrpc takes sentence pairs but one --text-column \('sentence1'\).*"
                                        r"--text-column sentence1 sentence2"):
        load_user_files(train, text_columns=["sentence1"], task="mrpc")


def test_single_task_given_two_columns(write):
    train = write("train.csv", "a,b,label\nx,y,0\n")
    with pytest.raises(DataError, match=r"task sst2 takes single sentences"):
        load_user_files(train, text_columns=["a", "b"], task="sst2")


def test_three_text_columns(write):
    train = write("train.csv", "a,b,c,label\nx,y,z,0\n")
    with pytest.raises(DataError, match=r"one or two column names, got 3"):
        load_user_files(train, text_columns=["a", "b", "c"])


def test_bad_json_line(write):
    train = write("train.jsonl", '{"sentence": "a", "label": 0}\n{"sentence": "b", label: 1}\n')
    with pytest.raises(DataError, match=r"train.jsonl: line 2, column 19: invalid JSON"):
        load_user_files(train)


def test_list_label_rejected(write):
    train = write("train.jsonl", jsonl({"sentence": "a", "label": [0.5]}))
    with pytest.raises(DataError, match=r"line 1: label \[0.5\] in column 'label' must be a string or a number"):
        load_user_files(train)


# --------------------------------------------------------------------------------------------
# Regression
# --------------------------------------------------------------------------------------------


def test_float_labels_infer_regression_pair_csv(write):
    train = write("train.csv", "s1,s2,score\na,b,3.8\nc,d,0.25\ne,f,5\n")
    dev = write("dev.csv", "s1,s2,score\ng,h,1.5\n")
    splits = load_user_files(train, dev, text_columns=["s1", "s2"], label_column="score")
    assert splits.task_type == "regression" and splits.train.num_labels == 1
    assert splits.train.labels == (3.8, 0.25, 5.0) and splits.validation.labels == (1.5,)
    assert splits.train.label_names == () and splits.train.text_pairs == ("b", "d", "f")
    assert splits.metric_names == ("pearson", "spearman")


def test_float_json_labels_single_text(write):
    train = write("train.jsonl", jsonl({"text": "a", "label": 0.5}, {"text": "b", "label": 2}))
    splits = load_user_files(train)
    assert splits.task_type == "regression" and splits.train.labels == (0.5, 2.0)


def test_many_integer_values_infer_regression_few_stay_classes(write):
    many = write("many.tsv", "sentence\tlabel\n" + "".join(f"s{i}\t{i}\n" for i in range(21)))
    assert load_user_files(many).task_type == "regression"
    few = write("few.tsv", "sentence\tlabel\n" + "".join(f"s{i}\t{i % 5 + 1}\n" for i in range(30)))
    splits = load_user_files(few)  # star ratings 1..5: classes
    assert splits.task_type == "classification" and splits.train.label_names == ("1", "2", "3", "4", "5")
    binary = write("binary.csv", "sentence,label\na,1.0\nb,0.0\n")  # whole floats: classes
    assert load_user_files(binary).train.label_names == ("0", "1")  # normalised: 1.0 is the class 1


def test_task_type_forces_regression_or_classification(write):
    train = write("train.csv", "sentence,label\na,1\nb,0\nc,1\n")
    assert load_user_files(train, task_type="regression").train.labels == (1.0, 0.0, 1.0)
    floats = write("floats.csv", "sentence,label\na,0.5\nb,1.5\n")
    assert load_user_files(floats, task_type="classification").train.label_names == ("0.5", "1.5")
    with pytest.raises(DataError, match="data.task_type must be one of auto, classification, regression"):
        load_user_files(train, task_type="ordinal")


def test_regression_label_not_a_number_names_file_and_line(write):
    train = write("train.csv", "sentence,label\na,0.5\nb,high\nc,2.5\n")
    with pytest.raises(DataError, match=r"train.csv: line 3: label 'high' in column 'label' is not a number"):
        load_user_files(train, task_type="regression")
    train = write("ok.csv", "sentence,label\na,0.5\nb,2.5\n")
    dev = write("dev.tsv", "sentence\tlabel\nx\t1.5\ny\t\u2013\n")
    with pytest.raises(DataError, match=r"dev.tsv: line 3: label '\u2013' in column 'label' is not a number"):
        load_user_files(train, dev)
    bad = write("inf.csv", "sentence,label\na,0.5\nb,inf\n")
    with pytest.raises(DataError, match=r"inf.csv: line 3: label 'inf' .*not finite"):
        load_user_files(bad, task_type="regression")


def test_stsb_task_on_user_files_is_regression(write):
    train = write("train.tsv", "sentence1\tsentence2\tlabel\na\tb\t4.2\nc\td\t1\n")
    splits = load_user_files(train, text_columns=["sentence1", "sentence2"], task="stsb")
    assert splits.task_type == "regression" and splits.train.labels == (4.2, 1.0)
    assert splits.metric_names == ("pearson", "spearman")
    with pytest.raises(DataError, match="--task stsb is a regression task; drop data.task_type=classification"):
        load_user_files(train, text_columns=["sentence1", "sentence2"], task="stsb", task_type="classification")


def test_task_metrics_come_with_user_files(write):
    train = write("train.tsv", "sentence1\tsentence2\tlabel\na\tb\t1\nc\td\t0\n")
    splits = load_user_files(train, text_columns=["sentence1", "sentence2"], task="mrpc")
    assert splits.metric_names == ("f1", "accuracy")


def test_non_string_text(write):
    train = write("train.jsonl", jsonl({"sentence": 3, "label": 0}))
    with pytest.raises(DataError, match=r"line 1: text column 'sentence' holds int 3; expected a string"):
        load_user_files(train)


def test_unknown_suffix(write):
    with pytest.raises(DataError, match=r"data.txt: unknown file type '.txt'"):
        load_user_files(write("data.txt", "sentence,label\na,0\n"))


def test_wrong_field_count_csv(write):
    train = write("train.csv", "sentence,label\na,0\nb,1,extra\n")
    with pytest.raises(DataError, match=r"train.csv: line 3: expected 2 comma-separated fields"):
        load_user_files(train)


# --------------------------------------------------------------------------------------------
# Input normalisation (issue 15 item 6)
# --------------------------------------------------------------------------------------------


def test_numeric_labels_are_normalised_not_split_into_classes(write):
    train = write("train.tsv", "sentence\tlabel\na\t1\nb\t1.0\nc\t0\nd\t+1\ne\t0.0\n")
    dev = write("dev.tsv", "sentence\tlabel\nx\t1.0\n")
    splits = load_user_files(train, dev)
    assert splits.train.label_names == ("0", "1") and splits.train.labels == (1, 1, 0, 1, 0)
    assert splits.validation.labels == (1,)
    js = write("t.jsonl", jsonl({"sentence": "a", "label": 1}, {"sentence": "b", "label": 1.0},
                                {"sentence": "c", "label": 0}))
    assert load_user_files(js).train.label_names == ("0", "1")


@pytest.mark.parametrize("bad", ["nan", "NaN", "inf", "-inf"])
def test_nan_and_infinite_labels_are_rejected_with_the_line(write, bad):
    train = write("train.tsv", f"sentence\tlabel\na\t1\nb\t0\nc\t{bad}\n")
    with pytest.raises(DataError, match=rf"line 4: label '{bad}' in column 'label' is not a number"):
        load_user_files(train)
    with pytest.raises(DataError, match="line 4"):
        load_user_files(train, task_type="regression")


def test_a_csv_field_over_128_kb_is_accepted(write):
    big = "word " * 60_000  # 300 KB, one valid field
    train = write("train.csv", f'sentence,label\n"{big}",1\nshort,0\n')
    splits = load_user_files(train)
    assert splits.train.texts[0] == big and splits.train.labels == (1, 0)


def test_a_directory_given_as_a_file_has_its_own_message(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t1\n")
    with pytest.raises(DataError, match=r"is a directory, not a file; give a CSV/TSV/JSONL file such as .*train\.tsv"):
        load_user_files(tmp_path)


def test_utf16_is_named(write):
    train = write("train.tsv", "sentence\tlabel\na\t1\nb\t0\n".encode("utf-16"))
    with pytest.raises(DataError, match="looks like UTF-16.*iconv -f utf-16"):
        load_user_files(train)


def test_empty_texts_get_a_warning_with_a_count(write):
    from raptor.errors import DataWarning

    train = write("train.tsv", "sentence\tlabel\na\t1\n \t0\nb\t0\n\t1\n")
    with pytest.warns(DataWarning, match=r"2 of 4 records have an empty text in column\(s\) 'sentence' \(lines 3, 5\)"):
        splits = load_user_files(train)
    assert len(splits.train) == 4
