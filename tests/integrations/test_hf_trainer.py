"""The Hugging Face ``Trainer`` path (DPTrainer, PrivacyArguments): the same run through ``Trainer``
and through ``raptor.fine_tune`` releases the same updates and reaches the same epsilon; the
training loss and realized counts never reach user code or logs; the saved model is read by
``from_pretrained`` and ``raptor predict``; what cannot be private is refused by name."""

from __future__ import annotations

import csv
import gc
import json
import math
import random

import pytest
import torch
from tiny import ReleaseSpy, assert_same_tensors
from transformers import TrainerCallback, TrainingArguments

import raptor
import raptor.training.step.release as release_module
import raptor.training.step.trainer as trainer_module
from raptor.data import train_wordpiece
from raptor.data.loaders import from_records, to_records
from raptor.errors import ConfigError
from raptor.integrations.hf_trainer import DPTrainer, PrivacyArguments
from raptor.moe.models import TinySize, build_model
from raptor.per_sample.engine import EngineResult
from raptor.recipes import tiny_recipe
from raptor.training.config import replace_fields

WORDS = ["good", "bad", "film", "plot", "great", "dull", "actors", "scene", "fine", "awful", "story", "long"]


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"sentence": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))), "label": rng.randint(0, 1)}
            for _ in range(n)]


TRAIN_ROWS, PUBLIC_ROWS = _rows(40, 1), _rows(16, 2)
TOK = train_wordpiece([r["sentence"] for r in PUBLIC_ROWS] * 2, vocab_size=60)
MAX_LENGTH = 16


def _model():
    return build_model("olmoe", generator=torch.Generator().manual_seed(5), num_labels=2,
                       size=TinySize(vocab_size=len(TOK), num_experts=4, top_k=2))


def _items(rows: list[dict]) -> list[dict]:
    """What a run_glue-style script's tokenized dataset gives: token lists and a label per record."""
    return [dict(TOK(r["sentence"], truncation=True, max_length=MAX_LENGTH), label=r["label"]) for r in rows]


def _config(method: str, tmp_path, steps: int = 2):
    return replace_fields(tiny_recipe(method, steps=steps, batch_size=8, max_length=MAX_LENGTH,
                                      output_dir=str(tmp_path / "fine_tune")), {"optim.weight_decay": 0.0})


def _args(tmp_path, **kw) -> TrainingArguments:
    base = dict(output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4, learning_rate=1e-3, weight_decay=0.0,
                lr_scheduler_type="constant", optim="adamw_torch", report_to="none", save_strategy="no",
                logging_steps=1, use_cpu=True, disable_tqdm=True, max_steps=2)
    return TrainingArguments(**{**base, **kw})


def _dp_trainer(method, tmp_path, *, public=None, callbacks=None, **args_kw) -> DPTrainer:
    public = public if public is not None else to_records(TOK, from_records(PUBLIC_ROWS), MAX_LENGTH)
    return DPTrainer(model=_model(), args=_args(tmp_path, **args_kw), train_dataset=_items(TRAIN_ROWS),
                     processing_class=TOK, callbacks=callbacks,
                     privacy_args=PrivacyArguments(method=method, batch_size=8, seed=0, public=public,
                                                   config=_config(method, tmp_path)))


@pytest.mark.parametrize("method", ["raptor", "dpsgd"])
def test_the_trainer_path_releases_what_fine_tune_releases_and_reaches_its_epsilon(method, tmp_path, monkeypatch):
    spy_ref = ReleaseSpy(monkeypatch, trainer_module)
    ref = raptor.fine_tune(_model(), TOK, TRAIN_ROWS, None, _config(method, tmp_path), public=PUBLIC_ROWS,
                           progress=False)
    spy = ReleaseSpy(monkeypatch, release_module)
    trainer = _dp_trainer(method, tmp_path)  # the same public records, encoded as fine_tune encodes them
    out = trainer.train()
    assert len(spy.calls) == len(spy_ref.calls) == 2
    for (sums, grads), (ref_sums, ref_grads) in zip(spy.calls, spy_ref.calls, strict=True):
        assert_same_tensors(sums, ref_sums)    # the same Poisson sample, micro-batches and clipped sums
        assert_same_tensors(grads, ref_grads)  # the same noise over the same public denominators
    assert any(v.abs().sum() > 0 for v in spy.calls[0][0].values()), "the sample had records"
    assert trainer.privacy_engine.epsilon() == ref.results["epsilon"] and 0 < ref.results["epsilon"] <= 8
    assert trainer._private_run.ledger.to_dict() == ref.trainer.ledger.to_dict()
    assert out.global_step == 2 and math.isnan(out.training_loss)
    ref_params = dict(ref.model.named_parameters())
    for name, p in trainer.model.named_parameters():  # the Trainer's AdamW took the stream optimizers' update
        assert torch.equal(p, ref_params[name]), name


