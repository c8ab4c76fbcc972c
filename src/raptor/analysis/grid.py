"""A resumable experiment grid: one JSON line per finished cell, skipped on a rerun.

A *cell* is one training run, fully described by a frozen :class:`Cell` (model, task, method,
epsilon, seed, stage and hyperparameters). :func:`run_grid` runs the cells that are not yet in the
results file, appending each finished cell as one line as soon as it ends (written, flushed and
fsync'ed), so that:

* a rerun skips what is done, and one grid can span several sessions;
* a crash or a kill never loses a finished cell: at worst the line being written is cut, and the
  next run drops that partial line before appending;
* the progress bar covers the whole grid (done cells included) and gives an ETA;
* with ``claims=``, processes that share a grid never run one cell twice: each claims the cell it
  runs (:mod:`raptor.analysis.claims`), skips a cell another one holds, and re-reads what is
  finished once the claim is its own (the last holder may have just finished it).

Each line holds the cell, its result (metric, epsilon, delta, ...), its wall time, the git
revision of the code that ran it and a timestamp.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raptor.errors import ConfigError

STAGES = ("tune", "final")


def _frozen_items(mapping: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    return tuple(sorted((str(k), v) for k, v in items))


@dataclass(frozen=True)
class Cell:
    """One run of a grid. ``hparams`` is stored as sorted (name, value) pairs so the cell is hashable."""

    model: str
    task: str
    method: str
    epsilon: float | None
    seed: int
    stage: str = "final"
    hparams: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ConfigError(f"Cell.stage must be one of {STAGES}, got {self.stage!r}")
        object.__setattr__(self, "hparams", _frozen_items(self.hparams))

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.hparams)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hparams"] = dict(self.hparams)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        return cls(model=data["model"], task=data["task"], method=data["method"], epsilon=data["epsilon"],
                   seed=int(data["seed"]), stage=data.get("stage", "final"), hparams=data.get("hparams", {}))

    @property
    def key(self) -> str:
        """A stable id: the sha1 of the cell's canonical JSON."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def label(self) -> str:
        eps = "inf" if self.epsilon is None else f"{self.epsilon:g}"
        hp = ",".join(f"{k}={v}" for k, v in self.hparams)
        return f"{self.stage}:{self.model}/{self.task}/{self.method}/eps{eps}/seed{self.seed}" + (f"[{hp}]" if hp else "")


def git_revision(cwd: str | Path | None = None) -> str:
    """``git rev-parse HEAD`` (+ ``-dirty`` when the tree has changes), or ``"unknown"`` outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def read_records(path: str | Path) -> list[dict]:
    """Every complete line of a grid file. A cut final line (a kill during a write) is ignored; a
    corrupt line elsewhere is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # the last line, without its newline: a write that was cut
                continue
            raise ConfigError(f"{path}:{number}: not a JSON record ({exc.msg}); fix or delete that line") from exc
    return records


def _drop_partial_tail(path: Path) -> None:
    """Remove a final line that has no newline (a write cut by a kill), so appends start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def append_record(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line and fsync it (the line is on disk when this returns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_partial_tail(path)
    line = json.dumps(record, sort_keys=True, default=_json_default) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def _json_default(value):
    if isinstance(value, float):
        return value
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _run_one(cell: Cell, path: Path, run_cell, on_error: str, rev: str, bar) -> None:
    """Run one cell and append its record (``status: "error"`` under ``on_error="record"``)."""
    bar.set_postfix_str(cell.label()[:80])
    start = time.perf_counter()
    record = {"key": cell.key, "cell": cell.to_dict(), "git_revision": rev}
    try:
        record.update(status="ok", result=dict(run_cell(cell)))
    except Exception as exc:  # noqa: BLE001 - recorded (or re-raised) with the cell that failed
        if on_error == "raise":
            raise
        record.update(status="error", error=f"{type(exc).__name__}: {exc}")
    record.update(wall_seconds=time.perf_counter() - start, finished_at=time.time())
    append_record(path, record)


def done_keys(path: str | Path) -> set[str]:
    """Keys of the cells already finished in ``path`` (failed cells are not done: a rerun retries them)."""
    return {r["key"] for r in read_records(path) if r.get("status", "ok") == "ok"}


def run_grid(
    cells: Sequence[Cell],
    path: str | Path,
    run_cell: Callable[[Cell], Mapping[str, Any]],
    *,
    progress: bool = True,
    on_error: str = "raise",
    revision: str | None = None,
    desc: str = "grid",
    claims: str | Path | None = None,
    finished: Callable[[], set[str]] | None = None,
) -> list[dict]:
    """Run every cell of ``cells`` not yet finished in ``path``; return all records of ``cells``.

    ``run_cell(cell)`` trains and evaluates one cell through the library and returns a JSON-able
    mapping (metric, epsilon, delta, ...). ``on_error="raise"`` stops the grid at a failing cell
    (finished cells stay on disk); ``"record"`` writes a ``status: "error"`` line and goes on (a
    rerun retries it). ``claims``: a directory in which each cell is claimed while it runs, so that
    processes sharing the grid skip the cells another one is running (a rerun takes up what they
    left). ``finished``: the keys finished anywhere (default :func:`done_keys` of ``path``), for a
    grid whose processes write several files.
    """
    if on_error not in ("raise", "record"):
        raise ConfigError(f"on_error must be 'raise' or 'record', got {on_error!r}")
    path = Path(path)
    finished = finished or (lambda: done_keys(path))
    unique = list(dict.fromkeys(cells))
    done = finished()
    todo = [c for c in unique if c.key not in done]
    rev = revision if revision is not None else git_revision(Path(__file__).parent)
    from tqdm.auto import tqdm

    from raptor.analysis.claims import claimed, holder

    bar = tqdm(total=len(unique), initial=len(unique) - len(todo), disable=not progress, desc=desc,
               unit="cell", dynamic_ncols=True)
    try:
        for cell in todo:
            with contextlib.nullcontext(True) if claims is None else claimed(claims, cell.key) as ours:
                if not ours:
                    who = holder(claims, cell.key) or {}
                    tqdm.write(f"skipped {cell.label()}: process {who.get('pid', '?')} on {who.get('host', '?')} "
                               "is running it; a rerun takes it up if that process stops first")
                elif claims is None or cell.key not in finished():  # the last holder may have finished it
                    _run_one(cell, path, run_cell, on_error, rev, bar)
            bar.update(1)
    finally:
        bar.close()
    keys = {c.key for c in unique}
    return [r for r in read_records(path) if r.get("key") in keys and r.get("status", "ok") == "ok"]
