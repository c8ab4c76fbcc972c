"""Public pre-training of a small MoE: the loop behind ``raptor pretrain``.

:func:`pretrain` takes a frozen :class:`PretrainConfig` and writes ``output_dir``:

* ``config.json`` + ``model.safetensors``: the pre-trained model (``save_pretrained``; the
  masked-LM / causal-LM head rides along and is dropped when raptor loads the directory as a
  classifier with :func:`raptor.moe.models.load_model`); float16 storage by default, loaded back
  as float32;
* ``tokenizer.json`` + ``tokenizer_config.json``: the tokenizer, trained on the same public text
  (or the one given), with a ``[MASK]`` token added for masked-token prediction;
* ``pretrain.json``: the configuration, the public files read (with sha256), the loss curve,
  the held-out public loss and top-1 accuracy, wall time and tokens per second, and per-layer
  routing statistics BEFORE and AFTER pre-training on held-out public text and (``glue_dir``) on
  each GLUE task's public slice;
* ``routing.png``: expert load shares and routing entropy per layer, before and after;
* ``checkpoint/state.pt``: the latest checkpoint (model, optimizer, data order, generator
  state, curve); ``resume=True`` continues the same run exactly.

Objectives: masked-token prediction for Switch (encoder only), causal LM for every decoder
family, through the same loop. Load-balancing and z-losses are ON here (``aux_loss_coef``,
``z_loss_coef``) because the text is public, so coupling the records of a batch costs no privacy;
private fine-tuning switches them off (``MoEAdapter.prepare``). Router jitter and dropout stay
off: transformers draws them from the global RNG, and every draw here comes from an explicit
generator.

Privacy: reads only the public text files in ``config.text`` (and, for the GLUE routing report
only, the public slice of each task's training split, chosen by position with the same rule as
``raptor train --public-size``). No private record is opened, tokenised or trained on.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from raptor import __version__
from raptor._hashing import sha256_file
from raptor.errors import ConfigError, DataError
from raptor.mechanisms import seeded_generator
from raptor.moe.adapters import get_adapter
from raptor.moe.models import FAMILIES, TinySize, tiny_config
from raptor.pretrain.corpus import pack_blocks, public_text_files, read_paragraphs, split_held_out
from raptor.pretrain.lm import build_lm, lm_from_checkpoint, objective
from raptor.pretrain.objectives import causal_loss, mlm_loss
from raptor.pretrain.routing import RouterCapture, router_losses, routing_statistics

MASK_TOKEN = "[MASK]"
DEFAULT_GLUE_TASKS = ("sst2", "mrpc", "rte", "wnli")


@dataclass(frozen=True)
class PretrainConfig:
    """Everything that fixes a pre-training run (see ``raptor pretrain --help`` for each field)."""

    output_dir: str
    text: tuple[str, ...]
    family: str = "switch_transformers"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    tokenizer: str | None = None
    vocab_size: int = 8192
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_experts: int = 8
    top_k: int = 2
    expert_intermediate: int = 256
    block_length: int = 128
    batch_size: int = 32
    steps: int = 2000
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    mask_prob: float = 0.15
    aux_loss_coef: float = 0.01
    z_loss_coef: float = 0.001
    held_out_every: int = 50
    eval_every: int = 250
    eval_blocks: int = 256
    checkpoint_every: int = 200
    glue_dir: str | None = None
    glue_tasks: tuple[str, ...] = DEFAULT_GLUE_TASKS
    glue_public_size: float = 0.05
    stats_records: int = 512
    save_dtype: str = "float16"
    seed: int = 0
    dtype: str = "float32"  # compute precision: "bfloat16" = autocast; weights, optimizer, checkpoints stay float32
    # continued pre-training: start from this checkpoint (a directory, or a shipped/built name such as
    # minilm-moe): its weights, its tokenizer and its family (``family`` and the size fields are then the
    # checkpoint's); parameters it lacks (a new masked-LM head) are drawn from the seed
    init_from: str | None = None

    def __post_init__(self) -> None:
        if self.init_from is not None:
            family = _checkpoint_family(self.init_from)
            if family not in FAMILIES:
                raise ConfigError(_not_an_moe_checkpoint(self.init_from, family))
            object.__setattr__(self, "family", family)
        if self.family not in FAMILIES:
            raise ConfigError(f"--family {self.family!r} is not supported; choose one of {', '.join(FAMILIES)}")
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_experts", "top_k",
                    "expert_intermediate", "batch_size", "steps", "eval_every", "eval_blocks",
                    "checkpoint_every", "stats_records")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.init_from is None and not get_adapter(self.family).top1 and self.top_k > self.num_experts:
            raise ConfigError(f"--top-k {self.top_k} exceeds --num-experts {self.num_experts}: a token cannot go to "
                              f"more experts than a layer has; give --top-k {self.num_experts} or less")
        for name in ("lr", "mask_prob"):
            if not 0 < getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must lie in (0, 1), got {getattr(self, name)!r}")
        for name in ("weight_decay", "aux_loss_coef", "z_loss_coef", "min_lr_ratio"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)!r}")
        if self.warmup_steps < 0:
            raise ConfigError(f"--warmup-steps must be >= 0, got {self.warmup_steps}")
        if self.save_dtype not in ("float16", "float32"):
            raise ConfigError(f"--save-dtype must be float16 or float32, got {self.save_dtype!r}")
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}")
        if self.dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {self.dtype!r}")

    @property
    def effective_top_k(self) -> int:
        return 1 if get_adapter(self.family).top1 else self.top_k


#: ``--dtype`` choices: the precision of the forward and backward (autocast); master weights stay float32.
COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclass
class PretrainResult:
    output_dir: Path
    report: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------


def _checkpoint_family(name: str) -> str:
    """``model_type`` of the checkpoint ``name`` (a directory, or a shipped/built short name)."""
    from raptor.shipped import resolve

    path = Path(resolve(name))
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"--init-from {name}: not a model directory (no config.json); give a save_pretrained "
                          "directory or a shipped/built model name such as minilm-moe")
    return str(json.loads(config_file.read_text()).get("model_type"))


def _not_an_moe_checkpoint(name: str, model_type: str) -> str:
    """The refusal of ``--init-from`` a checkpoint whose ``model_type`` is no MoE family raptor pre-trains:
    a dense BERT, Llama, Mistral or Qwen2 is upcycled first (``raptor upcycle``)."""
    from raptor.pretrain.upcycle_decoder import UPCYCLE_TARGETS

    if model_type == "bert" or model_type in UPCYCLE_TARGETS:
        moe = "bert_moe" if model_type == "bert" else UPCYCLE_TARGETS[model_type]
        out = f"{str(name).rstrip('/')}-moe"
        return (f"--init-from {name}: a dense {model_type} checkpoint (model_type {model_type!r}, no experts); "
                f"continued pre-training starts from an MoE checkpoint. Upcycle it into {moe} first: raptor upcycle "
                f"{name} --output-dir {out} --router random (or --public-file FILE for k-means routers), then "
                f"--init-from {out}")
    return (f"--init-from {name}: model_type {model_type!r} is not an MoE family raptor pre-trains "
            f"({', '.join(FAMILIES)}), and raptor upcycle takes only bert, {', '.join(sorted(UPCYCLE_TARGETS))}; give "
            "a checkpoint of one of these")


def make_tokenizer(config: PretrainConfig, train_paragraphs: list[str]):
    """The given tokenizer, or WordPiece trained on the public TRAIN paragraphs; plus ``[MASK]``."""
    from raptor.data.tokenization import load_tokenizer, train_wordpiece

    if config.init_from is not None:
        from raptor.shipped import resolve

        tokenizer = load_tokenizer(config.tokenizer or resolve(config.init_from))
    elif config.tokenizer:
        tokenizer = load_tokenizer(config.tokenizer)
    else:
        tokenizer = train_wordpiece(train_paragraphs, vocab_size=config.vocab_size)
    if tokenizer.mask_token is None:
        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
    return tokenizer


def model_config(config: PretrainConfig, tokenizer):
    """The family's config at the requested size, batch-coupling features off in the config itself
    (the aux / z-losses of pre-training are computed by this module, not by transformers)."""
    size = TinySize(vocab_size=len(tokenizer), hidden_size=config.hidden_size, num_layers=config.num_layers,
                    num_heads=config.num_heads, num_experts=config.num_experts, top_k=config.effective_top_k,
                    expert_intermediate=config.expert_intermediate, max_positions=max(config.block_length, 128))
    cfg = tiny_config(config.family, size=size, **get_adapter(config.family).pretrain_overrides)
    cfg.pad_token_id = tokenizer.pad_token_id
    return cfg


def lr_at(config: PretrainConfig, step: int) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``min_lr_ratio * lr`` at ``steps``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(config.steps - config.warmup_steps, 1)
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


class _Objective:
    """The family's objective on a batch of blocks (masked LM or causal LM)."""

    def __init__(self, config: PretrainConfig, tokenizer, device: torch.device | str = "cpu"):
        self.kind = objective(config.family)
        self.device_type = torch.device(device).type
        self.low_precision = config.dtype != "float32"
        self.mask_prob = config.mask_prob
        self.mask_id = tokenizer.mask_token_id
        specials = [tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
                    tokenizer.unk_token_id, tokenizer.mask_token_id]
        self.special_ids = tuple(sorted({int(s) for s in specials if s is not None}))
        self.vocab_size = len(tokenizer)

    def __call__(self, model, ids_BT: torch.Tensor, generator: torch.Generator):
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.low_precision):
            return self._loss(model, ids_BT, generator)

    def _loss(self, model, ids_BT: torch.Tensor, generator: torch.Generator):
        if self.kind == "mlm":
            return mlm_loss(model, ids_BT, mask_id=self.mask_id, vocab_size=self.vocab_size,
                            special_ids=self.special_ids, mask_prob=self.mask_prob, generator=generator)
        return causal_loss(model, ids_BT)


