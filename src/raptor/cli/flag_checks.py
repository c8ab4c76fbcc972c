"""Flag checks made before any data is read or any budget is spent: each names the flag
(or the file) and says what to do.

* :func:`check_train_args`: ``raptor train`` flags that the typed configs cannot see (the output
  directory string, the seed's range, sample caps, the tiny model's sizes, ``--max-length``
  against the model's positions, ``--tokenizer``, the public file against the train file,
  ``--resume`` into a directory that holds another run, ``--objective generate`` on a table).
* :func:`check_model_dir`: a ``save_pretrained`` directory has a readable ``config.json`` object
  and a complete weights file (a truncated ``model.safetensors`` is found from its header).
* :func:`interrupted_message`: what Ctrl-C or SIGTERM prints instead of a traceback.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from raptor.errors import ConfigError

#: the largest ``--max-length`` of a tiny random-init family (its position table is built to fit,
#: and grows with it)
MAX_TINY_LENGTH: int = 4096
#: largest ``--seed`` (the generators take a non-negative 63-bit integer)
SEED_LIMIT: int = 2**63
#: weights files of a ``save_pretrained`` directory, any one of which is enough
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
#: config keys that bound the number of positions a model takes
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")


def flag_name(args, dest: str) -> str:
    """How the command sets ``args.<dest>``: ``raptor train`` names its ``--set`` path (``--set
    model.hidden_size``) where the setting has no flag of its own (``args.flag_names``,
    :func:`raptor.cli.flags.resolve_train_args`); other commands' flags are the dest with dashes."""
    return getattr(args, "flag_names", {}).get(dest, "--" + dest.replace("_", "-"))


def flag_value(args, dest: str, value) -> str:
    """``--hidden-size 30``, or ``--set model.hidden_size=30`` for a ``--set`` setting."""
    name = flag_name(args, dest)
    return f"{name}={value}" if name.startswith("--set ") else f"{name} {value}"


def check_seed(seed) -> None:
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"--seed must be an integer in [0, 2**63), got {seed}")


def check_at_least(flag: str, value, minimum: int, what: str = "") -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"{flag} must be an integer >= {minimum}{what}, got {value}")


def check_model_dir(path: str | Path, flag: str = "--model") -> dict:
    """The parsed ``config.json`` of a model directory; :class:`ConfigError` when it is not valid
    JSON, not an object, or the directory has no weights file or a truncated ``model.safetensors``."""
    path = Path(path)
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{config_file}: not valid JSON ({err}); the model directory is damaged: save the model "
                          f"again, or give another {flag}") from None
    except OSError as err:
        raise ConfigError(f"{config_file}: cannot be read ({err.strerror or err})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file}: expected a JSON object (the model's settings), found "
                          f"{type(config).__name__}; save the model again, or give another {flag}")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise ConfigError(f"{flag} {path}: no weights file ({', '.join(WEIGHT_FILES)}); give a directory written by "
                          "save_pretrained (or a raptor train run's model/)")
    check_safetensors(path / "model.safetensors")
    return config


def check_safetensors(file: Path) -> None:
    """A ``.safetensors`` file (when present) is as long as its header says: a copy cut short fails
    here with one line instead of deep inside the loader."""
    if not file.is_file():
        return
    size = file.stat().st_size
    try:
        with file.open("rb") as f:
            head = f.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (None,)
            header = json.loads(f.read(length)) if length is not None and 0 < length <= size - 8 else None
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] if isinstance(header, dict) \
            else None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, IndexError, struct.error):
        ends = None
    if ends is None or 8 + length + max(ends, default=0) > size:
        raise ConfigError(f"{file}: truncated or not a safetensors file ({size:,} bytes); copy the model again")


def model_positions(model: str) -> int | None:
    """How many positions a model directory's config allows (None: not a directory, or no such bound)."""
    path = Path(model)
    if not (path / "config.json").is_file():
        return None
    config = check_model_dir(path)
    for key in POSITION_KEYS:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "/" not in name


def check_tokenizer_name(name: str | None, flag: str = "--tokenizer") -> None:
    """``--tokenizer`` exists locally, or is a hub name while the hub can be reached (one quick try,
    as for ``--model``, instead of a minute of retries)."""
    if name is None or Path(name).expanduser().exists():
        return
    from raptor.training.run.preflight import hub_reachable

    if _looks_local(name) or not hub_reachable():
        why = "no such directory or file" if _looks_local(name) else \
            "no such directory or file, and the hub cannot be reached"
        raise ConfigError(f"{flag} {name}: {why}; give a tokenizer directory or tokenizer.json (or leave "
                          f"{flag} out to use the model's)")


