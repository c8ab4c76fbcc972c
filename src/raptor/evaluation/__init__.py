"""raptor.evaluation: the GLUE metrics (:mod:`raptor.evaluation.metrics`) and the evaluator that
scores a model on one or more validation splits (:mod:`raptor.evaluation.evaluator`)."""

from raptor.evaluation.evaluator import Evaluator
from raptor.evaluation.metrics import (
    CLASSIFICATION_METRICS,
    DEFAULT_METRICS,
    METRICS,
    REGRESSION_METRICS,
    compute_metric,
    compute_metrics,
)

__all__ = [
    "CLASSIFICATION_METRICS",
    "DEFAULT_METRICS",
    "METRICS",
    "REGRESSION_METRICS",
    "Evaluator",
    "compute_metric",
    "compute_metrics",
]
