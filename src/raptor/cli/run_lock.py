"""One writer per output directory: ``OUTPUT_DIR/.raptor.lock`` (issue 26, second sweep).

Two ``raptor train`` processes given the same ``--output-dir`` would interleave their checkpoints,
results and model. The first takes the lock; the second exits at once with a one-line error naming
the holder's pid and host.

The lock is an exclusive ``flock`` on the lock file, not the file's existence: the kernel drops it
when its process ends in any way (``kill -9`` included), so a lock left by a dead process never
blocks a later run, with no pid guessing (pids are reused, and a pid means nothing on another host
of a shared file system). The file holds the holder's pid, host and command for the message, and is
removed when the run ends. After taking the lock, the holder checks that the file it locked is
still the one at the path (a run that was just ending may have removed it in between), and retries
if not. Without ``fcntl`` (not POSIX) no lock is taken. In a ``--distributed`` job only rank 0 (the
writer) takes it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from raptor.errors import ConfigError

LOCK_NAME = ".raptor.lock"
_HELD: dict[Path, tuple[int, bool]] = {}  # lock file -> (descriptor, whether the lock created its directory)


def lock_output_dir(output_dir, flag: str = "--output-dir", *, distributed: bool = False) -> Path | None:
    """Take the lock of ``output_dir`` (created if missing) for this process until :func:`release_all`;
    :class:`ConfigError` if another live process holds it. ``distributed``: a torchrun job, whose
    rank 0 alone writes and takes the lock (the other ranks share its directory)."""
    if distributed:
        from raptor.cli.distributed import launch_rank

        if launch_rank() != 0:
            return None
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    directory = Path(output_dir)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / LOCK_NAME
    if lock in _HELD:
        return lock
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(f"{flag} {directory}: another raptor run ({holder}) is writing there now; wait for it "
                              f"to end, or choose another {flag}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file as we opened it: lock the new one
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "command": " ".join(sys.argv[:1] + sys.argv[1:6])}).encode())
    _HELD[lock] = (fd, created)
    return lock


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(info['pid'])} on {info['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


def release_all() -> None:
    """Remove and unlock every lock this process holds (and a directory the lock created, if still empty)."""
    while _HELD:
        lock, (fd, created) = _HELD.popitem()
        try:
            lock.unlink(missing_ok=True)  # while still locked: a waiting run then locks a new file
        finally:
            os.close(fd)
        if created:
            try:
                lock.parent.rmdir()
            except OSError:  # it holds the run's outputs
                pass
