"""Shared helpers for raptor's benchmarks: robust statistics, peak-memory measurement, workers.

Timing: every ratio is a ratio of *medians* over repetitions measured in one process, with the two
steps interleaved (ABBA order) so that drift from other load on the machine hits both alike. The
inter-quartile range (IQR) of each step's time is reported next to its median. Wall time is the
headline; process CPU time (``time.process_time``) is reported too: on a machine shared with other
jobs it does not count the time this process waited for a core, so with one thread it is the
steadier of the two.

Memory (Linux): the peak resident set size (RSS) *increase* of one step over the RSS just before
it. Memory is measured after the timed rounds, with glibc's mmap threshold fixed at 64 KiB (see
:func:`fix_mmap_threshold`) so that freed tensors leave the RSS at once. Before each measured step the heap is trimmed (``malloc_trim(0)``, so freed pages retained by
glibc are returned to the OS and must be faulted in again) and the kernel's high-water mark is
reset (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0); the increase is ``VmHWM - VmRSS``
read from ``/proc/self/status``. This sees every allocation (torch's CPU allocator, oneDNN
scratch, Python objects), which ``tracemalloc`` does not. Each configuration runs in a fresh
subprocess, so configurations do not share a heap. Where ``clear_refs`` cannot be written the
fallback is ``ru_maxrss`` (high-water mark since process start), reported with ``method``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        _LIBC = ctypes.CDLL(name) if name else False
    return _LIBC


def trim_heap() -> None:
    """Collect garbage and return freed heap pages to the OS (glibc ``malloc_trim``; no-op elsewhere)."""
    gc.collect()
    libc = _libc()
    if libc and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def fix_mmap_threshold(nbytes: int = 64 * 1024) -> bool:
    """Serve every allocation of ``nbytes`` or more with its own ``mmap`` (glibc ``mallopt``).

    glibc raises its mmap threshold dynamically (up to 32 MiB) as large blocks are freed, after
    which tensors come from the heap and freed pages may or may not stay resident: the RSS peak of
    a step then depends on allocation history (we saw +-15 % between identical runs). With a fixed
    threshold, large blocks are unmapped when freed, so RSS follows live memory. Call it after the
    timed rounds (it changes allocation speed) and before measuring memory. Returns False where
    ``mallopt`` is not available.
    """
    libc = _libc()
    if not libc or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)))


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def peak_increase_bytes(step: Callable[[], object]) -> tuple[int, str]:
    """Peak RSS increase (bytes) while ``step()`` runs, and the method used.

    ``step``'s return value is dropped inside the measured region, so what it returns counts.
    """
    trim_heap()
    if _reset_high_water_mark():
        before = _status_kb("VmRSS")
        step()
        peak = _status_kb("VmHWM")
        if before is not None and peak is not None:
            return max(peak - before, 0) * 1024, "vmhwm-reset"
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(after - before, 0) * 1024, "ru_maxrss"


def peak_tensor_bytes(step: Callable[[], object]) -> int:
    """Peak bytes of tensor storage allocated by ``step()`` and alive at the same time.

    A ``TorchDispatchMode`` sees every ATen op of the step, its backward included; each new output
    storage is counted when it appears and uncounted when it is freed (a weakref finaliser on
    the storage object, which torch keeps alive as long as the storage). Storages that existed
    before the step (parameters, buffers, inputs, in-place outputs) are not counted. Unlike RSS it
    does not depend on the allocator's history, so it is exactly reproducible; it is a lower bound:
    it misses scratch that a kernel allocates and frees inside one op (those allocations do not pass
    the Python dispatch key), allocator slack and non-tensor memory.
    """
    from raptor.training.step.micro_batch import peak_tensor_bytes as measure

    return measure(step)


def rss_bytes() -> int:
    """Current resident set size (bytes), 0 where ``/proc`` is not available."""
    kb = _status_kb("VmRSS")
    return 0 if kb is None else kb * 1024


def summary(times: Sequence[float]) -> dict[str, float]:
    """Median, quartiles and IQR of a list of seconds."""
    xs = sorted(float(t) for t in times)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {"median": statistics.median(xs), "q1": q1, "q3": q3, "iqr": q3 - q1, "n": len(xs)}


def run_interleaved(steps: dict[str, Callable[[], object]], *, warmup: int, reps: int,
                    clocks: Mapping[str, Callable[[], float]]) -> dict[str, dict[str, list[float]]]:
    """Run ``warmup`` untimed rounds, then ``reps`` timed rounds of every step in ABBA order.

    Returns ``{clock name: {step name: [seconds per round]}}``; round ``i`` of every step ran
    back to back, so per-round ratios pair neighbouring measurements.
    """
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    times: dict[str, dict[str, list[float]]] = {c: {name: [] for name in names} for c in clocks}
    for rep in range(reps):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            start = {c: clock() for c, clock in clocks.items()}
            steps[name]()
            for c, clock in clocks.items():
                times[c][name].append(clock() - start[c])
    return times


def run_worker(script: Path, spec: dict, *, timeout: float) -> dict:
    """Run ``script --worker SPEC`` in a fresh interpreter and return the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, str(script), "--worker", json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"error": f"worker exited with status {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> str:
    """A plain-text table of ``rows`` with ``columns`` = (key, header)."""
    cells = [[header for _, header in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key)) for key, _ in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


class Clock:
    """Wall time per named phase: ``wrap(name, fn)`` returns ``fn`` timed into ``current[name]``;
    ``take()`` returns the totals so far and starts over."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - t0

        return timed

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


def write_report(report: dict, out) -> None:
    """Write a benchmark's JSON report to ``out`` (a path; None: nothing) and say where."""
    if out is None:
        return
    import json
    from pathlib import Path

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
