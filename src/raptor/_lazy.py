"""Lazy package exports (PEP 562), the one implementation every raptor package uses.

A package lists ``exported name -> defining module`` in a table and installs the two module
hooks from it::

    _EXPORTS = {"collate": "raptor.data.batching", ...}
    __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

so that ``import raptor.<pkg>.<module>`` (and ``raptor --help``) does not import every heavy
dependency of the package. The first access to an exported name imports its module and caches the
value in the package's namespace.

Rule (tested for every package): no exported name may equal the name of one of the package's
submodules. Importing a submodule binds its name on the package, which would then shadow the
lazily exported object (``from raptor.data import collate`` would return a module).

This module is a leaf: it imports only the standard library and no other raptor module, which is
why every sub-package may import it (the layering test checks both).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``(__getattr__, __dir__)`` pair for the package whose ``globals()`` is ``namespace``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
