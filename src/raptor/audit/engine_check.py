"""Engine-vs-oracle comparison: the code behind ``raptor check`` and the engine's tests.

:func:`compare` runs :class:`~raptor.per_sample.engine.PerRecordEngine` and
:func:`~raptor.per_sample.reference.reference_compute` on one batch with clip norms chosen between
the smallest and largest positive per-record norm of each group (so clipping is active on some
records of most groups) and reports the maximum relative errors.

Privacy: runs on a synthetic batch; nothing private is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from raptor.moe.adapters import freeze_untrained_experts
from raptor.per_sample.engine import EngineResult, PerRecordEngine
from raptor.per_sample.reference import reference_compute


@dataclass(frozen=True)
class CheckReport:
    """Maximum relative errors of the engine against the one-record reference."""

    family: str
    grouping: str
    lora: bool
    max_rel_norm_error: float
    max_rel_sum_error: float
    max_rel_loss_error: float
    owners_match: bool
    nonfinite_match: bool
    clipped_groups: int
    num_groups: int
    tolerance: float
    head: str = "classification"

    @property
    def passed(self) -> bool:
        return (self.max_rel_norm_error <= self.tolerance and self.max_rel_sum_error <= self.tolerance
                and self.max_rel_loss_error <= self.tolerance and self.owners_match and self.nonfinite_match)

    def to_dict(self) -> dict:
        return dict(asdict(self), passed=self.passed)


#: Precisions ``raptor check`` runs the engine in; bf16 is compared with a float64 oracle.
CHECK_DTYPES = ("float64", "float32", "bfloat16")
#: Max relative error of the bf16 engine's per-record norms and losses vs the float64 oracle, and of
#: its clipped sums vs one-record bf16 autograd, on tiny models (bf16 keeps 8 significant bits,
#: ~4e-3 relative per rounding; measured maxima in docs/DISTRIBUTED.md).
BF16_TOLERANCE = 3e-2


def to_float64(model: nn.Module) -> nn.Module:
    """Convert a model to float64 for exact comparisons (Switch routers keep their own dtype attr)."""
    model.double()
    for module in model.modules():
        if type(module).__name__.endswith("Top1Router"):
            module.dtype = torch.float64
    return model


def synthetic_batch(vocab_size: int, batch_size: int, seq_len: int, generator: torch.Generator,
                    *, pad_id: int = 0, num_labels: int = 2, empty_record: bool = True) -> dict[str, torch.Tensor]:
    """Random right-padded records of random lengths; record 1 is empty when ``empty_record``.

    ``num_labels=1`` (a regression head): float labels drawn uniformly from [0, 5) (STS-B's range).
    """
    ids = torch.randint(3, vocab_size, (batch_size, seq_len), generator=generator)
    lengths = torch.randint(1, seq_len + 1, (batch_size,), generator=generator)
    if batch_size > 0:
        lengths[0] = seq_len
    if empty_record and batch_size > 1:
        lengths[1] = 0
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad_id))
    if num_labels == 1:
        labels = torch.rand(batch_size, generator=generator, dtype=torch.float64) * 5
    else:
        labels = torch.randint(0, num_labels, (batch_size,), generator=generator)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def clip_norms_between(result: EngineResult) -> dict:
    """Per group: the midpoint of the smallest and largest positive finite per-record norm, so that
    some records are clipped and some are not; half the norm when one record has a positive norm
    (it is clipped); 1.0 when none has."""
    out = {}
    for key, norms in result.norms.items():
        v = norms[torch.isfinite(norms) & (norms > 0)]
        if v.numel() == 0:
            out[key] = 1.0
        elif float(v.min()) == float(v.max()):
            out[key] = float(v.min()) / 2
        else:
            out[key] = float((v.min() + v.max()) / 2)
    return out


def _rel(a: torch.Tensor, b: torch.Tensor, floor: float = 0.0) -> float:
    """Max relative error of ``a`` against ``b``; both are compared on the CPU (the engine's results
    live on the model's device, the one-record reference keeps its per-record tables on the CPU).

    ``floor``: the least scale to divide by. A parameter whose true gradient is zero (BERT's key
    bias: adding a constant to every key shifts a query's scores by a constant, which softmax
    ignores) has sums made of rounding noise on both sides; relative to its own noise they differ
    by O(1). The clipped sums are compared against ``floor`` = 1000 machine epsilons of the largest sum.
    Rounding noise sits far below that; a real error in a parameter's sums sits far above it."""
    if a.numel() == 0:
        return 0.0
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    finite = torch.isfinite(b)
    if not torch.equal(finite, torch.isfinite(a)):
        return float("inf")
    scale = b[finite].abs().max() if bool(finite.any()) else torch.tensor(0.0, dtype=torch.float64)
    scale = torch.clamp(scale, min=floor)
    if float(scale) == 0.0:
        return float((a[finite] - b[finite]).abs().max()) if bool(finite.any()) else 0.0
    return float((a[finite] - b[finite]).abs().max() / scale)


def _finite_abs_max(v: torch.Tensor) -> float:
    """The largest ``|v|`` over the finite entries of ``v``; 0 when it has none."""
    a = v.detach().double().abs()
    finite = a[torch.isfinite(a)]
    return float(finite.max()) if finite.numel() else 0.0


def _sum_floor(sums: Sequence[torch.Tensor]) -> float:
    """The ``floor`` of :func:`_rel` for the clipped sums: 1000 machine epsilons (the largest epsilon
    of the sums' float dtypes) times the largest finite ``|sum|``. Non-finite entries are left out of
    the scale, so the floor stays finite; :func:`_rel` reports them itself."""
    sums = [v for v in sums if v.numel()]
    eps = max((torch.finfo(v.dtype).eps for v in sums if v.is_floating_point()), default=0.0)
    return 1e3 * eps * max((_finite_abs_max(v) for v in sums), default=0.0)


def compare(model: nn.Module, batch: dict[str, torch.Tensor], *, trained_layers: Sequence[int], grouping: str,
            tolerance: float = 1e-4, family: str = "", lora: bool = False,
            loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
            oracle: nn.Module | None = None, engine: PerRecordEngine | None = None) -> CheckReport:
    """Engine vs reference on one batch, with clipping active on some records of each group.

    ``oracle``: a float64 copy of a low-precision ``model`` with the same weights. Per-record norms,
    losses and owners are then compared with the reference on ``oracle``, and the clipped sums with
    the reference on ``model`` itself (one-record autograd in the same precision: a bf16 model's
    summed gradients differ from float64 ones by far more than the engine's error wherever
    per-record gradients cancel, so only the same-precision loop tests the engine's sums).

    ``loss_fn``: the per-record loss both sides differentiate (default: the model's task's,
    cross-entropy, or squared error for a one-output regression head; the generative objective
    passes :func:`raptor.training.generate.answer_loss_per_record`). ``engine``: the engine of a
    run to check (its own loss function; :meth:`raptor.PrivacyEngine.check`) instead of a new one.
    """
    from raptor.per_sample.task_losses import loss_fn_for, task_type_of

    head = task_type_of(model)
    if engine is not None:
        loss_fn = engine.loss_fn
    loss_fn = loss_fn or loss_fn_for(head)
    if engine is None:
        engine = PerRecordEngine(model, trained_layers=trained_layers, grouping=grouping, loss_fn=loss_fn)
    probe = engine.compute(batch, {k: float("inf") for k in engine.group_keys})
    clip = clip_norms_between(probe)
    got = engine.compute(batch, clip)
    ref = reference_compute(model if oracle is None else oracle, batch, clip, trained_layers, grouping, loss_fn=loss_fn)
    same = ref if oracle is None else reference_compute(model, batch, clip, trained_layers, grouping, loss_fn=loss_fn)
    norm_err = max((_rel(got.norms[k], ref.norms[k]) for k in engine.group_keys), default=0.0)
    floor = _sum_floor(list(same.clipped_sums.values()))
    sum_err = max((_rel(got.clipped_sums[n], same.clipped_sums[n], floor) for n in same.clipped_sums), default=0.0)
    loss_err = _rel(got.loss_B, ref.loss_B)
    owners = all(torch.equal(got.owners[layer].cpu(), ref.owners[layer].cpu()) for layer in ref.owners)
    clipped = sum(int(bool((got.clip_factors[k] < 1).any())) for k in engine.group_keys)
    return CheckReport(
        family=family or model.config.model_type, grouping=grouping, lora=lora, max_rel_norm_error=norm_err,
        max_rel_sum_error=sum_err, max_rel_loss_error=loss_err, owners_match=owners,
        nonfinite_match=got.num_nonfinite == ref.num_nonfinite, clipped_groups=clipped,
        num_groups=len(engine.group_keys), tolerance=tolerance, head=head,
    )


def add_lora(model: nn.Module, generator: torch.Generator, *, rank: int = 4) -> nn.Module:
    """LoRA on attention and experts, random A and B: PEFT on the family's declared LoRA targets
    (attention projections, and ModuleDict experts' Linear layers), raptor's per-expert LoRA on fused experts.

    Only LoRA parameters stay trainable (PEFT freezes the base weights).
    """
    from raptor.moe.adapters import get_adapter
    from raptor.moe.expert_lora import add_expert_lora
    from raptor.moe.peft_lora import peft_lora

    adapter = get_adapter(model)
    fused = adapter.dispatch == "fused"
    # the family's declared LoRA targets: attention (and, for ModuleDict experts, the expert Linear layers)
    peft_model = peft_lora(model, r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                           target_modules=list(adapter.lora_targets), init_lora_weights=False)
    if fused:  # after PEFT, which freezes every parameter it did not add
        add_expert_lora(peft_model, rank=rank, alpha=2 * rank, generator=generator)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name and p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64).mul_(0.1).to(p.dtype))
    return peft_model


