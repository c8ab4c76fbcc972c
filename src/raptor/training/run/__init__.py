"""The run: records and a loaded model in, a finished (or resumed) run out.

:mod:`~raptor.training.run.fine_tune` (the API and the one assembly of a run),
:mod:`~raptor.training.run.options` (its arguments, checked), :mod:`~raptor.training.run.assemble`
(the model, engine, public stage and plan put together into a Trainer),
:mod:`~raptor.training.run.start` (start or continue a checkpoint), :mod:`~raptor.training.run.preflight`
(what is checked before anything is spent) and :mod:`~raptor.training.run.distributed` (torchrun).
"""
