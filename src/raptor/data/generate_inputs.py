"""A generative run's inputs as a library: records, their declared public split, model and tokenizer.

* text decoders (``model`` a tiny family name: olmoe, mixtral, qwen2_moe, qwen3_moe, deepseek_v2,
  deepseek_v3; or a local ``save_pretrained`` causal-LM directory): JSONL records with
  ``prompt_field`` / ``answer_field`` (:func:`raptor.data.qa.read_qa_jsonl`);
* DeepSeek-VL2 (a directory in the release layout, ``model_type`` ``deepseek_vl_v2``): JSONL records
  with ``image_field`` / ``question_field`` / ``answer_field`` (:func:`raptor.data.vqa.read_vqa_jsonl`;
  every image is decoded before anything else happens).

:func:`read_generate_inputs` is what ``raptor train --objective generate`` reads before it calls
:func:`raptor.training.run.fine_tune.run_fine_tune`; :func:`split_public` is the one public/private
split of generative records, used by that loader and by :func:`raptor.fine_tune` alike.

Privacy: the public records are only what :class:`GenerateSource` declares (a public file, a
``public_size`` slice given on purpose, or, for a non-private run, the training data itself); a
tiny family's tokenizer is trained on them only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raptor.data.public_source import PublicSource, resolve_public_source
from raptor.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: what a generative DP run computes from public data (the declared source must exist)
PUBLIC_NEEDS = ("public routing statistics and the layer choice",)


@dataclass(frozen=True)
class GenerateSource:
    """Where a generative run's records and model come from (``raptor train --objective generate``'s
    data and model flags). The size fields apply to a tiny family's random init."""

    model: str
    train_file: str
    validation_file: str | None = None
    public_file: str | None = None
    public_size: float | None = None
    tokenizer: str | None = None
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    image_field: str = "image"
    question_field: str = "question"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    vocab_size: int = 8000
    hidden_size: int = 64
    num_layers: int = 2
    num_experts: int = 4
    max_length: int = 128
    nonprivate: bool = False

    @property
    def is_vl2(self) -> bool:
        from raptor.moe.vl2.config import MODEL_TYPE

        config = Path(self.model) / "config.json"
        return config.is_file() and json.loads(config.read_text()).get("model_type") == MODEL_TYPE

    def public_source(self) -> PublicSource:
        """The declared public source (never a silent slice of ``train_file``), before anything is read."""
        return resolve_public_source(public_file=self.public_file, public_size=self.public_size, user_data=True,
                                     nonprivate=self.nonprivate, needs=PUBLIC_NEEDS)


@dataclass(frozen=True)
class GenerateInputs:
    """A generative run before anything is encoded: the model and tokenizer as loaded or drawn, the
    raw private/public/dev records, the record counts (``info``), the declared public ``source``,
    and the weights read unchanged from a base checkpoint (``base``: they need not be stored for
    resume)."""

    model: object
    tokenizer: object
    private: object
    public: object
    dev: object
    info: dict
    base: dict
    source: PublicSource


def split_public(train, source: PublicSource, public=None):
    """(public, private) generative records of a declared ``source``: ``public`` as given for a file,
    all of ``train`` for a non-private run without a source, else a deterministic ``--public-size``
    slice of ``train`` (:func:`raptor.data.public.public_indices`, seed 0), removed from the private
    records."""
    if source.kind in ("file", "model-corpus"):
        if public is None:
            raise ConfigError(f"public source {source.kind} {source.path}: no public records were given")
        return public, train
    if public is not None:
        raise ConfigError(f"public records were given but the public source is {source.kind}")
    n = len(train)
    if source.kind in ("training-data", "none"):
        return (train if source.kind == "training-data" else train.subset(())), train
    from raptor.data.public import public_indices

    chosen = set(public_indices(n, source.size, seed=0))
    return train.subset(sorted(chosen)), train.subset([i for i in range(n) if i not in chosen])


def _first(data, limit: int | None):
    return data if data is None or not limit else data.subset(range(min(len(data), limit)))


