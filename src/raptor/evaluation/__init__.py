"""raptor.evaluation: the GLUE metrics (:mod:`raptor.evaluation.metrics`), a leaf package (scikit-learn,
SciPy). The evaluator that scores a model on validation splits is :mod:`raptor.training.evaluator`."""

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
    "compute_metric",
    "compute_metrics",
]
