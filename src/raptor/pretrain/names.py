"""Pre-training defaults the CLI offers, importable without torch (``raptor pretrain --help`` starts fast).

:data:`raptor.pretrain.run.DEFAULT_GLUE_TASKS` is the source; ``tests/test_registries.py`` fails
when the two disagree."""

from __future__ import annotations

#: the GLUE tasks whose public slice gets routing statistics when ``--glue-dir`` is given
DEFAULT_GLUE_TASKS: tuple[str, ...] = ("sst2", "mrpc", "rte", "wnli")