def read_generate_inputs(source: GenerateSource, generator: torch.Generator) -> GenerateInputs:
    """Records (every VL2 image checked first), the declared public split, then the model:
    DeepSeek-VL2 from its directory; a tiny text family drawn from ``generator`` (tokenizer trained
    on the public records); or a ``save_pretrained`` causal LM."""
    public_source = source.public_source()
    vl2 = source.is_vl2
    if vl2:
        from raptor.data.vqa import read_vqa_jsonl

        def read(f):
            return read_vqa_jsonl(f, image_field=source.image_field, question_field=source.question_field,
                                  answer_field=source.answer_field)
    else:
        from raptor.data.qa import read_qa_jsonl

        def read(f):
            return read_qa_jsonl(f, prompt_field=source.prompt_field, answer_field=source.answer_field)
    train = read(source.train_file)  # every image checked here, before anything else
    dev = _first(read(source.validation_file) if source.validation_file else None, source.max_eval_samples)
    public, private = split_public(train, public_source, read(source.public_file) if source.public_file else None)
    private = _first(private, source.max_train_samples)
    model, tokenizer, base = _load_model(source, vl2, public, generator)
    info = {"private_records": len(private), "public_records": len(public),
            "dev_records": len(dev) if dev is not None else 0,
            "source": f"{'VQA' if vl2 else 'QA'} file {source.train_file}"}
    return GenerateInputs(model, tokenizer, private, public, dev, info, base, public_source)


def _load_model(source: GenerateSource, vl2: bool, public, generator):
    """(model, tokenizer, base weights)."""
    if vl2:
        from raptor.moe.vl2 import load_vl2

        model = load_vl2(source.model)  # refuses a directory that does not fill every parameter
        base = {n: tuple(p.shape) for n, p in model.named_parameters()}
        return model, load_decoder_tokenizer(source.tokenizer or source.model), base
    from raptor.data.model_source import base_weights
    from raptor.moe.causal import CAUSAL_CLASSES, build_causal_lm, load_causal_lm

    if source.model not in CAUSAL_CLASSES:
        return load_causal_lm(source.model), load_decoder_tokenizer(source.tokenizer or source.model), \
            base_weights(source.model)
    from raptor.data.tokenization import train_wordpiece
    from raptor.moe.models import TinySize

    tokenizer = load_decoder_tokenizer(source.tokenizer) if source.tokenizer else \
        train_wordpiece(public.corpus(), vocab_size=source.vocab_size, lowercase=True, min_frequency=1)
    size = TinySize(vocab_size=max(len(tokenizer), 8), hidden_size=source.hidden_size,
                    num_layers=source.num_layers, num_heads=4, num_experts=source.num_experts, top_k=2,
                    expert_intermediate=2 * source.hidden_size, max_positions=max(256, source.max_length))
    return build_causal_lm(source.model, size=size, generator=generator), tokenizer, {}


def load_decoder_tokenizer(path):
    """A tokenizer directory's ``tokenizer.json`` read directly (no AutoConfig lookup of the model,
    which DeepSeek-VL2's release layout would fail), else :func:`raptor.data.load_tokenizer`."""
    from transformers import PreTrainedTokenizerFast

    from raptor.data.tokenization import load_tokenizer

    p = Path(path)
    if p.is_dir() and (p / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(p))
    return load_tokenizer(path)


def encode_generative(model, tokenizer, private, public, dev, *, max_length: int, max_new_tokens: int):
    """(train, public, validation records, GenerationEval) with the run's ``model`` and ``tokenizer``
    (on resume: the checkpoint's); VQA records go through DeepSeek-VL2's processor."""
    from raptor.data.vqa import VQAData

    if isinstance(private, VQAData):
        from raptor.data.vl2_processor import Vl2Processor

        proc = Vl2Processor(model, tokenizer)

        def enc(d):
            return proc.encode(d, max_length=max_length)
        evaluation = proc.generation_eval(dev, max_new_tokens=max_new_tokens) if dev is not None else None
    else:
        from raptor.data.qa import encode_qa, qa_generation_eval

        def enc(d):
            return encode_qa(tokenizer, d, max_length=max_length)
        evaluation = qa_generation_eval(tokenizer, dev, max_length=max_length,
                                        max_new_tokens=max_new_tokens) if dev is not None else None
    return enc(private), enc(public), enc(dev) if dev is not None else None, evaluation
