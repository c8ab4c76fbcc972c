"""Local GLUE directory loader: the real files, header quirks, and every bad-input case."""

from __future__ import annotations

import gzip

import pytest

from raptor.data import load_glue_dir, read_glue_tsv
from raptor.data.glue_local import task_dir
from raptor.errors import DataError

# --------------------------------------------------------------------------------------------
# The real files in ../shared/data/glue
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task, n_train, n_dev",
    [
        ("sst2", 67_349, 872),
        # GLUE paper / hub: 3,668. The copy checked here has 3,667 data rows (3,668 lines with the header).
        ("mrpc", 3_667, 408),
        ("rte", 2_490, 277),
        ("stsb", 5_749, 1_500),
        ("wnli", 635, 71),
    ],
)
def test_real_row_counts(glue_dir, task, n_train, n_dev):
    splits = load_glue_dir(glue_dir, task)
    assert (len(splits.train), len(splits.validation)) == (n_train, n_dev)


def test_real_stsb_float_scores(glue_dir):
    splits = load_glue_dir(glue_dir, "stsb")
    assert splits.task_type == "regression" and splits.metric_names == ("pearson", "spearman")
    assert splits.train.texts[0] == "A plane is taking off."
    assert splits.train.text_pairs[0] == "An air plane is taking off."
    assert splits.train.labels[:2] == (5.0, 3.8)
    assert all(0.0 <= y <= 5.0 for y in splits.train.labels + splits.validation.labels)
    assert splits.train.num_labels == 1 and splits.train.label_names == ()


def test_real_wnli_and_metrics_of_real_tasks(glue_dir):
    wnli = load_glue_dir(glue_dir, "wnli")
    assert wnli.train.texts[0].startswith("I stuck a pin through a carrot.") and wnli.train.labels[0] == 1
    assert load_glue_dir(glue_dir, "mrpc").metric_names == ("f1", "accuracy")
    assert set(wnli.validation_sets()) == {"dev"}


def test_real_sst2_first_rows(glue_dir):
    train = load_glue_dir(glue_dir, "sst2").train
    assert train.texts[0] == "hide new secretions from the parental units "
    assert train.labels[:2] == (0, 0)
    assert train.text_pairs is None
    assert train.label_names == ("negative", "positive")


def test_real_mrpc_bom_header_and_quotes(glue_dir):
    raw = (glue_dir / "MRPC" / "train.tsv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")  # the quirk this test is about
    train = load_glue_dir(glue_dir, "mrpc").train
    assert train.is_pair
    assert train.texts[0].startswith("Amrozi accused his brother , whom he called \" the witness \"")
    assert train.text_pairs[0].startswith("Referring to him as only \" the witness \"")
    assert train.labels[:2] == (1, 0)
    # QUOTE_NONE: no quote character swallowed a tab or a newline
    assert all("\t" not in t and "\n" not in t for t in train.texts + train.text_pairs)


def test_real_rte_string_labels(glue_dir):
    splits = load_glue_dir(glue_dir, "rte")
    assert splits.validation.labels[0] == 1  # "not_entailment"
    assert splits.train.labels[0] == 1
    assert set(splits.train.labels) == {0, 1}
    assert splits.train.texts[0] == "No Weapons of Mass Destruction Found in Iraq Yet."


def test_root_may_be_the_task_dir(glue_dir):
    assert task_dir(glue_dir / "RTE", "rte") == glue_dir / "RTE"
    assert len(load_glue_dir(glue_dir / "RTE", "rte").validation) == 277


# --------------------------------------------------------------------------------------------
# Layout quirks on small files
# --------------------------------------------------------------------------------------------

COLA = "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n" \
       "gj04\t0\t*\tThey drank the pub.\n"


def test_cola_headerless(tmp_path, write):
    write("CoLA/train.tsv", COLA)
    write("CoLA/dev.tsv", COLA)
    splits = load_glue_dir(tmp_path, "cola")
    assert splits.train.texts == (
        "Our friends won't buy this analysis, let alone the next one we propose.",
        "They drank the pub.",
    )
    assert splits.train.labels == (1, 0)


