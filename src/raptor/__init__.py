"""raptor: role-aware differentially private fine-tuning of Mixture-of-Experts transformers.

Importing this package has no side effects: it loads no model, touches no RNG and reads no
environment variable. Sub-packages are imported on demand, and so are the public API's names:

* :func:`raptor.fine_tune` (:mod:`raptor.training.run.fine_tune`): DP fine-tuning of a loaded model;
* :class:`raptor.TrainConfig`, :class:`raptor.PrivacyConfig`, :class:`raptor.OptimConfig`,
  :class:`raptor.PerformanceConfig`, :func:`raptor.default_recipe`, :func:`raptor.tiny_recipe`, :func:`raptor.reference_recipe`;
* :func:`raptor.load_model` (a ``save_pretrained`` directory or hub name, the right head class);
* :func:`raptor.upcycle` (a dense BERT checkpoint, or ``"minilm"``, into a ``bert_moe`` MoE checkpoint).
* :class:`raptor.PrivacyEngine` (:mod:`raptor.integrations`): your own training loop, privately.
"""

from raptor._lazy import lazy_exports

__version__ = "0.1.0"

#: exported name -> the module that defines it (imported on first use: see :mod:`raptor._lazy`)
_EXPORTS: dict[str, str] = {
    "fine_tune": "raptor.training.run.fine_tune",
    "FineTuneResult": "raptor.training.run.fine_tune",
    "TrainConfig": "raptor.training.config",
    "PrivacyConfig": "raptor.training.config",
    "OptimConfig": "raptor.training.config",
    "PerformanceConfig": "raptor.training.config",
    "Schedule": "raptor.training.config",
    "tiny_recipe": "raptor.recipes",
    "default_recipe": "raptor.recipes",
    "reference_recipe": "raptor.recipes",
    "load_model": "raptor.moe.models",
    "upcycle": "raptor.pretrain.upcycle_checkpoint",
    "PrivacyEngine": "raptor.integrations.engine",
}

__all__ = ["__version__", *_EXPORTS]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
