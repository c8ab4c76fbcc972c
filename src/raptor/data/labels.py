"""One validation layer for class labels, used by ``raptor.fine_tune`` and ``raptor train``.

* :func:`label_ids`: the labels of records given in Python (``raptor.fine_tune``, JSON values) as
  ids and names: one type per split (integer class ids, or class names as strings, or booleans),
  no NaN or infinite value, no negative id, and against a training label set (``label_names``)
  every value must name one of its classes. A whole float is its integer (``1.0`` beside ``1`` is
  one class, as in files: :func:`raptor.data.user_files.canonical_label`); numbers of which some
  are fractional are all class names. A refusal names the record and the value.
* :func:`align_label_words`: label words matched to the labels by name when they are the label
  names (in any order); otherwise taken in label-id order, never a word that names another label.
* :func:`check_label_word_tokens`: two label words with the same tokens (``[UNK]``) would give two
  identical head rows; refused.
* :func:`label_map` / :func:`label_map_line`: the label -> id -> word map a run prints at its start
  and saves in ``results.json`` (``labels``).

Privacy: the label *set* of the training records is read, as every loader does (see
:mod:`raptor.data.user_files`); nothing else is computed from the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from raptor.errors import ConfigError, DataError

#: label map entries shown on the printed line (all are saved in results.json)
SHOWN_LABELS = 20


def plain(value):
    """A numpy or torch scalar as the Python value it holds (``numpy.int64(1)`` is ``1``); else ``value``."""
    if type(value).__module__ in ("numpy", "torch") and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _kind(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _canonical(value, where: str):
    """An int (class id) for a whole number, a str (class name) for a string or a boolean."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"{where}: label {value!r} is not a finite number (nan and infinite values are not "
                            "classes); fix or drop the record")
        return int(value) if value.is_integer() else repr(value)  # a fractional class is a name
    if isinstance(value, int):
        if value < 0:
            raise DataError(f"{where}: label {value} is a negative class id; integer labels are class ids "
                            "0..K-1 (give class names as strings to use other values)")
        return value
    if isinstance(value, str):
        from raptor.data.user_files import canonical_label

        if value.strip() == "":
            raise DataError(f"{where}: label {value!r} is an empty string; fix or drop the record")
        if value.strip().lower() in ("nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
            raise DataError(f"{where}: label {value!r} is not a finite number (nan and infinite values are not "
                            "classes); fix or drop the record")
        return canonical_label(value)
    raise DataError(f"{where}: label {value!r} is a {type(value).__name__}; a label must be an integer class id, a "
                    "class name (string) or a boolean")


def label_ids(values: Sequence, *, source: str, label_names: Sequence[str] | None = None,
              record: str = "record") -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``(label names, label ids)`` of one split's raw labels (see the module docstring).

    Without ``label_names`` (a training split), integer labels are ids (names ``"0".."K-1"``, at
    least two), string labels are names sorted as a file's (numerically when all are integers).
    With ``label_names`` (a validation or public split), every label must be one of the names (an
    integer is matched by name first, ``1`` to a class named ``"1"``) or an id in
    ``range(len(label_names))``."""
    values = [plain(v) for v in values]
    if not values:
        raise DataError(f"{source}: no records")
    first = _kind(values[0])
    canonical = []
    for i, value in enumerate(values):
        where = f"{source}: {record} {i}"
        if _kind(value) != first:
            raise DataError(f"{where}: label {value!r} is a {_kind(value)}, but {record} 0's label {values[0]!r} is "
                            f"a {first}; labels must be of one type (integer class ids, or class names as strings): "
                            "fix the record or convert the labels")
        canonical.append(_canonical(value, where))
    if first == "number" and any(isinstance(y, str) for y in canonical):  # 0.5 among 0, 1: all are names
        canonical = [str(y) for y in canonical]
    if label_names is None:
        if all(isinstance(y, int) for y in canonical):
            names = tuple(str(i) for i in range(max(max(canonical) + 1, 2)))
            return names, tuple(canonical)
        from raptor.data.user_files import _sorted_labels

        names = tuple(_sorted_labels(canonical))
        if len(names) < 2:
            raise DataError(f"{source}: every label is {names[0]!r}; classification needs at least two classes in "
                            "the training records")
        index = {n: i for i, n in enumerate(names)}
        return names, tuple(index[y] for y in canonical)
    names = tuple(str(n) for n in label_names)
    index = {n: i for i, n in enumerate(names)}
    ids = []
    for i, y in enumerate(canonical):
        if str(y) in index:  # by name first: labels "1", "2" in training and 1, 2 here are the same classes
            ids.append(index[str(y)])
        elif isinstance(y, int) and y < len(names):
            ids.append(y)
        else:
            raise DataError(f"{source}: {record} {i}: label {values[i]!r} is not a class of the training labels "
                            f"{_shown(names)} (ids 0..{len(names) - 1}); a classifier cannot predict a class it "
                            "never saw: fix the label, or give labels as the training records do")
    return names, tuple(ids)


def _shown(names: Sequence[str]) -> str:
    listed = list(names[:SHOWN_LABELS])
    return f"{listed}" + (f" and {len(names) - SHOWN_LABELS} more" if len(names) > SHOWN_LABELS else "")


def align_label_words(label_names: Sequence[str], words: Sequence[str], flag: str = "label_words") -> list[str]:
    """The label words in label-id order: matched by name when they are the label names in any order
    (words ``yes no`` for labels ``no`` = 0, ``yes`` = 1 gives ``no, yes``); otherwise as
    given, unless a word names another label, which is refused (it would initialise that label's
    row from a different label's word)."""
    names, words = [str(n) for n in label_names], [str(w) for w in words]
    if len(words) != len(names):
        raise ConfigError(f"{flag}: {len(words)} words {words} for {len(names)} labels {_shown(names)}: give one word "
                          "per label (in label-id order, or the label names themselves in any order)")
    if sorted(words) == sorted(names):
        return names
    folded = [n.lower() for n in names]
    if len(set(folded)) == len(folded) and sorted(w.lower() for w in words) == sorted(folded):
        by_name = {w.lower(): w for w in words}
        return [by_name[n] for n in folded]
    for i, word in enumerate(words):
        if word in names and names.index(word) != i:
            raise ConfigError(f"{flag}: the word {word!r} is the name of label {names.index(word)} but would "
                              f"initialise label {i} ({names[i]!r}); give one word per label in label-id order "
                              f"({', '.join(repr(n) for n in names)}), or exactly the label names in any order")
    return words


def check_label_word_tokens(tokenizer, words: Sequence[str], flag: str = "label_words") -> None:
    """Two label words that the tokenizer turns into the same tokens (unknown words become ``[UNK]``)
    would give identical head rows, so every prediction would be one class: refused."""
    seen: dict[tuple[int, ...], str] = {}
    unk = getattr(tokenizer, "unk_token_id", None)
    for word in words:
        ids = tuple(tokenizer(word, add_special_tokens=False)["input_ids"])
        if ids in seen:
            what = "the unknown token" if unk is not None and set(ids) <= {unk} else f"tokens {list(ids)}"
            raise ConfigError(f"{flag}: {seen[ids]!r} and {word!r} are both {what} in this tokenizer, so their head "
                              "rows would be identical and the model would start predicting one class; choose words "
                              "the tokenizer knows (or a random head)")
        seen[ids] = word


def label_map(label_names: Sequence[str], words: Sequence[str] | None = None) -> list[dict]:
    """``[{"label": name, "id": i, "word": word or None}, ...]`` in id order (results.json ``labels``)."""
    return [{"label": str(n), "id": i, "word": None if words is None else str(words[i])}
            for i, n in enumerate(label_names)]


def label_map_line(label_names: Sequence[str], words: Sequence[str] | None = None, *,
                   prefix: str = "raptor") -> str:
    """One line: ``labels (label -> id -> word): 'no' -> 0 -> 'no', 'yes' -> 1 -> 'yes'``."""
    entries = label_map(label_names, words)
    shown = [f"{e['label']!r} -> {e['id']}" + (f" -> {e['word']!r}" if words is not None else "")
             for e in entries[:SHOWN_LABELS]]
    more = f", ... ({len(entries)} labels, all in results.json)" if len(entries) > SHOWN_LABELS else ""
    head = "label -> id -> word" if words is not None else "label -> id"
    return f"{prefix}: labels ({head}): {', '.join(shown)}{more}"