def test_cola_repackaged_with_header(tmp_path, write):
    write("CoLA/train.tsv", "source\tlabel\toriginal_label\tsentence\n" + COLA)
    write("CoLA/dev.tsv", COLA)
    assert load_glue_dir(tmp_path, "cola").train.labels == (1, 0)


def test_mnli_dev_matched_with_extra_columns(tmp_path, write):
    train_header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"
    dev_header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tlabel2\tgold_label\n"
    write("MNLI/train.tsv", train_header + "0\t1\t1e\tgov\tA man \"sleeps.\tA person rests.\tentailment\tentailment\n")
    write("MNLI/dev_matched.tsv", dev_header + "0\t1\t1n\tfic\tIt rains.\tIt is dry.\tcontradiction\tneutral\tcontradiction\n")
    splits = load_glue_dir(tmp_path, "mnli")
    assert splits.train.texts == ('A man "sleeps.',)
    assert splits.train.labels == (0,)
    assert splits.validation.labels == (2,)
    assert splits.validation.text_pairs == ("It is dry.",)


MNLI_TRAIN_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                     "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI_DEV_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                   "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
                   "label5\tgold_label")


def _mnli_row(i, s1, s2, gold, annotators):
    return "\t".join([str(i), "31193", f"{i}n", "government", "( x )", "( y )", "(ROOT x)", "(ROOT y)", s1, s2,
                      *annotators, gold])


def test_mnli_matched_and_mismatched_in_the_official_layout(tmp_path, write):
    write("MNLI/train.tsv", "\n".join([MNLI_TRAIN_HEADER, _mnli_row(0, "A", "B", "neutral", ["neutral"])]) + "\n")
    five = ["neutral", "entailment", "neutral", "neutral", "contradiction"]
    write("MNLI/dev_matched.tsv", "\n".join([MNLI_DEV_HEADER, _mnli_row(1, "C", "D", "entailment", five),
                                             _mnli_row(2, "E", "F", "contradiction", five)]) + "\n")
    splits = load_glue_dir(tmp_path, "mnli")
    assert list(splits.validation_sets()) == ["matched"]  # dev_mismatched absent: matched only
    write("MNLI/dev_mismatched.tsv", "\n".join([MNLI_DEV_HEADER, _mnli_row(3, "G", "H", "neutral", five)]) + "\n")
    splits = load_glue_dir(tmp_path, "mnli")
    sets = splits.validation_sets()
    assert list(sets) == ["matched", "mismatched"]
    assert sets["matched"].labels == (0, 2) and sets["mismatched"].labels == (1,)
    assert sets["mismatched"].texts == ("G",) and sets["mismatched"].text_pairs == ("H",)
    assert splits.train.labels == (1,)


def test_stsb_non_numeric_score_names_file_and_line(tmp_path, write):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    write("STS-B/train.tsv", f"{header}\n0\tmain\tMSRvid\t2012\t1\tnone\tnone\tA\tB\t2.5\n"
                             f"1\tmain\tMSRvid\t2012\t2\tnone\tnone\tC\tD\tfive\n")
    write("STS-B/dev.tsv", f"{header}\n0\tmain\tMSRvid\t2012\t1\tnone\tnone\tA\tB\t2.5\n")
    with pytest.raises(DataError, match=r"STS-B/train.tsv: line 3: label 'five' in column 'score' is not a number"):
        load_glue_dir(tmp_path, "stsb")


def test_gzipped_tsv(tmp_path):
    (tmp_path / "SST-2").mkdir()
    for stem in ("train", "dev"):
        (tmp_path / "SST-2" / f"{stem}.tsv.gz").write_bytes(gzip.compress(b"sentence\tlabel\ngood .\t1\nbad .\t0\n"))
    assert load_glue_dir(tmp_path, "sst2").validation.labels == (1, 0)


# --------------------------------------------------------------------------------------------
# Bad input: each error names the file, the line or column, and what was expected
# --------------------------------------------------------------------------------------------


def test_missing_dir(tmp_path):
    with pytest.raises(DataError, match="GLUE directory not found"):
        load_glue_dir(tmp_path / "nope", "sst2")


def test_missing_train_file(tmp_path):
    with pytest.raises(DataError, match=r"no SST-2/train.tsv.*SST-2/dev.tsv"):
        load_glue_dir(tmp_path, "sst2")


