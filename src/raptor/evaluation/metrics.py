"""The GLUE metrics, each computed by scikit-learn or SciPy on a split's predictions.

| name                   | task(s)                         | computed by                              |
|------------------------|---------------------------------|------------------------------------------|
| ``accuracy``           | SST-2, MNLI, QNLI, RTE, WNLI, … | :func:`sklearn.metrics.accuracy_score`    |
| ``f1``                 | MRPC, QQP (with accuracy)       | :func:`sklearn.metrics.f1_score`, positive label id 1 |
| ``matthews_correlation`` | CoLA                          | :func:`sklearn.metrics.matthews_corrcoef` |
| ``pearson``            | STS-B (and user regression)     | :func:`scipy.stats.pearsonr`              |
| ``spearman``           | STS-B (and user regression)     | :func:`scipy.stats.spearmanr`             |

Classification metrics take predicted and true label ids; regression metrics take predicted and
true scores. Degenerate cases follow the libraries: F1 with no predicted and no true positive is
0 (``zero_division=0``); the Matthews correlation of a constant prediction is 0; a correlation
with a constant prediction or constant targets is undefined and reported as ``nan`` (SciPy's
warning is silenced; the JSON writer spells it ``"nan"``).

Privacy: these run on the validation split, which is evaluation data, not the private training
records (see :mod:`raptor.training.step.trainer`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from raptor.errors import ConfigError

CLASSIFICATION_METRICS: tuple[str, ...] = ("accuracy", "f1", "matthews_correlation")
REGRESSION_METRICS: tuple[str, ...] = ("pearson", "spearman")
METRICS: tuple[str, ...] = CLASSIFICATION_METRICS + REGRESSION_METRICS

#: the metrics reported when a task does not name its own
DEFAULT_METRICS: dict[str, tuple[str, ...]] = {"classification": ("accuracy",), "regression": REGRESSION_METRICS}


def check_metric_names(names: Sequence[str], task_type: str) -> tuple[str, ...]:
    """``names`` as a tuple, after checking that each is a metric of ``task_type``."""
    allowed = CLASSIFICATION_METRICS if task_type == "classification" else REGRESSION_METRICS
    if task_type not in DEFAULT_METRICS:
        raise ConfigError(f"task type must be 'classification' or 'regression', got {task_type!r}")
    names = tuple(names)
    if not names:
        raise ConfigError("a task needs at least one metric")
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ConfigError(f"metrics {bad} do not apply to a {task_type} task; use {', '.join(allowed)}")
    return names


def _correlation(fn, predictions: np.ndarray, references: np.ndarray) -> float:
    if predictions.size < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConstantInputWarning / degrees of freedom: nan is the answer
        value = fn(predictions, references)[0]
    return float(value)


def compute_metric(name: str, predictions: Sequence, references: Sequence) -> float:
    """One metric of ``predictions`` against ``references`` (same length)."""
    preds, refs = np.asarray(predictions), np.asarray(references)
    if preds.shape != refs.shape or preds.ndim != 1:
        raise ConfigError(f"predictions {preds.shape} and references {refs.shape} must be 1-D of the same length")
    if preds.size == 0:
        return math.nan
    if name == "accuracy":
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(refs, preds))
    if name == "f1":
        from sklearn.metrics import f1_score

        return float(f1_score(refs, preds, pos_label=1, average="binary", zero_division=0))
    if name == "matthews_correlation":
        from sklearn.metrics import matthews_corrcoef

        return float(matthews_corrcoef(refs, preds))
    if name == "pearson":
        from scipy.stats import pearsonr

        return _correlation(pearsonr, preds.astype(np.float64), refs.astype(np.float64))
    if name == "spearman":
        from scipy.stats import spearmanr

        return _correlation(spearmanr, preds.astype(np.float64), refs.astype(np.float64))
    raise ConfigError(f"unknown metric {name!r}; known metrics are {', '.join(METRICS)}")


def compute_metrics(names: Sequence[str], predictions: Sequence, references: Sequence) -> dict[str, float]:
    """``{name: value}`` for each metric of ``names``, in that order."""
    return {name: compute_metric(name, predictions, references) for name in names}
