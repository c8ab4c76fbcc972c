"""``raptor train --objective generate``: DP fine-tuning of a decoder on (prompt, answer) pairs.

Data (JSON Lines):

* text decoders (``--model`` a tiny family name: olmoe, mixtral, qwen2_moe, qwen3_moe,
  deepseek_v2, deepseek_v3; or a local ``save_pretrained`` causal-LM directory): one record per
  line with ``data.prompt_field`` (default ``prompt``) and ``data.answer_field`` (default ``answer``);
* DeepSeek-VL2 (``--model DIR`` in the release layout, ``model_type`` ``deepseek_vl_v2``): one
  record per line with ``data.image_field`` (default ``image``, a path relative to the JSONL file),
  ``data.question_field`` (``question``) and ``data.answer_field`` (``answer``). Every image is opened
  and decoded before anything else happens; a missing or corrupt one stops the run with an error
  naming the line.

The public corpus (routing statistics, layer choice, the tiny families' tokenizer) is only what
you declare: ``--public-file``, or a deterministic slice of the training file given on purpose
(``--public-size``); the training file is never sliced by default (``--method nonprivate`` uses
the training data itself; any other run without a public source stops with an error naming the
flags). results.json records the source. The privacy
unit is one record (one JSONL line); with several questions per image, protect the image by
putting one record per image.

Evaluation: greedy decoding on ``--validation-file`` (``run.max_new_tokens``), exact match after
normalisation (case, punctuation, whitespace) and token F1, before training (zero-shot, written
as ``zero_shot`` in results.json) and at every evaluation point.

The reference's DeepSeek-VL2 settings (RAPTOR paper): epsilon 8, delta 1e-5, shared ratio 0.9,
alternating schedule 1:1, LoRA rank 16 for dp-lora, shared experts frozen:

    raptor train --model VL2_DIR --objective generate --train-file vqa.jsonl --validation-file dev.jsonl --public-file public_vqa.jsonl \\
        --method raptor --epsilon 8 --delta 1e-5 --set privacy.shared_ratio=0.9 \\
        --set privacy.schedule.alternate=1,1 --set run.freeze_shared_experts=true
    raptor train ... --method dp-lora --lora 16 --epsilon 8 --delta 1e-5

Runs as ``raptor train`` (the same library function,
:func:`raptor.training.run.fine_tune.run_fine_tune`; the loaders are
:mod:`raptor.data.generate_inputs`): flags, ``--output-dir`` (``--overwrite``),
``--device``, ``--model`` and ``--resume`` checked before anything is read; ``--batch-size``
default N/10; checkpoints (``OUTPUT_DIR/checkpoint``) before the first update, every
``run.checkpoint_every`` steps and at the end, holding the initial weights not in a base checkpoint
(a tiny family's random init), the tokenizer, the plan and public statistics, the ledger, the
optimizers, the generator states and a fingerprint of the config (``run.freeze_shared_experts`` and
the objective included) and data, so that ``--resume`` continues the same run exactly, seeded or
not, and refuses a changed one naming the fields; ``OUTPUT_DIR/model``: the fine-tuned model
(``save_pretrained``, or DeepSeek-VL2's release layout) with its tokenizer, named in
``results.json`` (``final_model``).

Privacy: as ``raptor train`` (the training loss is never shown; the progress bar shows the dev
exact match, dev loss and epsilon).
"""

from __future__ import annotations

import argparse
import math

from raptor.data.generate_inputs import GenerateSource
from raptor.errors import ConfigError
from raptor.training.config import TrainConfig, is_private


def check_generate_flags(args: argparse.Namespace) -> None:
    """The flags that --objective generate refuses or needs, checked before anything else."""
    if not args.train_file:
        raise ConfigError("--objective generate needs --train-file (JSONL: prompt/answer, or image/question/answer)")
    if args.task or args.data_dir:
        raise ConfigError("--objective generate reads --train-file JSONL; --task/--data-dir are for classification")
    if args.head_init == "label-words":
        raise ConfigError("--set model.head_init applies to classification heads; --objective generate keeps the LM head")


def generate_source(args: argparse.Namespace) -> GenerateSource:
    """The data and model flags as a :class:`raptor.data.generate_inputs.GenerateSource`."""
    return GenerateSource(model=args.model, train_file=args.train_file, validation_file=args.validation_file,
                          public_file=args.public_file, public_size=args.public_size, tokenizer=args.tokenizer,
                          prompt_field=args.prompt_field, answer_field=args.answer_field,
                          image_field=args.image_field, question_field=args.question_field,
                          max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
                          vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_layers=args.num_layers,
                          num_experts=args.num_experts, max_length=args.max_length,
                          nonprivate=not is_private(args.method))


def generate_inputs(args: argparse.Namespace, config: TrainConfig):
    """The JSONL records (every VL2 image checked first), the declared public split, then the model
    (:func:`raptor.data.generate_inputs.read_generate_inputs`), as ``raptor train``'s
    :class:`~raptor.cli.run_output.Inputs`."""
    from raptor.cli.run_output import Inputs
    from raptor.data.generate_inputs import read_generate_inputs
    from raptor.data.model_source import init_generator

    source = generate_source(args)
    source.public_source()  # declared before anything is read
    inputs = read_generate_inputs(source, init_generator(config.seed))
    return Inputs(inputs.model, inputs.tokenizer, inputs.private, inputs.dev, inputs.public, inputs.source,
                  base=inputs.base, data={"source": inputs.info["source"]})


def generate_lines(results: dict, out) -> list[str]:
    """The last lines of a generative run: dev exact match and token F1 (zero-shot first), epsilon."""
    eps, zero_shot = results["epsilon"], results["zero_shot"]
    zs = f" (zero-shot {zero_shot['exact_match']:.3f})" if zero_shot else ""
    return [f"dev exact match {results['final_exact_match']}{zs}, token F1 {results['final_token_f1']}, "
            + (f"epsilon {eps:.4g} at delta {results['delta']}" if math.isfinite(eps) else "non-private (epsilon = inf)"),
            f"wrote {out / 'results.json'} and the fine-tuned model in {out / 'model'}"]
