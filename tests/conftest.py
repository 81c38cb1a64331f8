"""Shared fixtures: paths to the reference data and to the real models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs property tests derandomized (same examples every run); locally they
# explore. Either way no deadline: the 2-core machines are shared and noisy.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# tests/cuda/ needs an NVIDIA GPU: it is not part of the default run (CI here
# has no GPU) but of tests/cuda/run_on_gpu.sh, which sets MUSER_CUDA_TESTS=1
# and runs it on the GPU machine. Not a skip: without the variable pytest
# never collects those files; with it, a missing device fails them.
collect_ignore = [] if os.environ.get("MUSER_CUDA_TESTS") else ["cuda"]

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = FIXTURES / "reference"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """llama.cpp's reference outputs (tests/fixtures/reference, see sync_reference.py)."""
    return REFERENCE


def _real_model(key: str) -> Path:
    import muser.models

    return muser.models.path(key)  # FetchError says how to fetch: CI fetches before the tests


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The real smollm2-135m GGUF from the muser cache (fetched by .ci/run)."""
    return _real_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The real gemma3-270m GGUF from the muser cache (fetched by .ci/run)."""
    return _real_model("gemma3-270m")


@pytest.fixture(scope="session")
def real_model_path():
    """`real_model_path(key)` -> path (str) of a fetched registry model."""
    return lambda key: os.fspath(_real_model(key))
