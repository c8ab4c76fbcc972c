"""Model (and tokenizer) loading as a library: what ``raptor train``, ``raptor inspect`` and the
experiments call.

:class:`ModelSource` names a tiny family (random init from an explicit generator, WordPiece trained
on the PUBLIC corpus only), a local ``save_pretrained`` directory or a hub name;
:func:`load_model_and_tokenizer` loads it, :func:`init_generator` is the run's initialisation
generator and :func:`base_weights` lists what a ``save_pretrained`` directory holds (a checkpoint
stores only the weights not read unchanged from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raptor.errors import CheckpointError
from raptor.moe.names import FAMILY_NAMES
from raptor.shipped import DEFAULT_MODEL  # the model of a run that names none (re-exported)

if TYPE_CHECKING:  # torch, transformers and tokenizers are imported on use (fast CLI start-up)
    import torch

    from raptor.data import ClassificationData




@dataclass(frozen=True)
class ModelSource:
    """A model to fine-tune: a tiny family name, a ``save_pretrained`` directory or a hub name.

    ``tokenizer``: a tokenizer directory/file (default: the model's own, or for tiny families a
    WordPiece of ``vocab_size`` trained on the public corpus). The size fields apply to tiny families.
    """

    model: str = DEFAULT_MODEL
    tokenizer: str | None = None
    vocab_size: int = 8000
    hidden_size: int = 64
    num_layers: int = 2
    num_experts: int = 4
    max_length: int = 128

    @property
    def is_tiny(self) -> bool:
        return self.model in FAMILY_NAMES


def load_model_and_tokenizer(source: ModelSource, public: ClassificationData, num_labels: int,
                             generator: torch.Generator):
    """(model, tokenizer). Privacy: a tiny family's tokenizer is trained on ``public`` only.

    ``generator`` (the run's seeded or secure one) draws a tiny family's weights, or the parameters a
    pre-trained checkpoint lacks (its new classification head); never the global RNG."""
    from raptor.data import check_tokenizer_matches_model, load_tokenizer, train_wordpiece
    from raptor.moe.adapters import get_adapter
    from raptor.moe.models import TinySize, build_model, load_model

    if source.is_tiny:
        tokenizer = load_tokenizer(source.tokenizer) if source.tokenizer else \
            train_wordpiece(public.corpus(), vocab_size=source.vocab_size, lowercase=True)
        size = TinySize(vocab_size=max(len(tokenizer), 8), hidden_size=source.hidden_size,
                        num_layers=source.num_layers, num_heads=4, num_experts=source.num_experts,
                        top_k=1 if get_adapter(source.model).top1 else 2,
                        expert_intermediate=2 * source.hidden_size, max_positions=max(256, source.max_length))
        model = build_model(source.model, num_labels=num_labels, generator=generator, size=size)
    else:
        tokenizer = load_tokenizer(source.tokenizer or source.model)
        model = load_model(source.model, num_labels=num_labels, generator=generator)
    check_tokenizer_matches_model(tokenizer, model.config)
    return model, tokenizer


def model_directory(name: str) -> Path:
    """The directory a ``--model`` name means: a shipped or built model's (built on first use), else the path."""
    from raptor.shipped import model_directory as directory

    return directory(name)


def shipped_models() -> tuple[str, ...]:
    """The names of the models shipped with raptor (:func:`raptor.shipped.available`)."""
    from raptor.shipped import available

    return tuple(available())


def init_generator(seed: int | None) -> torch.Generator:
    """A run's initialisation generator (stream 3 of :class:`raptor.mechanisms.GeneratorSpec`): it
    draws a tiny family's weights or a new head. Without ``seed`` it comes from the OS CSPRNG
    (a secure run); with one, the run is reproducible and NOT secure."""
    from raptor.mechanisms import GeneratorSpec

    return GeneratorSpec(secure=seed is None, seed=seed).make(3)


def base_weights(model_dir: str | Path | None) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the weights stored in a ``save_pretrained`` directory's safetensors files
    (empty for anything else: a tiny family, a hub name, a ``.bin`` checkpoint)."""
    if model_dir is None or not Path(model_dir).is_dir():
        return {}
    from safetensors import SafetensorError, safe_open

    out = {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                out.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{file}: cannot be read ({err}); check the --model directory") from err
    return out
