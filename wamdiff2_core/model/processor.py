"""Prompt and image processing without torchvision or a hub.

Turns (prompt text with ``<image>`` placeholders, images) into Qwen3-VL model inputs: the
chat-formatted token ids with one ``<|image_pad|>`` per merged vision patch, the pixel patches
and grids from transformers' PIL image processor (settings: ``preprocess.ProcessorConfig``,
read from the checkpoint), and the token-type ids M-RoPE needs.

The chat format is the one the reference repository's inference builds for a record: text
pieces around each image are stripped (empty ones dropped), images become
``<|vision_start|><|image_pad|>...<|vision_end|>``, the user turn ends with ``<|im_end|>\\n``
and the assistant turn opens with ``<|im_start|>assistant\\n``. A checkpoint that ships a
chat template (a real Qwen3-VL one) is rendered with its own template, as the reference's
``processor.apply_chat_template`` does; the bundled and preset tokenizers have none and use
the same format written out. The answer ends with the end-of-answer id.

Text is text: the special tokens of a prompt are the ones the chat format writes, added as
ids; every text piece of the prompt (and every answer) is tokenized as plain text
(``tokenizer.encode_plain``), so ``<|im_end|>`` or ``<|image_pad|>`` in a question are
characters, never the end of the turn or an image. For prompts without such strings the ids
are the ones tokenizing the whole formatted text gives (the reference's way).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import PreTrainedTokenizerFast

from wamdiff2_core.model import tokenizer as toks
from wamdiff2_core.tasks.text import IMAGE_PLACEHOLDER
from wamdiff2_core.model.checkpoint import CheckpointError
from wamdiff2_core.model.preprocess import (HF_PREPROCESSOR_FILE, PROCESSOR_FILE,
                                            ProcessorConfig)

CHAT_TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja")
REQUIRED_TOKENS = (toks.IM_START, toks.IM_END, toks.VISION_START, toks.VISION_END,
                   toks.IMAGE_PAD)
# Where the k-th text piece goes in a rendered chat format (NUL never occurs in a template).
_TEXT_MARK = "\x00{}\x00"
_TEXT_MARKS = re.compile("\x00([0-9]+)\x00")


def to_pil(image) -> Image.Image:
    """A PIL RGB image from a PIL image or an (H, W, 3) uint8 array."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got {arr.shape} {arr.dtype}")
    return Image.fromarray(arr, "RGB")


def token_id(tokenizer, token: str) -> int | None:
    """The id of a token the tokenizer knows as a whole token, else None."""
    i = tokenizer.convert_tokens_to_ids(token)
    return i if isinstance(i, int) and i != tokenizer.unk_token_id else None


