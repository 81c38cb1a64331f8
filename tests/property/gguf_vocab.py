"""Test helper: the bytes each token contributes, built from a vocabulary GGUF.

Reads tests/fixtures/reference/tokenizer/*.gguf with the ``gguf`` package and
decodes the token strings itself (independently of muser's tokenizer):

- SentencePiece ("llama" model): U+2581 becomes a space in normal tokens,
  ``<0xXX>`` byte tokens become their byte; other types keep their text.
- GPT-2 byte-level BPE ("gpt2" model): every character of a normal token maps
  back to one byte through GPT-2's byte<->unicode table.

Control tokens get their text only in the ``special=True`` variant, mirroring
what the tokenizer's ``token_bytes(special=...)`` provides.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import gguf

TOKENIZER_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "tokenizer"

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Vocab:
    name: str
    model: str
    token_bytes: tuple[bytes, ...]  # special=False variant (control tokens empty)
    token_bytes_special: tuple[bytes, ...]  # control tokens with their text
    token_types: tuple[int, ...]
    add_space_prefix: bool
    bos_id: int | None
    byte_token: dict[int, int]  # byte value -> a token that is exactly that byte
    special_ids: tuple[int, ...]  # control and unknown tokens


def gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable bytes map to themselves,
    the others to U+0100 onwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            mapping[chr(256 + extra)] = b
            extra += 1
    return mapping


def _field(reader: gguf.GGUFReader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        if field.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data]
        return [field.parts[i][0].item() for i in field.data]
    if field.types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode()
    return field.parts[field.data[0]][0].item()


@functools.lru_cache(maxsize=None)
def load_vocab(name: str) -> Vocab:
    reader = gguf.GGUFReader(TOKENIZER_DIR / f"ggml-vocab-{name}.gguf")
    model = _field(reader, "tokenizer.ggml.model")
    texts = [t.decode("utf-8") for t in _field(reader, "tokenizer.ggml.tokens")]
    types = [int(t) for t in _field(reader, "tokenizer.ggml.token_type")]
    add_space_prefix = _field(reader, "tokenizer.ggml.add_space_prefix")
    if add_space_prefix is None:
        add_space_prefix = model == "llama"  # llama.cpp's default: on for SentencePiece
    to_byte = gpt2_unicode_to_byte()
    plain: list[bytes] = []
    byte_token: dict[int, int] = {}
    for token_id, (text, kind) in enumerate(zip(texts, types)):
        if kind == BYTE:
            piece = bytes([int(text[3:-1], 16)])  # "<0xE2>"
        elif kind == NORMAL and model == "llama":
            piece = text.replace("\u2581", " ").encode("utf-8")
        elif kind == NORMAL and model == "gpt2":
            piece = bytes(to_byte[ch] for ch in text)
        else:
            piece = text.encode("utf-8")
        plain.append(piece)
        if len(piece) == 1 and kind in (NORMAL, BYTE) and (kind == BYTE or piece[0] not in byte_token):
            byte_token[piece[0]] = token_id
    special = tuple(plain)
    hidden = tuple(b"" if kind == CONTROL else piece for piece, kind in zip(plain, types))
    return Vocab(
        name=name,
        model=model,
        token_bytes=hidden,
        token_bytes_special=special,
        token_types=tuple(types),
        add_space_prefix=bool(add_space_prefix),
        bos_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        byte_token=byte_token,
        special_ids=tuple(i for i, kind in enumerate(types) if kind in (CONTROL, UNKNOWN)),
    )