def test_missing_validation_file(tmp_path, write):
    write("SST-2/train.tsv", "sentence\tlabel\ngood\t1\n")
    with pytest.raises(DataError, match=r"SST-2: no dev.tsv"):
        load_glue_dir(tmp_path, "sst2")


def test_missing_file_read(tmp_path):
    with pytest.raises(DataError, match=r"nope.tsv: file not found"):
        read_glue_tsv(tmp_path / "nope.tsv", "sst2")


def test_missing_column(write):
    path = write("train.tsv", "text\tlabel\ngood\t1\n")
    with pytest.raises(DataError, match=r"train.tsv: missing text column 'sentence'; the header has 'text', 'label'"):
        read_glue_tsv(path, "sst2")


def test_missing_label_column(write):
    path = write("train.tsv", "index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(DataError, match=r"missing label column 'label'"):
        read_glue_tsv(path, "rte")


def test_unknown_label(write):
    path = write("train.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tcontradiction\n")
    with pytest.raises(DataError, match=r"train.tsv: line 3: unknown label 'contradiction'.*'not_entailment'"):
        read_glue_tsv(path, "rte")


@pytest.mark.parametrize("content", ["", "\n\n", "sentence\tlabel\n"])
def test_empty_file(write, content):
    path = write("train.tsv", content)
    with pytest.raises(DataError, match=r"train.tsv: file is empty"):
        read_glue_tsv(path, "sst2")


def test_undecodable_bytes(write):
    path = write("train.tsv", b"sentence\tlabel\ngood\t1\ncaf\xe9 bad\t0\n")
    with pytest.raises(DataError, match=r"train.tsv: line 3: undecodable bytes b'\\xe9' at byte offset 25 "
                                        r"\(byte 4 of the line\).*UTF-8"):
        read_glue_tsv(path, "sst2")


def test_undecodable_offset_counts_the_bom(write):
    path = write("train.tsv", b"\xef\xbb\xbfsentence\tlabel\n\xff\t1\n")
    with pytest.raises(DataError, match=r"line 2: undecodable bytes b'\\xff' at byte offset 18"):
        read_glue_tsv(path, "sst2")


def test_wrong_field_count(write):
    path = write("train.tsv", "sentence\tlabel\ngood\t1\nno label here\n")
    with pytest.raises(DataError, match=r"train.tsv: line 3: expected 2 tab-separated fields \(sentence, label\), found 1"):
        read_glue_tsv(path, "sst2")


# The official header of each task's train/dev TSV, and one labelled row (texts "A" / "B").
OFFICIAL = {
    "sst2": ("sentence\tlabel", "A\t1", 1),
    "mrpc": ("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t11\t12\tA\tB", 1),
    "rte": ("index\tsentence1\tsentence2\tlabel", "0\tA\tB\tnot_entailment", 1),
    "qnli": ("index\tquestion\tsentence\tlabel", "0\tA\tB\tentailment", 0),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t1\t2\tA\tB\t1", 1),
    "wnli": ("index\tsentence1\tsentence2\tlabel", "0\tA\tB\t0", 0),
    "mnli": ("index\tsentence1\tsentence2\tgold_label", "0\tA\tB\tneutral", 1),
    "cola": (None, "src\t0\t*\tA", 0),
    "stsb": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
             "0\tmain-news\theadlines\t2013\t0001\tnone\tnone\tA\tB\t3.200", 3.2),
}


@pytest.mark.parametrize("task", sorted(OFFICIAL))
def test_every_task_reads_its_official_layout(tmp_path, write, task):
    from raptor.data import get_task

    spec = get_task(task)
    header, row, label = OFFICIAL[task]
    text = (header + "\n" if header else "") + row + "\n"
    write(f"{spec.glue_dir}/train.tsv", text)
    write(f"{spec.glue_dir}/{spec.validation_split}.tsv", text)
    splits = load_glue_dir(tmp_path, task)
    for data in (splits.train, splits.validation):
        assert data.texts == ("A",) and data.labels == (label,)
        assert data.text_pairs == (("B",) if spec.is_pair else None)
