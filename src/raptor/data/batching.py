"""Encoding records into model batches: ``input_ids [B,T]``, ``attention_mask [B,T]``, ``labels [B]``.

Two paths that give identical batches (a test checks it):

- fast: :func:`encode` tokenizes a whole split once (special tokens added, truncated to
  ``max_length``, pairs encoded as pairs with the tokenizer's pair template and longest-first
  truncation, no padding), then :func:`collate` right-pads the records of a batch to the longest
  one with the tokenizer's pad id;
- reference: :func:`encode_batch` calls the tokenizer on the batch's texts with
  ``padding="longest"``, ``padding_side="right"`` and ``return_tensors="pt"``.

Padding is on the right and the mask is 1 on real tokens, 0 on padding. ``labels`` are label ids
(``torch.long``) or, for a regression split, float32 scores. ``collate(...,
pad_to=max_length)`` pads to a fixed width instead of the longest record. An empty batch gives
``input_ids`` and ``attention_mask`` of shape ``[0, 0]`` (``[0, pad_to]`` with ``pad_to``) and
``labels`` of shape ``[0]``.

Legend of shape suffixes: B records in the batch, T tokens (the longest record in the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from raptor.data.dataset import ClassificationData
from raptor.errors import ConfigError


@dataclass(frozen=True)
class EncodedData:
    """A tokenized split: each record's token ids (unpadded) and its label id (or float score)."""

    input_ids: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...] | tuple[float, ...]
    pad_token_id: int
    max_length: int
    regression: bool = False

    @property
    def label_dtype(self) -> torch.dtype:
        return torch.float32 if self.regression else torch.long

    def __len__(self) -> int:
        return len(self.labels)


def _check(tokenizer, max_length: int, pair: bool) -> int:
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ConfigError("the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = '[PAD]')")
    need = tokenizer.num_special_tokens_to_add(pair=pair) + (2 if pair else 1)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < need:
        raise ConfigError(
            f"max_length must be an integer >= {need} (special tokens plus one token per text), got {max_length!r}"
        )
    return pad_id


#: a text longer than this many characters per token of ``max_length`` is cut to a prefix first
CHARS_PER_TOKEN_BOUND = 32
#: tokens beyond ``max_length`` a prefix must give, so that the cut cannot change the kept tokens
PREFIX_MARGIN = 8


def bounded_text(tokenizer, text: str, max_length: int) -> str:
    """A prefix of ``text`` whose truncated encoding equals that of ``text``, at most a few times as
    long as needed: tokenizers tokenize a whole text before truncating, so a 20 MB record would take
    gigabytes. The prefix is grown (x4) until it yields ``max_length + PREFIX_MARGIN`` tokens, so
    the cut (which can only change the tokens at its end) lies beyond every kept token."""
    k = CHARS_PER_TOKEN_BOUND * max_length
    while k < len(text):
        prefix = text[:k]
        if len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) >= max_length + PREFIX_MARGIN:
            return prefix
        k *= 4
    return text


def encode(tokenizer, data: ClassificationData, *, max_length: int) -> EncodedData:
    """Tokenize every record of ``data`` once, truncated to ``max_length`` tokens, without padding.

    Memory is bounded per record: a very long text is cut to a prefix first (:func:`bounded_text`),
    which gives the same tokens as the whole text (a test checks it against the whole text)."""
    pad_id = _check(tokenizer, max_length, data.is_pair)
    if len(data) == 0:
        return EncodedData((), (), pad_id, max_length, data.is_regression)
    out = tokenizer(
        [bounded_text(tokenizer, t, max_length) for t in data.texts],
        [bounded_text(tokenizer, t, max_length) for t in data.text_pairs] if data.is_pair else None,
        truncation=True,
        max_length=max_length,
        padding=False,
        add_special_tokens=True,
    )
    ids = tuple(tuple(int(t) for t in row) for row in out["input_ids"])
    return EncodedData(ids, data.labels, pad_id, max_length, data.is_regression)


def collate(encoded: EncodedData, indices: Sequence[int], *, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """The batch of records ``indices``, right-padded to the longest one, or to ``pad_to`` tokens.

    Privacy: the batch width ``T`` is the longest record's length unless ``pad_to`` is given; pass
    ``pad_to=encoded.max_length`` when the width must not depend on private records.
    """
    rows = [encoded.input_ids[int(i)] for i in indices]
    T = max((len(r) for r in rows), default=0)
    if pad_to is not None:
        if pad_to < encoded.max_length:
            raise ConfigError(f"pad_to ({pad_to}) must be >= the encoding's max_length ({encoded.max_length})")
        T = pad_to
    input_ids_BT = torch.full((len(rows), T), encoded.pad_token_id, dtype=torch.long)
    attention_mask_BT = torch.zeros((len(rows), T), dtype=torch.long)
    for b, row in enumerate(rows):
        input_ids_BT[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask_BT[b, : len(row)] = 1
    labels_B = torch.tensor([encoded.labels[int(i)] for i in indices], dtype=encoded.label_dtype)
    return {"input_ids": input_ids_BT, "attention_mask": attention_mask_BT, "labels": labels_B}


def encode_batch(tokenizer, data: ClassificationData, indices: Sequence[int], *, max_length: int) -> dict[str, torch.Tensor]:
    """Reference path: tokenize and pad the records ``indices`` in one tokenizer call."""
    _check(tokenizer, max_length, data.is_pair)
    idx = [int(i) for i in indices]
    label_dtype = torch.float32 if data.is_regression else torch.long
    if not idx:
        empty = torch.zeros((0, 0), dtype=torch.long)
        return {"input_ids": empty, "attention_mask": empty.clone(), "labels": torch.zeros(0, dtype=label_dtype)}
    out = tokenizer(
        [data.texts[i] for i in idx],
        [data.text_pairs[i] for i in idx] if data.is_pair else None,
        truncation=True,
        max_length=max_length,
        padding="longest",
        padding_side="right",
        return_tensors="pt",
    )
    return {
        "input_ids": out["input_ids"].long(),
        "attention_mask": out["attention_mask"].long(),
        "labels": torch.tensor([data.labels[i] for i in idx], dtype=label_dtype),
    }
