"""Label-word initialisation of the classification head (the reference's default for matched runs).

Row ``i`` of the head's weight becomes ``scale * v_i / ||v_i||``, where ``v_i`` is the mean input
embedding of the tokens of label ``i``'s word (``negative``/``positive`` for SST-2, ``yes``/``no``
for the entailment tasks, ...); the head's bias, if any, becomes 0. With a pretrained model this
starts the classifier where the model already separates the label words; with a tiny
random-weight model it is just another random start.

Regression (STS-B, ``--task-type regression``) has no label words: its head has one output, a
score, not one row per label. Label-word initialisation refuses it (:data:`REGRESSION_REFUSAL`).

Privacy: uses only the model's own (public, pre-trained) embeddings, the tokenizer and fixed
label words; no record is read, so it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from raptor.errors import ConfigError

#: GLUE task -> one word per label id, in the order of ``raptor.data.tasks.GLUE_TASKS[task].label_names``
LABEL_WORDS: dict[str, tuple[str, ...]] = {
    "sst2": ("negative", "positive"),
    "mrpc": ("no", "yes"),  # not_equivalent, equivalent
    "rte": ("yes", "no"),  # entailment, not_entailment
    "cola": ("no", "yes"),  # unacceptable, acceptable
    "qnli": ("yes", "no"),  # entailment, not_entailment
    "mnli": ("yes", "maybe", "no"),  # entailment, neutral, contradiction
    "qqp": ("no", "yes"),  # not_duplicate, duplicate
    "wnli": ("no", "yes"),  # not_entailment, entailment
}

HEAD_ATTRS = ("classifier", "score")

REGRESSION_REFUSAL = ("--head-init label-words does not apply to regression (STS-B, --task-type regression): a "
                      "regression head has one output, a score, not one row per label word; use --head-init random")


def classification_head(model: nn.Module) -> nn.Linear:
    """The model's linear classification head (``classifier`` or ``score``, PEFT wrapping looked through)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for attr in HEAD_ATTRS:
        head = getattr(base, attr, None)
        if isinstance(head, nn.Linear):
            return head
    raise ConfigError(f"{type(base).__name__} has no linear classification head ('classifier' or 'score'): "
                      "label-word initialisation needs one")


@torch.no_grad()
def init_head_from_label_words(model: nn.Module, tokenizer, label_words: Sequence[str], *,
                               scale: float = 0.02) -> None:
    """Set the head's rows to the normalised mean embeddings of ``label_words`` times ``scale``."""
    head = classification_head(model)
    config = getattr(model, "config", None)
    if head.weight.shape[0] == 1 or getattr(config, "problem_type", None) == "regression":
        raise ConfigError(REGRESSION_REFUSAL)
    embedding = model.get_input_embeddings().weight
    if head.weight.shape[0] != len(label_words):
        raise ConfigError(f"{len(label_words)} label words {list(label_words)} for a head with "
                          f"{head.weight.shape[0]} labels: give one word per label")
    if head.weight.shape[1] != embedding.shape[1]:
        raise ConfigError(f"the head's input width {head.weight.shape[1]} differs from the embedding width "
                          f"{embedding.shape[1]}: label-word initialisation needs them equal")
    for i, word in enumerate(label_words):
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ConfigError(f"label word {word!r} has no tokens in this tokenizer: choose another word")
        vec = embedding[torch.tensor(ids, device=embedding.device)].float().mean(dim=0)
        norm = vec.norm()
        if not torch.isfinite(norm) or norm == 0:
            raise ConfigError(f"label word {word!r}: its mean embedding has norm {float(norm)}; choose another word")
        head.weight[i].copy_((vec / norm * scale).to(head.weight.dtype))
    if head.bias is not None:
        head.bias.zero_()