def check_pretrained_tokenizer(model: str, tokenizer: str | None, flag: str = "--tokenizer") -> None:
    """``--tokenizer`` with a pretrained ``--model`` that has a tokenizer of its own: refused unless it
    is that tokenizer (the same vocabulary). The model's embeddings mean its own tokenizer's ids;
    another tokenizer's ids index the same rows and would train on noise."""
    from raptor.data.model_source import FAMILY_NAMES, shipped_models

    if tokenizer is None or model in FAMILY_NAMES:
        return
    from raptor.data.model_source import model_directory

    directory = model_directory(model)
    own = [n for n in ("tokenizer.json", "vocab.txt") if (directory / n).is_file()]
    given = model_directory(str(Path(tokenizer).expanduser()) if tokenizer not in shipped_models() else tokenizer)
    if not own or not given.exists():
        return
    if given.resolve() in (directory.resolve(), (directory / own[0]).resolve()):
        return
    from raptor.data import load_tokenizer

    theirs, ours = load_tokenizer(str(given)), load_tokenizer(str(directory))
    if theirs.get_vocab() != ours.get_vocab():
        raise ConfigError(f"{flag} {tokenizer}: its vocabulary ({len(theirs)} tokens) is not the one --model {model} "
                          f"was trained with ({len(ours)} tokens, in {directory}); a pretrained model's embeddings "
                          "mean its own tokenizer's ids, so another tokenizer's ids would train on noise. Leave "
                          f"{flag} out (the model's own is used), or give a tiny --model family to train with it")


def check_model_max_length(directory: str | Path, max_length: int | None, flag: str = "--max-length") -> None:
    """``max_length`` fits the positions of the model in ``directory`` (its config.json)."""
    positions = model_positions(str(directory))
    if max_length is not None and positions is not None and max_length > positions:
        raise ConfigError(f"{flag} {max_length} is above the model's {positions} positions "
                          f"({Path(directory) / 'config.json'}); give {flag} {positions} or less")


def _sha256(path: Path) -> str:
    from raptor._hashing import sha256_file

    return sha256_file(path)


def check_public_file(train_file: str | None, public_file: str | None) -> None:
    """The declared public corpus is not the private train file (by path or by content)."""
    if not train_file or not public_file:
        return
    train, public = Path(train_file), Path(public_file)
    if not (train.is_file() and public.is_file()):
        return  # the readers name a missing file
    if train.resolve() == public.resolve():
        raise ConfigError(f"--public-file {public}: is the --train-file; every private record would also be public. "
                          "Give a corpus you may use without privacy, or --public-size K to make K records public "
                          "on purpose")
    if train.stat().st_size == public.stat().st_size and _sha256(train) == _sha256(public):
        raise ConfigError(f"--public-file {public}: has the same content as the --train-file {train}; every private "
                          "record would also be public. Give another public corpus, or --public-size K")


def check_resume_output(output_dir: Path, resume: str | None, overwrite: bool) -> None:
    """``--resume A/checkpoint --output-dir B``: B may be new, empty or A itself, never another run."""
    from raptor.training.run.preflight import RUN_MARKERS

    if not resume or overwrite or not output_dir.is_dir():
        return
    held = [m for m in RUN_MARKERS if (output_dir / m).exists()]
    if held and (output_dir / "checkpoint").resolve() != Path(resume).resolve():
        raise ConfigError(f"--output-dir {output_dir}: already holds another run ({', '.join(held)}); --resume "
                          f"{resume} would overwrite it. Resume into the run's own directory, a new directory, or "
                          "pass --overwrite to replace it")


def _loadable_pretrained(model: str) -> bool:
    """A shipped or built model's name, or a directory with weights whose config.json is a JSON
    object: a model whose sizes are its own (anything else gets the model checks' own message first)."""
    import json

    from raptor.data.model_source import shipped_models

    if model in shipped_models() and not Path(model).exists():
        return True
    config = Path(model) / "config.json"
    try:
        if not (config.is_file() and isinstance(json.loads(config.read_text(encoding="utf-8")), dict)):
            return False
    except (OSError, ValueError):
        return False
    return any(Path(model).glob("*.safetensors")) or any(Path(model).glob("pytorch_model*.bin"))


