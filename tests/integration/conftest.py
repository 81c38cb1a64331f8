"""Fixtures for integration tests that need the real models of MODELS.md."""

from __future__ import annotations

import os
from typing import Callable

import pytest


@pytest.fixture(scope="session")
def real_model_path() -> Callable[[str], str]:
    """Returns a function key -> path of that real model's cached .gguf
    (fetched beforehand with `python -m muser fetch`)."""

    def path(key: str) -> str:
        from muser import models

        return os.fspath(models.path(key))

    return path
