"""The per-record training objectives, re-exported from :mod:`raptor.per_sample.objectives`
(they live beside the engine whose loss hook they fill)."""

from raptor.per_sample.objectives import loss_fn_for, predictions, squared_error_per_record, task_type_of

__all__ = ["loss_fn_for", "predictions", "squared_error_per_record", "task_type_of"]