def check_tiny_sizes(args) -> None:
    """The size flags of a tiny random-init family, named (not ``TinySize.hidden_size``); with a
    pretrained ``--model`` (whose sizes are its config's) a size flag other than its default is refused."""
    from raptor.data.model_source import FAMILY_NAMES, ModelSource

    if args.model not in FAMILY_NAMES:
        if not _loadable_pretrained(args.model):  # an unknown name or a broken directory: its own check says so
            return
        default = ModelSource()
        given = [(flag, value) for flag, value, fallback in (
            (flag_name(args, "hidden_size"), args.hidden_size, default.hidden_size),
            (flag_name(args, "num_layers"), args.num_layers, default.num_layers),
            (flag_name(args, "num_experts"), args.num_experts, default.num_experts),
            (flag_name(args, "vocab_size"), args.vocab_size, default.vocab_size))
            if value != fallback]
        if given:
            flags = ", ".join(f for f, _ in given)
            raise ConfigError(f"{' '.join(f + ('=' if f.startswith('--set ') else ' ') + str(v) for f, v in given)}: {'these set' if len(given) > 1 else 'this sets'} "
                              f"the size of a tiny random-init family, but --model {args.model} is a pretrained model "
                              f"whose sizes are its own (its config.json) and would be ignored; leave {flags} out, or "
                              f"give --model a family ({', '.join(FAMILY_NAMES)})")
        return
    for flag, value in ((flag_name(args, "vocab_size"), args.vocab_size), (flag_name(args, "hidden_size"), args.hidden_size),
                        (flag_name(args, "num_layers"), args.num_layers), (flag_name(args, "num_experts"), args.num_experts)):
        if value < 1:
            raise ConfigError(f"{flag} must be an integer >= 1, got {value}")
    if args.hidden_size % 4:
        raise ConfigError(f"{flag_value(args, 'hidden_size', args.hidden_size)} must be a multiple of 4 (the tiny families have 4 "
                          "attention heads)")
    if args.num_experts < 2:
        raise ConfigError(f"{flag_name(args, 'num_experts')} must be at least 2 (a mixture of experts), got {args.num_experts}")


def check_max_length(args) -> None:
    from raptor.data.model_source import FAMILY_NAMES

    if args.model in FAMILY_NAMES:
        if args.max_length > MAX_TINY_LENGTH:
            raise ConfigError(f"--max-length {args.max_length} is above {MAX_TINY_LENGTH}, the most a tiny random-init "
                              "family takes here; lower --max-length")
        return
    positions = model_positions(args.model) if Path(args.model).is_dir() else None
    if positions is not None and args.max_length > positions:
        raise ConfigError(f"--max-length {args.max_length} is above the model's {positions} positions "
                          f"({args.model}/config.json); lower --max-length")


def check_train_args(args) -> None:
    """Everything that ``raptor train`` can check from its flags alone, before any data is read."""
    if str(args.output_dir).strip() == "":
        raise ConfigError("--output-dir is empty; give a directory path (e.g. runs/my-run)")
    check_seed(args.seed)
    if args.public_size is not None and not math.isfinite(args.public_size):
        raise ConfigError(f"--public-size must be a finite count or a fraction in (0, 1), got {args.public_size}")
    check_at_least(flag_name(args, "checkpoint_every"), args.checkpoint_every, 0, " (0: only before the first and after the last "
                                                                   "step)")
    check_at_least(flag_name(args, "max_train_samples"), args.max_train_samples, 1, " (leave it out for all records)")
    check_at_least(flag_name(args, "max_eval_samples"), args.max_eval_samples, 1, " (leave it out for all records)")
    check_at_least("--max-length", args.max_length, 1)
    if args.steps is not None:
        from raptor.accounting.events import check_steps

        check_steps(args.steps, f"--steps {args.steps}")
    if args.text_column and args.label_column in args.text_column:
        raise ConfigError(f"--text-column {args.label_column!r} is also the --label-column; the model would read "
                          "the label as its input. Give the text column(s) with --text-column")
    if getattr(args, "freeze_shared_experts", False) and args.objective != "generate":
        raise ConfigError("--set run.freeze_shared_experts applies to --objective generate (the reference's VL2 setting); a "
                          "classification run trains the shared experts with its method: drop the flag")
    check_tiny_sizes(args)
    check_max_length(args)
    check_tokenizer_name(args.tokenizer, flag_name(args, "tokenizer"))
    check_pretrained_tokenizer(args.model, args.tokenizer, flag_name(args, "tokenizer"))
    if args.objective == "generate" and args.train_file:
        suffixes = [s.lower() for s in Path(args.train_file).suffixes if s.lower() != ".gz"]
        if not suffixes or suffixes[-1] not in (".jsonl", ".json"):
            raise ConfigError(f"--objective generate reads JSON Lines (prompt/answer, or image/question/answer); "
                              f"--train-file {args.train_file} is not a .jsonl file")
    if args.public_size is None:  # both given: the public-source rule names the conflict
        check_public_file(args.train_file, args.public_file)
    if Path(args.model).is_dir() and (Path(args.model) / "config.json").is_file():
        check_model_dir(args.model)
    check_resume_output(Path(args.output_dir), args.resume, args.overwrite)


