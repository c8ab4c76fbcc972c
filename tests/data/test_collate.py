"""Batches: fast path (encode once + collate) equals the reference (tokenizer pads the batch)."""

from __future__ import annotations

import pytest
import torch

from raptor.data import ClassificationData, encode, encode_batch, train_wordpiece
from raptor.data.batching import collate
from raptor.errors import ConfigError

TEXTS = ("a charming journey", "bleak , desperate and very very long " * 4, "ok", "", "the film is slow")
PAIRS = ("is it good ?", "no", "a much longer second sentence that will need truncating " * 3, "x", "")


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(TEXTS + PAIRS, vocab_size=80, min_frequency=1)


@pytest.fixture(scope="module", params=["single", "pair"])
def data(request):
    pairs = PAIRS if request.param == "pair" else None
    return ClassificationData(TEXTS, (0, 1, 1, 0, 1), ("neg", "pos"), pairs, source="mem")


@pytest.mark.parametrize("max_length", [8, 16, 512])
@pytest.mark.parametrize("indices", [[0, 1, 2, 3, 4], [4, 2], [3], [1, 1, 0]])
def test_fast_path_matches_reference(tokenizer, data, max_length, indices):
    fast = collate(encode(tokenizer, data, max_length=max_length), indices)
    slow = encode_batch(tokenizer, data, indices, max_length=max_length)
    assert fast.keys() == slow.keys() == {"input_ids", "attention_mask", "labels"}
    for key in fast:
        assert fast[key].dtype == torch.long
        assert torch.equal(fast[key], slow[key]), key


def test_shapes_padding_and_truncation(tokenizer, data):
    batch = collate(encode(tokenizer, data, max_length=8), range(len(data)))
    ids_BT, mask_BT = batch["input_ids"], batch["attention_mask"]
    assert ids_BT.shape == mask_BT.shape and ids_BT.shape[0] == 5 and ids_BT.shape[1] <= 8
    assert batch["labels"].tolist() == [0, 1, 1, 0, 1]
    lengths = mask_BT.sum(dim=1)
    for b in range(5):
        n = int(lengths[b])
        assert mask_BT[b, :n].eq(1).all() and mask_BT[b, n:].eq(0).all()  # right padding
        assert ids_BT[b, n:].eq(0).all()  # pad id 0
        assert ids_BT[b, 0] == 2 and ids_BT[b, n - 1] == 3  # [CLS] ... [SEP]
        assert (ids_BT[b, :n] == 3).sum() == (2 if data.is_pair else 1)  # pairs are encoded as pairs
    assert int(lengths.max()) == 8  # the long records were truncated to max_length


def test_empty_batch(tokenizer, data):
    batch = collate(encode(tokenizer, data, max_length=16), [])
    assert batch["input_ids"].shape == (0, 0) and batch["labels"].shape == (0,)
    ref = encode_batch(tokenizer, data, [], max_length=16)
    assert ref["input_ids"].shape == (0, 0)


def test_pad_to_fixed_width(tokenizer, data):
    enc = encode(tokenizer, data, max_length=16)
    fixed = collate(enc, [2, 0], pad_to=16)
    natural = collate(enc, [2, 0])
    T = natural["input_ids"].shape[1]
    assert fixed["input_ids"].shape == (2, 16)
    assert torch.equal(fixed["input_ids"][:, :T], natural["input_ids"])
    assert fixed["input_ids"][:, T:].eq(0).all() and fixed["attention_mask"][:, T:].eq(0).all()
    assert collate(enc, [], pad_to=16)["input_ids"].shape == (0, 16)
    with pytest.raises(ConfigError, match="pad_to"):
        collate(enc, [0], pad_to=8)


def test_max_length_too_small(tokenizer, data):
    with pytest.raises(ConfigError, match="max_length must be an integer >="):
        encode(tokenizer, data, max_length=2)


def test_tokenizer_without_pad(tokenizer, data):
    from copy import deepcopy

    nopad = deepcopy(tokenizer)
    nopad.pad_token = None
    with pytest.raises(ConfigError, match="no pad token"):
        encode(nopad, data, max_length=16)


@pytest.mark.parametrize("pair", [False, True])
@pytest.mark.parametrize("max_length", [8, 16])
def test_huge_records_are_cut_to_a_bounded_prefix_with_the_same_tokens(tokenizer, pair, max_length):
    """A very long text (a 20 MB JSONL record) is tokenized only up to a bounded prefix, and the
    result equals the slow path that tokenizes the whole text (encode_batch)."""
    # Long enough to be cut (> 32 characters per kept token), short enough for the slow reference:
    # the tokenizers library's pair truncation takes memory quadratic in the length of a text.
    long_a = "bleak ,  desperate and   very long journey " * 50  # ~2k characters, runs of spaces
    long_b = "x" * 600 + " the film is slow" * 150  # a first 'word' longer than any token
    texts = (long_a, "ok", long_b, "a charming journey")
    pairs = (long_b, long_a, "no", "is it good ?") if pair else None
    data = ClassificationData(texts, (0, 1, 1, 0), ("neg", "pos"), pairs, source="mem")
    seen = []

    class Spy:
        def __init__(self, tok):
            self.tok = tok

        def __getattr__(self, name):
            return getattr(self.tok, name)

        def __call__(self, text, text_pair=None, **kw):
            for t in ([text] if isinstance(text, str) else text) + ([] if text_pair is None else list(text_pair)):
                seen.append(len(t))
            return self.tok(text, text_pair, **kw)

    fast = collate(encode(Spy(tokenizer), data, max_length=max_length), range(4))
    slow = encode_batch(tokenizer, data, range(4), max_length=max_length)
    assert all(torch.equal(fast[k], slow[k]) for k in fast)
    assert max(seen) < min(len(long_a), len(long_b))  # never a whole long text