class Planted(TrainerCallback):
    """User code inside the Trainer's loop, reading whatever it is handed."""

    def __init__(self):
        self.logs, self.reads = [], []

    def on_log(self, args, state, control, logs=None, **kw):
        self.logs.append(dict(logs))

    def on_step_end(self, args, state, control, model=None, **kw):
        self.reads.append((state.num_input_tokens_seen, state.total_flos))


def test_user_code_in_the_trainer_reads_no_realized_count_and_no_training_loss(tmp_path):
    planted = Planted()
    trainer = _dp_trainer("raptor", tmp_path, callbacks=[planted], max_steps=3)
    for read in (lambda: trainer.owner_counts, lambda: trainer.privacy_engine.owner_counts,
                 lambda: trainer.privacy_engine.last_result, lambda: trainer.last_loss):
        with pytest.raises(AttributeError):
            read()
    out = trainer.train()
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is EngineResult]  # no per-record result kept
    logged = [k for entry in trainer.state.log_history for k in entry]
    assert "epsilon" in logged and not [k for k in logged if k in ("loss", "train_loss", "total_flos")]
    assert planted.logs and all("loss" not in entry and "epsilon" in entry for entry in planted.logs)
    assert [entry["epsilon"] for entry in planted.logs][-1] == trainer.privacy_engine.epsilon() > 0
    assert planted.reads == [(0, 0)] * 3  # no token count, no flos of the sampled batches
    assert math.isnan(out.training_loss) and "train_loss" not in out.metrics
    public = {k for k in dir(trainer.privacy_engine) if not k.startswith("_")}
    assert not [k for k in public if "owner" in k or "count" in k or "loss" in k]


def test_the_saved_model_is_read_by_from_pretrained_and_raptor_predict(tmp_path):
    from raptor.cli.main import main

    trainer = _dp_trainer("raptor", tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    assert (tmp_path / "hf" / "checkpoint-1" / "raptor" / "state.json").is_file()  # the ledger with the checkpoint
    out = tmp_path / "saved"
    trainer.save_model(str(out))
    back = type(trainer.model).from_pretrained(str(out))
    for name, p in back.named_parameters():
        assert torch.equal(p, dict(trainer.model.named_parameters())[name]), name
    privacy = json.loads((out / "raptor_privacy.json").read_text())
    assert privacy["epsilon"] == trainer.privacy_engine.epsilon() and privacy["steps"] == 1
    texts = tmp_path / "texts.csv"
    texts.write_text("sentence\ngood film\nawful plot\n")
    pred = tmp_path / "pred.csv"
    assert main(["predict", "--model", str(out), "--input", str(texts), "--output", str(pred), "--no-progress"]) == 0
    rows = list(csv.DictReader(pred.open()))
    assert len(rows) == 2 and {r["prediction"] for r in rows} <= {"LABEL_0", "LABEL_1"}


@pytest.mark.parametrize(("field", "value", "match"), [
    ("fp16", True, "fp16/bf16"),
    ("bf16", True, "fp16/bf16"),
    ("deepspeed", "ds_config.json", "deepspeed"),
    ("gradient_accumulation_steps", 2, "gradient_accumulation_steps"),
    ("include_num_input_tokens_seen", "all", "include_num_input_tokens_seen"),
    ("neftune_noise_alpha", 5.0, "neftune_noise_alpha"),
    ("label_smoothing_factor", 0.1, "label_smoothing_factor"),
    ("torch_compile", True, "torch_compile"),
])
def test_what_cannot_be_private_is_refused_by_its_field(field, value, match, tmp_path):
    args = _args(tmp_path)
    setattr(args, field, value)  # set after construction: TrainingArguments checks some of these against the device
    with pytest.raises(ConfigError, match=f"TrainingArguments.{match}"):
        DPTrainer(model=_model(), args=args, train_dataset=_items(TRAIN_ROWS), processing_class=TOK,
                  privacy_args=PrivacyArguments(seed=0, public=_items(PUBLIC_ROWS)))


def test_batch_losses_model_init_and_resuming_a_trainer_checkpoint_are_refused(tmp_path):
    kw = dict(args=_args(tmp_path), train_dataset=_items(TRAIN_ROWS), processing_class=TOK,
              privacy_args=PrivacyArguments(seed=0, public=_items(PUBLIC_ROWS)))
    with pytest.raises(ConfigError, match="compute_loss_func"):
        DPTrainer(model=_model(), compute_loss_func=lambda outputs, labels, num_items_in_batch=None: 0, **kw)
    with pytest.raises(ConfigError, match="model_init"):
        DPTrainer(model_init=_model, **kw)
    trainer = DPTrainer(model=_model(), **kw)  # public records as items of the dataset's form
    with pytest.raises(ConfigError, match="resume_from_checkpoint"):
        trainer.train(resume_from_checkpoint=str(tmp_path))