def checkpoint_step(output_dir) -> int | None:
    """The step of the checkpoint in ``output_dir`` (None: none yet, or unreadable)."""
    try:
        state = json.loads((Path(output_dir) / "checkpoint" / "state.json").read_text())
        return int(state["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def interrupted_message(args, how: str) -> str:
    """One line for Ctrl-C (``how="interrupted"``) or SIGTERM: where the last checkpoint is and the
    command that resumes it."""
    command = getattr(args, "command", "")
    out = getattr(args, "output_dir", None)
    if command != "train" or out is None:
        return f"raptor {command}: {how}"
    step = checkpoint_step(out)
    ck = Path(out) / "checkpoint"
    if step is None:
        return f"raptor train: {how}; no checkpoint was written yet, so start the run again"
    return (f"raptor train: {how}; checkpoint at step {step} in {ck}; resume with the same command and "
            f"--resume {ck}")



class Terminated(Exception):
    """Raised in the main thread when the process receives SIGTERM (so the CLI can say where the
    checkpoint is instead of dying silently)."""


def on_sigterm(signum, frame) -> None:
    raise Terminated()


#: errno values of a write that cannot succeed: no space, quota, read-only file system, permission
_WRITE_ERRNOS = {28: "no space left on the device", 122: "disk quota exceeded", 30: "read-only file system",
                 13: "permission denied"}


def write_error_message(err: BaseException, args) -> str | None:
    """One line for an output write that failed (a full disk, a read-only file system), or None when
    ``err`` is not one: ``OSError`` with such an errno, or safetensors' ``SafetensorError`` that
    wraps one."""
    text = str(err)
    if isinstance(err, OSError) and err.errno in _WRITE_ERRNOS:
        why = _WRITE_ERRNOS[err.errno]
        where = f" writing {err.filename}" if err.filename else ""
    elif type(err).__name__ == "SafetensorError" and ("No space left" in text or "StorageFull" in text):
        why, where = "no space left on the device", " writing a safetensors file"
    else:
        return None
    out = getattr(args, "output_dir", None)
    hint = ""
    if out is not None and checkpoint_step(out) is not None:
        hint = f"; the checkpoint at step {checkpoint_step(out)} in {Path(out) / 'checkpoint'} is kept: free space " \
               f"and resume with --resume {Path(out) / 'checkpoint'}"
    return f"{why}{where}; free space or choose another --output-dir{hint}"


def check_predict_output(out: Path, input_file: str, max_length) -> None:
    """``raptor predict``: ``--max-length`` >= 1, ``--output`` is not the ``--input`` and can be
    written (probed before any prediction is computed; nothing is left behind by the probe)."""
    import os

    check_at_least("--max-length", max_length, 1)
    inp = Path(input_file)
    if inp.exists() and (out.resolve() == inp.resolve() or (out.exists() and os.path.samefile(out, inp))):
        raise ConfigError(f"--output {out}: is the --input file; the predictions would replace the input. Give "
                          "another --output")
    existed = out.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a"):
            pass
    except OSError as err:
        raise ConfigError(f"--output {out}: cannot be written ({err.strerror or err}); choose a writable "
                          "location") from None
    if not existed:
        out.unlink(missing_ok=True)


def check_inspect_args(args) -> None:
    """``raptor inspect`` shares the data and model flags of ``raptor train``: the same checks, and
    its own counts."""
    check_seed(args.seed)
    if args.public_size is not None and not math.isfinite(args.public_size):
        raise ConfigError(f"--public-size must be a finite count or a fraction in (0, 1), got {args.public_size}")
    check_at_least(flag_name(args, "max_train_samples"), args.max_train_samples, 1, " (leave it out for all records)")
    check_at_least(flag_name(args, "max_eval_samples"), args.max_eval_samples, 1, " (leave it out for all records)")
    check_at_least("--count", args.count, 1)
    check_at_least("--batch-size", args.batch_size, 1)
    for flag, value in (("--noise-multiplier", args.noise_multiplier), ("--clip-expert", args.clip_expert)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{flag} must be a positive finite number, got {value}")
    check_tiny_sizes(args)
    check_max_length(args)
    check_tokenizer_name(args.tokenizer)
    if Path(args.model).is_dir() and (Path(args.model) / "config.json").is_file():
        check_model_dir(args.model)


def check_output_file(path: str | Path, flag: str) -> None:
    """An output file's directory exists or can be created (no file in the way), checked before the
    work whose result it receives."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory; give a file name")
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} is a file, so the file cannot be created")


#: upper bounds of ``raptor pretrain``'s count and size flags: far above any run this
#: library makes on one machine, low enough that a typo is a one-line error, not an allocation of
#: terabytes or a run of years
PRETRAIN_LIMITS: dict[str, int] = {
    "vocab_size": 1_000_000, "hidden_size": 65_536, "num_layers": 1_024, "num_heads": 1_024,
    "num_experts": 4_096, "top_k": 4_096, "expert_intermediate": 262_144, "block_length": MAX_TINY_LENGTH,
    "batch_size": 1_000_000, "steps": 100_000_000, "warmup_steps": 100_000_000, "held_out_every": 1_000_000,
    "eval_every": 100_000_000, "eval_blocks": 10_000_000, "checkpoint_every": 100_000_000,
    "stats_records": 10_000_000, "threads": 4_096,
}
#: suffixes of a table (labelled records), which ``raptor pretrain --text`` would read as plain text
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")


def check_at_most(flag: str, value, maximum: int, what: str = "") -> None:
    if value is not None and value > maximum:
        raise ConfigError(f"{flag} must be an integer <= {maximum:,}{what}, got {value:,}")


def check_pretrain_args(args) -> None:
    """``raptor pretrain``: the seed's range, upper bounds of the counts and sizes, the learning-rate
    floor as a fraction, finite rates, no table given as plain text, a ``--tokenizer`` that exists
    (before the hub's minute of retries). Checked before the output directory is touched."""
    check_seed(args.seed)
    for name, limit in PRETRAIN_LIMITS.items():
        check_at_most(f"--{name.replace('_', '-')}", getattr(args, name, None), limit)
    if not 0 <= args.min_lr_ratio <= 1:
        raise ConfigError(f"--min-lr-ratio is the final lr as a fraction of --lr, so it must lie in [0, 1]; got "
                          f"{args.min_lr_ratio}")
    for name in ("lr", "weight_decay", "aux_loss_coef", "z_loss_coef", "glue_public_size"):
        value = getattr(args, name)
        if not math.isfinite(value):
            raise ConfigError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    for text in args.text:
        suffixes = [s.lower() for s in Path(text).suffixes if s.lower() != ".gz"]
        if Path(text).is_file() and suffixes and suffixes[-1] in TABLE_SUFFIXES:
            raise ConfigError(f"--text {text}: is a table ({suffixes[-1]}), but pre-training reads plain text, one "
                              "paragraph per line, and would train on its header and labels too; write the public "
                              "text column to a .txt file and pass that")
    check_tokenizer_name(args.tokenizer)


#: ``raptor audit mechanism --releases``: at most this many per world and half (about an hour on
#: one CPU core)
MAX_AUDIT_RELEASES: int = 2_000_000
#: ``--sigma`` of the mechanism audit: below this the claimed epsilon's privacy-loss distribution
#: grows past memory as sigma falls (0.05 takes 25 s)
MIN_AUDIT_SIGMA: float = 0.05
#: ``raptor audit one-run --canaries``: at most this many canaries
MAX_CANARIES: int = 10_000_000


def check_audit_args(args) -> None:
    """``raptor audit``: counts, seeds and the noise level inside the ranges the audit can compute,
    checked before the output directory is touched."""
    if str(args.output_dir).strip() == "":
        raise ConfigError("--output-dir is empty; give a directory path (e.g. runs/my-run)")
    if args.audit == "mechanism":
        check_seed(args.seed)
        check_at_least("--releases", args.releases, 100)
        check_at_most("--releases", args.releases, MAX_AUDIT_RELEASES, " (about an hour on one core)")
        if not (math.isfinite(args.sigma) and args.sigma >= MIN_AUDIT_SIGMA):
            raise ConfigError(f"--sigma must be a finite number >= {MIN_AUDIT_SIGMA} (below it the claimed epsilon "
                              f"cannot be computed in memory), got {args.sigma}")
        if not 0 < args.delta < 1:
            raise ConfigError(f"--delta must be in (0, 1), got {args.delta}")
    else:
        if args.audit_seed is not None and not 0 <= args.audit_seed < SEED_LIMIT:
            raise ConfigError(f"--audit-seed must be an integer in [0, 2**63), got {args.audit_seed}")
        check_at_least("--canaries", args.canaries, 1)
        check_at_most("--canaries", args.canaries, MAX_CANARIES)
        if not (math.isfinite(args.epsilon) and args.epsilon > 0):
            raise ConfigError(f"--epsilon must be a positive finite number, got {args.epsilon}")
