"""The shared open-spy (tests/conftest.py) sees open(), io.open() and Path reads, and restores both."""

from __future__ import annotations

import builtins
import io


def test_record_opens_sees_every_way_of_opening_and_restores(tmp_path, record_opens):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    for p in (a, b, c):
        p.write_text("x")
    real_open, real_io_open = builtins.open, io.open
    with record_opens() as opened:
        with open(a) as f:
            f.read()
        with io.open(b) as f:  # noqa: UP020 (the spy must see io.open itself)
            f.read()
        c.read_text()
    assert opened == [str(a), str(b), str(c)]
    assert builtins.open is real_open and io.open is real_io_open
    a.read_text()
    assert len(opened) == 3  # nothing recorded after the block