def messages(prompt: str, n_images: int) -> list[dict]:
    """The reference inference's messages for a human turn: with images, the text pieces
    around each ``<image>`` stripped, empty ones dropped, one image entry per placeholder;
    without images, the text as it is."""
    parts = prompt.split(IMAGE_PLACEHOLDER)
    if len(parts) - 1 != n_images:
        raise ValueError(f"prompt has {len(parts) - 1} {IMAGE_PLACEHOLDER} placeholders "
                         f"but {n_images} images were given")
    if n_images == 0:
        return [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    content = []
    for i, part in enumerate(parts):
        if part.strip():
            content.append({"type": "text", "text": part.strip()})
        if i < n_images:
            content.append({"type": "image"})
    return [{"role": "user", "content": content}]


class Wamdiff2Processor:
    """Tokenizer + image processor + chat format for one checkpoint.

    ``eoa_id``, ``pad_id`` and ``mask_id`` are the model's diffusion fields (the tokenizer of a
    real Qwen3-VL checkpoint has no mask token); they default to the tokenizer's own
    ``<|im_end|>``, ``<|endoftext|>`` and ``<|mask|>``."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, config: ProcessorConfig,
                 eoa_id: int | None = None, pad_id: int | None = None,
                 mask_id: int | None = None, use_chat_template: bool = False,
                 config_source: str = "given"):
        added = tokenizer.get_added_vocab()
        missing = [t for t in REQUIRED_TOKENS
                   if token_id(tokenizer, t) is None or t not in added]
        if missing:
            raise CheckpointError(f"the tokenizer has no {', '.join(missing)} token(s), which "
                                  f"the Qwen3-VL chat and image format needs")
        self.tokenizer = tokenizer
        self.config = config
        self.config_source = config_source
        self.image_processor = config.image_processor()
        ids = lambda t: token_id(tokenizer, t)                           # noqa: E731
        self.eoa_id = eoa_id if eoa_id is not None else ids(toks.IM_END)
        self.pad_id = pad_id if pad_id is not None else ids(toks.ENDOFTEXT)
        self.mask_id = mask_id if mask_id is not None else ids(toks.MASK)
        self.image_pad_id = ids(toks.IMAGE_PAD)
        self.vision_start_id = ids(toks.VISION_START)
        self.vision_end_id = ids(toks.VISION_END)
        self.use_chat_template = bool(use_chat_template and tokenizer.chat_template)
        # The chat format's own tokens (every added token, longest first, as the tokenizer
        # matches them); only the rendered format is split on them, never a prompt's text.
        self._added_ids = added
        self._added = re.compile("(" + "|".join(
            re.escape(t) for t in sorted(added, key=len, reverse=True)) + ")")

    def with_ids(self, eoa_id: int, pad_id: int, mask_id: int) -> "Wamdiff2Processor":
        """The same tokenizer and images with other special ids."""
        if (eoa_id, pad_id, mask_id) == (self.eoa_id, self.pad_id, self.mask_id):
            return self
        return type(self)(self.tokenizer, self.config, eoa_id, pad_id, mask_id,
                          self.use_chat_template, self.config_source)

    # ------------------------------------------------------------------ text
    def encode_text(self, text: str) -> list[int]:
        """Ids of ``text`` as plain text (no special token can come out of it)."""
        return toks.encode_plain(self.tokenizer, text)

    def _render(self, content: list[dict]) -> str:
        """The user turn of ``content`` and the opened assistant turn, as text."""
        if self.use_chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": content}], tokenize=False,
                add_generation_prompt=True)
        body = "".join(c["text"] if c["type"] == "text"
                       else toks.VISION_START + toks.IMAGE_PAD + toks.VISION_END
                       for c in content)
        return f"{toks.IM_START}user\n{body}{toks.IM_END}\n{toks.IM_START}assistant\n"

    def turn_pieces(self, prompt: str, n_image_tokens: list[int]) -> list[str | int]:
        """The user turn and the opened assistant turn as pieces: ``str`` for text (the
        prompt's text pieces and the format's own words around them) and ``int`` for the
        format's token ids, each image pad repeated ``n_image_tokens[i]`` times.

        The format is rendered with a mark in place of each text piece and split on its
        added tokens; the text pieces go in afterwards, so nothing in them is ever read
        as a token of the format."""
        content = messages(prompt, len(n_image_tokens))[0]["content"]
        texts = [c["text"] for c in content if c["type"] == "text"]
        marks = iter(range(len(texts)))
        rendered = self._render([dict(c, text=_TEXT_MARK.format(next(marks)))
                                 if c["type"] == "text" else c for c in content])
        parts = _TEXT_MARKS.split(rendered)                    # format, k, format, k, ...
        if [int(k) for k in parts[1::2]] != list(range(len(texts))):
            raise ValueError("the chat template does not write each text piece once, in "
                             "order")
        split = [self._added.split(p) if i % 2 == 0 else p for i, p in enumerate(parts)]
        pads = sum(bits[1::2].count(toks.IMAGE_PAD) for bits in split[::2])
        if pads != len(n_image_tokens):
            raise ValueError(f"the chat template wrote {pads} image pads for "
                             f"{len(n_image_tokens)} images")
        pieces: list[str | int] = []
        images = iter(n_image_tokens)
        for i, bits in enumerate(split):
            if i % 2:
                pieces.append(texts[int(bits)])
                continue
            for j, bit in enumerate(bits):                      # text, token, text, ...
                if j % 2 == 0:
                    pieces.append(bit)
                elif bit == toks.IMAGE_PAD:
                    pieces.extend([self.image_pad_id] * next(images))
                else:
                    pieces.append(self._added_ids[bit])
        return pieces

    def prompt_ids(self, prompt: str, n_image_tokens: list[int]) -> list[int]:
        """Token ids of the user turn and the opened assistant turn (``turn_pieces``): the
        format's tokens as ids, each run of text tokenized as plain text."""
        ids: list[int] = []
        text = ""
        for piece in self.turn_pieces(prompt, n_image_tokens) + [None]:
            if isinstance(piece, str):
                text += piece
                continue
            if text:
                ids += self.encode_text(text)
                text = ""
            if piece is not None:
                ids.append(piece)
        return ids

    def chat_text(self, prompt: str, n_image_tokens: list[int]) -> str:
        """The user turn and the opened assistant turn as text, image pads expanded (for
        reading; ``prompt_ids`` never tokenizes it)."""
        tokens = {i: t for t, i in self._added_ids.items()}
        return "".join(p if isinstance(p, str) else tokens[p]
                       for p in self.turn_pieces(prompt, n_image_tokens))

    def encode_answer(self, answer: str, block_size: int, min_blocks: int = 1) -> list[int]:
        """Answer ids (plain text) + end-of-answer, padded with end-of-answer to whole
        blocks."""
        ids = self.encode_text(answer) + [self.eoa_id]
        n = max(min_blocks, -(-len(ids) // block_size)) * block_size
        return ids + [self.eoa_id] * (n - len(ids))

    def decode_answer(self, ids) -> str:
        """Text of the answer ids up to (not including) the first end-of-answer."""
        ids = [int(i) for i in ids]
        if self.eoa_id in ids:
            ids = ids[:ids.index(self.eoa_id)]
        ids = [i for i in ids if i != self.mask_id]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ---------------------------------------------------------------- images
    def process_images(self, images: list) -> dict:
        if not images:
            return {}
        out = self.image_processor(images=[to_pil(im) for im in images], return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def _image_tokens(self, grid_thw: torch.Tensor) -> list[int]:
        merge = self.config.merge_size ** 2
        return [int(g.prod()) // merge for g in grid_thw]

    # ---------------------------------------------------------------- batches
    def encode_prompts(self, prompts: list[str], images: list[list]) -> dict:
        """A left-padded prompt batch.

        Returns input_ids (B, P), valid (B, P) bool, mm_token_type_ids (B, P), and
        pixel_values / image_grid_thw for all images in row order.
        """
        if len(prompts) != len(images):
            raise ValueError("one image list per prompt is needed")
        rows, vis = [], self.process_images([im for row in images for im in row])
        grids = vis.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))
        n_tokens, k = self._image_tokens(grids), 0
        for prompt, row in zip(prompts, images):
            rows.append(self.prompt_ids(prompt, n_tokens[k:k + len(row)]))
            k += len(row)
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r):] = torch.tensor(r)
            valid[i, width - len(r):] = True
        mm = (input_ids == self.image_pad_id).long() * valid.long()
        return {"input_ids": input_ids, "valid": valid, "mm_token_type_ids": mm, **vis}

    # ------------------------------------------------------------ save / load
    def save_pretrained(self, path: str | Path) -> None:
        """Tokenizer (with its chat template), ``wamdiff2_processor.json`` (every
        preprocessing setting explicit) and the same settings as a Hugging Face
        ``preprocessor_config.json``."""
        path = Path(path)
        self.tokenizer.save_pretrained(str(path))
        (path / PROCESSOR_FILE).write_text(self.config.to_json())
        self.image_processor.save_pretrained(str(path))
        assert (path / HF_PREPROCESSOR_FILE).exists()


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """The checkpoint's tokenizer (tokenizer.json), with the processor-level chat template
    (chat_template.json / .jinja) when the tokenizer files carry none."""
    if not (path / "tokenizer.json").exists():
        raise CheckpointError(f"{path} has no tokenizer.json (wamdiff2 loads fast tokenizers "
                              f"only)")
    check_library_files(path)
    try:
        tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"cannot load the tokenizer of {path}: {exc}") from None
    if not tok.chat_template:
        for name in CHAT_TEMPLATE_FILES:
            file = path / name
            if file.exists():
                tok.chat_template = _chat_template(file)
                break
    return tok


def _chat_template(file: Path) -> str:
    """The chat template in ``file`` (chat_template.json's ``chat_template``, or a .jinja
    file's text), read within a user file's limits; CheckpointError otherwise."""
    from wamdiff2_core.user_files import read_json, read_text

    try:
        if file.suffix != ".json":
            return read_text(file, "chat template")
        template = read_json(file, "chat template").get("chat_template")
    except AttributeError:
        template = None
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(template, str):
        raise CheckpointError(f"chat template {file} must be a JSON object with a "
                              f"chat_template string")
    return template


# Files of a checkpoint that tokenizers and transformers parse themselves.
LIBRARY_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json", "generation_config.json")


def check_library_files(path: Path) -> None:
    """CheckpointError for a library-parsed file of checkpoint ``path`` that is not a
    regular file, is over 64 MiB or nests deeper than ``user_files`` allows: the libraries
    would block on a FIFO, read a device whole or overflow their stack on it."""
    from wamdiff2_core.user_files import check_json_file

    for name in LIBRARY_FILES:
        file = path / name
        if os.path.lexists(file):
            try:
                check_json_file(file, "checkpoint file", 64 << 20)
            except ValueError as exc:
                raise CheckpointError(str(exc)) from None
