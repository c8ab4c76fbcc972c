"""The ``minilm-moe`` cache checks and heals itself: a build carries ``SHA256SUMS`` and every use checks
it; a damaged or unfinished build is removed and built again under the lock with one warning (or
refused in one line naming the directory to delete); no ``.building`` directory outlives a failed
build; every error of the cache names ``RAPTOR_CACHE`` and the real cause (not a directory,
read-only, full), never ``--output-dir``.

The rebuild itself is stubbed by a copy of one real build (the session's ``minilm_cache``): this is
about the cache, not the upcycling."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import time
import warnings
from pathlib import Path

import pytest

from raptor.errors import ConfigError, RaptorWarning
from raptor.pretrain import minilm

NAME = f"minilm-moe-v{minilm.BUILD_VERSION}"


def run_cli(argv, capsys):
    """(exit code, stdout, stderr) of ``raptor ARGV`` in process."""
    from raptor.cli.main import main

    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(rc, err, pattern):
    assert rc == 2 and "Traceback" not in err, (rc, err)
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and re.search(pattern, lines[0]), err


@pytest.fixture
def cache(minilm_cache, tmp_path, monkeypatch):
    """(a copy of a real build's cache root, the list of rebuilds): ``minilm.build`` copies the real
    build's files (all but its manifest) instead of upcycling again."""
    good = Path(minilm_cache) / NAME
    root = tmp_path / "cache"
    root.mkdir()
    shutil.copytree(good, root / NAME)
    builds: list[Path] = []

    def copy_build(name, target):
        shutil.copytree(good, target, ignore=shutil.ignore_patterns(minilm.MANIFEST))
        builds.append(target)
        return target

    monkeypatch.setattr(minilm, "build", copy_build)
    monkeypatch.setenv("RAPTOR_CACHE", str(root))
    minilm._VERIFIED.clear()
    return root, builds


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.endswith((".building", ".damaged")))


def _set_first_weight(path: Path, value: float) -> None:
    """Overwrite the first element of the file's first float32 tensor in place (size and header kept)."""
    with path.open("r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        entry = next(v for k, v in sorted(header.items()) if k != "__metadata__" and v["dtype"] == "F32")
        f.seek(8 + n + entry["data_offsets"][0])
        f.write(struct.pack("<f", value))


def _truncate(d: Path) -> None:
    weights = d / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)


DAMAGE = {
    "truncated safetensors": (_truncate, "model.safetensors is truncated"),
    "config.json deleted": (lambda d: (d / "config.json").unlink(), "config.json missing"),
    "one weight set to 1e30": (lambda d: _set_first_weight(d / "model.safetensors", 1e30),
                               "model.safetensors does not match its sha256"),
    "tokenizer edited": (lambda d: (d / "tokenizer.json").write_text("{}"), "tokenizer.json does not match"),
    "an unfinished build without a manifest": (
        lambda d: [(d / n).unlink() for n in (minilm.MANIFEST, "config.json")], "config.json missing"),
}


def test_the_build_carries_a_manifest_and_a_whole_build_is_used_as_it_is(cache):
    root, builds = cache
    sums = dict(reversed(line.split("  ", 1)) for line in (root / NAME / minilm.MANIFEST).read_text().splitlines())
    assert {"config.json", "model.safetensors", "tokenizer.json", "upcycle.json"} <= set(sums)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minilm.ensure_built("minilm-moe") == root / NAME
    assert time.perf_counter() - start < 1.5, "the first check of a process hashes ~175 MB: well under a second"
    start = time.perf_counter()
    for _ in range(20):
        minilm.ensure_built("minilm-moe")
    assert time.perf_counter() - start < 0.2, "later checks compare size and mtime only"
    assert builds == []


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_build_is_rebuilt_with_one_warning(case, cache):
    root, builds = cache
    damage, why = DAMAGE[case]
    minilm.ensure_built("minilm-moe")  # checked once in this process, then damaged
    damage(root / NAME)
    with pytest.warns(RaptorWarning) as caught:
        assert minilm.ensure_built("minilm-moe") == root / NAME
    lines = [str(w.message) for w in caught if issubclass(w.category, RaptorWarning)]
    assert len(lines) == 1, lines
    assert f"RAPTOR_CACHE {root}" in lines[0] and "is damaged" in lines[0] and why in lines[0], lines[0]
    assert "building it again" in lines[0]
    assert len(builds) == 1 and _leftovers(root) == []
    minilm._VERIFIED.clear()
    assert minilm.check_build(root / NAME) == ("ok", "")  # the new build is whole
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        minilm.ensure_built("minilm-moe")
    assert len(builds) == 1


def test_a_build_made_before_manifests_is_kept_and_gets_one(cache):
    root, builds = cache
    (root / NAME / minilm.MANIFEST).unlink()
    assert minilm.check_build(root / NAME)[0] == "unverified"
    assert minilm.ensure_built("minilm-moe") == root / NAME
    assert (root / NAME / minilm.MANIFEST).is_file() and builds == []
    minilm._VERIFIED.clear()
    assert minilm.check_build(root / NAME) == ("ok", "")


