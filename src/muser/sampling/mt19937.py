"""A Mersenne Twister stream bit-exact with C++ ``std::mt19937``.

muser reproduces llama.cpp's sampling draws, and llama.cpp draws from
``std::mt19937`` seeded with a 32-bit seed. NumPy's ``MT19937`` bit generator
runs the same recurrence; only its seeding differs, so the state is seeded here
with the C++ rule (``x[0] = seed``, ``x[i] = 1812433253 * (x[i-1] ^ (x[i-1] >> 30)) + i``)
and handed to NumPy, which then produces the identical 32-bit outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from muser.errors import InternalError

__all__ = ["Mt19937", "Mt19937State", "DEFAULT_SEED"]

_N = 624  # state words of mt19937
_MASK32 = 0xFFFFFFFF

#: The seed ``std::mt19937`` uses when default-constructed.
DEFAULT_SEED = 5489


def _seeded_key(seed: int) -> np.ndarray:
    """The 624 state words ``std::mt19937(seed)`` starts from, as uint32."""
    key = np.empty(_N, dtype=np.uint32)
    word = seed
    key[0] = word
    for i in range(1, _N):
        word = (1812433253 * (word ^ (word >> 30)) + i) & _MASK32
        key[i] = word
    return key


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"Mt19937 seed must be an int, got {type(seed).__name__}")
    value = int(seed)
    if not 0 <= value <= _MASK32:
        raise ValueError(f"Mt19937 seed must be in [0, 2**32 - 1], got {value}")
    return value


@dataclass(frozen=True)
class Mt19937State:
    """An immutable snapshot of a :class:`Mt19937` stream.

    ``key`` holds the 624 state words (uint32, little-endian bytes) and ``pos``
    the index of the next word to temper (624 means the block is regenerated
    before the next output), exactly as in the C++ engine.
    """

    key: bytes
    pos: int

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != _N * 4:
            raise ValueError(f"Mt19937State.key must be {_N * 4} bytes")
        if not isinstance(self.pos, int) or not 0 <= self.pos <= _N:
            raise ValueError(f"Mt19937State.pos must be in [0, {_N}], got {self.pos!r}")


class Mt19937:
    """A 32-bit Mersenne Twister stream identical to C++ ``std::mt19937(seed)``.

    ``next_u32()`` returns the same sequence as successive calls of a C++
    ``std::mt19937`` constructed with the same seed (e.g. the 10,000th output for
    seed 5489 is 4123659995, the value the C++ standard requires).

    Seeding is deferred to the first use: a stream that never draws (say, XTC
    switched off) costs nothing.

    Thread safety: an instance is mutable and not synchronized; give each
    request (each sampler feature) its own stream.
    Failure: a seed outside [0, 2**32 - 1] raises ``ValueError``.
    """

    __slots__ = ("_bitgen", "_pending_seed")

    def __init__(self, seed: int = DEFAULT_SEED) -> None:
        self._bitgen: np.random.MT19937 | None = None  # made on first use
        self._pending_seed: int | None = None
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Restart the stream as ``std::mt19937::seed(seed)`` does."""
        self._pending_seed = _check_seed(seed)

    def _generator(self) -> np.random.MT19937:
        if self._pending_seed is not None:
            self._set_key(_seeded_key(self._pending_seed), _N)
            self._pending_seed = None
        if self._bitgen is None:  # seed() or setstate() always ran first
            raise InternalError("Mt19937 used before it was seeded")
        return self._bitgen

    def next_u32(self) -> int:
        """The next 32-bit output, as a Python int in [0, 2**32)."""
        return int(self._generator().random_raw())

    def next_u32_array(self, count: int) -> np.ndarray:
        """The next ``count`` outputs as a uint32 array (same as ``count`` calls of ``next_u32``)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return self._generator().random_raw(count).astype(np.uint32)

    def discard(self, count: int) -> None:
        """Skip ``count`` outputs, as ``std::mt19937::discard``."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        remaining = count
        while remaining > 0:
            step = min(remaining, 1 << 20)
            self._generator().random_raw(step, output=False)
            remaining -= step

    def getstate(self) -> Mt19937State:
        """An immutable snapshot; ``setstate`` of it resumes the exact same outputs."""
        key, pos = self._key_and_pos()
        return Mt19937State(key=key.astype("<u4").tobytes(), pos=pos)

    def setstate(self, state: Mt19937State) -> None:
        """Resume from a snapshot taken by ``getstate`` (of any Mt19937)."""
        if not isinstance(state, Mt19937State):
            raise TypeError(f"expected Mt19937State, got {type(state).__name__}")
        key = np.frombuffer(state.key, dtype="<u4").astype(np.uint32)
        self._pending_seed = None
        self._set_key(key, state.pos)

    def clone(self) -> "Mt19937":
        """An independent stream at the same position."""
        twin = Mt19937.__new__(Mt19937)
        twin._bitgen = None
        twin._pending_seed = self._pending_seed
        if self._pending_seed is None:
            twin._set_key(*self._key_and_pos())
        return twin

    def _key_and_pos(self) -> tuple[np.ndarray, int]:
        state = self._generator().state["state"]
        return np.asarray(state["key"], dtype=np.uint32), int(state["pos"])

    def _set_key(self, key: np.ndarray, pos: int) -> None:
        if self._bitgen is None:
            self._bitgen = np.random.MT19937(0)  # its own seeding is overwritten right away
        self._bitgen.state = {
            "bit_generator": "MT19937",
            "state": {"key": key, "pos": pos},
        }

    def __repr__(self) -> str:
        if self._pending_seed is not None:
            return f"Mt19937(seed={self._pending_seed})"
        return f"Mt19937(pos={self._key_and_pos()[1]})"
