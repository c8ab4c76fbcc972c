"""experiments/run_grid.py: every search space gives the cells (their keys, so that a resumed grid
skips what it finished) and the configs (``TrainConfig.to_dict()``) recorded in
``grid_cells_snapshot.json``, for every ``--space``, ``--configs`` and grid method, under two sets
of grid-wide settings.

Regenerate the snapshot (only when a change of the cells is meant):
``.venv/bin/python tests/experiments/test_grid_cells_snapshot.py``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("grid_cells_snapshot.json")
#: grid methods beyond ``--methods``'s choices that the ablation scripts take from the spaces
EXTRA_METHODS = ("raptor-head", "dpsgd-head")
#: the clips a cell calibrated on public norms would get (a stand-in: the norms are the run's)
CALIBRATED = (0.123, 0.0456)


def _fixed(rg) -> dict:
    return {"default": rg.Fixed(model_dir="m", data_dir="d"),
            "paper": rg.Fixed(model_dir="m", data_dir="d", max_train=None, max_length=128, batch_size=1024,
                              epochs=3.0, delta=1e-6, head="public-fit", micro_batch_size=32, device="cuda")}


def _clips(method: str, hparams: dict) -> tuple[float, float]:
    spec = hparams.get("clip", 1.0)
    if method == "nonprivate":
        return 1.0, 1.0
    if isinstance(spec, (int, float)):
        return float(spec), float(spec)
    return CALIBRATED


def _config_dict(cfg) -> dict:
    d = json.loads(json.dumps(cfg.to_dict()))
    d["output_dir"] = str(Path(d["output_dir"]).relative_to(ROOT))  # the checkout's place is no part of it
    return d


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def snapshot(rg) -> dict:
    """{"cells": {"<fixed>/<space>/<configs>/<method>": [[cell key, config id], ...] or "refused"},
    "configs": {config id: TrainConfig.to_dict()}, "hparams": {cell key: hparams}} of ``rg``."""
    from raptor.analysis.grid import Cell
    from raptor.errors import ConfigError

    cells, configs, hparams = {}, {}, {}
    space0, configs0 = rg.SPACE, rg.CONFIGS
    try:
        for fx_name, fx in _fixed(rg).items():
            for space in rg.SPACES:
                for k in (1, 2, 3, 4):
                    rg.SPACE, rg.CONFIGS = space, k
                    for method in (*rg.GRID_METHODS, *EXTRA_METHODS):
                        where = f"{fx_name}/{space}/{k}/{method}"
                        eps = None if method == "nonprivate" else 1.0
                        try:
                            space_of = [{**fx.hparams(), **h} for h in rg.search_space(method)]
                        except (ConfigError, KeyError):
                            cells[where] = "refused"
                            continue
                        fixed = rg.fixed_choice(("m@x", "sst2", method, eps), fx)
                        if fixed is not None:
                            assert [fixed] == space_of, where
                        out = []
                        for h in space_of:
                            cell = Cell(model="m@x", task="sst2", method=method, epsilon=eps, seed=100,
                                        stage="tune" if rg.tuned(method) else "final", hparams=h)
                            cfg = _config_dict(rg.build_config(cell, fx, *_clips(method, h)))
                            text = json.dumps(cfg, sort_keys=True)
                            cid = hashlib.sha1(text.encode()).hexdigest()[:12]
                            configs[cid] = cfg
                            hparams[cell.key] = h
                            out.append([cell.key, cid])
                        cells[where] = out
    finally:
        rg.SPACE, rg.CONFIGS = space0, configs0
    return {"cells": cells, "configs": configs, "hparams": hparams}


#: the variants' spaces: outside them a variant is refused (in the snapshot, taken before the
#: variants were recipes, it ran there as its library method at another method's settings; no
#: result file holds such a cell)
VARIANT_SPACES = {"raptor-split": ("paper",), "raptor-head": ("paper", "minilm"), "dpsgd-head": ("paper", "minilm")}


def _refused_now(where: str) -> bool:
    _, space, _, method = where.split("/")
    return method in VARIANT_SPACES and space not in VARIANT_SPACES[method]


def test_every_grid_cell_and_config_is_the_snapshot(experiment_script):
    rg = experiment_script("run_grid")
    want = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    got = snapshot(rg)
    assert got["cells"].keys() == want["cells"].keys()
    assert got["hparams"].items() <= want["hparams"].items()  # every cell's key names the hparams it had
    assert any(_refused_now(w) and not isinstance(c, str) for w, c in want["cells"].items())
    for where, cells in want["cells"].items():
        mine = got["cells"][where]
        if isinstance(cells, str) or _refused_now(where):  # a refusal: still one
            assert mine == "refused", where
            continue
        assert [key for key, _ in mine] == [key for key, _ in cells], where
        for (_, cid), (_, want_cid) in zip(mine, cells):
            have, expected = _flat(got["configs"][cid]), _flat(want["configs"][want_cid])
            # every recorded field as it was (a field added to the configs since is not compared)
            assert {f: have.get(f) for f in expected} == expected, where


def _load_run_grid():
    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("run_grid_snapshot", ROOT / "experiments" / "run_grid.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _dump(snap: dict) -> str:
    """The snapshot as JSON with one line per entry (a changed cell is a changed line)."""
    parts = []
    for section in sorted(snap):
        rows = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(snap[section].items())]
        parts.append(f" {json.dumps(section)}: {{\n" + ",\n".join(rows) + "\n }")
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    SNAPSHOT.write_text(_dump(snapshot(_load_run_grid())), encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
