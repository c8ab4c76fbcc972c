"""`raptor train --task T` for GLUE tasks: each task's own metrics in results.json and on stdout,
STS-B as regression, MNLI matched and mismatched; small synthetic files in the official layout."""

from __future__ import annotations

import json
import math

import pytest

from raptor.cli.main import main

WORDS = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull", "a", "the", "movie", "plot"]


def _sentence(i: int) -> str:
    return " ".join(WORDS[(i * k + 3) % len(WORDS)] for k in range(1, 6))


def _stsb(n: int) -> str:
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    return header + "".join(f"{i}\tmain-news\theadlines\t2013\t{i:04d}\tnone\tnone\t{_sentence(i)}\t{_sentence(i + 1)}"
                            f"\t{(i * 37 % 50) / 10:.3f}\n" for i in range(n))


def _mrpc(n: int) -> str:
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    return header + "".join(f"{i % 2}\t{i}\t{i + 1}\t{_sentence(i)}\t{_sentence(i + 2)}\n" for i in range(n))


def _cola(n: int) -> str:
    return "".join(f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{_sentence(i)}\n" for i in range(n))


def _mnli(n: int, dev: bool) -> str:
    labels = ("entailment", "neutral", "contradiction")
    annot = "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5" if dev else "\tlabel1"
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
              f"sentence2_parse\tsentence1\tsentence2{annot}\tgold_label\n")
    k = 5 if dev else 1
    return header + "".join(
        f"{i}\t{i}\t{i}e\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{_sentence(i)}\t{_sentence(i + 4)}\t"
        + "\t".join([labels[i % 3]] * k) + f"\t{labels[i % 3]}\n" for i in range(n))


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    files = {"STS-B/train.tsv": _stsb(90), "STS-B/dev.tsv": _stsb(30), "MRPC/train.tsv": _mrpc(90),
             "MRPC/dev.tsv": _mrpc(30), "CoLA/train.tsv": _cola(90), "CoLA/dev.tsv": _cola(30),
             "MNLI/train.tsv": _mnli(90, False), "MNLI/dev_matched.tsv": _mnli(30, True),
             "MNLI/dev_mismatched.tsv": _mnli(20, True)}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def _args(glue, task, method, out):
    return ["train", "--model", "switch_transformers", "--task", task, "--data-dir", str(glue), "--method", method, "--public-size", "20",
            "--set", "model.vocab_size=60", "--max-length", "16", "--set", "model.hidden_size=16", "--batch-size", "16",
            "--set", "performance.micro_batch_size=16", "--seed", "3", "--no-progress", "--epsilon", "8", "--steps", "2",
            "--set", "eval_every=1", "--output-dir", str(out)]


@pytest.mark.parametrize("task, method, metrics", [
    ("stsb", "raptor", ("pearson", "spearman")), ("stsb", "dpsgd", ("pearson", "spearman")),
    ("mrpc", "raptor", ("f1", "accuracy")), ("mrpc", "dpsgd", ("f1", "accuracy")),
    ("cola", "nonprivate", ("matthews_correlation",)),
    ("mnli", "raptor", ("matched_accuracy", "mismatched_accuracy")),
])
def test_train_reports_the_tasks_glue_metrics(glue, tmp_path, capsys, task, method, metrics):
    out = tmp_path / "run"
    assert main(_args(glue, task, method, out)) == 0
    res = json.loads((out / "results.json").read_text())
    assert tuple(res["final_metrics"]) == metrics and res["main_metric"] == metrics[0]
    assert len(res["evals"]) == 2 and all(tuple(e["metrics"]) == metrics for e in res["evals"])
    for value in res["final_metrics"].values():
        assert value == "nan" or -1.0 <= value <= 1.0
    printed = capsys.readouterr().out
    assert all(f"{m} " in printed for m in metrics)
    regression = task == "stsb"
    assert res["data"]["task_type"] == ("regression" if regression else "classification")
    assert (res["final_accuracy"] is None) is regression
    if task == "mnli":
        assert res["data"]["dev_sets"] == {"matched": 30, "mismatched": 20}
    if method != "nonprivate":
        assert 0 < res["epsilon"] <= 8.0 + 1e-9
    else:
        assert res["epsilon"] == "inf"


def test_stsb_head_has_one_output_and_label_words_are_refused(glue, tmp_path, capsys):
    assert main(_args(glue, "stsb", "raptor", tmp_path / "a") + ["--set", "model.head_init=label-words"]) == 2
    err = capsys.readouterr().err
    assert "--set model.head_init=label-words does not apply to regression" in err
    assert not (tmp_path / "a" / "results.json").exists()


def test_user_file_regression_runs(tmp_path, capsys):
    rows = "".join(f"{_sentence(i)}\t{(i * 7 % 40) / 8:.3f}\n" for i in range(80))
    (tmp_path / "train.tsv").write_text("text\tscore\n" + rows)
    (tmp_path / "dev.tsv").write_text("text\tscore\n" + "".join(f"{_sentence(i)}\t{i / 9:.2f}\n" for i in range(20)))
    out = tmp_path / "run"
    assert main(["train", "--model", "switch_transformers", "--train-file", str(tmp_path / "train.tsv"), "--validation-file", str(tmp_path / "dev.tsv"),
                 "--label-column", "score", "--public-size", "20", "--set", "model.vocab_size=60", "--max-length", "12",
                 "--set", "model.hidden_size=16", "--batch-size", "16", "--seed", "1", "--no-progress", "--steps", "1",
                 "--method", "dp-lora", "--output-dir", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["task_type"] == "regression" and set(res["final_metrics"]) == {"pearson", "spearman"}
    assert math.isfinite(res["evals"][-1]["dev_loss"])


def test_task_without_data_dir_and_no_cache_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("datasets")
    assert main(["train", "--model", "switch_transformers", "--task", "cola", "--set", f"data.hf_cache={tmp_path}", "--no-progress",
                 "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "no cached copy of glue/cola" in err and "--data-dir DIR" in err
