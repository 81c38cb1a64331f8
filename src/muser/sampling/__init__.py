"""Token samplers: composable, seeded, snapshot-able, reproducing llama.cpp's draws.

Build a chain for a request with ``make_sampler(SamplingParams(...), seed)``,
then per step ``token = chain.sample(logits)`` and ``chain.accept(token)``.
"""

from __future__ import annotations

from muser.sampling.base import GrammarConstraint, Sampler
from muser.sampling.candidates import Candidates
from muser.sampling.chain import ChainSnapshot, SamplerChain
from muser.sampling.dry import Dry, dry_breakers_from_strings
from muser.sampling.factory import SamplerVocab, make_sampler
from muser.sampling.logit_bias import LogitBias
from muser.sampling.mirostat import Mirostat, MirostatV2
from muser.sampling.mt19937 import Mt19937, Mt19937State
from muser.sampling.params import DEFAULT_SAMPLER_ORDER, SAMPLER_NAMES, SamplingParams
from muser.sampling.penalties import Penalties
from muser.sampling.selectors import Distribution, Greedy
from muser.sampling.temperature import Temperature
from muser.sampling.truncation import MinP, TopK, TopNSigma, TopP, Typical
from muser.sampling.xtc import Xtc

__all__ = [
    "Candidates",
    "ChainSnapshot",
    "DEFAULT_SAMPLER_ORDER",
    "Distribution",
    "Dry",
    "GrammarConstraint",
    "Greedy",
    "LogitBias",
    "MinP",
    "Mirostat",
    "MirostatV2",
    "Mt19937",
    "Mt19937State",
    "Penalties",
    "SAMPLER_NAMES",
    "Sampler",
    "SamplerChain",
    "SamplerVocab",
    "SamplingParams",
    "Temperature",
    "TopK",
    "TopNSigma",
    "TopP",
    "Typical",
    "Xtc",
    "dry_breakers_from_strings",
    "make_sampler",
]
