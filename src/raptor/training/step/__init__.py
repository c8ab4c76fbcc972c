"""One update and what it releases: the :class:`~raptor.training.step.trainer.Trainer`, the step
plan (:mod:`~raptor.training.step.plan`: per update, what is released and what is accounted), the
noise plans it is built from (:mod:`~raptor.training.step.noise_plans`), the noisy release
(:mod:`~raptor.training.step.release`), plain autograd for the non-private baseline, float32
master weights, micro-batching and the engine/plan/ledger protocols.
"""
