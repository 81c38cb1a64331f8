"""make_sampler: build the sampler chain for a request from SamplingParams."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from muser.sampling.base import GrammarConstraint, Sampler
from muser.sampling.chain import SamplerChain
from muser.sampling.dry import Dry, dry_breakers_from_strings
from muser.sampling.logit_bias import LogitBias
from muser.sampling.mirostat import Mirostat, MirostatV2
from muser.sampling.params import SamplingParams
from muser.sampling.penalties import Penalties
from muser.sampling.selectors import Distribution, Greedy
from muser.sampling.temperature import Temperature
from muser.sampling.truncation import MinP, TopK, TopNSigma, TopP, Typical
from muser.sampling.xtc import Xtc

__all__ = ["make_sampler", "SamplerVocab", "MIROSTAT_M"]

#: Mirostat v1's number of tokens used to estimate the Zipf exponent (llama.cpp: 100).
MIROSTAT_M = 100


@runtime_checkable
class SamplerVocab(Protocol):
    """What DRY needs from a tokenizer to turn breaker strings into tokens."""

    def token_bytes(self, special: bool = False) -> Sequence[bytes]: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


def make_sampler(
    params: SamplingParams,
    seed: int | None = None,
    *,
    grammar: GrammarConstraint | None = None,
    vocab: SamplerVocab | None = None,
    dry_breakers: Mapping[int, Sequence[tuple[int, ...]]] | None = None,
    context_size: int | None = None,
) -> SamplerChain:
    """Build the chain llama.cpp's common sampler would build for ``params``.

    Args:
        params: the sampling settings.
        seed: 32-bit seed of every RNG stream (the draw, XTC and mirostat each get
            their own stream seeded with it, as in llama.cpp). None picks a random
            seed, kept in ``chain.seed``.
        grammar: optional constraint consulted after each draw (see SamplerChain).
        vocab: needed only when DRY is on with sequence breakers and
            ``dry_breakers`` is not given (the breaker strings are tokenized).
        dry_breakers: pre-processed DRY breakers (head token -> tails), e.g. cached
            from :func:`~muser.sampling.dry.dry_breakers_from_strings`.
        context_size: the sequence's context limit, bounding DRY's ``-1`` window.

    Raises ``ValueError`` for a seed outside [0, 2**32 - 1] or DRY breakers that
    cannot be tokenized for lack of a vocabulary. Never shares state between
    chains: each call returns an independent chain.
    """
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
    if seed is None:
        seed = secrets.randbits(32)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 0xFFFFFFFF:
        raise ValueError(f"seed must be an int in [0, 2**32 - 1], got {seed!r}")

    samplers: list[Sampler] = []
    if params.logit_bias:
        samplers.append(LogitBias(params.logit_bias))
    if params.mirostat == 1:
        samplers += [
            Temperature(params.temperature),
            Mirostat(params.mirostat_tau, params.mirostat_eta, seed, m=MIROSTAT_M),
        ]
    elif params.mirostat == 2:
        samplers += [Temperature(params.temperature), MirostatV2(params.mirostat_tau, params.mirostat_eta, seed)]
    else:
        # At temperature 0 the temperature sampler leaves one finite logit, so the
        # draw could only pick it; greedy picks the same token without a draw.
        greedy = params.temperature <= 0.0 and "temperature" in params.samplers
        if not (greedy and not _can_move_the_argmax(params)):
            # (Otherwise every sampler before greedy only trims the tail, which
            # never removes the top token: skip them, same token, less work.)
            for name in params.samplers:
                samplers.append(_build(name, params, seed, vocab, dry_breakers, context_size))
        samplers.append(Greedy() if greedy else Distribution(seed))
    return SamplerChain(samplers, grammar=grammar, seed=seed)


def _can_move_the_argmax(params: SamplingParams) -> bool:
    """Whether a sampler in ``params.samplers`` may change which token has the
    highest logit (penalties, DRY and XTC can; top-k/p, min-p, typical,
    top-n-sigma and temperature only trim or rescale)."""
    active = set(params.samplers)
    penalties = params.repeat_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
    return ("penalties" in active and penalties) or ("dry" in active and params.dry_multiplier > 0.0) or (
        "xtc" in active and params.xtc_probability > 0.0)


def _build(
    name: str,
    params: SamplingParams,
    seed: int,
    vocab: SamplerVocab | None,
    dry_breakers: Mapping[int, Sequence[tuple[int, ...]]] | None,
    context_size: int | None,
) -> Sampler:
    if name == "penalties":
        return Penalties(params.penalty_last_n, params.repeat_penalty, params.frequency_penalty, params.presence_penalty)
    if name == "dry":
        breakers = dry_breakers
        dry_on = params.dry_multiplier > 0.0 and params.dry_penalty_last_n != 0
        if breakers is None and dry_on and params.dry_sequence_breakers:
            if vocab is None:
                raise ValueError(
                    "SamplingParams.dry_sequence_breakers: DRY needs vocab= (or dry_breakers=) "
                    "to turn breaker strings into tokens"
                )
            breakers = dry_breakers_from_strings(
                params.dry_sequence_breakers,
                vocab.token_bytes(special=True),
                lambda text: vocab.tokenize(text, add_special=False, parse_special=False),
            )
        return Dry(
            params.dry_multiplier,
            params.dry_base,
            params.dry_allowed_length,
            params.dry_penalty_last_n,
            breakers,
            context_size,
        )
    if name == "top_n_sigma":
        return TopNSigma(params.top_n_sigma)
    if name == "top_k":
        return TopK(params.top_k)
    if name == "typical_p":
        return Typical(params.typical_p, params.min_keep)
    if name == "top_p":
        return TopP(params.top_p, params.min_keep)
    if name == "min_p":
        return MinP(params.min_p, params.min_keep)
    if name == "xtc":
        return Xtc(params.xtc_probability, params.xtc_threshold, params.min_keep, seed)
    if name == "temperature":
        return Temperature(params.temperature, params.dynatemp_range, params.dynatemp_exponent)
    raise ValueError(f"SamplingParams.samplers: unknown sampler {name!r}")
