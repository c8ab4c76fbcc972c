"""experiments/run_grid.py --space paper: a matched budget for all seven methods, the protocol in
every roles-built method's cells, raptor-split is RAPTOR with the head in its own shared group (its
recipe, raptor.recipes.raptor_split_recipe), and the config a cell builds says so."""

from __future__ import annotations

import pytest

from raptor.analysis.grid import Cell

SEVEN = ("nonprivate", "dpsgd", "dpsgd-full", "last-layer", "dp-lora", "raptor", "raptor-split")


@pytest.fixture()
def rg(experiment_script, monkeypatch):
    mod = experiment_script("run_grid")
    monkeypatch.setattr(mod, "SPACE", "paper")
    return mod


def test_matched_budget_and_protocol(rg):
    assert rg.check_matched_budget(SEVEN) == 2
    for method in ("dpsgd", "dpsgd-full", "raptor"):
        for h in rg.search_space(method):
            assert (h["lora"], h["freeze_head"], h["layers"]) == (True, True, "last")
    for method in ("dp-lora", "last-layer"):
        assert all("freeze_head" not in h for h in rg.search_space(method))
    lrs = {m: [h["lr"] for h in rg.search_space(m)] for m in SEVEN if m != "nonprivate"}
    assert len({tuple(v) for v in lrs.values()}) == 1  # every DP method searches the same learning rates


def test_cells_build_the_protocol_config(rg):
    fx = rg.Fixed(model_dir="m", data_dir="d", max_train=None, batch_size=1024, epochs=3.0)
    for method, lib, split, frozen, ratio in (("raptor-split", "raptor", "head", False, 0.3),
                                              ("raptor", "raptor", "none", True, 0.3),
                                              ("raptor-head", "raptor", "none", False, 0.9),
                                              ("dpsgd-head", "dpsgd", "none", False, None),
                                              ("dpsgd-full", "dpsgd-full", "none", True, None)):
        cell = Cell(model="m@x", task="sst2", method=method, epsilon=8.0, seed=0,
                    hparams={**fx.hparams(), **rg.search_space(method)[0]})
        cfg = rg.build_config(cell, fx, 0.1, 0.01)
        assert (cfg.method, cfg.privacy.shared_split, cfg.freeze_head, cfg.lora, cfg.layers) == \
            (lib, split, frozen, True, "last")
        assert ratio is None or cfg.privacy.shared_ratio == ratio
        assert cfg.batch_size == 1024 and cfg.privacy.epsilon == 8.0 and cfg.seed == 0


def test_calibration_is_per_seed_wherever_the_initial_weights_are(rg):
    """LoRA's A factors come from the cell's generator, so a LoRA cell's public clip norms are its
    own seed's; a warm model with a label-word head and no LoRA has one init for every seed."""
    fx = rg.Fixed(model_dir="m", data_dir="d", max_train=None, batch_size=1024, epochs=3.0)

    def key(method, seed, **over):
        h = {**fx.hparams(), **rg.search_space(method)[0], **over}
        return rg.calibration_key(Cell(model="m@x", task="sst2", method=method, epsilon=8.0, seed=seed, hparams=h))

    for method in ("raptor", "dpsgd", "dpsgd-full", "dp-lora"):
        assert key(method, 0) != key(method, 1), method
    assert key("dpsgd", 0, lora=False) == key("dpsgd", 1, lora=False)
    assert key("last-layer", 0) == key("last-layer", 1)
    assert key("dpsgd", 0, lora=False, head="random") != key("dpsgd", 1, lora=False, head="random")


def test_raptor_and_its_variant_are_compared_with_the_others_only(rg):
    from raptor.analysis.paper_table import margins

    row = {"std": 0.01, "n": 3}
    summary = {("m", "sst2", "raptor", 8.0): {**row, "mean": 0.70}, ("m", "sst2", "raptor-split", 8.0): {**row, "mean": 0.80},
               ("m", "sst2", "dpsgd", 8.0): {**row, "mean": 0.60}}
    mine = margins(summary, exclude=("nonprivate", *rg.VARIANTS))
    assert mine[0]["best_baseline"] == "dpsgd" and mine[0]["verdict"] == "win"


def test_a_third_learning_rate_keeps_the_two_lr_table(rg, monkeypatch):
    """--configs 3 widens every method's search by one lr (the DP methods all selected the top of
    two) and leaves the first two configurations, and so every finished cell, as they were."""
    two = {m: rg.search_space(m) for m in SEVEN}
    monkeypatch.setattr(rg, "CONFIGS", 3)
    assert rg.check_matched_budget(SEVEN) == 3
    for m in SEVEN:
        three = rg.search_space(m)
        assert three[:2] == two[m] and len(three) == 3
        assert three[2]["lr"] == (3e-4 if m == "nonprivate" else 8e-3)
        assert {k: v for k, v in three[2].items() if k != "lr"} == {k: v for k, v in three[1].items() if k != "lr"}


@pytest.mark.parametrize("variant", ["raptor-split", "raptor-head", "dpsgd-head"])
def test_a_variant_cell_is_its_recipe(rg, variant):
    """A variant's cells carry its recipe's settings (raptor.recipes.VARIANT_RECIPES): the config a
    cell builds is the recipe's in its method, trainable set, head and shared stream."""
    from raptor.recipes import VARIANT_RECIPES

    want = VARIANT_RECIPES[variant]()
    fx = rg.Fixed(model_dir="m", data_dir="d", max_train=None, batch_size=1024, epochs=3.0)
    for h in rg.search_space(variant):
        cell = Cell(model="m@x", task="sst2", method=variant, epsilon=8.0, seed=0, hparams={**fx.hparams(), **h})
        got = rg.build_config(cell, fx, 0.1, 0.01)
        assert rg.library_method(variant) == want.method
        for field in ("method", "lora", "freeze_head", "layers"):
            assert getattr(got, field) == getattr(want, field), field
        assert (got.privacy.shared_split, got.privacy.shared_ratio) == (want.privacy.shared_split,
                                                                        want.privacy.shared_ratio)


def test_a_variant_runs_only_under_the_spaces_that_define_it(rg, monkeypatch):
    from raptor.errors import ConfigError

    for space, refused in (("default", ("raptor-split", "raptor-head", "dpsgd-head")), ("minilm", ("raptor-split",)),
                           ("demo", ("raptor-split",)), ("paper", ("naive_dp", "baseline_a"))):
        monkeypatch.setattr(rg, "SPACE", space)
        for method in refused:
            with pytest.raises(ConfigError, match=f"--methods {method}: .*runs only under --space"):
                rg.search_space(method)
    monkeypatch.setattr(rg, "SPACE", "minilm")
    assert rg.search_space("raptor-head") and rg.search_space("dpsgd-head")


def test_every_grid_method_has_its_own_plot_colour(rg):
    mpl = pytest.importorskip("matplotlib.colors")
    from raptor.analysis.paper_table import method_colour

    colours = {m: mpl.to_rgba(method_colour(m, rg.VARIANT_COLOURS)) for m in rg.GRID_METHODS}
    assert len(set(colours.values())) == len(rg.GRID_METHODS), colours
