"""The generative objective for decoder families: answer-only cross-entropy, greedy decoding, exact match.

Fine-tuning on (prompt, answer) pairs. Each record is ``[bos] prompt answer [eos]`` padded on the
right to a fixed, public length; ``labels[r, t]`` is the token at position t when t is an answer
token (the answer's tokens and the closing eos) and ``-100`` elsewhere (prompt, image tokens,
padding). The loss of record r is the mean next-token cross-entropy over its answer tokens:

    loss_r = (1 / |A_r|) * sum_{t in A_r} -log p(x_t | x_<t)

so every record weighs the same whatever its answer length (a record with no answer token has
loss 0). :func:`answer_loss_per_record` is the per-record loss hook of
:class:`raptor.per_sample.engine.PerRecordEngine` (``loss_fn``): it returns one loss per record
and couples nothing across records, so every DP method uses it unchanged.

Evaluation (:func:`evaluate_generation`): greedy decoding from each prompt, one record at a time
(no padding, no KV cache: the plain, obviously-correct loop), until eos or ``max_new_tokens``;
then exact match after normalisation (lower case, punctuation removed, whitespace collapsed) and
token-level F1 (the SQuAD-style bag-of-tokens F1 on the normalised strings).

Privacy: evaluation runs on the validation split (evaluation data), never on the private
training records; the training loss is never shown.

Legend: B records, T tokens per record, V vocabulary.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from raptor.data.qa import IGNORE_INDEX, GenerationEval
from raptor.errors import ConfigError
from raptor.training.evaluator import model_device
from raptor.training.step.trainer import Trainer


def answer_loss_per_record(logits_BTV: torch.Tensor, labels_BT: torch.Tensor) -> torch.Tensor:
    """Per-record mean next-token cross-entropy over answer tokens, ``[B]``.

    ``labels_BT`` holds the target token at answer positions and ``-100`` elsewhere; the logits at
    position t predict the token at t + 1.
    """
    if labels_BT.dim() != 2 or logits_BTV.shape[:2] != labels_BT.shape:
        raise ConfigError(f"the generative loss needs logits [B,T,V] and labels [B,T]; got "
                          f"{tuple(logits_BTV.shape)} and {tuple(labels_BT.shape)}")
    if logits_BTV.dtype not in (torch.float32, torch.float64):
        logits_BTV = logits_BTV.float()
    pred = logits_BTV[:, :-1]
    target = labels_BT[:, 1:]
    B, T1, V = pred.shape
    nll = F.cross_entropy(pred.reshape(B * T1, V), target.reshape(B * T1), ignore_index=IGNORE_INDEX,
                          reduction="none").reshape(B, T1)
    count_B = (target != IGNORE_INDEX).sum(dim=1)
    return nll.sum(dim=1) / count_B.clamp(min=1).to(nll.dtype)


# ------------------------------------------------------------------------------------- metrics
_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed (no article removal)."""
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the bags of normalised tokens (1 when both are empty)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


# ------------------------------------------------------------------------------------- decoding
@torch.no_grad()
def greedy_generate(model: nn.Module, prompt: Mapping[str, torch.Tensor], *, max_new_tokens: int,
                    eos_id: int, extend: Sequence[str] = ("images_seq_mask",)) -> list[int]:
    """Greedy continuation of ONE prompt (``input_ids`` [1,P] and any extra model inputs, no padding).

    Each step re-runs the full forward on the prompt plus the tokens generated so far (no cache) and
    appends the argmax of the last position; stops after ``eos_id`` (not returned) or
    ``max_new_tokens``. Inputs named in ``extend`` are per-token masks that grow with ``False``.
    """
    ids = prompt["input_ids"]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ConfigError(f"greedy_generate takes one prompt [1,P], got input_ids {tuple(ids.shape)}")
    extra = {k: v for k, v in prompt.items() if k not in ("input_ids", "attention_mask", "labels")}
    out: list[int] = []
    for _ in range(max_new_tokens):
        inputs = dict(extra, input_ids=ids, attention_mask=torch.ones_like(ids))
        logits = model(**inputs).logits
        token = int(logits[0, -1].argmax())
        if token == eos_id:
            break
        out.append(token)
        ids = torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        for k in extend:
            if k in extra:
                extra[k] = torch.cat([extra[k], extra[k].new_zeros((1, 1))], dim=1)
    return out


