"""DeepSeek-VL2 prompts: the release's conversation format and image-token layout, encoded to records.

Following the release's ``DeepseekVLV2Processor`` (``processing_deepseek_vl_v2.py``) and its
``"deepseek"`` conversation template (``conversation.py``: roles ``<|User|>``/``<|Assistant|>``,
separator ``"\\n\\n"``, eos after the assistant's reply), one VQA record is

    [bos] "<|User|>: " <image tokens> "\\n{question}\\n\\n<|Assistant|>:" | " {answer}" [eos]

with the part after ``|`` as the answer (labels). The image tokens are ``num_image_tokens``
copies of the ``<image>`` id, marked in ``images_seq_mask`` (see :mod:`raptor.moe.vl2.model`
for their layout). Images are padded to ``image_size`` squares with the mean colour (the release's
``ImageOps.pad(..., color=(127, 127, 127))``) and kept as ``uint8``.

Simplified: single-tile images (the release's ``cropping=False`` path), no dynamic tiling; the
text pieces are tokenized separately around the image (as the release does), the answer on its own.

Legend: N records, T = max_length, S image side.
"""

from __future__ import annotations

import numpy as np
import torch

from raptor.data.qa import GenerationEval, SpecialIds, fit_lengths, pack
from raptor.data.vqa import VQAData, load_image
from raptor.errors import DataError
from raptor.moe.vl2.model import DeepseekVL2ForCausalLM

IMAGE_TOKEN = "<image>"
USER_PREFIX = "<|User|>: "
ASSISTANT_SUFFIX = "\n\n<|Assistant|>:"


class Vl2Processor:
    """Turns VQA records into model inputs for one DeepSeek-VL2 model and its tokenizer."""

    def __init__(self, model: DeepseekVL2ForCausalLM, tokenizer):
        self.tokenizer = tokenizer
        self.special = SpecialIds.of(tokenizer)
        self.image_size = model.config.vision.image_size
        self.num_image_tokens = model.num_image_tokens
        image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        if image_id is None or image_id == tokenizer.unk_token_id or image_id >= model.config.vocab_size:
            raise DataError(f"the tokenizer has no {IMAGE_TOKEN!r} token inside the model's vocabulary "
                            f"({model.config.vocab_size}); use the checkpoint's own tokenizer")
        self.image_id = int(image_id)

    def _enc(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt(self, question: str) -> tuple[list[int], list[bool]]:
        head = [self.special.bos] + self._enc(USER_PREFIX)
        tail = self._enc("\n" + question + ASSISTANT_SUFFIX)
        ids = head + [self.image_id] * self.num_image_tokens + tail
        mask = [False] * len(head) + [True] * self.num_image_tokens + [False] * len(tail)
        return ids, mask

    def answer(self, answer: str) -> list[int]:
        return self._enc(" " + answer) + [self.special.eos]

    def pixels(self, data: VQAData) -> torch.Tensor:
        """uint8 [N, 3, S, S]; a missing or corrupt image raises DataError naming its line."""
        out = torch.empty((len(data), 3, self.image_size, self.image_size), dtype=torch.uint8)
        for i, path in enumerate(data.images):
            where = f"{data.source}, line {data.lines[i]}" if data.lines else str(path)
            array = load_image(path, self.image_size, where=where)
            out[i] = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
        return out

    def encode(self, data: VQAData, *, max_length: int) -> dict[str, torch.Tensor]:
        """Training records: ``input_ids``, ``attention_mask``, ``labels`` [N,T], ``images`` [N,3,S,S]
        (uint8) and ``images_seq_mask`` [N,T] (bool)."""
        prompts, answers, masks = [], [], []
        for i in range(len(data)):
            p, m = self.prompt(data.questions[i])
            a = self.answer(data.answers[i])
            where = f"{data.source}, line {data.lines[i]}" if data.lines else f"record {i}"
            p, a = fit_lengths(p, a, max_length, keep_prompt=True, where=where)
            prompts.append(p)
            answers.append(a)
            masks.append(m)
        records = pack(prompts, answers, max_length=max_length, pad_id=self.special.pad)
        seq_mask = torch.zeros((len(data), max_length), dtype=torch.bool)
        for i, m in enumerate(masks):
            seq_mask[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
        records["images"] = self.pixels(data)
        records["images_seq_mask"] = seq_mask
        return records

    def generation_eval(self, data: VQAData, *, max_new_tokens: int = 8) -> GenerationEval:
        """Unpadded prompts (with their image) for greedy decoding, and the gold answers."""
        pixels = self.pixels(data)
        prompts = []
        for i in range(len(data)):
            ids, mask = self.prompt(data.questions[i])
            prompts.append({"input_ids": torch.tensor([ids]), "images": pixels[i:i + 1],
                            "images_seq_mask": torch.tensor([mask])})
        return GenerationEval(tuple(prompts), tuple(data.answers), eos_id=self.special.eos,
                              max_new_tokens=max_new_tokens)
