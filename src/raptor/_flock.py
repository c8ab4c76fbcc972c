"""An exclusive lock on a file that names its holder: the mechanism of the ``--output-dir`` lock
(:mod:`raptor.cli.run_lock`) and of the grid's cell claims (:mod:`raptor.analysis.claims`).

The lock is an exclusive, non-blocking ``flock``, not the file's existence: the kernel drops it when
its process ends in any way (``kill -9`` included), so nothing guesses from pids. After taking it,
the taker checks that the file it locked is still the one at the path (a holder that was just
ending may have removed it in between) and locks the new file if not. A holder removes the file
*before* closing it (:func:`unlock_and_remove`), so a waiter never locks a file about to go.
POSIX only: ``fcntl`` is ``None`` elsewhere, and callers decide what to do without it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None


def lock_file(path: str | Path) -> int | None:
    """The descriptor of ``path`` (created if missing) under this process's exclusive lock, or
    ``None`` when the lock cannot be taken: another live process holds it (or ``flock`` refused it
    otherwise, which is treated the same). An error opening the file propagates."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the previous holder removed the file as we opened it: lock the new one


def write_holder(fd: int, **extra) -> None:
    """Write this process's pid and host (and ``extra``) into the locked file, for messages."""
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), **extra}).encode())


def read_holder(path: str | Path) -> dict:
    """What the lock file at ``path`` says of its holder (``{}`` without a readable file)."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def unlock_and_remove(path: str | Path, fd: int) -> None:
    """Remove the lock file while still holding it, then release the lock."""
    try:
        Path(path).unlink(missing_ok=True)
    finally:
        os.close(fd)