def evaluate_generation(model: nn.Module, data: GenerationEval, tokenizer, *, device=None,
                        examples: int = 5) -> dict:
    """Greedy decoding on every prompt: mean exact match, mean token F1, and a few examples.
    ``device``: where the prompts go (default: the model's device)."""
    device = model_device(model) if device is None else device
    em = f1 = 0.0
    shown = []
    for i, (prompt, gold) in enumerate(zip(data.prompts, data.answers, strict=True)):
        batch = {k: v.to(device) for k, v in prompt.items()}
        tokens = greedy_generate(model, batch, max_new_tokens=data.max_new_tokens, eos_id=data.eos_id)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        em += exact_match(text, gold)
        f1 += token_f1(text, gold)
        if i < examples:
            shown.append({"prediction": text, "answer": gold})
    n = max(len(data), 1)
    return {"exact_match": em / n, "token_f1": f1 / n, "records": len(data), "examples": shown}


@torch.no_grad()
def mean_answer_loss(model: nn.Module, records: Mapping[str, torch.Tensor], *, batch_size: int, device) -> float:
    """Mean per-record answer loss over (validation) records, natural routing."""
    n = int(records["labels"].shape[0])
    total = 0.0
    for start in range(0, n, batch_size):
        batch = {k: v[start:start + batch_size].to(device) for k, v in records.items()}
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        total += float(answer_loss_per_record(logits, batch["labels"]).sum())
    return total / max(n, 1)


# ------------------------------------------------------------------------------------- training
class GenerativeObjective:
    """What the method table needs for generative fine-tuning.

    ``evaluation``: validation prompts and gold answers (greedy decoding, exact match, token F1);
    ``tokenizer``: decodes generated ids; ``freeze_shared_experts``: keep the MoE blocks' always-on
    shared experts frozen (the reference's DeepSeek-VL2 setting) instead of training them in the
    shared group (raptor's default). Under ``dp-lora`` the LM head stays frozen (a pretrained
    vocabulary projection; only the LoRA factors train).
    """

    loss_fn = staticmethod(answer_loss_per_record)

    def __init__(self, *, evaluation: GenerationEval | None, tokenizer, freeze_shared_experts: bool = False):
        self.evaluation = evaluation
        self.tokenizer = tokenizer
        self.freeze_shared_experts = bool(freeze_shared_experts)

    @staticmethod
    def trainer_class():
        return GenerativeTrainer


class GenerativeTrainer(Trainer):
    """:class:`~raptor.training.step.trainer.Trainer` with generative evaluation.

    ``evaluate`` returns exact match (the main metric), token F1 and the mean dev answer loss; the token F1 and a few decoded
    examples of each evaluation are kept too, and ``results()`` names the fields for what they are
    (``exact_match``, ``token_f1``) instead of ``accuracy``.
    """

    def __init__(self, *, objective: GenerativeObjective, **kwargs):
        super().__init__(**kwargs)
        self.objective = objective
        self.generation_log: list[dict] = []

    def evaluate_generation(self) -> dict | None:
        ev = self.objective.evaluation
        if ev is None:
            return None
        return evaluate_generation(self.model, ev, self.objective.tokenizer, device=self.device)

    @torch.no_grad()
    def evaluate(self) -> dict:
        """The evaluation point of :meth:`Trainer.evaluate` with ``exact_match`` (main) and ``token_f1``."""
        gen = self.evaluate_generation()
        if gen is None:
            return {"metrics": {}, "main_metric": None, "dev_loss": None, "accuracy": None}
        loss = None
        if self.validation is not None:
            loss = mean_answer_loss(self.model, self.validation, batch_size=self.config.performance.eval_batch_size,
                                    device=self.device)
        self.generation_log.append(gen)
        return {"metrics": {"exact_match": gen["exact_match"], "token_f1": gen["token_f1"]},
                "main_metric": "exact_match", "dev_loss": loss, "accuracy": None}

    def results(self) -> dict:
        """Read from the evaluation points (``state.evals``, which checkpoints keep), so a resumed
        run reports the evaluations made before the interruption too; the decoded examples are
        those of this process's last evaluation."""
        out = super().results()
        evals = []
        for e in out["evals"]:
            metrics = e.get("metrics") or {}
            if "exact_match" not in metrics:  # no validation prompts: nothing was decoded
                continue
            e = {k: v for k, v in e.items() if k != "accuracy"}
            e.update(exact_match=metrics["exact_match"], token_f1=metrics["token_f1"])
            evals.append(e)
        out["evals"] = evals
        out.pop("final_accuracy", None)
        last = evals[-1] if evals else None
        out["final_exact_match"] = last["exact_match"] if last else None
        out["final_token_f1"] = last["token_f1"] if last else None
        out["examples"] = self.generation_log[-1]["examples"] if self.generation_log else []
        out["objective"] = "generate"
        return out
