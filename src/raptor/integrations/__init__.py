"""raptor.integrations: private training where users already train, over raptor's one engine.

* :class:`PrivacyEngine` (:mod:`raptor.integrations.engine`): the user's own PyTorch loop, shaped
  the way Opacus users expect (``make_private`` returns a model, an optimizer and a Poisson loader).
* :class:`DPTrainer` with :class:`PrivacyArguments` (:mod:`raptor.integrations.hf_trainer`): a
  Hugging Face ``Trainer`` script, privately, on a :class:`PrivacyEngine` underneath.

Both are thin adapters: the plan (:class:`raptor.training.step.plan.StepPlan`), the per-record
engine, the release (:func:`raptor.training.step.release.release_gradients`), the ledger and the
checkpoints are those of :class:`raptor.training.step.trainer.Trainer`, built by
:func:`raptor.training.run.assemble.build_trainer` (:mod:`raptor.integrations.run`).
"""

from raptor._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "PrivacyEngine": "raptor.integrations.engine",
    "PrivateModel": "raptor.integrations.engine",
    "PrivateOptimizer": "raptor.integrations.engine",
    "PrivateLoss": "raptor.integrations.engine",
    "PoissonLoader": "raptor.integrations.loader",
    "DPTrainer": "raptor.integrations.hf_trainer",
    "PrivacyArguments": "raptor.integrations.hf_trainer",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
