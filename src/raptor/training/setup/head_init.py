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


@torch.no_grad()
def fit_head_on_public(model: nn.Module, public: dict[str, torch.Tensor], *, batch_size: int = 64,
                       l2: float = 1.0, max_iter: int = 500) -> dict:
    """Fit the linear classification head on PUBLIC records (``--head-init public-fit``).

    The head's input (the model's pooled features, read by a hook on the head, at the current,
    public weights) is computed for every public record; an L2-regularised multinomial logistic
    regression (scikit-learn's lbfgs, deterministic: no random draw) is fitted to their labels;
    its coefficients become the head's weight and bias. Returns the fit's public accuracy and size.

    Privacy: the caller passes declared-public records only (privacy rule 2); no private record is
    read, so the head costs no budget. A run that then freezes the head (``freeze_head=True``) trains
    the backbone against this fixed public classifier.
    """
    from sklearn.linear_model import LogisticRegression

    head = classification_head(model)
    if head.weight.shape[0] == 1:
        raise ConfigError("--head-init public-fit fits a classifier; a regression head (one output) has no classes")
    labels = public["labels"]
    n = int(labels.shape[0])
    if n == 0:
        raise ConfigError("--head-init public-fit needs public records with labels: declare a public split "
                          "(--public-file or --public-size)")
    feats: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda module, args: feats.append(args[0].detach().double().cpu()))
    was_training = model.training
    model.eval()
    try:
        device = head.weight.device
        for s in range(0, n, batch_size):
            model(input_ids=public["input_ids"][s:s + batch_size].to(device),
                  attention_mask=public["attention_mask"][s:s + batch_size].to(device))
    finally:
        handle.remove()
        model.train(was_training)
    x = torch.cat(feats).numpy()
    y = labels.long().cpu().numpy()
    classes = sorted(set(y.tolist()))
    K = head.weight.shape[0]
    if len(classes) < 2:
        raise ConfigError(f"--head-init public-fit: the public records hold one class only ({classes}); "
                          "a classifier needs at least two")
    fit = LogisticRegression(C=1.0 / l2, max_iter=max_iter).fit(x, y)
    weight = torch.zeros(K, x.shape[1], dtype=torch.float64)
    bias = torch.zeros(K, dtype=torch.float64)
    coef, intercept = torch.as_tensor(fit.coef_), torch.as_tensor(fit.intercept_)
    if len(classes) == 2:  # one logit margin w.x + b for class 1: split it as +-1/2 over the two rows
        weight[classes[1]], weight[classes[0]] = coef[0] / 2, -coef[0] / 2
        bias[classes[1]], bias[classes[0]] = intercept[0] / 2, -intercept[0] / 2
    else:
        for row, c in enumerate(fit.classes_):
            weight[int(c)], bias[int(c)] = coef[row], intercept[row]
    head.weight.copy_(weight.to(head.weight.dtype))
    if head.bias is not None:
        head.bias.copy_(bias.to(head.bias.dtype))
    return {"public_records": n, "public_accuracy": float(fit.score(x, y)), "l2": l2}
