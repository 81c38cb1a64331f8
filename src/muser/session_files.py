"""Sessions saved to disk: ``session.save(path)`` / ``engine.load_session(path)``.

The file is a safetensors file (readable by the ``safetensors`` package):

- ``tokens`` (I32, ``(n_past,)``) and ``logits`` (F32, ``(n_vocab,)``, absent
  for an empty session);
- ``kv.<layer>.k`` / ``kv.<layer>.v`` (U16 = f16 bits, ``(rows, width)``): the
  KV rows of positions ``first_position..n_past-1`` of each layer (all of
  them for global layers; a sliding-window layer keeps what its ring holds);
- with ``sampler=``: ``sampler.<i>.mt19937`` (U32, ``(624,)``) for each
  Mt19937 stream of the sampler chain (draw, XTC, mirostat), the rest of
  its state (positions, penalty windows, mirostat's mu) in the metadata,
  and the grammar's position (the token ids it accepted) when the chain
  has a grammar;
- ``__metadata__``: ``format`` (``muser.session``), ``version``,
  ``model_sha256`` (of the whole GGUF file), ``model_name``, ``backend``,
  ``muser_version``, ``n_past``, ``max_context`` and the layer layout.

Loading checks the model hash and the backend first, so a file saved from
another model (or backend) raises :class:`SessionFileError` naming both,
and every count, shape and offset before using any of it (files are
untrusted). Continuing after loading is bitwise identical to never having
stopped (same KV bits, same logits, same RNG streams).

Prompt cache recipe: prefill a long shared prefix (a system prompt, a
document) once, ``save`` it, and let each request ``load_session`` it and
prefill only its own suffix; see the README.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from muser import _core
from muser.errors import SessionFileError
from muser.sampling.chain import ChainSnapshot, SamplerChain
from muser.sampling.mt19937 import Mt19937State

if TYPE_CHECKING:
    from muser.engine import Engine, Session

__all__ = ["FORMAT", "VERSION", "load_session", "read_metadata", "save_session"]

FORMAT = "muser.session"
VERSION = 1

_DTYPES: dict[str, np.dtype[Any]] = {"F32": np.dtype("<f4"), "I32": np.dtype("<i4"), "U16": np.dtype("<u2"), "U32": np.dtype("<u4")}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
_MAX_HEADER = 100 << 20  # the JSON header of any real session file is far smaller


# -- the safetensors container ----------------------------------------------


def _write(path: Path, tensors: Mapping[str, npt.NDArray[Any]], metadata: Mapping[str, str]) -> None:
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    arrays = []
    for name, array in tensors.items():
        contiguous = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        header[name] = {"dtype": _NAMES[contiguous.dtype], "shape": list(contiguous.shape),
                        "data_offsets": [offset, offset + contiguous.nbytes]}
        offset += contiguous.nbytes
        arrays.append(contiguous)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned, as safetensors writes it
    partial = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False)
    try:
        with partial:
            partial.write(struct.pack("<Q", len(encoded)))
            partial.write(encoded)
            for array in arrays:
                partial.write(array.tobytes())
        os.replace(partial.name, path)
    finally:
        if os.path.exists(partial.name):
            os.unlink(partial.name)


def _read(path: Path) -> tuple[dict[str, npt.NDArray[Any]], dict[str, str]]:
    def bad(what: str) -> SessionFileError:
        return SessionFileError(f"{path}: not a valid session file: {what}")

    data = path.read_bytes()
    if len(data) < 8:
        raise bad("shorter than its 8-byte header length")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise bad(f"header length {size} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + size])
    except ValueError as exc:
        raise bad(f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("no __metadata__ of strings")
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, info in header.items():
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(n) for n in info["shape"])
            begin, end = (int(n) for n in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise bad(f"tensor {name!r} has a malformed entry") from None
        if any(n < 0 for n in shape) or not 0 <= begin <= end <= len(body):
            raise bad(f"tensor {name!r}: offsets [{begin}, {end}) outside the {len(body)} data bytes")
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != end - begin:
            raise bad(f"tensor {name!r}: shape {list(shape)} does not fill [{begin}, {end})")
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return tensors, metadata


# -- sampler chain state -------------------------------------------------------


def _encode_state(value: Any, index: int, tensors: dict[str, npt.NDArray[Any]]) -> Any:
    """A sampler's snapshot as JSON; Mt19937 keys go to tensors."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Mt19937State):
        name = f"sampler.{index}.mt19937"
        if name in tensors:  # (one stream per sampler in every chain muser builds)
            raise ValueError(f"sampler {index} holds two Mt19937 streams")
        tensors[name] = np.frombuffer(value.key, dtype="<u4").copy()
        return {"mt19937": name, "pos": value.pos}
    if isinstance(value, tuple):
        return {"tuple": [_encode_state(v, index, tensors) for v in value]}
    raise TypeError(f"cannot save a sampler state of type {type(value).__name__}")