@torch.no_grad()
def evaluate(model, blocks_NT: torch.Tensor, objective_fn: _Objective, *, seed: int, batch_size: int) -> dict:
    """Held-out loss and top-1 accuracy (masked positions or next tokens); the same masks every call."""
    was = model.training
    model.eval()
    gen = seeded_generator(seed)
    loss_sum, correct, count = 0.0, 0, 0
    for start in range(0, blocks_NT.shape[0], batch_size):
        loss, c, n = objective_fn(model, blocks_NT[start:start + batch_size], gen)
        loss_sum += float(loss) * n
        correct += c
        count += n
    model.train(was)
    return {"loss": loss_sum / max(count, 1), "top1": correct / max(count, 1), "predictions": count}


def glue_public_records(config: PretrainConfig, tokenizer) -> dict[str, dict[str, torch.Tensor]]:
    """For each GLUE task: the public slice of its training split (first ``stats_records``
    records), tokenised ``[CLS] a [SEP] (b [SEP])`` to at most 64 tokens, right-padded.

    Privacy: the slice is chosen by position only (``split_public_private``, seed 0, the rule of
    ``raptor train --public-size``); only its texts reach the model, never a private record.
    """
    from raptor.data import load_glue_dir, split_public_private

    out = {}
    for task in config.glue_tasks:
        splits = load_glue_dir(config.glue_dir, task)
        public = split_public_private(splits.train, public_size=config.glue_public_size, seed=0).public
        n = min(config.stats_records, len(public))
        texts = list(public.texts[:n])
        pairs = list(public.text_pairs[:n]) if public.text_pairs is not None else None
        enc = tokenizer(texts, pairs, truncation=True, max_length=64, padding=True, return_tensors="pt")
        out[task] = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    return out


