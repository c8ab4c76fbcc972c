"""raptor.pretrain: non-private pre-training of a small MoE on PUBLIC text (a warm start for DP
fine-tuning), and the pre-trained models shipped with raptor.

- :func:`pretrain` / :class:`PretrainConfig`: the loop behind ``raptor pretrain``;
- :mod:`raptor.pretrain.corpus`: which public files are read and how they become token blocks;
- :mod:`raptor.pretrain.lm`: masked-LM (Switch) and causal-LM (decoder families) heads;
- :mod:`raptor.pretrain.routing`: load-balancing / z-losses and routing statistics;
- :mod:`raptor.shipped`: short names of the shipped pre-trained models.
"""

from raptor._lazy import lazy_exports

#: exported name -> the module that defines it (imported on first use, so that
#: ``raptor pretrain --help`` imports no torch: see :mod:`raptor._lazy`)
_EXPORTS: dict[str, str] = {
    "PretrainConfig": "raptor.pretrain.run",
    "PretrainResult": "raptor.pretrain.run",
    "pretrain": "raptor.pretrain.run",
}

__all__ = ["PretrainConfig", "PretrainResult", "pretrain"]
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
