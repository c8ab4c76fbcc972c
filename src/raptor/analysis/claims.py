"""One process per grid cell: a claim file held under an exclusive lock while the cell runs.

Several processes may work on one grid (``--shard K/N`` processes, and a process started by hand
for one group, say). Without a claim, two of them can start the same cell and spend a cell's CPU
time twice. :func:`claimed` takes ``<directory>/<key>.claim`` for the body of a ``with`` block,
with the lock of :mod:`raptor._flock` (the kernel's ``flock``: a killed process releases its claims
at once, so a claim is never stale); the file names its holder (pid, host, start time).

The caller must re-check that the cell is still unfinished *after* the claim is ours: the
previous holder may have finished it between the caller's check and its claim.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from raptor._flock import lock_file, read_holder, unlock_and_remove, write_holder


@contextlib.contextmanager
def claimed(directory: str | Path, key: str) -> Iterator[bool]:
    """``True`` inside the block when this process holds the claim on ``key``; ``False`` when
    another live process holds it (the block should then skip the cell). Released on exit."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.claim"
    fd = lock_file(path)
    if fd is None:
        yield False
        return
    try:
        write_holder(fd, started_at=time.time())
        yield True
    finally:
        unlock_and_remove(path, fd)


def holder(directory: str | Path, key: str) -> dict | None:
    """What the claim file of ``key`` says of its holder (``None`` without a readable file)."""
    return read_holder(Path(directory) / f"{key}.claim") or None
