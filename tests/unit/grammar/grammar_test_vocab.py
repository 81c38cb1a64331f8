"""Test helper: token byte strings from a GGUF vocabulary (tokenizer.ggml.tokens).

This is NOT the tokenizer (another module owns that); it only turns the stored
token texts into the bytes each token produces, well enough to build realistic
vocabularies for grammar tests and benchmarks:

- `gpt2` vocabularies store byte-level BPE text: every byte is mapped to a
  printable code point (the GPT-2 byte<->unicode table, rebuilt here).
- `llama` (SentencePiece) vocabularies use U+2581 for a space and `<0xAB>`
  for byte tokens.
Control tokens get b"" (never produced under a grammar).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_BYTE = 6


def _gpt2_unicode_to_byte() -> dict[str, int]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            mapping[chr(256 + extra)] = b
            extra += 1
    return mapping


_GPT2 = _gpt2_unicode_to_byte()


def gpt2_token_bytes(text: str) -> bytes:
    """Bytes of one byte-level BPE token text (characters outside the table are UTF-8 encoded)."""
    out = bytearray()
    for ch in text:
        b = _GPT2.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def spm_token_bytes(text: str, token_type: int) -> bytes:
    if token_type == TOKEN_TYPE_BYTE and text.startswith("<0x") and text.endswith(">"):
        return bytes([int(text[3:-1], 16)])
    return text.replace("\u2581", " ").encode("utf-8")


def load_token_bytes(path: str | Path) -> tuple[list[bytes], list[int]]:
    """(token_bytes, end-of-generation ids) of a GGUF vocabulary (read with muser's GGUF reader)."""
    from muser._core import GgufFile

    meta = GgufFile.open(str(path)).metadata()
    model = meta["tokenizer.ggml.model"]
    texts = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(texts)
    out = []
    for text, ttype in zip(texts, types):
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if ttype == TOKEN_TYPE_CONTROL:
            out.append(b"")
        elif model == "gpt2":
            out.append(gpt2_token_bytes(text))
        else:
            out.append(spm_token_bytes(text, ttype))
    eog = {meta.get("tokenizer.ggml.eos_token_id"), meta.get("tokenizer.ggml.eot_token_id")}
    return out, sorted(int(i) for i in eog if i is not None)


def greedy_tokenize(text: bytes, token_bytes: list[bytes], max_len: int | None = None) -> list[int]:
    """Longest-match tokenization (a decode trace for benchmarks and tests, not real BPE)."""
    by_bytes: dict[bytes, int] = {}
    for i, t in enumerate(token_bytes):
        if t and t not in by_bytes:
            by_bytes[t] = i
    longest = max_len or max(len(t) for t in token_bytes)
    out = []
    pos = 0
    while pos < len(text):
        for n in range(min(longest, len(text) - pos), 0, -1):
            tid = by_bytes.get(text[pos : pos + n])
            if tid is not None:
                out.append(tid)
                pos += n
                break
        else:
            raise ValueError(f"byte {text[pos]:#x} has no token")
    return out


def synthetic_vocab(size: int, seed: int = 0) -> list[bytes]:
    """All 256 single bytes plus `size - 256` realistic pieces (words, JSON punctuation, CJK)."""
    rng = np.random.default_rng(seed)
    pieces = [bytes([b]) for b in range(256)]
    seen = set(pieces)
    letters = "abcdefghijklmnopqrstuvwxyz"
    punct = ['"', '",', '":', '": "', '{"', '"}', '},', '[', '],', ', "', '\n', '  ', '    ', '": {', '": [']
    cjk = "的一是不了人我在有他这中大来上个国"
    while len(pieces) < size:
        kind = rng.integers(0, 10)
        if kind < 6:
            n = int(rng.integers(2, 10))
            word = "".join(letters[i] for i in rng.integers(0, 26, n))
            if rng.integers(0, 2):
                word = " " + word
            if rng.integers(0, 4) == 0:
                word = word.capitalize()
            piece = word.encode()
        elif kind < 8:
            piece = (punct[int(rng.integers(0, len(punct)))] + str(int(rng.integers(0, 1000)))).encode()
        else:
            n = int(rng.integers(1, 4))
            piece = "".join(cjk[i] for i in rng.integers(0, len(cjk), n)).encode()
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)
    return pieces