def _decode_state(value: Any, tensors: Mapping[str, npt.NDArray[Any]]) -> Any:
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_decode_state(v, tensors) for v in value["tuple"])
    if isinstance(value, dict) and "mt19937" in value:
        key = tensors.get(str(value["mt19937"]))
        if key is None or key.dtype != np.dtype("<u4") or key.shape != (624,):
            raise SessionFileError(f"sampler stream {value['mt19937']!r} is missing or not 624 uint32 words")
        return Mt19937State(key.astype("<u4").tobytes(), int(value["pos"]))
    return value


def _grammar_fingerprint(chain: SamplerChain) -> str | None:
    grammar = getattr(chain.grammar, "grammar", None)
    text = getattr(grammar, "text", None)
    return None if text is None else base64.b64encode(text.encode()).decode()


# -- public ------------------------------------------------------------------


def save_session(session: Session, path: str | os.PathLike[str], *, sampler: SamplerChain | None = None) -> Path:
    """Write ``session`` (and ``sampler``'s state, when given) to ``path``; returns the path.

    The session is snapshotted first (a consistent copy), so it may keep
    running while the file is written. The file appears atomically.

    Raises:
        ValueError: the session's KV state cannot be exported right now (a
            failed forward left it to be rebuilt: run one more step first).
        OSError: the file cannot be written.
    """
    engine = session.engine
    exported = _core.snapshot_export(session.snapshot())
    tensors: dict[str, npt.NDArray[Any]] = {"tokens": np.asarray(exported["tokens"], dtype="<i4")}
    if exported["logits"] is not None:
        tensors["logits"] = np.asarray(exported["logits"], dtype="<f4")
    layers = exported["layers"]
    for index, layer in enumerate(layers):
        tensors[f"kv.{index}.k"] = layer["k"]
        tensors[f"kv.{index}.v"] = layer["v"]
    metadata = {
        "format": FORMAT, "version": str(VERSION), "model_sha256": engine.model_sha256,
        "model_name": str(engine.config.get("name") or ""), "backend": engine.backend,
        "muser_version": _version(), "n_past": str(len(exported["tokens"])),
        "max_context": str(exported["max_context"]),
        "kv_layers": json.dumps([{"ring": bool(layer["ring"]), "first_position": int(layer["first_position"])}
                                 for layer in layers]),
    }
    if sampler is not None:
        snapshot = sampler.snapshot()
        states = [_encode_state(state, index, tensors) for index, state in enumerate(snapshot.states)]
        entry: dict[str, Any] = {"names": list(snapshot.names), "states": states, "seed": sampler.seed}
        if sampler.grammar is not None:
            constraint_snapshot = getattr(sampler.grammar, "snapshot", None)
            if constraint_snapshot is None:
                raise TypeError("the sampler's grammar cannot be saved (it has no snapshot())")
            entry["grammar"] = {"accepted": [int(t) for t in constraint_snapshot()],
                                "text": _grammar_fingerprint(sampler)}
        metadata["sampler"] = json.dumps(entry)
    target = Path(path)
    _write(target, tensors, metadata)
    return target


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The header of a session file (format, model hash and name, backend, sizes)."""
    return _read(Path(path))[1]


def load_session(engine: Engine, path: str | os.PathLike[str], *, sampler: SamplerChain | None = None) -> Session:
    """A new session of ``engine`` holding what ``path`` holds (same max_context).

    With ``sampler`` (a chain built like the saved one: same samplers in the
    same order, same grammar), its state is restored too, so sampling
    continues exactly where it stopped.

    Raises:
        SessionFileError: not a session file, a file of another model or
            backend (the message names both), or inconsistent contents.
        ValueError: ``sampler`` is laid out differently from the saved chain.
    """
    from muser.engine import Session

    source = Path(path)
    tensors, metadata = _read(source)
    if metadata.get("format") != FORMAT:
        raise SessionFileError(f"{source}: not a muser session file (format {metadata.get('format')!r})")
    if metadata.get("version") != str(VERSION):
        raise SessionFileError(f"{source}: session file version {metadata.get('version')!r}; this muser reads "
                               f"version {VERSION}")
    if metadata.get("model_sha256") != engine.model_sha256:
        raise SessionFileError(
            f"{source} was saved from model {metadata.get('model_name')!r} (sha256 "
            f"{metadata.get('model_sha256', '?')[:16]}...), not from this engine's {engine.config.get('name')!r} "
            f"(sha256 {engine.model_sha256[:16]}..., {engine.path}); load it into an engine of that model")
    if metadata.get("backend") != engine.backend:
        raise SessionFileError(f"{source} was saved with the {metadata.get('backend')!r} backend; this engine uses "
                               f"{engine.backend!r} (KV contents are only exact on the backend that wrote them)")
    try:
        max_context = int(metadata["max_context"])
        layers = json.loads(metadata["kv_layers"])
        rings = [bool(layer["ring"]) for layer in layers]
        first_positions = [int(layer["first_position"]) for layer in layers]
        ks = [tensors[f"kv.{i}.k"] for i in range(len(layers))]
        vs = [tensors[f"kv.{i}.v"] for i in range(len(layers))]
        tokens = tensors["tokens"]
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionFileError(f"{source}: incomplete session file ({exc!r})") from None
    if str(len(tokens)) != metadata.get("n_past"):
        raise SessionFileError(f"{source}: {len(tokens)} tokens but n_past {metadata.get('n_past')}")
    try:
        snapshot = _core.snapshot_import(engine._core, max_context, tokens, tensors.get("logits"), rings,
                                         first_positions, ks, vs)
    except ValueError as exc:
        raise SessionFileError(f"{source}: {exc}") from None
    if sampler is not None:
        _restore_sampler(sampler, metadata, tensors, source)
    session = Session(engine._core.session(max_context), engine)
    session.restore(snapshot)
    return session


def _restore_sampler(sampler: SamplerChain, metadata: Mapping[str, str],
                     tensors: Mapping[str, npt.NDArray[Any]], source: Path) -> None:
    if "sampler" not in metadata:
        raise SessionFileError(f"{source} holds no sampler state (save it with sampler=...)")
    try:
        entry = json.loads(metadata["sampler"])
        names = tuple(str(n) for n in entry["names"])
        states = tuple(_decode_state(s, tensors) for s in entry["states"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionFileError(f"{source}: malformed sampler state ({exc!r})") from None
    grammar_entry = entry.get("grammar")
    if (grammar_entry is None) != (sampler.grammar is None):
        raise ValueError("the saved sampler " + ("had" if grammar_entry else "had no") +
                         " grammar; pass a chain built the same way")
    if grammar_entry is not None and grammar_entry.get("text") != _grammar_fingerprint(sampler):
        raise ValueError("the sampler's grammar differs from the saved one")
    sampler.restore(ChainSnapshot(names=names, states=states))
    if grammar_entry is not None:
        getattr(sampler.grammar, "restore")([int(t) for t in grammar_entry["accepted"]])


def _version() -> str:
    from muser import __version__

    return __version__
