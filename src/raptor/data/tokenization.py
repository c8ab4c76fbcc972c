"""Tokenizers: train a WordPiece tokenizer offline on the public corpus; save, load, check.

:func:`train_wordpiece` builds a BERT-style WordPiece tokenizer with the ``tokenizers`` library:
BERT normaliser (optional lower-casing, accent stripping follows lower-casing), BERT
pre-tokeniser, ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` templates (token type 1 on the
second segment). Special tokens have fixed ids::

    [PAD] = 0, [UNK] = 1, [CLS] = 2, [SEP] = 3

so the pad id matches the tiny models' ``pad_token_id = 0``, and every other token follows in
sorted order. The vocabulary is learned by :func:`learn_wordpiece_vocab`, the algorithm of the
``tokenizers`` WordPiece trainer with one change: ``tokenizers`` breaks ties between equally
frequent pairs (and numbers the alphabet) in hash-map order, so two runs on the same corpus give
different vocabularies; ours breaks ties lexicographically, so the same public corpus and settings
always give the same ``tokenizer.json``. Normalisation, pre-tokenisation, the WordPiece model and
its serialisation are the ``tokenizers`` ones.

The result is a ``transformers`` fast tokenizer (``PreTrainedTokenizerFast``), like any tokenizer
:func:`load_tokenizer` returns, so the rest of raptor handles ours and a hub model's the same way.

Privacy: train only on the public corpus (``PublicPrivateSplit.public``); a vocabulary learned
from private records would leak their rare words.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from raptor.errors import ConfigError, DataError

#: BERT-style special tokens in id order: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3.
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
PAD, UNK, CLS, SEP = SPECIAL_TOKENS


def _pretokenize(texts: Iterable[str], lowercase: bool) -> Counter:
    """Word counts after the BERT normaliser and pre-tokeniser of ``tokenizers``."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter = Counter()
    for text in texts:
        words.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    return words


def learn_wordpiece_vocab(words: Mapping[str, int], *, vocab_size: int, min_frequency: int) -> list[str]:
    """Learn a WordPiece vocabulary from word counts, deterministically.

    The algorithm of the ``tokenizers`` WordPiece trainer: BPE over symbols where every character
    but a word's first carries the ``##`` prefix. Start from every character symbol; repeatedly
    merge the most frequent adjacent pair ``(a, ##b) -> a+b`` (count summed over words weighted by
    their frequency) while the pair occurs at least ``min_frequency`` times and the vocabulary is
    below ``vocab_size``. Ties go to the lexicographically smallest pair (``tokenizers`` breaks them
    in hash-map order, which changes from run to run). Returns the special tokens, then the learned
    tokens sorted.

    Pair counts are updated incrementally (only words containing the merged pair are touched) and
    the best pair comes from a heap with lazy invalidation; a test checks this against a plain
    recount-everything loop.
    """
    prefix = "##"
    symbols = [[w[0], *(prefix + c for c in w[1:])] for w in words]
    counts = list(words.values())
    vocab = set(SPECIAL_TOKENS)
    for syms in symbols:
        vocab.update(syms)
    pair_count: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for w, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:]):
            pair_count[pair] += counts[w]
            where[pair].add(w)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    while heap and len(vocab) < vocab_size:
        neg, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -neg:
            continue  # stale entry
        if -neg < min_frequency:
            break
        merged = a + b[len(prefix):]
        vocab.add(merged)
        touched: set[tuple[str, str]] = set()
        for w in sorted(where.pop((a, b))):
            syms = symbols[w]
            for pair in zip(syms, syms[1:]):
                pair_count[pair] -= counts[w]
                touched.add(pair)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            symbols[w] = out
            for pair in zip(out, out[1:]):
                pair_count[pair] += counts[w]
                where[pair].add(w)
                touched.add(pair)
        for pair in touched:
            c = pair_count[pair]
            if c <= 0:
                pair_count.pop(pair, None)
                where.pop(pair, None)
            elif pair != (a, b):
                heapq.heappush(heap, (-c, *pair))
        pair_count.pop((a, b), None)
    return [*SPECIAL_TOKENS, *sorted(vocab - set(SPECIAL_TOKENS))]


