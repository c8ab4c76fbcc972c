"""(prompt, answer) data for the generative objective: JSONL reading and fixed-length encoding.

A record is ``[bos] prompt answer [eos]``, right-padded to ``max_length`` (a fixed, public shape:
padding to the longest private record would reveal its length). ``labels`` carries the answer
tokens and the closing eos at their positions and ``-100`` elsewhere (see
:mod:`raptor.training.generate`). A prompt too long for ``max_length`` loses tokens from its left
end (right after bos) so that the answer is kept whole; an answer longer than half of
``max_length`` is cut at its end.

JSONL fields are configurable (``prompt`` / ``answer`` by default); a missing field, a non-string
value or an empty answer raises :class:`DataError` naming the file and the line.

Legend: N records, T = max_length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from raptor.data.textio import Record, read_table
from raptor.errors import ConfigError, DataError

IGNORE_INDEX = -100  # label of a position that is not an answer token


@dataclass(frozen=True)
class QAData:
    """Prompts and gold answers of one split (``lines``: the 1-based line of each record)."""

    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    lines: tuple[int, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.answers):
            raise DataError(f"{self.source or 'dataset'}: {len(self.prompts)} prompts but {len(self.answers)} answers")

    def __len__(self) -> int:
        return len(self.answers)

    def subset(self, indices: Sequence[int]) -> QAData:
        idx = [int(i) for i in indices]
        return QAData(tuple(self.prompts[i] for i in idx), tuple(self.answers[i] for i in idx),
                      tuple(self.lines[i] for i in idx) if self.lines else (), self.source)

    def corpus(self):
        yield from self.prompts
        yield from self.answers


@dataclass(frozen=True)
class GenerationEval:
    """Prompts (unpadded, one record each), gold answers, and how to decode."""

    prompts: tuple[dict[str, torch.Tensor], ...]
    answers: tuple[str, ...]
    eos_id: int
    max_new_tokens: int = 16

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.answers):
            raise ConfigError(f"{len(self.prompts)} prompts but {len(self.answers)} answers")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def __len__(self) -> int:
        return len(self.answers)


def string_field(record: Record, name: str, where: str, *, allow_empty: bool = False) -> str:
    """Field ``name`` of a JSONL record as a string, or a DataError naming the line."""
    if name not in record.fields:
        raise DataError(f"{where}, line {record.line}: no {name!r} field (fields: {', '.join(record.fields)}); "
                        "name the field with the matching --*-field flag")
    value = record.fields[name]
    if not isinstance(value, str):
        raise DataError(f"{where}, line {record.line}: field {name!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise DataError(f"{where}, line {record.line}: field {name!r} is empty")
    return value


def read_qa_jsonl(path: str | Path, *, prompt_field: str = "prompt", answer_field: str = "answer") -> QAData:
    """Prompt/answer pairs from a JSON Lines file."""
    table = read_table(path, fmt="jsonl")
    prompts, answers, lines = [], [], []
    for rec in table.records:
        prompts.append(string_field(rec, prompt_field, table.name, allow_empty=True))
        answers.append(string_field(rec, answer_field, table.name))
        lines.append(rec.line)
    return QAData(tuple(prompts), tuple(answers), tuple(lines), table.name)


@dataclass(frozen=True)
class SpecialIds:
    """bos / eos / pad ids of a tokenizer (bos falls back to [CLS], eos to [SEP])."""

    bos: int
    eos: int
    pad: int

    @classmethod
    def of(cls, tokenizer) -> SpecialIds:
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        pad = tokenizer.pad_token_id
        missing = [n for n, v in (("bos (or [CLS])", bos), ("eos (or [SEP])", eos), ("pad", pad)) if v is None]
        if missing:
            raise DataError(f"the tokenizer has no {', '.join(missing)} token; the generative objective needs them")
        return cls(int(bos), int(eos), int(pad))


def fit_lengths(prompt: list[int], answer: list[int], max_length: int, *, keep_prompt: bool = False,
                where: str = "") -> tuple[list[int], list[int]]:
    """Cut ``prompt`` (from the left, after its first token) and ``answer`` (at the end) to fit."""
    if len(prompt) + len(answer) <= max_length:
        return prompt, answer
    if keep_prompt:
        raise DataError(f"{where}: the prompt ({len(prompt)} tokens, image tokens included) and answer "
                        f"({len(answer)}) do not fit --max-length {max_length}; raise --max-length")
    answer = answer[: max(1, max_length // 2)]
    room = max_length - len(answer)
    prompt = prompt[:1] + prompt[len(prompt) - (room - 1):] if room > 1 else prompt[:1]
    return prompt, answer


def pack(prompts: Sequence[list[int]], answers: Sequence[list[int]], *, max_length: int, pad_id: int
         ) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask``/``labels`` [N, max_length] from fitted pieces."""
    N = len(prompts)
    ids = torch.full((N, max_length), pad_id, dtype=torch.long)
    mask = torch.zeros((N, max_length), dtype=torch.long)
    labels = torch.full((N, max_length), IGNORE_INDEX, dtype=torch.long)
    for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        n = len(p) + len(a)
        ids[i, :n] = torch.tensor(p + a, dtype=torch.long)
        mask[i, :n] = 1
        labels[i, len(p):n] = torch.tensor(a, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def encode_qa(tokenizer, data: QAData, *, max_length: int) -> dict[str, torch.Tensor]:
    """Training records of a text QA split: ``[bos] prompt answer [eos]``, answer-only labels."""
    sp = SpecialIds.of(tokenizer)
    prompts, answers = [], []
    for i in range(len(data)):
        p = [sp.bos] + tokenizer.encode(data.prompts[i], add_special_tokens=False)
        a = tokenizer.encode(" " + data.answers[i], add_special_tokens=False) + [sp.eos]
        p, a = fit_lengths(p, a, max_length)
        prompts.append(p)
        answers.append(a)
    return pack(prompts, answers, max_length=max_length, pad_id=sp.pad)


def qa_generation_eval(tokenizer, data: QAData, *, max_length: int, max_new_tokens: int = 16) -> GenerationEval:
    """Unpadded prompts ``[bos] prompt`` for greedy decoding, with the gold answers."""
    sp = SpecialIds.of(tokenizer)
    prompts = []
    for text in data.prompts:
        p = [sp.bos] + tokenizer.encode(text, add_special_tokens=False)
        if len(p) > max_length - 1:
            p = p[:1] + p[len(p) - (max_length - 2):]
        prompts.append({"input_ids": torch.tensor([p], dtype=torch.long)})
    return GenerationEval(tuple(prompts), tuple(data.answers), eos_id=sp.eos, max_new_tokens=max_new_tokens)
