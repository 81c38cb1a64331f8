"""Split GGUF models (``name-00001-of-00003.gguf``): merge the parts into one file.

llama.cpp's ``gguf-split`` writes a model as several GGUF files: the first
holds the metadata, every part holds some tensors and the keys
``split.no``/``split.count``/``split.tensors.count``. muser maps one file, so
:func:`merge_splits` writes the single GGUF the parts describe: the first
part's metadata without the ``split.*`` keys, every tensor's info with its
offset moved into the joined data section, and each part's data section
copied verbatim (no tensor is decoded, so any tensor type works).

The parts are untrusted like any GGUF: counts are checked against the bytes
left and a malformed part raises :class:`muser.ModelFormatError` naming it.
The merged file is then validated by the engine like any other.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from muser.errors import ModelFormatError

__all__ = ["SPLIT_PATTERN", "merge_splits", "split_parts"]

#: ``<stem>-00001-of-00003.gguf``: part number and count, 1-based.
SPLIT_PATTERN = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
# GGUF value types -> size of one scalar; 8 string and 9 array are variable.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


@dataclass
class _Tensor:
    info_without_offset: bytes  # name, n_dims, dims, type: copied as is
    offset: int


@dataclass
class _Part:
    path: Path
    version: int
    kv: list[tuple[str, bytes]]  # (key, the key's whole raw entry)
    values: dict[str, int]  # the integer values we need (general.alignment, split.*)
    tensors: list[_Tensor]
    data_offset: int
    alignment: int


class _Reader:
    def __init__(self, handle: BinaryIO, path: Path, size: int) -> None:
        self.handle, self.path, self.size = handle, path, size

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.handle.tell() + n > self.size:
            raise ModelFormatError(f"[gguf split] {self.path.name}: {what} runs past the end of the file")
        return self.handle.read(n)

    def u32(self, what: str) -> int:
        value: int = struct.unpack("<I", self.take(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = struct.unpack("<Q", self.take(8, what))[0]
        return value

    def string(self, what: str) -> bytes:
        return self.take(self.u64(what), what)

    def skip_value(self, kind: int, what: str) -> None:
        if kind in _SCALAR_SIZES:
            self.take(_SCALAR_SIZES[kind], what)
        elif kind == _STRING:
            self.string(what)
        elif kind == _ARRAY:
            element, count = self.u32(what), self.u64(what)
            if element in _SCALAR_SIZES:
                self.take(_SCALAR_SIZES[element] * count, what)
            elif element == _STRING:
                for _ in range(count):
                    self.string(what)
            else:
                raise ModelFormatError(f"[gguf split] {self.path.name}: {what}: unsupported array type {element}")
        else:
            raise ModelFormatError(f"[gguf split] {self.path.name}: {what}: unknown value type {kind}")


def _read_part(path: Path) -> _Part:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        reader = _Reader(handle, path, size)
        if reader.take(4, "magic") != _MAGIC:
            raise ModelFormatError(f"[gguf split] {path.name}: not a GGUF file (bad magic)")
        version = reader.u32("version")
        if version not in (2, 3):
            raise ModelFormatError(f"[gguf split] {path.name}: GGUF version: expected 2 or 3, got {version}")
        n_tensors, n_kv = reader.u64("tensor count"), reader.u64("metadata count")
        kv: list[tuple[str, bytes]] = []
        values: dict[str, int] = {}
        for _ in range(n_kv):
            start = handle.tell()
            key = reader.string("metadata key").decode("utf-8", errors="replace")
            kind = reader.u32(f"type of {key}")
            value_at = handle.tell()
            reader.skip_value(kind, key)
            end = handle.tell()
            if kind in (0, 1, 2, 3, 4, 5, 10, 11):
                handle.seek(value_at)
                values[key] = int.from_bytes(handle.read(end - value_at), "little")
            handle.seek(start)
            kv.append((key, handle.read(end - start)))
        tensors = []
        for _ in range(n_tensors):
            start = handle.tell()
            name = reader.string("tensor name").decode("utf-8", errors="replace")
            n_dims = reader.u32(f"dimensions of {name}")
            if n_dims > 8:
                raise ModelFormatError(f"[gguf split] {path.name}: tensor {name}: {n_dims} dimensions (at most 8)")
            reader.take(8 * n_dims + 4, f"shape of {name}")
            end = handle.tell()
            handle.seek(start)
            info = handle.read(end - start)
            tensors.append(_Tensor(info, reader.u64(f"offset of {name}")))
        alignment = int(values.get("general.alignment", _DEFAULT_ALIGNMENT))
        if alignment <= 0 or alignment & (alignment - 1):
            raise ModelFormatError(f"[gguf split] {path.name}: general.alignment must be a power of two, "
                                   f"got {alignment}")
        data_offset = _align(handle.tell(), alignment)
        if data_offset > size:
            raise ModelFormatError(f"[gguf split] {path.name}: the data section starts past the end of the file")
    return _Part(path, version, kv, values, tensors, data_offset, alignment)


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def split_parts(first: Path) -> list[Path]:
    """All parts of the split model whose first part is ``first`` (same folder), in order.

    Raises:
        ValueError: ``first`` is not named like part 1 of a split model.
        FileNotFoundError: a part is missing (named).
    """
    match = SPLIT_PATTERN.match(first.name)
    if match is None or int(match["no"]) != 1:
        raise ValueError(f"{first.name} is not the first part of a split GGUF (-00001-of-0000N.gguf)")
    count = int(match["count"])
    parts = [first.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for part in parts:
        if not part.exists():
            raise FileNotFoundError(f"split GGUF part {part} is missing")
    return parts


def merge_splits(parts: list[Path], dest: Path) -> Path:
    """Write the one GGUF that ``parts`` (in order) describe to ``dest`` (atomically).

    Raises:
        ModelFormatError: a part is malformed, or the parts disagree with their
            ``split.*`` keys (wrong number, order or tensor count).
    """
    read = [_read_part(Path(p)) for p in parts]
    first = read[0]
    count = first.values.get("split.count")
    if count is not None and count != len(read):
        raise ModelFormatError(f"[gguf split] {first.path.name}: split.count is {count}, got {len(read)} parts")
    for index, part in enumerate(read):
        number = part.values.get("split.no")
        if number is not None and number != index:
            raise ModelFormatError(f"[gguf split] {part.path.name}: split.no is {number}, expected {index}")
        if part.alignment != first.alignment:
            raise ModelFormatError(f"[gguf split] {part.path.name}: alignment differs from the first part's")
    total_tensors = sum(len(p.tensors) for p in read)
    expected = first.values.get("split.tensors.count")
    if expected is not None and expected != total_tensors:
        raise ModelFormatError(f"[gguf split] split.tensors.count is {expected}, the parts hold {total_tensors}")
    alignment = first.alignment
    kv = [raw for key, raw in first.kv if not key.startswith("split.")]
    # Each part's data section lands at an aligned base in the joined data.
    bases, cursor = [], 0
    for part in read:
        bases.append(cursor)
        cursor = _align(cursor + part.path.stat().st_size - part.data_offset, alignment)
    header = bytearray(_MAGIC + struct.pack("<IQQ", first.version, total_tensors, len(kv)))
    for raw in kv:
        header += raw
    for part, base in zip(read, bases):
        for tensor in part.tensors:
            header += tensor.info_without_offset + struct.pack("<Q", base + tensor.offset)
    header += bytes(_align(len(header), alignment) - len(header))
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as out:
            out.write(header)
            for part, base in zip(read, bases):
                out.write(bytes(len(header) + base - out.tell()))
                with open(part.path, "rb") as source:
                    source.seek(part.data_offset)
                    shutil.copyfileobj(source, out, 1 << 20)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest
