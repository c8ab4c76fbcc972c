"""One writer per output directory: ``OUTPUT_DIR/.raptor.lock``.

Two ``raptor train`` processes given the same ``--output-dir`` would interleave their checkpoints,
results and model. The first takes the lock; the second exits at once with a one-line error naming
the holder's pid and host.

The lock is an exclusive ``flock`` on the lock file (:mod:`raptor._flock`), not the file's
existence: the kernel drops it when its process ends in any way (``kill -9`` included), so a lock
left by a dead process never blocks a later run, with no pid guessing (pids are reused, and a pid
means nothing on another host of a shared file system). The file holds the holder's pid, host and
command for the message, and is removed when the run ends. Without ``fcntl`` (not POSIX) no lock
is taken. In a ``run.distributed`` job only rank 0 (the
writer) takes it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from raptor._flock import fcntl, lock_file, read_holder, unlock_and_remove, write_holder
from raptor.errors import ConfigError

LOCK_NAME = ".raptor.lock"
_HELD: dict[Path, tuple[int, bool]] = {}  # lock file -> (descriptor, whether the lock created its directory)


def lock_output_dir(output_dir, flag: str = "--output-dir", *, distributed: bool = False) -> Path | None:
    """Take the lock of ``output_dir`` (created if missing) for this process until :func:`release_all`;
    :class:`ConfigError` if another live process holds it. ``distributed``: a torchrun job, whose
    rank 0 alone writes and takes the lock (the other ranks share its directory)."""
    if distributed:
        from raptor.cli.torchrun import launch_rank

        if launch_rank() != 0:
            return None
    if fcntl is None:  # not POSIX: no lock
        return None
    directory = Path(output_dir)
    created = not directory.exists()
    lock = directory / LOCK_NAME
    if lock in _HELD:
        return lock
    try:  # a dangling symlink, a directory under /proc, ...: one line, not a traceback
        directory.mkdir(parents=True, exist_ok=True)
        fd = lock_file(lock)
    except OSError as err:
        raise ConfigError(f"{flag} {directory}: cannot be used as an output directory ({err.strerror or err}); "
                          f"choose another {flag}") from None
    if fd is None:
        raise ConfigError(f"{flag} {directory}: another raptor run ({_holder(lock)}) is writing there now; wait for it "
                          f"to end, or choose another {flag}")
    write_holder(fd, command=" ".join(sys.argv[:1] + sys.argv[1:6]))
    _HELD[lock] = (fd, created)
    return lock


def claim_output_dir(output_dir, *, command: str, writes: Iterable[str] = (), resume: bool = False,
                     flag: str = "--output-dir") -> Path:
    """The output directory of a command other than ``raptor train`` (pretrain, audit,
    predict): usable (:func:`raptor.training.run.preflight.check_output_dir`), locked (:func:`lock_output_dir`),
    and holding nothing but the files ``command`` writes itself (``writes``: their names), so that a
    train run, a saved model or another command's results are never overwritten. ``resume``: the
    directory is this command's own earlier run (checked by the command)."""
    from raptor.training.run.preflight import check_output_dir

    directory = check_output_dir(output_dir, overwrite=True, resume=True)
    lock_output_dir(directory, flag)
    if resume:
        return directory
    own = set(writes) | {LOCK_NAME}
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in own) if directory.is_dir() else []
    if foreign:
        shown = ", ".join(foreign[:6]) + (", ..." if len(foreign) > 6 else "")
        raise ConfigError(f"{flag} {directory}: already holds files that {command} does not write ({shown}), such as "
                          f"another run's or a saved model's, which would be overwritten; choose a new or empty {flag}")
    return directory


def _holder(lock: Path) -> str:
    info = read_holder(lock)
    try:
        return f"pid {int(info['pid'])} on {info['host']}"
    except (ValueError, KeyError, TypeError):
        return "pid unknown"


def release_all() -> None:
    """Remove and unlock every lock this process holds (and a directory the lock created, if still empty)."""
    while _HELD:
        lock, (fd, created) = _HELD.popitem()
        unlock_and_remove(lock, fd)  # removed while still locked: a waiting run then locks a new file
        if created:
            try:
                lock.parent.rmdir()
            except OSError:  # it holds the run's outputs
                pass
