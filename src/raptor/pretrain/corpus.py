"""The PUBLIC pre-training corpus: which files, how they are split and packed into token blocks.

* :func:`public_text_files` lists the files to read: the ones the user names, or every ``*.txt``
  of a directory (``../shared/data/public_text`` by default in the CLI), optionally a chosen
  subset (``include``) or all but some (``exclude``). Nothing else is ever opened.
* :func:`read_paragraphs` reads them: one paragraph per non-empty line (the layout of every file
  in ``public_text``).
* :func:`split_held_out` holds out whole groups of consecutive paragraphs (by position only, never
  by content) for the held-out loss.
* :func:`pack_blocks` tokenises paragraphs and packs them into fixed-length blocks
  ``[CLS] p1 [SEP] p2 [SEP] ...`` of ``block_length`` tokens, with no padding.

Legend: N blocks, T tokens per block.

Privacy: these functions read only the files they are given, which the user declared public.
The caller (``raptor pretrain``) never passes a private file; a test opens-and-records every file
the pre-training run touches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from raptor.errors import ConfigError, DataError


@dataclass(frozen=True)
class CorpusFile:
    """One public text file and its paragraphs."""

    path: Path
    paragraphs: tuple[str, ...]

    @property
    def words(self) -> int:
        return sum(len(p.split()) for p in self.paragraphs)


def public_text_files(
    paths: Sequence[str | Path],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> tuple[Path, ...]:
    """The public files to read, sorted by name.

    ``paths`` are files or directories (a directory contributes its ``*.txt`` files). ``include``
    keeps only files whose name contains one of its strings; ``exclude`` drops files whose name
    contains one of its strings (e.g. ``imdb``: research use only, never in a shipped model).
    """
    if not paths:
        raise ConfigError("no public text given: pass --text FILE_OR_DIR (e.g. ../shared/data/public_text)")
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.glob("*.txt") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise DataError(f"--text {path}: no such file or directory")
    if include:
        files = [f for f in files if any(s in f.name for s in include)]
    if exclude:
        files = [f for f in files if not any(s in f.name for s in exclude)]
    files = sorted(dict.fromkeys(files), key=lambda p: (p.name, str(p)))
    if not files:
        raise DataError(f"no public text files left from --text {list(map(str, paths))} after "
                        f"--include {list(include)} / --exclude {list(exclude)}")
    return tuple(files)


def read_paragraphs(files: Sequence[Path]) -> tuple[CorpusFile, ...]:
    """Each file's non-empty lines (stripped), as paragraphs. UTF-8; a bad byte names the file."""
    out = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{path}: not UTF-8 text ({err})") from err
        paragraphs = tuple(line.strip() for line in text.splitlines() if line.strip())
        if not paragraphs:
            raise DataError(f"{path}: no text in this file")
        out.append(CorpusFile(path, paragraphs))
    return tuple(out)


def split_held_out(paragraphs: Sequence[str], *, every: int, group: int = 20) -> tuple[list[str], list[str]]:
    """Split paragraphs into (train, held_out) by position: group ``g`` of ``group`` consecutive
    paragraphs is held out when ``g % every == every // 2``. Whole groups keep neighbouring
    paragraphs of one article on one side."""
    if every < 2:
        raise ConfigError(f"--held-out-every must be >= 2, got {every}")
    train, held = [], []
    for i, p in enumerate(paragraphs):
        (held if (i // group) % every == every // 2 else train).append(p)
    return train, held


def pack_blocks(tokenizer, paragraphs: Sequence[str], *, block_length: int, batch: int = 2000) -> torch.Tensor:
    """Token blocks ``[N, T]`` (long): ``[CLS]`` then paragraphs separated by ``[SEP]``, cut every
    ``T - 1`` tokens; the last partial block is dropped. Uses the tokenizer's cls/sep tokens
    (bos/eos when it has no cls/sep)."""
    if block_length < 8:
        raise ConfigError(f"--block-length must be >= 8, got {block_length}")
    cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if cls_id is None or sep_id is None:
        raise ConfigError("the tokenizer has neither [CLS]/[SEP] nor bos/eos tokens to separate paragraphs")
    stream: list[int] = []
    for start in range(0, len(paragraphs), batch):
        for ids in tokenizer(list(paragraphs[start:start + batch]), add_special_tokens=False)["input_ids"]:
            stream.extend(ids)
            stream.append(sep_id)
    body = block_length - 1
    n = len(stream) // body
    if n == 0:
        raise DataError(f"the public text gives {len(stream)} tokens, fewer than one block of {block_length}")
    body_NT = torch.tensor(stream[: n * body], dtype=torch.long).view(n, body)
    return torch.cat([torch.full((n, 1), cls_id, dtype=torch.long), body_NT], dim=1)
