"""What ``raptor train`` loads, prints and writes around a run, for both objectives: its inputs,
the settings line, results.json and the non-finite-gradient warning."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from raptor.training.config import TrainConfig

if TYPE_CHECKING:  # torch and the record types are imported on use (raptor train --help starts fast)
    from torch import nn

    from raptor.data import ClassificationData
    from raptor.data.public_source import PublicSource
    from raptor.data.qa import QAData
    from raptor.data.vqa import VQAData

    Records = ClassificationData | QAData | VQAData


@dataclass(frozen=True)
class Inputs:
    """What ``raptor train``'s flags load before the run, for either objective: the model and
    tokenizer, the private, validation and declared-public records with their source, the weights
    read unchanged from a base checkpoint (``base``; None: those of ``--model``), what the head was
    initialised from, the dev metrics and what results.json's ``data`` entry adds."""

    model: nn.Module
    tokenizer: object  # a Hugging Face tokenizer
    private: Records
    validation: Records | dict[str, Records] | None  # classification: {split name: records}
    public: Records
    source: PublicSource
    label_names: tuple[str, ...] | None = None
    label_words: list[str] | None = None
    metrics: tuple[str, ...] | None = None
    base: dict[str, tuple[int, ...]] | None = None
    data: dict = field(default_factory=dict)


def settings_line(args: argparse.Namespace, config: TrainConfig, num_private: int, *,
                  task_type: str | None = None) -> str:
    """The first line of a run: the settings that matter, defaults marked, and the task
    type (``inferred`` when ``--task-type`` was left to auto)."""
    if config.steps is not None:
        length = f"{config.steps} steps (--steps) over {num_private:,} private records"
    else:
        length = f"{config.num_steps(num_private)} steps ({config.epochs:g} epochs of {num_private:,} private records)"
    eps = "inf (non-private)" if config.privacy.epsilon is None else f"{config.privacy.epsilon:g}"
    task = ""
    if task_type is not None:
        how = " (inferred from the labels; --set data.task_type=... to fix it)" \
            if getattr(args, "task_type", "auto") == "auto" and getattr(args, "train_file", None) else ""
        task = f", task {task_type}{how}"
    return (f"raptor train: {config.method}{task}, epsilon {eps}, batch size {config.batch_size}"
            f"{' (default N/10)' if defaulted(args, 'batch_size') else ''}, lr {config.optim.lr:g}"
            f"{' (default for this model kind)' if defaulted(args, 'optim.lr') else ''}, {config.optim.name}, "
            f"{length}, max length {config.max_length}, device {config.performance.device}")


def defaulted(args: argparse.Namespace, path: str) -> bool:
    """Whether the config field ``path`` was left to the library's default rule (no flag, ``--set``
    or recipe set it)."""
    return path not in getattr(args, "given", ())


def write_results(path: Path, results: dict) -> None:
    """results.json as strict JSON (non-finite floats as strings)."""
    from raptor.training.saving.json_io import write_strict_json

    write_strict_json(path, results)


def nonfinite_warning(count: int) -> str | None:
    """House rule 4: records whose gradient was non-finite were zeroed (the steps still happened); say so."""
    if not count:
        return None
    return (f"raptor train: warning: {count} record-steps had a non-finite per-record gradient; they were zeroed "
            "before aggregation (every step still happened). This count is NOT protected by DP: do not publish it. "
            "Lower --lr, or train in float32, and check the data for degenerate records.")


def summary_line(trainer, data: dict, *, label: str = "raptor train") -> str:
    """The line printed once a run is built: records per side, steps, q, sigmas, trained layers."""
    return (f"{label}: {trainer.config.method} on {data['source']}: {data['private_records']:,} private / "
            f"{data['public_records']:,} public ({data['public_source']['description']}) / "
            f"{data['dev_records']:,} dev records; {trainer.plan.steps} steps, q={trainer.sample_rate:.4g}, "
            f"sigma_s={trainer.plan.sigmas['shared']}, sigma_e={trainer.plan.sigmas['expert']}, "
            f"trained layers {list(trainer.plan.trained_layers)}"
            + ("" if trainer.config.privacy.secure_rng else "  [SEEDED: reproducible, NOT secure]"))


def run_results(args: argparse.Namespace, trainer, started: float) -> dict:
    """results.json entries both objectives add to the library's: the model, defaults used, size, time."""
    import time

    return {"model": args.model, "defaults": {"batch_size": defaulted(args, "batch_size"), "lr": defaulted(args, "optim.lr")},
            "num_trainable_parameters": sum(p.numel() for p in trainer.params.values()),
            "total_seconds": time.perf_counter() - started}


def save_run(out: Path, trainer, tokenizer, label_names, max_length: int, results: dict, stopped) -> None:
    """OUTPUT_DIR/checkpoint, OUTPUT_DIR/model and results.json; a budget stop (``stopped``) is
    raised again once they are written, saying so."""
    import sys

    from raptor.training.saving.final_model import save_final_model

    trainer.save(out / "checkpoint")
    save_final_model(out / "model", trainer.model, tokenizer, label_names, max_length)
    write_results(out / "results.json", results)
    if stopped is not None:
        print(f"raptor train: wrote {out / 'results.json'}, {out / 'checkpoint'} and {out / 'model'} before "
              "stopping", file=sys.stderr)
        raise stopped


def quiet_transformers(args: argparse.Namespace) -> None:
    """``--no-progress``: transformers' "Loading weights" / "Writing model shards" bars off too."""
    if getattr(args, "no_progress", False):
        import transformers

        transformers.utils.logging.disable_progress_bar()
