"""``raptor check`` with the engine's results on another device than the reference's (issue 23).

On a GPU the engine returns its norms, owners and sums on the model's device while the one-record
reference keeps its per-record tables on the CPU; ``compare`` once called ``torch.equal`` on a CPU
mask and a CUDA tensor and crashed for every family. These tests need no GPU: a tensor subclass
stands in for "a tensor on a second device type". Any op mixing it with a plain CPU tensor of one
or more dimensions raises the error CUDA raises, and ``.cpu()`` turns it into a plain CPU tensor.
Unlike a static search for a pattern, this runs the comparison's real data flow, so any new mix
(``torch.equal``, arithmetic, ``torch.where`` ...) is caught wherever it is written.
"""

from __future__ import annotations

import pytest
import torch

from raptor.audit import engine_check as check
from raptor.per_sample.engine import EngineResult, PerRecordEngine


class OtherDevice(torch.Tensor):
    """A CPU tensor that behaves, for device mixing, like one on another device type (e.g. CUDA)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and _to_cpu(args[1:], kwargs)):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).as_subclass(torch.Tensor)
        flat = list(_tensors(args)) + list(_tensors(kwargs.values()))
        if any(isinstance(t, cls) for t in flat) and any(type(t) is torch.Tensor and t.dim() > 0 for t in flat):
            raise RuntimeError(f"{getattr(func, '__name__', func)}: Expected all tensors to be on the same device, "
                               "but found at least two devices, other:0 and cpu!")
        return super().__torch_function__(func, types, args, kwargs)


def _to_cpu(args, kwargs) -> bool:
    where = kwargs.get("device", args[0] if args else None)
    return where is not None and not isinstance(where, torch.dtype) and torch.device(where).type == "cpu"


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _elsewhere(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(OtherDevice)


def test_stand_in_raises_like_a_second_device():
    a, b = _elsewhere(torch.ones(3)), torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.equal(torch.isfinite(a), torch.isfinite(b))
    with pytest.raises(RuntimeError, match="same device"):
        _ = a - b
    assert type(a.cpu()) is torch.Tensor and torch.equal(a.cpu(), b)
    assert type(a.to("cpu")) is torch.Tensor
    assert float(a.sum()) == 3.0 and isinstance(a * 2, OtherDevice)


def test_rel_compares_tensors_of_two_devices():
    b = torch.tensor([1.0, 2.0, float("inf")], dtype=torch.float64)
    a = _elsewhere(torch.tensor([1.0, 2.5, float("inf")], dtype=torch.float32))
    assert check._rel(a, b) == pytest.approx(0.25)
    assert check._rel(b.clone(), _elsewhere(b.clone())) == 0.0
    assert check._rel(_elsewhere(torch.tensor([1.0, float("nan")])), torch.tensor([1.0, 1.0])) == float("inf")


def _on_other_device(result: EngineResult) -> EngineResult:
    def move(x):
        return {k: _elsewhere(v) for k, v in x.items()}

    return EngineResult(loss_B=_elsewhere(result.loss_B), norms=move(result.norms),
                        clipped_sums=move(result.clipped_sums), owners=move(result.owners),
                        num_nonfinite=result.num_nonfinite, nonfinite_B=_elsewhere(result.nonfinite_B),
                        clip_factors=move(result.clip_factors))


@pytest.mark.parametrize("family", ["mixtral", "switch_transformers"])
def test_check_passes_with_engine_results_on_another_device(family, monkeypatch):
    """The whole of ``check_family`` with the engine's results on the stand-in device, the reference's on the CPU."""
    compute = PerRecordEngine.compute
    monkeypatch.setattr(PerRecordEngine, "compute", lambda self, *a, **k: _on_other_device(compute(self, *a, **k)))
    report = check.check_family(family, batch_size=3, seq_len=6)
    assert report.passed, report.to_dict()
    assert report.owners_match and report.clipped_groups > 0


@pytest.mark.parametrize("family", ["qwen2_moe", "switch_transformers"])
def test_grouped_kernel_and_per_expert_loop_agree_with_the_reference(family, monkeypatch):
    """float32: the grouped kernel (``torch._grouped_mm``) runs the experts' products and is checked
    against the one-record reference; with the kernel off, the per-expert loop gives the same results."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from raptor.per_sample import capture

    if not capture.GROUPED_KERNEL:
        pytest.skip("this torch has no torch._grouped_mm")
    assert capture._kernel_runs(torch.device("cpu"), torch.float32)  # probed outside the spy
    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Spy():
        fast = check.check_family(family, batch_size=4, seq_len=8, seed=3, dtype="float32")
    assert fast.passed, fast.to_dict()
    assert "_grouped_mm" in seen
    monkeypatch.setattr(capture, "GROUPED_KERNEL", False)
    seen.clear()
    with Spy():
        loop = check.check_family(family, batch_size=4, seq_len=8, seed=3, dtype="float32")
    assert loop.passed, loop.to_dict()
    assert "_grouped_mm" not in seen


def test_grouped_mm_falls_back_to_the_loop_where_the_kernel_raises(monkeypatch):
    """A CUDA build may take only some dtypes in ``torch._grouped_mm``: the one-time probe says no
    and every product runs as the per-group loop, with the same values, instead of crashing a step."""
    from raptor.per_sample import capture

    if not capture.GROUPED_KERNEL:
        pytest.skip("this torch has no torch._grouped_mm")
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(10, 16, generator=g), torch.randn(3, 16, 8, generator=g)
    offs = capture.Offsets(torch.tensor([4, 4, 10], dtype=torch.int32))
    want = torch.cat([x[:4] @ w[0], x[4:] @ w[2]])
    assert torch.allclose(capture.grouped_mm(x, w, offs), want, atol=1e-5)

    def refuses(*args, **kwargs):
        raise RuntimeError("grouped gemm is only supported for bfloat16")

    capture._kernel_runs.cache_clear()
    monkeypatch.setattr(torch, "_grouped_mm", refuses)
    try:
        assert not capture._kernel_runs(torch.device("cpu"), torch.float32)
        assert torch.allclose(capture.grouped_mm(x, w, offs), want, atol=1e-5)
        outer = capture.grouped_outer(torch.randn(10, 8, generator=g), x, offs)
        assert outer.shape == (3, 8, 16) and torch.count_nonzero(outer[1]) == 0
    finally:
        capture._kernel_runs.cache_clear()  # the real kernel for the tests that follow


def test_grouped_mm_probe_refuses_a_kernel_that_is_wrong_on_empty_groups(monkeypatch):
    """A kernel that runs but writes garbage for an empty group (a known failure of grouped GEMMs on
    some GPUs) is found by the one-time probe and not used; the engine's products then run as the loop."""
    from raptor.per_sample import capture

    if not capture.GROUPED_KERNEL:
        pytest.skip("this torch has no torch._grouped_mm")
    real = torch._grouped_mm

    def garbage_on_empty(a, b, offs=None, **kwargs):
        out = real(a, b, offs=offs, **kwargs)
        if a.dim() == 2 and b.dim() == 2:  # the outer-product form: fill the empty groups' slots
            counts = torch.diff(offs, prepend=offs.new_zeros(1))
            out[counts == 0] = 7.0
        return out

    capture._kernel_runs.cache_clear()
    try:
        assert capture._kernel_runs(torch.device("cpu"), torch.float32)  # the real kernel passes its probe
        capture._kernel_runs.cache_clear()
        monkeypatch.setattr(torch, "_grouped_mm", garbage_on_empty)
        assert not capture._kernel_runs(torch.device("cpu"), torch.float32)
        assert not capture.grouped_kernel_runs("cpu", torch.float32)
        g = torch.Generator().manual_seed(1)
        gr, a = torch.randn(6, 4, generator=g), torch.randn(6, 3, generator=g)
        out = capture.grouped_outer(gr, a, capture.Offsets(torch.tensor([6, 6], dtype=torch.int32)))
        assert torch.allclose(out[0], gr.t() @ a, atol=1e-5) and torch.count_nonzero(out[1]) == 0
    finally:
        capture._kernel_runs.cache_clear()
