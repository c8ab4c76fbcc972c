"""Visual question answering data: JSONL with images, and a small synthetic set drawn with Pillow.

User file: JSON Lines, one record per line with an image path (relative to the JSONL file's
directory, or absolute), a question and an answer; field names are configurable (``image``,
``question``, ``answer`` by default). :func:`read_vqa_jsonl` opens and decodes EVERY image when
the file is read, so a missing or corrupt image stops the run before training starts, with a
:class:`DataError` naming the file, the line and the image path.

Synthetic set (:func:`make_synthetic_vqa`): one coloured shape (square, circle or triangle) on a
white background per image; questions "what colour is the square?" (answer: the colour) and
"what shape is in the picture?" (answer: the shape). Seeded (an explicit ``torch.Generator``),
small, for tests and the demo; it is no benchmark.

Legend: S image side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageOps, UnidentifiedImageError

from raptor.data.qa import string_field
from raptor.data.textio import read_table
from raptor.errors import ConfigError, DataError

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 60, 220), "yellow": (240, 220, 20),
    "purple": (140, 40, 170),
}
SHAPES: tuple[str, ...] = ("square", "circle", "triangle")
PAD_COLOUR = (127, 127, 127)  # the release pads with int(255 * mean), mean = 0.5


@dataclass(frozen=True)
class VQAData:
    """Image paths, questions and answers of one split (``lines``: 1-based JSONL line of each record)."""

    images: tuple[Path, ...]
    questions: tuple[str, ...]
    answers: tuple[str, ...]
    lines: tuple[int, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if not len(self.images) == len(self.questions) == len(self.answers):
            raise DataError(f"{self.source or 'dataset'}: images, questions and answers differ in number")

    def __len__(self) -> int:
        return len(self.answers)

    def subset(self, indices: Sequence[int]) -> VQAData:
        idx = [int(i) for i in indices]
        return VQAData(tuple(self.images[i] for i in idx), tuple(self.questions[i] for i in idx),
                       tuple(self.answers[i] for i in idx), tuple(self.lines[i] for i in idx) if self.lines else (),
                       self.source)


def load_image(path: Path, size: int, *, where: str) -> np.ndarray:
    """RGB uint8 [S, S, 3]: the image scaled to fit and padded to a square with the mean colour."""
    try:
        with Image.open(path) as im:
            im.load()
            rgb = im.convert("RGB")
    except FileNotFoundError as err:
        raise DataError(f"{where}: image {path} does not exist") from err
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise DataError(f"{where}: image {path} cannot be decoded ({type(err).__name__}: {err})") from err
    return np.asarray(ImageOps.pad(rgb, (size, size), color=PAD_COLOUR), dtype=np.uint8)


def read_vqa_jsonl(path: str | Path, *, image_field: str = "image", question_field: str = "question",
                   answer_field: str = "answer", check_images: bool = True) -> VQAData:
    """Records of a VQA JSONL file; every image is opened and decoded here (``check_images``)."""
    path = Path(path)
    table = read_table(path, fmt="jsonl")
    images, questions, answers, lines = [], [], [], []
    for rec in table.records:
        rel = string_field(rec, image_field, table.name)
        image = Path(rel) if Path(rel).is_absolute() else path.parent / rel
        where = f"{table.name}, line {rec.line}"
        if check_images:
            load_image(image, 8, where=where)
        images.append(image)
        questions.append(string_field(rec, question_field, table.name))
        answers.append(string_field(rec, answer_field, table.name))
        lines.append(rec.line)
    return VQAData(tuple(images), tuple(questions), tuple(answers), tuple(lines), table.name)


def _draw(shape: str, colour: str, size: int, generator: torch.Generator) -> Image.Image:
    im = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(im)
    side = int(torch.randint(size // 3, size * 2 // 3 + 1, (1,), generator=generator))
    x0, y0 = (int(v) for v in torch.randint(0, size - side + 1, (2,), generator=generator))
    box = (x0, y0, x0 + side - 1, y0 + side - 1)
    fill = COLOURS[colour]
    if shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "circle":
        draw.ellipse(box, fill=fill)
    else:
        draw.polygon([(x0 + side // 2, y0), (x0, y0 + side - 1), (x0 + side - 1, y0 + side - 1)], fill=fill)
    return im


def make_synthetic_vqa(directory: str | Path, *, num_images: int, seed: int = 0, image_size: int = 32,
                       name: str = "vqa.jsonl") -> Path:
    """Write ``num_images`` PNGs (in ``<name stem>_images/``) and a JSONL ``name`` (two questions per
    image) under ``directory``; returns the JSONL path."""
    if num_images < 1 or image_size < 8:
        raise ConfigError(f"num_images must be >= 1 and image_size >= 8, got {num_images} and {image_size}")
    directory = Path(directory)
    stem = Path(name).stem
    (directory / f"{stem}_images").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    colours = list(COLOURS)
    lines = []
    for i in range(num_images):
        shape = SHAPES[int(torch.randint(len(SHAPES), (1,), generator=g))]
        colour = colours[int(torch.randint(len(colours), (1,), generator=g))]
        rel = f"{stem}_images/{i:05d}.png"
        _draw(shape, colour, image_size, g).save(directory / rel)
        lines.append({"image": rel, "question": f"what colour is the {shape}?", "answer": colour})
        lines.append({"image": rel, "question": "what shape is in the picture?", "answer": shape})
    path = directory / name
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def synthetic_corpus() -> list[str]:
    """Every word the synthetic set and the VL2 prompt template use (for a tiny tokenizer)."""
    words = [f"what colour is the {s}?" for s in SHAPES] + ["what shape is in the picture?"]
    return words + list(COLOURS) + list(SHAPES) + ["<|User|>: \n\n<|Assistant|>:"]