def routing_report(model, held_out_NT: torch.Tensor, glue: dict, config: PretrainConfig) -> dict:
    """Routing statistics on held-out public blocks and on each GLUE public slice."""
    n = min(config.stats_records, held_out_NT.shape[0])
    out = {"public_held_out": routing_statistics(model, held_out_NT[:n], torch.ones_like(held_out_NT[:n]))}
    for task, rec in glue.items():
        out[f"glue_{task}_public"] = routing_statistics(model, rec["input_ids"], rec["attention_mask"])
    return out


def _save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def save_model(model, tokenizer, config: PretrainConfig, out: Path) -> None:
    """``save_pretrained`` (float16 or float32 storage) and the tokenizer, into ``out``."""
    import copy

    to_save = copy.deepcopy(model)
    to_save.config.num_labels = 2
    if config.save_dtype == "float16":
        to_save = to_save.half()
    to_save.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def _check_split(corpus, held_par, every: int, group: int = 20) -> None:
    """A held-out split that is not empty, or a :class:`DataError` saying why (not "the public text
    gives 0 tokens")."""
    if held_par:
        return
    groups = max(-(-len(cf.paragraphs) // group) for cf in corpus)
    fix = f"give --held-out-every {2 * groups - 1} or less, or more text" if groups >= 2 else \
        f"give more text (a file of more than {group} paragraphs)"
    raise DataError(f"--held-out-every {every}: no paragraph is held out for evaluation: the largest file has "
                    f"{groups} group(s) of {group} paragraphs, and group {every // 2} of every {every} is held out; "
                    f"{fix}")


@dataclass
class _RunData:
    """A run's public text, read and tokenised."""

    corpus: list  # the files read (``CorpusFile``: path, paragraphs, words)
    tokenizer: object
    train_NT: torch.Tensor
    held_NT: torch.Tensor
    glue: dict


@dataclass
class _Run:
    """What one call of :func:`pretrain` works with, once set up."""

    config: PretrainConfig
    out: Path
    ckpt_path: Path
    device: str
    data: _RunData
    objective_fn: _Objective
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    data_gen: torch.Generator
    setup_seconds: float = 0.0


def _output_dir(config: PretrainConfig, resume: bool) -> tuple[Path, Path]:
    """``(output_dir, checkpoint path)``, the directory made; refuses a resume with no checkpoint and a
    new run over an existing one."""
    out = Path(config.output_dir)
    ckpt_path = out / "checkpoint" / "state.pt"
    if resume and not ckpt_path.is_file():
        raise ConfigError(f"--resume: {ckpt_path} does not exist; start without --resume")
    if not resume and ckpt_path.exists():
        raise ConfigError(f"{out} already holds a run; pass --resume to continue it or choose a new --output-dir")
    out.mkdir(parents=True, exist_ok=True)
    return out, ckpt_path


def _read_data(config: PretrainConfig, out: Path, resume: bool) -> _RunData:
    """The public files split into train and held-out paragraphs, the tokenizer (the run's saved one on
    resume, else made and saved into ``out``), the packed blocks and the GLUE public slices."""
    files = public_text_files(config.text, include=config.include, exclude=config.exclude)
    corpus = read_paragraphs(files)
    train_par, held_par = [], []
    for cf in corpus:
        tr, he = split_held_out(cf.paragraphs, every=config.held_out_every)
        train_par.extend(tr)
        held_par.extend(he)
    _check_split(corpus, held_par, config.held_out_every)
    if resume:
        from raptor.data.tokenization import load_tokenizer

        tokenizer = load_tokenizer(out)
    else:
        tokenizer = make_tokenizer(config, train_par)
        tokenizer.save_pretrained(str(out))
    train_NT = pack_blocks(tokenizer, train_par, block_length=config.block_length)
    held_NT = pack_blocks(tokenizer, held_par, block_length=config.block_length)[: config.eval_blocks]
    glue = glue_public_records(config, tokenizer) if config.glue_dir else {}
    return _RunData(corpus=corpus, tokenizer=tokenizer, train_NT=train_NT, held_NT=held_NT, glue=glue)


def _initial_model(config: PretrainConfig, tokenizer, device: str):
    """The LM to train, on ``device``: the ``init_from`` checkpoint's (continued pre-training), else a
    new one of the configured size; draws from the seeded generator."""
    if config.init_from is not None:
        from raptor.shipped import resolve

        return lm_from_checkpoint(str(resolve(config.init_from)), seeded_generator(config.seed)).to(device)
    return build_lm(model_config(config, tokenizer), seeded_generator(config.seed)).to(device)


def _set_up(config: PretrainConfig, out: Path, ckpt_path: Path, resume: bool, device: str) -> _Run:
    """Data, objective, model, optimizer and data generator (timed: ``setup_seconds``)."""
    t_setup = time.perf_counter()
    data = _read_data(config, out, resume)
    objective_fn = _Objective(config, data.tokenizer, device)
    model = _initial_model(config, data.tokenizer, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    data_gen = seeded_generator(config.seed + 1)
    return _Run(config=config, out=out, ckpt_path=ckpt_path, device=device, data=data, objective_fn=objective_fn,
                model=model, optimizer=optimizer, data_gen=data_gen, setup_seconds=time.perf_counter() - t_setup)


def _held_out_eval(run: _Run) -> dict:
    return evaluate(run.model, run.data.held_NT, run.objective_fn, seed=run.config.seed + 2,
                    batch_size=run.config.batch_size)


def _start_state(run: _Run, resume: bool) -> dict:
    """The run's state: the checkpoint's on resume (model, optimizer and data generator restored; the
    settings must match), else step 0 with the routing and held-out evaluation before training."""
    config, config_dict = run.config, asdict(run.config)
    if resume:
        state = torch.load(run.ckpt_path, weights_only=False, map_location="cpu")
        state["config"].setdefault("dtype", "float32")  # runs saved before --dtype existed were float32
        diff = sorted(k for k in config_dict if k != "output_dir" and state["config"].get(k) != config_dict[k])
        if diff:  # the directory may differ: a run copied elsewhere resumes there
            raise ConfigError(f"--resume: the run in {run.out} was started with different settings "
                              f"({', '.join(diff)}); pass the same flags as the first run")
        run.model.load_state_dict(state["model"])
        run.optimizer.load_state_dict(state["optimizer"])
        run.data_gen.set_state(state["data_gen"])
        return state
    before = routing_report(run.model, run.data.held_NT, run.data.glue, config)
    init_eval = _held_out_eval(run)
    return {"config": config_dict, "step": 0, "order": None, "cursor": 0, "curve": [],
            "held_out_curve": [{"step": 0, **init_eval}], "train_seconds": 0.0, "tokens": 0,
            "routing_before": before}


def _next_batch(run: _Run, state: dict) -> torch.Tensor:
    """The next ``batch_size`` training blocks of the epoch's order (a new order from the data
    generator when the epoch cannot fill a batch)."""
    size, train_NT = run.config.batch_size, run.data.train_NT
    if state["order"] is None or state["cursor"] + size > len(state["order"]):
        state["order"] = torch.randperm(train_NT.shape[0], generator=run.data_gen)
        state["cursor"] = 0
    idx = state["order"][state["cursor"]: state["cursor"] + size]
    state["cursor"] += size
    return train_NT[idx]


def _optimizer_step(run: _Run, capture: RouterCapture, batch: torch.Tensor, step: int):
    """One update at ``step``'s learning rate: objective plus load-balancing and z-losses, gradient
    norm clipped to 1. Returns ``(loss, load_balancing, z_loss)``."""
    config, model, optimizer = run.config, run.model, run.optimizer
    for group in optimizer.param_groups:
        group["lr"] = lr_at(config, step)
    loss, _, _ = run.objective_fn(model, batch, run.data_gen)
    lb, z = router_losses(capture, torch.ones_like(batch))
    total = loss + config.aux_loss_coef * lb + config.z_loss_coef * z
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss, lb, z


def _save_state(run: _Run, state: dict) -> None:
    _save_checkpoint(run.ckpt_path, {**state, "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
                                     "data_gen": run.data_gen.get_state()})


def _train(run: _Run, state: dict, *, progress: bool, stop_after: int | None) -> bool:
    """Train from ``state["step"]`` to ``config.steps``: loss curve every 10 steps, held-out evaluation
    every ``eval_every``, checkpoint every ``checkpoint_every`` (and at the end). Returns False when
    ``stop_after`` steps of this call stopped it first."""
    from tqdm.auto import tqdm

    config, model = run.config, run.model
    model.train()
    capture = RouterCapture(model)
    bar = tqdm(total=config.steps, initial=state["step"], disable=not progress, unit="step",
               desc=f"pretrain {config.family}")
    t0 = time.perf_counter()
    seconds_before = state["train_seconds"]
    window: list[float] = []
    steps_this_call = 0
    try:
        while state["step"] < config.steps:
            if stop_after is not None and steps_this_call == stop_after:
                return False
            step = state["step"]
            batch = _next_batch(run, state)
            loss, lb, z = _optimizer_step(run, capture, batch, step)
            state["step"] = step + 1
            steps_this_call += 1
            state["tokens"] += batch.numel()
            window.append(loss.item())
            if state["step"] % 10 == 0 or state["step"] == config.steps:
                state["curve"].append({"step": state["step"], "loss": sum(window) / len(window),
                                       "load_balancing": lb.item(), "z_loss": z.item(),
                                       "lr": lr_at(config, step)})
                window = []
            elapsed = seconds_before + time.perf_counter() - t0
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{state['tokens'] / max(elapsed, 1e-9):.0f}")
            if state["step"] % config.eval_every == 0 or state["step"] == config.steps:
                capture.close()  # evaluation runs without the capture's hooks
                ev = _held_out_eval(run)
                capture = RouterCapture(model)
                state["held_out_curve"].append({"step": state["step"], **ev})
                bar.write(f"step {state['step']}: held-out loss {ev['loss']:.4f}, top-1 {ev['top1']:.4f}")
            if state["step"] % config.checkpoint_every == 0 or state["step"] == config.steps:
                state["train_seconds"] = seconds_before + time.perf_counter() - t0
                _save_state(run, state)
    finally:
        capture.close()
        bar.close()
    state["train_seconds"] = seconds_before + time.perf_counter() - t0
    return True


def _report(run: _Run, state: dict, after: dict) -> dict:
    """The contents of ``pretrain.json``."""
    config, data = run.config, run.data
    final = state["held_out_curve"][-1]
    return {
        "raptor_version": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(run.device),
        "config": asdict(config),
        "objective": objective(config.family),
        "privacy": ("public text only; load-balancing and z-losses on (public data, batch coupling costs "
                    "nothing); router jitter and dropout off"),
        "files": [{"name": cf.path.name, "paragraphs": len(cf.paragraphs), "words": cf.words,
                   "sha256": sha256_file(cf.path)} for cf in data.corpus],
        "tokenizer": {"given": config.tokenizer, "size": len(data.tokenizer)},
        "train_blocks": int(data.train_NT.shape[0]),
        "train_tokens_per_epoch": int(data.train_NT.numel()),
        "held_out_blocks": int(data.held_NT.shape[0]),
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "steps": state["step"],
        "tokens_seen": state["tokens"],
        "epochs": state["tokens"] / max(data.train_NT.numel(), 1),
        "train_seconds": state["train_seconds"],
        "setup_seconds": run.setup_seconds,
        "tokens_per_second": state["tokens"] / max(state["train_seconds"], 1e-9),
        "loss_curve": state["curve"],
        "held_out_curve": state["held_out_curve"],
        "held_out_loss": final["loss"],
        "held_out_top1": final["top1"],
        "routing_before": state["routing_before"],
        "routing_after": after,
    }


def _finish(run: _Run, state: dict) -> PretrainResult:
    """Routing after training, then the final outputs: model and tokenizer, ``pretrain.json``,
    ``routing.png``."""
    run.model.eval()
    after = routing_report(run.model, run.data.held_NT, run.data.glue, run.config)
    save_model(run.model, run.data.tokenizer, run.config, run.out)
    report = _report(run, state, after)
    (run.out / "pretrain.json").write_text(json.dumps(report, indent=1))
    from raptor.pretrain.plot import plot_routing

    png = plot_routing(report, run.out / "routing.png")
    if png is None:
        print("routing.png not written: matplotlib is missing (pip install 'raptor-dp[plot]')")
    return PretrainResult(run.out, report)


def pretrain(config: PretrainConfig, *, resume: bool = False, progress: bool = True,
             stop_after: int | None = None, device: str = "cpu") -> PretrainResult | None:
    """Pre-train on public text and write ``config.output_dir`` (see the module docstring).

    ``device``: where the model trains (``cpu``, ``cuda``); not part of the run's settings, so a run
    started on one device can be resumed on another. Data order and masks are drawn on the CPU from
    the seeded generators, the same on every device.

    ``stop_after`` (tests of resume) stops after that many steps of this call, right after a
    checkpoint, without writing the final outputs, and returns ``None``.
    """
    out, ckpt_path = _output_dir(config, resume)
    run = _set_up(config, out, ckpt_path, resume, device)
    state = _start_state(run, resume)
    if not _train(run, state, progress=progress, stop_after=stop_after):
        return None
    return _finish(run, state)
