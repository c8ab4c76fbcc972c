"""The GLUE metrics against values worked out by hand on small cases."""

from __future__ import annotations

import math

import pytest
import torch

from raptor.errors import ConfigError
from raptor.evaluation import compute_metric, compute_metrics
from raptor.training.evaluator import Evaluator

# preds vs refs: TP = 2 (records 0, 3), TN = 1 (record 1), FP = 1 (record 2), FN = 0
PREDS = [1, 0, 1, 1]
REFS = [1, 0, 0, 1]


def test_accuracy_by_hand():
    assert compute_metric("accuracy", PREDS, REFS) == pytest.approx(3 / 4)


def test_f1_by_hand():
    precision, recall = 2 / 3, 2 / 2
    assert compute_metric("f1", PREDS, REFS) == pytest.approx(2 * precision * recall / (precision + recall))  # 0.8


def test_f1_counts_label_one_as_positive():
    # swapping the roles of 0 and 1: TP = 1 (record 1), FP = 0, FN = 1 (record 2) -> P = 1, R = 1/2, F1 = 2/3
    flipped = compute_metric("f1", [1 - p for p in PREDS], [1 - r for r in REFS])
    assert flipped == pytest.approx(2 / 3)


def test_matthews_by_hand():
    tp, tn, fp, fn = 2, 1, 1, 0
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert compute_metric("matthews_correlation", PREDS, REFS) == pytest.approx(expected)  # 1/sqrt(3)
    assert compute_metric("matthews_correlation", [0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_pearson_by_hand():
    # x = 1, 2, 3; y = 1, 2, 4: deviations (-1, 0, 1) and (-4/3, -1/3, 5/3); sum of products 3,
    # sums of squares 2 and 42/9 -> r = 3 / sqrt(2 * 42 / 9) = 9 / sqrt(84)
    assert compute_metric("pearson", [1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx(9 / math.sqrt(84))


def test_spearman_by_hand():
    # ranks (1, 2, 3, 4) vs (1, 3, 2, 4): d = (0, -1, 1, 0), rho = 1 - 6 * 2 / (4 * (16 - 1)) = 0.8
    assert compute_metric("spearman", [0.1, 0.2, 0.3, 0.4], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)
    # Spearman sees only the order: a monotone transform of the predictions keeps it
    assert compute_metric("spearman", [1.0, 8.0, 27.0, 64.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)


def test_degenerate_cases():
    assert compute_metric("f1", [0, 0, 0], [0, 0, 0]) == 0.0  # no positive at all
    assert compute_metric("matthews_correlation", [1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction
    assert math.isnan(compute_metric("pearson", [2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))  # undefined
    assert math.isnan(compute_metric("spearman", [1.0], [1.0]))
    assert math.isnan(compute_metric("accuracy", [], []))


def test_compute_metrics_keeps_order_and_rejects_unknown():
    assert list(compute_metrics(("f1", "accuracy"), PREDS, REFS)) == ["f1", "accuracy"]
    with pytest.raises(ConfigError, match="unknown metric 'bleu'"):
        compute_metric("bleu", PREDS, REFS)
    with pytest.raises(ConfigError, match="same length"):
        compute_metric("accuracy", [1, 0], [1])


class _Fixed(torch.nn.Module):
    """A 'model' whose logits are looked up by the first token id (id i -> row i of ``table``)."""

    def __init__(self, table, num_labels):
        super().__init__()
        self.table = torch.tensor(table, dtype=torch.float32)
        self.config = type("C", (), {"num_labels": num_labels, "problem_type": None})()

    def forward(self, input_ids, attention_mask):
        return type("Out", (), {"logits": self.table[input_ids[:, 0]]})()


def _records(first_ids, labels, dtype):
    ids = torch.tensor(first_ids)[:, None]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor(labels, dtype=dtype)}


def test_evaluator_classification_two_splits_mnli_style():
    model = _Fixed([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]], 3)  # token i predicts label i
    sets = {"matched": _records([0, 1, 2, 2], [0, 1, 1, 2], torch.long),
            "mismatched": _records([0, 0], [0, 1], torch.long)}
    out = Evaluator(sets, task_type="classification", metrics=("accuracy",), batch_size=3)(model)
    assert out["metrics"] == {"matched_accuracy": pytest.approx(0.75), "mismatched_accuracy": pytest.approx(0.5)}
    assert out["main_metric"] == "matched_accuracy" and out["accuracy"] == pytest.approx(0.75)
    # cross-entropy of logits (2, 0, 0) at the right label: log(e^2 + 2) - 2; at a wrong one: log(e^2 + 2)
    ce_right, ce_wrong = math.log(math.exp(2) + 2) - 2, math.log(math.exp(2) + 2)
    assert out["dev_loss"] == pytest.approx((3 * ce_right + ce_wrong) / 4, rel=1e-6)


def test_evaluator_regression_uses_squared_error_and_correlations():
    model = _Fixed([[1.0], [2.0], [3.0]], 1)
    sets = {"dev": _records([0, 1, 2], [1.0, 2.0, 4.0], torch.float32)}
    out = Evaluator(sets, task_type="regression", batch_size=2)(model)
    assert out["main_metric"] == "pearson" and out["accuracy"] is None
    assert out["metrics"]["pearson"] == pytest.approx(9 / math.sqrt(84))
    assert out["metrics"]["spearman"] == pytest.approx(1.0)
    assert out["dev_loss"] == pytest.approx(1.0 / 3)  # squared errors 0, 0, 1


def test_evaluator_rejects_a_metric_of_the_other_type():
    with pytest.raises(ConfigError, match="do not apply to a regression task"):
        Evaluator({"dev": _records([0], [1.0], torch.float32)}, task_type="regression", metrics=("accuracy",))


class _OnDevice(_Fixed):
    """``_Fixed`` with one parameter: where it lives is the model's device."""

    def __init__(self, table, num_labels):
        super().__init__(table, num_labels)
        self.anchor = torch.nn.Parameter(torch.zeros(1))


def test_evaluator_follows_the_models_device_and_refuses_another():
    """No device given: chunks go where the model is (a CPU default once failed every cell of a GPU
    grid at its final evaluation). A device given that is not the model's is a ConfigError naming both."""
    model = _OnDevice([[2.0, 0.0], [0.0, 2.0]], 2)
    sets = {"dev": _records([0, 1], [0, 1], torch.long)}
    ev = Evaluator(sets, task_type="classification")
    assert ev.device_for(model) == torch.device("cpu")
    assert ev(model)["metrics"]["accuracy"] == pytest.approx(1.0)
    assert ev.device_for(model.to("meta")) == torch.device("meta")
    assert ev.device_for(_Fixed([[1.0]], 1)) == torch.device("cpu")  # no parameter: the CPU
    assert Evaluator(sets, device="cpu").device_for(_OnDevice([[1.0]], 1)) == torch.device("cpu")
    with pytest.raises(ConfigError, match="device meta is not the model's"):
        Evaluator(sets, device="meta")(_OnDevice([[1.0, 0.0], [0.0, 1.0]], 2))
