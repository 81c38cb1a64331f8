"""Pure draw functions: turning random words and weights into a choice.

Choosing a token is a pure function of (weights, a uniform number); the uniform
number comes from an :class:`~muser.sampling.mt19937.Mt19937` stream. Every rule
here restates what the C++ standard library (libstdc++) and llama.cpp do, so that
the same seed and the same logits give the same token:

- ``std::generate_canonical<double, 53>`` consumes two 32-bit words ``w1, w2``
  and returns ``(w1 + w2 * 2**32) / 2**64``, the sum rounded once to double,
  clamped below 1.0 (``uniform_real_distribution<double>(0, 1)`` is exactly this).
- ``std::generate_canonical<float, 24>`` consumes one word and returns
  ``float(w) / 2**32`` clamped below 1.0 (``uniform_real_distribution<float>(0, 1)``).
- ``std::discrete_distribution`` normalizes its weights in double, takes their
  running sum, forces the last entry to 1.0, and picks the first index whose
  running sum is not below the uniform; with fewer than two weights it returns 0
  without drawing.
- llama.cpp's final "dist" step takes ``p_i = expf(l_i - max)`` in float, their
  running sum in double, and picks the first index whose running sum reaches
  ``total * u``.
"""

from __future__ import annotations

import math

import numpy as np

from muser.sampling.mt19937 import Mt19937

__all__ = [
    "canonical_double",
    "canonical_float",
    "uniform_double",
    "uniform_float",
    "unnormalized_probs",
    "running_sums",
    "pick_from_running",
    "pick_by_running_sum",
    "pick_discrete",
    "discrete_draw",
]

_TWO_32 = 4294967296.0
_TWO_64 = 18446744073709551616.0
_BELOW_ONE_DOUBLE = math.nextafter(1.0, 0.0)
_BELOW_ONE_FLOAT = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def canonical_double(first_word: int, second_word: int) -> float:
    """``generate_canonical<double, 53>`` fed ``first_word`` then ``second_word``."""
    # Python float arithmetic is IEEE double with round-to-nearest-even, as in C++:
    # the first word is exact, the addition rounds once, the division is exact.
    total = float(first_word) + float(second_word) * _TWO_32
    value = total / _TWO_64
    return _BELOW_ONE_DOUBLE if value >= 1.0 else value


def canonical_float(word: int) -> float:
    """``generate_canonical<float, 24>`` fed ``word``, as a Python float holding a float32 value."""
    value = float(np.float32(word)) / _TWO_32  # uint32 -> double is exact; -> float32 rounds once
    return _BELOW_ONE_FLOAT if value >= 1.0 else value


def uniform_double(rng: Mt19937) -> float:
    """One ``uniform_real_distribution<double>(0, 1)`` draw from ``rng`` (two words)."""
    first = rng.next_u32()
    return canonical_double(first, rng.next_u32())


def uniform_float(rng: Mt19937) -> float:
    """One ``uniform_real_distribution<float>(0, 1)`` draw from ``rng`` (one word)."""
    return canonical_float(rng.next_u32())


def unnormalized_probs(logits: np.ndarray) -> np.ndarray:
    """``expf(l - max)`` for float32 logits, as float32 (n,).

    The exponential runs in double and rounds once to float: that matches a
    C library's ``expf`` on all but ~0.1% of inputs, where NumPy's own float32
    ``exp`` differs from it on about a third of inputs (by 1-2 ulp).
    """
    logits = np.asarray(logits, dtype=np.float32)
    shifted = logits - logits.max()  # float32 subtraction, as in C++
    weights: np.ndarray = np.exp(shifted.astype(np.float64)).astype(np.float32)
    return weights


def running_sums(probs: np.ndarray) -> np.ndarray:
    """Running sums of float32 weights accumulated in double, in array order (like the C++ loop)."""
    return np.cumsum(np.asarray(probs).astype(np.float64))  # cumsum is sequential


def pick_from_running(running: np.ndarray, uniform: float) -> int:
    """The first index whose running sum reaches ``running[-1] * uniform``. Pure function."""
    target = running[-1] * uniform
    index = int(np.searchsorted(running, target, side="left"))
    return min(index, int(running.shape[0]) - 1)


def pick_by_running_sum(probs: np.ndarray, uniform: float) -> int:
    """llama.cpp's final pick: the first index whose running sum reaches ``total * uniform``.

    ``probs`` are float32 weights (not necessarily normalized); the running sum is
    accumulated in double, in array order. Pure function.
    """
    return pick_from_running(running_sums(probs), uniform)


def pick_discrete(weights: np.ndarray, uniform: float) -> int:
    """``std::discrete_distribution``'s pick for a given uniform. Pure function.

    Weights are normalized in double one by one, summed in order, and the last
    running sum is forced to 1.0; the pick is the first running sum >= uniform.
    """
    weights64 = np.asarray(weights, dtype=np.float64)
    if weights64.size < 2:
        return 0
    total = np.cumsum(weights64)[-1]  # std::accumulate: sequential
    running = np.cumsum(weights64 / total)  # normalize each weight, then partial sums
    running[-1] = 1.0
    return int(np.searchsorted(running, uniform, side="left"))


def discrete_draw(weights: np.ndarray, rng: Mt19937) -> int:
    """One ``std::discrete_distribution<int>(weights)(rng)`` draw.

    Consumes two words, or none when there are fewer than two weights.
    """
    if np.asarray(weights).size < 2:
        return 0
    return pick_discrete(weights, uniform_double(rng))
