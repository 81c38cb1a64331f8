"""Tiny synthetic models for the engine tests, written once per test session."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Callable[..., Path]:
    """`tiny_model(arch, weight_type="F32", seed=0, **options)` -> path of a tiny GGUF.

    Files are written once per distinct argument set and reused.
    """
    directory = tmp_path_factory.mktemp("tiny_models")
    written: dict[tuple, Path] = {}

    def make(arch: str, weight_type: str = "F32", seed: int = 0, **options) -> Path:
        key = (arch, weight_type, seed, tuple(sorted(options.items())))
        if key not in written:
            name = f"{arch}-{weight_type}-{seed}-{len(written)}.gguf"
            written[key] = write_tiny_model(directory / name, arch, weight_type, seed, **options)
        return written[key]

    return make
