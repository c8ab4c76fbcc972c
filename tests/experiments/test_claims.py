"""raptor.analysis.claims: one process per grid cell, released when the holder ends or dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from raptor.analysis.claims import claimed, holder


def test_a_held_claim_refuses_a_second_taker_and_is_removed_on_release(tmp_path):
    with claimed(tmp_path, "k") as first:
        assert first
        assert holder(tmp_path, "k")["pid"] == os.getpid()
        with claimed(tmp_path, "k") as second:  # another open file description: refused like another process
            assert not second
        with claimed(tmp_path, "other") as third:  # other keys are free
            assert third
    assert not (tmp_path / "k.claim").exists() and holder(tmp_path, "k") is None
    with claimed(tmp_path, "k") as again:
        assert again


def test_a_killed_holder_leaves_a_file_but_no_claim(tmp_path):
    code = ("import sys, time; from raptor.analysis.claims import claimed\n"
            "with claimed(sys.argv[1], 'k') as ours:\n"
            "    print('held' if ours else 'refused', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with claimed(tmp_path, "k") as ours:
            assert not ours  # a live process holds it
        assert holder(tmp_path, "k")["pid"] == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert (tmp_path / "k.claim").exists()  # SIGKILL ran no cleanup ...
        with claimed(tmp_path, "k") as ours:
            assert ours  # ... but the kernel dropped its lock
            assert holder(tmp_path, "k")["pid"] == os.getpid()
    finally:
        proc.kill()
        proc.wait(timeout=30)