def check_family(family: str, *, grouping: str = "roles", lora: bool = False, batch_size: int = 5,
                 seq_len: int = 10, seed: int = 0, tolerance: float = 1e-4, dtype: str = "float64",
                 num_labels: int = 2, device: str = "cpu") -> CheckReport:
    """Build the family's tiny model (``dtype`` float64, float32 or bfloat16, on ``device``) and
    compare the engine with the reference.

    float64/float32: the reference runs the same model. bfloat16: the engine runs the bf16 model and
    the reference a float64 copy of it made before the cast (same weights up to bf16 rounding), so
    the errors are bf16's (use a bf16 tolerance, :data:`BF16_TOLERANCE`).
    ``num_labels=1`` checks a one-output regression head (squared-error loss, float labels).
    """
    import copy

    from raptor.errors import ConfigError
    from raptor.moe.models import build_model

    if dtype not in CHECK_DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(CHECK_DTYPES)}, got {dtype!r}")
    generator = torch.Generator().manual_seed(seed)
    model = build_model(family, generator=generator, num_labels=num_labels)
    if dtype == "float64":
        model = to_float64(model)
    layers = [info.index for info in _layers(model)]
    trained = layers[-1:]
    if lora:
        model = add_lora(model, generator)
    freeze_untrained_experts(model, trained)
    vocab = model.config.vocab_size
    batch = synthetic_batch(vocab, batch_size, seq_len, generator, num_labels=num_labels)
    oracle = None
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)  # round first: the oracle has the bf16 model's exact weights
        oracle = to_float64(copy.deepcopy(model)).to(device)
    model = model.to(device)
    batch = {k: v.to(device) for k, v in batch.items()}
    return compare(model, batch, trained_layers=trained, grouping=grouping, tolerance=tolerance, family=family,
                   lora=lora, oracle=oracle)


def check_all(family: str, *, groupings: Sequence[str] = ("roles", "dense"), loras: Sequence[bool] = (False, True),
              tolerance: float | None = None, dtype: str = "float64", **kwargs) -> dict:
    """``raptor check``'s run: :func:`check_family` for every grouping and LoRA setting, at
    ``tolerance`` (default 1e-4, :data:`BF16_TOLERANCE` for bfloat16), as one JSON-ready dict
    ``{"family", "passed", "checks": [CheckReport.to_dict(), ...]}``; ``kwargs`` go to
    :func:`check_family` (batch_size, seq_len, seed, device)."""
    if tolerance is None:
        tolerance = BF16_TOLERANCE if dtype == "bfloat16" else 1e-4
    reports = [check_family(family, grouping=g, lora=lora, tolerance=tolerance, dtype=dtype, **kwargs)
               for lora in loras for g in groupings]
    return {"family": family, "passed": all(r.passed for r in reports), "tolerance": tolerance,
            "checks": [r.to_dict() for r in reports]}


def _layers(model: nn.Module):
    from raptor.moe.adapters import get_adapter

    return get_adapter(model).moe_layers(model)
