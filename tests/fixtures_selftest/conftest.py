"""Paths to the real models the oracle is validated on (fetched into muser's cache)."""

from __future__ import annotations

from pathlib import Path

import pytest


def _registry_model(key: str) -> Path:
    import muser.models  # imported here: the rest of these tests never need muser

    return muser.models.path(key)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (llama architecture)."""
    return _registry_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """Gemma-3-270M Q4_K_M (gemma3 architecture)."""
    return _registry_model("gemma3-270m")
