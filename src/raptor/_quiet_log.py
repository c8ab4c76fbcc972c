"""Drop some records of one logger for the duration of a call, in the calling thread only.

A plain ``logger.addFilter`` / ``removeFilter`` around a call is global: while it is installed, a
second thread logging to the same logger loses its matching records too, and two threads adding
and removing their own filters can leave each other's call unquieted. :class:`ScopedDrop` installs
one filter while at least one caller is inside (a lock guards the count) and the filter drops a
record only when the context that logs it (the thread, or the asyncio task) asked for quiet: a
:class:`contextvars.ContextVar` holds that, so nested and concurrent uses each see only their own.

This module is a leaf: it imports only the standard library and no other raptor module, so every
sub-package may import it (the layering test checks both).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator


class _ContextFilter(logging.Filter):
    def __init__(self, active: contextvars.ContextVar[int], drops: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__()
        self._active, self._drops = active, drops

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self._active.get() and self._drops(record))


class ScopedDrop:
    """``with quiet(): ...`` drops the records of logger ``logger_name`` for which ``drops(record)``
    is true, logged by this thread (or task) inside the block; every other record, every other
    thread's records and every record after the block are logged as before. The filter is on the
    logger only while some caller is inside, so the logger's filters are as they were afterwards."""

    def __init__(self, logger_name: str, drops: Callable[[logging.LogRecord], bool]) -> None:
        self.logger_name = logger_name
        self._active: contextvars.ContextVar[int] = contextvars.ContextVar(f"raptor-quiet:{logger_name}", default=0)
        self._filter = _ContextFilter(self._active, drops)
        self._lock = threading.Lock()
        self._users = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        logger = logging.getLogger(self.logger_name)
        with self._lock:
            if self._users == 0:
                logger.addFilter(self._filter)
            self._users += 1
        token = self._active.set(self._active.get() + 1)
        try:
            yield
        finally:
            self._active.reset(token)
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    logger.removeFilter(self._filter)
