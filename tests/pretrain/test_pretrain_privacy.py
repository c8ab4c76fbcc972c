"""`raptor pretrain` (the CLI step that makes a warm start) never reads a private record: a private
file beside the public text is not opened, and no private text reaches the tokenizer trainer or the
token blocks the model trains on."""

from __future__ import annotations

from pathlib import Path

import raptor.data.tokenization as tokenization
import raptor.pretrain.run as pretrain_run
from raptor.cli.main import main

PUBLIC = ["the cat sat on the mat and the dog ran away quickly today",
          "a short story about a small red boat on a quiet river",
          "people walked along the river and talked about the weather"]
SECRET = "zqxjvwsecretword"


def test_pretrain_cli_reads_no_private_file_and_trains_on_public_text_only(tmp_path, monkeypatch, record_opens):
    text = tmp_path / "text"
    text.mkdir()
    (text / "public.txt").write_text("\n".join(PUBLIC * 20) + "\n")
    (text / "private_train.txt").write_text(f"{SECRET} is a private record\n" * 20)  # excluded by name
    (text / "private.csv").write_text(f"sentence,label\n{SECRET} private,1\n")  # not a *.txt: never listed
    trainer_texts, block_texts = [], []
    real_train, real_pack = tokenization.train_wordpiece, pretrain_run.pack_blocks

    def spy_train(texts, *args, **kwargs):
        texts = list(texts)
        trainer_texts.extend(texts)
        return real_train(texts, *args, **kwargs)

    def spy_pack(tokenizer, paragraphs, **kwargs):
        block_texts.extend(paragraphs)
        return real_pack(tokenizer, paragraphs, **kwargs)

    monkeypatch.setattr(tokenization, "train_wordpiece", spy_train)
    monkeypatch.setattr(pretrain_run, "pack_blocks", spy_pack)
    with record_opens() as opened:
        rc = main(["pretrain", "--text", str(text), "--exclude", "private", "--output-dir", str(tmp_path / "out"),
                   "--vocab-size", "120", "--hidden-size", "16", "--num-layers", "2", "--num-heads", "2",
                   "--num-experts", "4", "--expert-intermediate", "16", "--block-length", "16", "--batch-size", "4",
                   "--steps", "2", "--warmup-steps", "1", "--eval-every", "2", "--eval-blocks", "4",
                   "--checkpoint-every", "2", "--held-out-every", "3", "--stats-records", "8", "--no-progress"])
    monkeypatch.undo()
    assert rc == 0
    assert opened and trainer_texts and block_texts, "the spies saw nothing: they would not catch a private read"
    assert not any(Path(p).name.startswith("private") for p in opened)
    assert set(trainer_texts) <= set(PUBLIC) and set(block_texts) <= set(PUBLIC)
    assert not any(SECRET in t for t in trainer_texts + block_texts)
