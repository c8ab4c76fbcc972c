"""``raptor pretrain --device/--dtype`` (issue 23), tested on the CPU.

The device is where the run trains, not part of its settings: a run resumes on another device. The
compute dtype is a setting (autocast; weights, optimizer and checkpoints stay float32), so a bf16 run
resumes exactly, as a float32 one does.
"""

from __future__ import annotations

import pytest
import torch
from test_pretrain import _config

from raptor.cli.main import main
from raptor.errors import ConfigError
from raptor.pretrain import pretrain


def test_bfloat16_run_trains_in_bf16_resumes_exactly_and_keeps_float32_weights(tmp_path, monkeypatch):
    seen = []
    real = torch.nn.functional.linear

    def spy(x, w, b=None):  # under autocast the products run in bf16 (the weights stay float32)
        out = real(x, w, b)
        seen.append((w.dtype, out.dtype))
        return out

    full = pretrain(_config(tmp_path / "a", dtype="bfloat16"), progress=False, device="cpu")
    cfg = _config(tmp_path / "b", dtype="bfloat16")
    assert pretrain(cfg, progress=False, stop_after=3, device="cpu") is None
    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    resumed = pretrain(cfg, resume=True, progress=False, device="cpu")
    a = torch.load(full.output_dir / "checkpoint" / "state.pt", weights_only=False)
    b = torch.load(resumed.output_dir / "checkpoint" / "state.pt", weights_only=False)
    for k in a["model"]:
        assert a["model"][k].dtype == torch.float32 or not a["model"][k].is_floating_point(), k
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert resumed.report["held_out_loss"] == full.report["held_out_loss"]
    assert full.report["config"]["dtype"] == "bfloat16" and full.report["device"] == "cpu"
    assert (torch.float32, torch.bfloat16) in seen


def test_bfloat16_differs_from_float32(tmp_path):
    """The flag is not ignored: the same run in float32 ends elsewhere."""
    bf = pretrain(_config(tmp_path / "bf", dtype="bfloat16", steps=3), progress=False)
    fp = pretrain(_config(tmp_path / "fp", steps=3), progress=False)
    assert bf.report["held_out_loss"] != fp.report["held_out_loss"]


def test_resume_with_another_dtype_is_refused(tmp_path):
    cfg = _config(tmp_path, dtype="bfloat16")
    assert pretrain(cfg, progress=False, stop_after=3) is None
    with pytest.raises(ConfigError, match="dtype"):
        pretrain(_config(tmp_path), resume=True, progress=False)


def test_cli_device_and_dtype_flags(tmp_path, capsys):
    text = _config(tmp_path).text[0]
    common = ["pretrain", "--text", text, "--vocab-size", "120", "--hidden-size", "16", "--num-layers", "2",
              "--num-heads", "2", "--num-experts", "4", "--expert-intermediate", "16", "--block-length", "16",
              "--batch-size", "4", "--steps", "2", "--warmup-steps", "1", "--eval-every", "2", "--eval-blocks", "4",
              "--checkpoint-every", "2", "--held-out-every", "3", "--stats-records", "8", "--no-progress"]
    assert main(common + ["--output-dir", str(tmp_path / "cli"), "--device", "cpu", "--dtype", "bfloat16"]) == 0
    capsys.readouterr()
    if not torch.cuda.is_available():
        assert main(common + ["--output-dir", str(tmp_path / "gpu"), "--device", "cuda"]) == 2
        assert "--device cuda" in capsys.readouterr().err
    assert main(common + ["--output-dir", str(tmp_path / "bad"), "--device", "nonsense"]) == 2