def train_wordpiece(
    public_texts: Iterable[str],
    *,
    vocab_size: int = 4000,
    lowercase: bool = True,
    min_frequency: int = 2,
):
    """Train a WordPiece tokenizer on ``public_texts`` (see the module docstring).

    ``vocab_size`` is a target: a small corpus may yield fewer tokens, and the special tokens plus
    every character of the corpus (with and without ``##``) are always kept, even beyond it
    (``len(tokenizer)`` is the real size). Returns a ``transformers.PreTrainedTokenizerFast`` built on a
    ``tokenizers`` WordPiece model.

    Privacy: pass public texts only.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_TOKENS):
        raise ConfigError(f"vocab_size must be an integer > {len(SPECIAL_TOKENS)}, got {vocab_size!r}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ConfigError(f"min_frequency must be a positive integer, got {min_frequency!r}")
    words = _pretokenize(public_texts, lowercase)
    if not words:
        raise DataError("cannot train a tokenizer on an empty public corpus; give it some public texts")
    tokens = learn_wordpiece_vocab(words, vocab_size=vocab_size, min_frequency=min_frequency)
    vocab = {token: i for i, token in enumerate(tokens)}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    return _wrap(tok)


def _wrap(tok):
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, unk_token=UNK, cls_token=CLS, sep_token=SEP
    )
    wrapped.padding_side = "right"
    return wrapped


def save_tokenizer(tokenizer, directory: str | Path) -> Path:
    """Write ``tokenizer`` to ``directory`` (``tokenizer.json`` + ``tokenizer_config.json``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    return directory


def load_tokenizer(path_or_name: str | Path):
    """Load a Hugging Face tokenizer.

    - a directory written by ``save_pretrained`` (ours, or any model's): ``AutoTokenizer``;
    - a ``tokenizer.json`` file: a fast tokenizer; the BERT special tokens ``[PAD] [UNK] [CLS]
      [SEP]`` are set when its vocabulary has them;
    - the short name of a model shipped with raptor (:mod:`raptor.shipped`): its tokenizer;
    - anything else is taken as a hub name (``google/switch-base-8``), which needs the hub.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from raptor.shipped import resolve

    path_or_name = resolve(path_or_name)
    path = Path(path_or_name)
    if path.is_file():
        if path.suffix != ".json":
            raise DataError(f"{path}: expected a tokenizer directory or a tokenizer.json file")
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path))
        vocab = tokenizer.get_vocab()
        special = {k: v for k, v in dict(pad_token=PAD, unk_token=UNK, cls_token=CLS, sep_token=SEP).items()
                   if v in vocab}
        tokenizer.add_special_tokens(special)
        tokenizer.padding_side = "right"
        return tokenizer
    if path.is_dir():
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                                   "spiece.model", "tokenizer.model")):
            raise DataError(f"{path}: no tokenizer files here (tokenizer.json, tokenizer_config.json, ...)")
        return AutoTokenizer.from_pretrained(str(path))
    if path.is_absolute() or str(path_or_name).startswith((".", "~")) or str(path_or_name).count("/") > 1:
        raise DataError(f"{path}: tokenizer path not found")
    try:
        return AutoTokenizer.from_pretrained(str(path_or_name))
    except OSError as err:
        raise DataError(
            f"could not load tokenizer {str(path_or_name)!r}: it is not a local path and the hub did not "
            f"provide it ({err}); give a local directory or tokenizer.json"
        ) from err


def check_tokenizer_matches_model(tokenizer, config) -> None:
    """Raise :class:`ConfigError` unless the tokenizer's pad id equals ``config.pad_token_id`` and
    every token id fits in ``config.vocab_size``."""
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ConfigError("the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = '[PAD]')")
    model_pad = getattr(config, "pad_token_id", None)
    if model_pad is not None and pad_id != model_pad:
        raise ConfigError(
            f"tokenizer pad id {pad_id} differs from the model's pad_token_id {model_pad}; use a tokenizer "
            f"whose [PAD] is {model_pad} or set config.pad_token_id"
        )
    if len(tokenizer) > config.vocab_size:
        raise ConfigError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {config.vocab_size}; "
            f"build the model with vocab_size >= {len(tokenizer)}"
        )
