"""The training objective of a sequence-classification model: classification or regression.

A model whose head has one output (``config.num_labels == 1``, the Hugging Face convention, which
also sets ``config.problem_type = "regression"``) is a regression model: STS-B's similarity score
or a user file with float labels. Its per-record loss is the squared error of that one output
against the float label (MSE; the mean over a batch is the usual ``MSELoss``). Any other head is a
classifier trained with per-record cross-entropy.

The per-record losses are what :class:`raptor.per_sample.engine.PerRecordEngine` differentiates
(its ``loss_fn``), so every DP method trains a regression head the same way it trains a
classifier: each record's gradient is clipped per group, nothing couples records.

Legend: B records, K labels (1 for regression).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.per_sample.engine import cross_entropy_per_record

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def squared_error_per_record(logits_B1: torch.Tensor, labels_B: torch.Tensor) -> torch.Tensor:
    """Per-record squared error ``[B]`` of a one-output head against float targets."""
    if logits_B1.dim() != 2 or logits_B1.shape[-1] != 1:
        raise ConfigError(f"a regression head must have one output, got logits of shape {tuple(logits_B1.shape)}")
    if logits_B1.dtype not in (torch.float32, torch.float64):
        logits_B1 = logits_B1.float()
    return (logits_B1[:, 0] - labels_B.to(logits_B1.dtype)).square()


def task_type_of(model: nn.Module) -> str:
    """``"regression"`` for a one-output head (``config.num_labels == 1`` or ``problem_type ==
    "regression"``), else ``"classification"``; a model without a Hugging Face config is a classifier."""
    config = getattr(model, "config", None)
    if config is None:
        return "classification"
    if getattr(config, "problem_type", None) == "regression" or getattr(config, "num_labels", 2) == 1:
        return "regression"
    return "classification"


def loss_fn_for(task_type: str) -> LossFn:
    """The per-record loss of ``task_type``: cross-entropy, or squared error for regression."""
    if task_type == "classification":
        return cross_entropy_per_record
    if task_type == "regression":
        return squared_error_per_record
    raise ConfigError(f"task type must be 'classification' or 'regression', got {task_type!r}")


def predictions(logits_BK: torch.Tensor, task_type: str) -> torch.Tensor:
    """Predicted label ids ``[B]`` (argmax) or predicted scores ``[B]`` (the one output)."""
    if task_type == "regression":
        return logits_BK.float()[:, 0]
    return logits_BK.argmax(-1)
