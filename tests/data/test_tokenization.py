"""WordPiece training on the public corpus: fixed special ids, determinism, save/load, model checks."""

from __future__ import annotations

import heapq  # noqa: F401  (documents that the fast learner uses a heap; the reference below does not)
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from raptor.data import check_tokenizer_matches_model, load_tokenizer, save_tokenizer, train_wordpiece
from raptor.data.tokenization import SPECIAL_TOKENS, learn_wordpiece_vocab
from raptor.errors import ConfigError, DataError

CORPUS = [
    "A charming and often affecting journey.",
    "Unflinchingly bleak and desperate.",
    "The acting, costumes, music, cinematography and sound are all astounding.",
    "It's slow -- very, very slow.",
    "A sometimes tedious film.",
    "The movie is charming, charming and charmingly acted.",
] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(CORPUS, vocab_size=120, min_frequency=2)


def test_special_token_ids(tokenizer):
    vocab = tokenizer.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id) == (0, 1, 2, 3)
    assert tokenizer.padding_side == "right"


def test_encodes_single_and_pair(tokenizer):
    single = tokenizer("charming journey")["input_ids"]
    assert single[0] == 2 and single[-1] == 3 and 1 not in single
    pair = tokenizer("charming", "bleak film", return_token_type_ids=True)
    ids, types_ = pair["input_ids"], pair["token_type_ids"]
    assert ids[0] == 2 and ids.count(3) == 2 and ids[-1] == 3
    first_sep = ids.index(3)
    assert set(types_[: first_sep + 1]) == {0} and set(types_[first_sep + 1 :]) == {1}


def test_lowercase_option():
    lower = train_wordpiece(CORPUS, vocab_size=120, lowercase=True)
    cased = train_wordpiece(CORPUS, vocab_size=120, lowercase=False)
    assert lower.tokenize("CHARMING") == lower.tokenize("charming")
    assert cased.tokenize("Charming") != cased.tokenize("charming")


def test_vocab_size_is_reached_but_the_alphabet_is_kept(tokenizer):
    assert len(tokenizer) <= 120
    assert len(train_wordpiece(CORPUS, vocab_size=60)) == 60
    # every character (and its ## form) stays, so a tiny vocab_size is exceeded by the alphabet
    alphabet_only = train_wordpiece(CORPUS, vocab_size=5)
    assert all(len(t.removeprefix("##")) == 1 for t in alphabet_only.get_vocab() if t not in SPECIAL_TOKENS)
    assert len(alphabet_only) > 5


def test_deterministic():
    a = train_wordpiece(CORPUS * 5, vocab_size=200)
    for _ in range(3):
        assert train_wordpiece(CORPUS * 5, vocab_size=200)._tokenizer.to_str() == a._tokenizer.to_str()


def reference_vocab(words: dict[str, int], vocab_size: int, min_frequency: int) -> list[str]:
    """Slow, obviously-correct BPE-with-## learner: recount every pair after every merge."""
    seqs = {w: [w[0], *("##" + c for c in w[1:])] for w in words}
    vocab = set(SPECIAL_TOKENS) | {s for seq in seqs.values() for s in seq}
    while len(vocab) < vocab_size:
        counts: Counter = Counter()
        for w, seq in seqs.items():
            for pair in zip(seq, seq[1:]):
                counts[pair] += words[w]
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < min_frequency:
            break
        a, b = best
        vocab.add(a + b[2:])
        for w, seq in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                    out.append(a + b[2:])
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
    return [*SPECIAL_TOKENS, *sorted(vocab - set(SPECIAL_TOKENS))]


@pytest.mark.parametrize("vocab_size, min_frequency", [(60, 1), (150, 2), (400, 1), (400, 3)])
def test_fast_learner_matches_reference(vocab_size, min_frequency):
    words = Counter(w.lower() for text in CORPUS + ["aaaa aaa abab baba banana bandana"] for w in text.split())
    assert learn_wordpiece_vocab(words, vocab_size=vocab_size, min_frequency=min_frequency) == \
        reference_vocab(dict(words), vocab_size, min_frequency)


def test_save_and_load_directory(tokenizer, tmp_path):
    save_tokenizer(tokenizer, tmp_path / "tok")
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    loaded = load_tokenizer(tmp_path / "tok")
    text = "a charming, bleak journey"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.pad_token_id == 0
    assert loaded.get_vocab() == tokenizer.get_vocab()


def test_load_bare_tokenizer_json(tokenizer, tmp_path):
    save_tokenizer(tokenizer, tmp_path)
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    assert (loaded.pad_token_id, loaded.cls_token_id, loaded.sep_token_id) == (0, 2, 3)
    assert loaded("x y", "z")["input_ids"] == tokenizer("x y", "z")["input_ids"]
    assert json.loads((tmp_path / "tokenizer.json").read_text())["model"]["type"] == "WordPiece"


def test_load_errors(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="tokenizer path not found"):
        load_tokenizer(tmp_path / "missing" / "dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no tokenizer files here"):
        load_tokenizer(tmp_path / "empty")
    import transformers

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to the hub")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", unreachable)
    with pytest.raises(DataError, match=r"could not load tokenizer 'google/switch-base-8'.*local directory"):
        load_tokenizer("google/switch-base-8")


def test_bad_arguments():
    with pytest.raises(ConfigError, match="vocab_size"):
        train_wordpiece(CORPUS, vocab_size=3)
    with pytest.raises(ConfigError, match="min_frequency"):
        train_wordpiece(CORPUS, min_frequency=0)
    with pytest.raises(DataError, match="empty public corpus"):
        train_wordpiece(["", "  "])


def test_matches_model_config(tokenizer):
    check_tokenizer_matches_model(tokenizer, SimpleNamespace(pad_token_id=0, vocab_size=len(tokenizer)))
    with pytest.raises(ConfigError, match="pad id 0 differs from the model's pad_token_id 1"):
        check_tokenizer_matches_model(tokenizer, SimpleNamespace(pad_token_id=1, vocab_size=1000))
    with pytest.raises(ConfigError, match="vocab_size is 10"):
        check_tokenizer_matches_model(tokenizer, SimpleNamespace(pad_token_id=0, vocab_size=10))


def test_tiny_switch_config_pad_is_zero(tokenizer):
    from raptor.moe.models import tiny_config

    check_tokenizer_matches_model(tokenizer, tiny_config("switch_transformers"))
