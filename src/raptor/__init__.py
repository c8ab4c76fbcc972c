"""raptor: role-aware differentially private fine-tuning of Mixture-of-Experts transformers.

Importing this package has no side effects: it loads no model, touches no RNG and reads no
environment variable. Sub-packages are imported on demand, and so are the public API's names:

* :func:`raptor.fine_tune` (:mod:`raptor.training.fine_tune`): DP fine-tuning of a loaded model;
* :class:`raptor.TrainConfig`, :class:`raptor.PrivacyConfig`, :class:`raptor.OptimConfig`,
  :class:`raptor.PerformanceConfig`, :func:`raptor.tiny_recipe`, :func:`raptor.reference_recipe`;
* :func:`raptor.load_model` (a ``save_pretrained`` directory or hub name, the right head class).
"""

__version__ = "0.1.0"

_LAZY = {
    "fine_tune": "raptor.training.fine_tune",
    "FineTuneResult": "raptor.training.fine_tune",
    "TrainConfig": "raptor.training.config",
    "PrivacyConfig": "raptor.training.config",
    "OptimConfig": "raptor.training.config",
    "PerformanceConfig": "raptor.training.config",
    "Schedule": "raptor.training.config",
    "tiny_recipe": "raptor.training.config",
    "reference_recipe": "raptor.training.config",
    "load_model": "raptor.moe.models",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'raptor' has no attribute {name!r}")
