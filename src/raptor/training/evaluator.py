"""Scoring a model on its validation split(s) with the task's own metrics.

:class:`Evaluator` holds the tokenized validation records of one or more named splits (one,
``dev``, for most tasks; ``matched`` and ``mismatched`` for MNLI), the task's metric names (see
:mod:`raptor.evaluation.metrics`) and its type. Calling it on a model runs the model in
``eval_batch_size`` chunks with natural routing and no gradients and returns

* ``metrics``: ``{name: value}``; with several splits every name is prefixed by the split
  (``matched_accuracy``, ``mismatched_accuracy``);
* ``main_metric``: the key of the task's main metric (the first metric of the first split): the
  one the progress bar shows and experiments compare;
* ``dev_loss``: the mean per-record loss (cross-entropy, or squared error for regression) on the
  first split;
* ``accuracy``: the first split's accuracy for a classification task (``None`` for regression),
  the field older results carried;
* ``single_class``: for a classification task whose model predicts ONE class for every record of
  the first split (a collapsed classifier: its accuracy is that class's share), that class id;
  else ``None``.

Data-parallel runs (``comm``, :mod:`raptor.training.run.distributed`): each rank predicts its contiguous
shard of every split, and the predictions and loss sums are gathered on every rank before the
metrics are computed, so every rank returns the same numbers as one process would.

Device: the chunks go to the model's device (that of its first parameter) unless ``device`` is
given; a given device that is not the model's is a :class:`ConfigError` (a CPU evaluator handed
to a CUDA trainer once failed every cell of a GPU grid at its last step).

Privacy: the validation splits are evaluation data, not the private training set; their
metrics and loss may be shown (the training loss may not).

Legend: B records in a chunk, K labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from raptor.errors import ConfigError
from raptor.evaluation.metrics import DEFAULT_METRICS, check_metric_names, compute_metrics

Records = Mapping[str, torch.Tensor]  # input_ids [N,T], attention_mask [N,T], labels [N]


def metric_names(names: Sequence[str], task_type: str) -> tuple[str, ...]:
    """``names`` checked against the metrics of ``task_type`` (a :class:`ConfigError` names the
    unknown or mismatched one)."""
    return check_metric_names(names, task_type)


def model_device(model: nn.Module) -> torch.device:
    """Where ``model`` computes: its first parameter's device (the CPU for a model without one)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


class Evaluator:
    """The task's metrics on named validation splits (see the module docstring)."""

    def __init__(self, sets: Mapping[str, Records], *, task_type: str = "classification",
                 metrics: Sequence[str] | None = None, batch_size: int = 256,
                 device: str | torch.device | None = None, comm=None):
        if not sets:
            raise ConfigError("Evaluator needs at least one validation split")
        self.sets = dict(sets)
        self.task_type = task_type
        self.metrics = check_metric_names(metrics or DEFAULT_METRICS.get(task_type, ()), task_type)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"eval batch size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self.device = None if device is None else torch.device(device)
        self.comm = comm  # a raptor.training.run.distributed.Communicator (None: one process)

    def key(self, split: str, metric: str) -> str:
        """The name of ``metric`` on ``split`` in the results."""
        return metric if len(self.sets) == 1 else f"{split}_{metric}"

    @property
    def main_metric(self) -> str:
        return self.key(next(iter(self.sets)), self.metrics[0])

    @torch.no_grad()
    def predict(self, model: nn.Module, records: Records) -> tuple[torch.Tensor, float]:
        """(predictions ``[N]`` on the CPU, mean per-record loss) of ``model`` on ``records``."""
        from raptor.per_sample.task_losses import loss_fn_for, predictions
        from raptor.training.step.plain import classification_logits

        loss_fn = loss_fn_for(self.task_type)
        device = self.device_for(model)
        n = int(records["labels"].shape[0])
        lo, hi = (0, n) if self.comm is None else self.comm.shard_range(n)  # this rank's shard
        preds, loss_sum = [], 0.0
        for start in range(lo, hi, self.batch_size):
            batch = {k: v[start:min(start + self.batch_size, hi)].to(device) for k, v in records.items()}
            logits_BK = classification_logits(model, batch).float()
            loss_sum += float(loss_fn(logits_BK, batch["labels"]).sum())
            preds.append(predictions(logits_BK, self.task_type).cpu())
        preds_N = torch.cat(preds) if preds else torch.zeros(0)
        if self.comm is not None:
            preds_N, loss_sum = self.comm.gather_predictions(preds_N, loss_sum)
        if n == 0:
            return torch.zeros(0), math.nan
        return preds_N, loss_sum / n

    def device_for(self, model: nn.Module) -> torch.device:
        """Where the chunks go: the model's device (its first parameter's; the CPU for a model
        without parameters), which an explicit ``device`` must match."""
        on = model_device(model)
        if self.device is not None and self.device != on and not (
                self.device.type == on.type and self.device.index is None):
            raise ConfigError(f"the evaluator's device {self.device} is not the model's ({on}): build the Evaluator "
                              f"without device= (it follows the model) or with device={str(on)!r}")
        return on

    def sharded(self, comm) -> Evaluator:
        """This evaluator over ``comm``'s ranks (each predicts its shard; results gathered)."""
        return Evaluator(self.sets, task_type=self.task_type, metrics=self.metrics, batch_size=self.batch_size,
                         device=self.device, comm=comm)

    def __call__(self, model: nn.Module) -> dict:
        metrics: dict[str, float] = {}
        dev_loss = accuracy = single = majority = None
        for i, (split, records) in enumerate(self.sets.items()):
            preds, loss = self.predict(model, records)
            values = compute_metrics(self.metrics, preds.numpy(), records["labels"].cpu().numpy())
            metrics.update({self.key(split, m): v for m, v in values.items()})
            if i == 0:
                dev_loss = loss
                if self.task_type == "classification":
                    classes = torch.unique(preds)
                    single = int(classes[0]) if preds.numel() > 1 and classes.numel() == 1 else None
                    accuracy = values["accuracy"] if "accuracy" in values else \
                        compute_metrics(("accuracy",), preds.numpy(), records["labels"].cpu().numpy())["accuracy"]
                    labels = records["labels"].cpu().long()  # evaluation data, not the private training set
                    majority = float(torch.bincount(labels).max() / labels.numel()) if labels.numel() else None
        return {"metrics": metrics, "main_metric": self.main_metric, "dev_loss": dev_loss, "accuracy": accuracy,
                "single_class": single, "majority_class_accuracy": majority}
