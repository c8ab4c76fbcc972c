"""Issue 15 for ``raptor train --objective generate``: exact resume (seeded and unseeded), a changed
run refused naming the field, the output-directory checks and ``--overwrite``, and the final model.

Interruption is in-process: the trainer raises at the start of update k, after the checkpoint of
step k was written (what a kill at that moment leaves behind)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from raptor.cli.main import main
from raptor.training.generate import GenerativeTrainer

STEPS = 4


class Interrupted(Exception):
    """Stands for a kill between two updates."""


@pytest.fixture(scope="module")
def qa(tmp_path_factory):
    d = tmp_path_factory.mktemp("qa")
    rows = [{"prompt": f"colour of item {i}?", "answer": ["red", "blue", "green"][i % 3]} for i in range(46)]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:40]))
    (d / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[40:]))
    return d


def _args(qa, out, *extra, seed=True):
    return ["train", "--model", "olmoe", "--objective", "generate", "--train-file", str(qa / "train.jsonl"),
            "--validation-file", str(qa / "dev.jsonl"), "--public-size", "8", "--steps", str(STEPS),
            "--batch-size", "8", "--set", "performance.micro_batch_size=8", "--max-length", "12", "--set", "model.hidden_size=16",
            "--set", "model.vocab_size=60", "--set", "run.max_new_tokens=2", "--set", "data.max_eval_samples=2", "--epsilon", "4", "--set", "run.checkpoint_every=1",
            "--no-progress", "--output-dir", str(out), *(["--seed", "0"] if seed else []), *extra]


def _interrupt_at(monkeypatch, k: int) -> None:
    real = GenerativeTrainer.step

    def step(self):
        if self.state.step == k:
            raise Interrupted(k)
        real(self)

    monkeypatch.setattr(GenerativeTrainer, "step", step)


def _interrupted_run(monkeypatch, argv, k: int) -> None:
    _interrupt_at(monkeypatch, k)
    with pytest.raises(Interrupted):
        main(argv)
    monkeypatch.undo()


def _step(ck) -> int:
    return json.loads((ck / "state.json").read_text())["step"]


def _same_run(a, b) -> dict:
    wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k  # bit-identical final models
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    assert ra["steps"] == rb["steps"] == STEPS
    assert ra["epsilon"] == rb["epsilon"] and 0 < ra["epsilon"] <= 4.0  # the same ledger
    assert ra["streams"] == rb["streams"]  # the same public statistics
    assert [e["exact_match"] for e in ra["evals"]] == [e["exact_match"] for e in rb["evals"]]
    assert [e["dev_loss"] for e in ra["evals"]] == [e["dev_loss"] for e in rb["evals"]]
    return rb


@pytest.fixture(scope="module")
def seeded_reference(qa, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(_args(qa, out)) == 0
    return out


def test_seeded_generate_run_interrupted_and_resumed_equals_the_uninterrupted_run(qa, seeded_reference, tmp_path,
                                                                                  monkeypatch):
    out = tmp_path / "run"
    _interrupted_run(monkeypatch, _args(qa, out), 2)
    assert _step(out / "checkpoint") == 2 and not (out / "results.json").exists()
    for name in ("initial.safetensors", "tokenizer", "rng.pt", "optimizers.pt"):
        assert (out / "checkpoint" / name).exists(), name
    assert main(_args(qa, out, "--resume", str(out / "checkpoint"))) == 0
    res = _same_run(seeded_reference, out)
    # the final model is a save_pretrained directory with its tokenizer, and results.json points to it
    assert res["final_model"] == str(out / "model") and res["objective"] == "generate"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(res["final_model"])
    tok = AutoTokenizer.from_pretrained(res["final_model"])
    ids = tok("colour of item 3?", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape[-1] == model.config.vocab_size
    assert json.loads((out / "model" / "raptor_labels.json").read_text())["objective"] == "generate"


def test_unseeded_generate_run_resumes_exactly(qa, tmp_path, monkeypatch):
    """Secure randomness: the random init, the tokenizer and the generator states come from the
    checkpoint. Two continuations of one checkpoint, one of them interrupted, end equal."""
    first = tmp_path / "first"
    _interrupted_run(monkeypatch, _args(qa, first, seed=False), 1)
    assert _step(first / "checkpoint") == 1
    shutil.copytree(first / "checkpoint", tmp_path / "c1")
    shutil.copytree(first / "checkpoint", tmp_path / "c2")
    ref = tmp_path / "ref"
    assert main(_args(qa, ref, "--resume", str(tmp_path / "c1"), seed=False)) == 0
    killed = tmp_path / "killed"
    _interrupted_run(monkeypatch, _args(qa, killed, "--resume", str(tmp_path / "c2"), seed=False), 3)
    assert _step(killed / "checkpoint") == 3
    assert main(_args(qa, killed, "--resume", str(killed / "checkpoint"), seed=False)) == 0
    res = _same_run(ref, killed)
    assert res["config"]["seed"] is None and res["config"]["privacy"]["secure_rng"] is True
    assert not (killed / "checkpoint" / "rng.pt").exists()  # a finished secure run keeps no generator state


@pytest.mark.parametrize("extra,named", [
    (["--lr", "0.5"], r"--lr (optim.lr): 0.003 -> 0.5"),
    (["--set", "run.freeze_shared_experts=true"], r"freeze_shared_experts: False -> True"),
    (["--steps", "6"], r"--steps (steps): 4 -> 6"),
])
def test_changed_generate_run_is_refused_naming_the_field(qa, seeded_reference, tmp_path, capsys, extra, named):
    argv = _args(qa, tmp_path / "out", "--resume", str(seeded_reference / "checkpoint"))
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert "differs from the one that wrote the checkpoint" in err and named in err, err
    assert not (tmp_path / "out").exists()


def test_generate_output_dir_checked_before_anything_is_read(qa, seeded_reference, tmp_path, capsys):
    argv = _args(qa, seeded_reference)
    argv[argv.index("--train-file") + 1] = str(tmp_path / "not_read.jsonl")  # would fail if it were read
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a run (results.json, checkpoint, model)" in err and "--overwrite" in err


def test_generate_overwrite_replaces_the_run(qa, seeded_reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(seeded_reference, out)
    (out / "results.json").write_text("{}")
    assert main(_args(qa, out, "--overwrite")) == 0
    _same_run(seeded_reference, out)


def _perturb_plan(ck, rel: float) -> None:
    state = json.loads((ck / "state.json").read_text())
    group = next(iter(state["extra"]["plan"]["groups"].values()))
    group["denominator"] *= 1 + rel
    (ck / "state.json").write_text(json.dumps(state))


def test_resume_compares_public_statistics_with_a_relative_tolerance(qa, seeded_reference, tmp_path, capsys):
    """A float rounded differently on another device (1e-9 relative) is the same run; a real change
    (1e-3) is refused, naming the statistic."""
    ck = tmp_path / "ck"
    shutil.copytree(seeded_reference / "checkpoint", ck)
    _perturb_plan(ck, 1e-9)
    assert main(_args(qa, tmp_path / "a", "--resume", str(ck))) == 0
    _same_run(seeded_reference, tmp_path / "a")
    shutil.rmtree(ck)
    shutil.copytree(seeded_reference / "checkpoint", ck)
    _perturb_plan(ck, 1e-3)
    assert main(_args(qa, tmp_path / "b", "--resume", str(ck))) == 2
    err = capsys.readouterr().err
    assert "differ from the saved ones beyond a relative 1e-06" in err and "plan.groups." in err \
        and ".denominator" in err, err
