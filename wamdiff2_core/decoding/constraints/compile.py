"""Compile an answer language against a tokenizer with outlines-core.

outlines-core (``Index(regex, Vocabulary)``) builds the token-level DFA of a regular
expression over a vocabulary and hands out its transitions, which is what the constrained
block step needs: forward and backward reachability over whole blocks, not only the next
token's mask (xgrammar and llguidance give masks per parser state, with no automaton to take
out). Tokens are given to it as the bytes they decode to; special tokens (the mask, the
end-of-answer, the chat and vision markers) are never part of an answer's text.

The waypoint language builds in ~1 ms over the project BPE and in ~0.3 s over the
151,669-token Qwen vocabulary, so a decoder's owner keeps what it compiled
(``engine.DecodingEngine.automaton``).
"""
from __future__ import annotations

from wamdiff2_core.decoding.constraints.automaton import LanguageError, TokenAutomaton
from wamdiff2_core.tasks.languages import AnswerLanguage


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte -> printable character map (byte-level BPE alphabets)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer) -> dict[int, bytes]:
    """The bytes each ordinary token of a Hugging Face fast tokenizer stands for (special
    and added tokens left out). Byte-level BPE tokens are read through the byte alphabet;
    other tokenizers through ``decode`` of the single token."""
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    vocab = tokenizer.get_vocab()
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    byte_level = type(decoder).__name__ == "ByteLevel"
    table = _byte_decoder()
    out = {}
    for piece, i in vocab.items():
        if i in special:
            continue
        if byte_level:
            if not all(c in table for c in piece):
                continue
            data = bytes(table[c] for c in piece)
        else:
            text = tokenizer.decode([i])
            if not text or "\ufffd" in text:
                continue
            data = text.encode("utf-8")
        if data:
            out[i] = data
    return out


def compile_tokens(language: AnswerLanguage, pieces: dict[int, bytes],
                   eoa: int) -> TokenAutomaton:
    """The token automaton of ``language`` over tokens given as id -> bytes.

    Raises:
        LanguageError: the language needs a character no token holds, or has no word.
    """
    from outlines_core import Index, Vocabulary

    by_bytes: dict[bytes, list[int]] = {}
    for i, data in pieces.items():
        if i != eoa:
            by_bytes.setdefault(data, []).append(i)
    try:
        index = Index(language.regex, Vocabulary(eoa, by_bytes))
    except (ValueError, RuntimeError) as exc:
        raise LanguageError(f"language {language.name!r} cannot be written with this "
                            f"tokenizer's tokens: {exc}") from None
    return TokenAutomaton.build(language, index.get_initial_state(), index.get_final_states(),
                                index.get_transitions(), eoa)


def compile_language(language: AnswerLanguage, tokenizer, eoa: int) -> TokenAutomaton:
    """The token automaton of ``language`` over ``tokenizer`` (compiled on every call).

    Raises:
        LanguageError: as ``compile_tokens``.
    """
    return compile_tokens(language, token_bytes(tokenizer), eoa)