def test_a_killed_builds_directory_is_removed_and_a_failed_build_leaves_none(cache, monkeypatch):
    root, builds = cache
    shutil.rmtree(root / NAME)
    (root / f".{NAME}.building").mkdir()
    (root / f".{NAME}.building" / "model.safetensors").write_bytes(b"partial")
    assert minilm.ensure_built("minilm-moe") == root / NAME
    assert _leftovers(root) == [] and len(builds) == 1
    shutil.rmtree(root / NAME)

    def full(name, target):
        target.mkdir()
        (target / "model.safetensors").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device", str(target / "model.safetensors"))

    monkeypatch.setattr(minilm, "build", full)
    with pytest.raises(ConfigError) as raised:
        minilm.ensure_built("minilm-moe")
    message = str(raised.value)
    assert f"RAPTOR_CACHE {root} has no space left" in message and "set RAPTOR_CACHE to" in message, message
    assert "--output-dir" not in message
    assert _leftovers(root) == [] and not (root / NAME).exists()


def _train(tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"a film {i}\t{i % 2}\n" for i in range(16)))
    return run_cli(["train", "--model", "minilm-moe", "--train-file", train, "--public-size", "4", "--steps", "1",
                    "--batch-size", "4", "--max-length", "8", "--no-progress", "--output-dir", tmp_path / "out"],
                   capsys)


def test_raptor_cache_a_regular_file_is_one_line(tmp_path, monkeypatch, capsys):
    cache_file = tmp_path / "cache-file"
    cache_file.write_text("not a directory")
    monkeypatch.setenv("RAPTOR_CACHE", str(cache_file))
    rc, _, err = _train(tmp_path, capsys)
    one_error_line(rc, err, rf"RAPTOR_CACHE {cache_file} is a file, not a directory; set RAPTOR_CACHE to a directory")
    assert "--output-dir" not in err


def test_a_full_raptor_cache_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "cache"))

    def full(name, target):
        target.mkdir()
        raise OSError(errno.ENOSPC, "No space left on device", str(target / "model.safetensors"))

    monkeypatch.setattr(minilm, "build", full)
    rc, _, err = _train(tmp_path, capsys)
    one_error_line(rc, err, r"RAPTOR_CACHE .*cache has no space left on its device .*set RAPTOR_CACHE to a "
                            r"directory with space")
    assert "--output-dir" not in err and _leftovers(tmp_path / "cache") == []


def _read_only(monkeypatch, root: Path) -> None:
    """Writes under ``root`` fail with EROFS (the tests may run as root, which chmod does not stop)."""
    real_open, real_mkdir, real_replace = os.open, os.mkdir, os.replace

    def under(path) -> bool:
        return str(Path(path).absolute()).startswith(str(root))

    def ro_open(path, flags, *args, **kw):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kw)

    def ro_mkdir(path, *args, **kw):
        if under(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kw)

    def ro_replace(src, dst, *args, **kw):
        if under(src):
            raise OSError(errno.EROFS, "Read-only file system", str(src))
        return real_replace(src, dst, *args, **kw)

    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr(os, "mkdir", ro_mkdir)
    monkeypatch.setattr(os, "replace", ro_replace)


def test_a_read_only_raptor_cache(cache, tmp_path, monkeypatch):
    root, builds = cache
    _read_only(monkeypatch, root)
    assert minilm.ensure_built("minilm-moe") == root / NAME  # a whole build is read, never written
    shutil.rmtree(root / NAME)
    with pytest.raises(ConfigError) as raised:
        minilm.ensure_built("minilm-moe")
    message = str(raised.value)
    assert message.startswith(f"RAPTOR_CACHE {root} is on a read-only file system, so minilm-moe cannot be built"), \
        message
    assert "set RAPTOR_CACHE to a writable directory" in message and "free space" not in message
    assert "--output-dir" not in message and builds == []


def test_a_damaged_build_that_cannot_be_removed_is_refused_naming_it(cache, monkeypatch):
    root, builds = cache
    _truncate(root / NAME)
    _read_only(monkeypatch, root)
    with pytest.raises(ConfigError) as raised:
        minilm.ensure_built("minilm-moe")
    message = str(raised.value)
    assert f"its minilm-moe build {root / NAME} is damaged (model.safetensors is truncated" in message, message
    assert f"delete {root / NAME} and run again" in message and builds == []


def test_a_file_in_raptor_caches_path_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("RAPTOR_CACHE", str(tmp_path / "afile" / "cache"))
    rc, _, err = _train(tmp_path, capsys)
    one_error_line(rc, err, rf"RAPTOR_CACHE {tmp_path / 'afile' / 'cache'} is not a directory \(a file is in its "
                            r"path\), so minilm-moe cannot be built there; set RAPTOR_CACHE to a directory")


def test_a_tilde_in_raptor_cache_means_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAPTOR_CACHE", "~/models")
    assert minilm.cache_root() == tmp_path / "models"
