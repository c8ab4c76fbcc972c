"""One process per grid cell: a claim file held under an exclusive ``flock`` while the cell runs.

Several processes may work on one grid (``--shard K/N`` processes, and a process started by hand
for one group, say). Without a claim, two of them can start the same cell and spend a cell's CPU
time twice. :func:`claimed` takes ``<directory>/<key>.claim`` for the body of a ``with`` block:

* the lock is the kernel's (``fcntl.flock``), so a process that is killed releases its claims at
  once: a claim is never stale, and nothing has to guess from PIDs;
* the file names its holder (pid, host, start time) for a person who looks;
* a claim taken while the holder was removing the file is detected (the path no longer names the
  locked file) and taken again.

The caller must re-check that the cell is still unfinished *after* the claim is ours: the
previous holder may have finished it between the caller's check and its claim.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def claimed(directory: str | Path, key: str) -> Iterator[bool]:
    """``True`` inside the block when this process holds the claim on ``key``; ``False`` when
    another live process holds it (the block should then skip the cell). Released on exit."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.claim"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock: claim the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started_at": time.time()}).encode())
        yield True
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # before unlocking, so a waiter never locks a file that is about to go
        os.close(fd)


def holder(directory: str | Path, key: str) -> dict | None:
    """What the claim file of ``key`` says of its holder (``None`` without a readable file)."""
    try:
        return json.loads((Path(directory) / f"{key}.claim").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
