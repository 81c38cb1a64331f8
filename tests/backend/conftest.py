"""Fixtures of the backend kernel tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def metal_emulator(tmp_path_factory):
    """An OpRunner over the Metal emulator, built once per session (about a
    minute on two cores: every kernel with ASan and UBSan)."""
    from metal_emulator_harness import OpRunner, build

    root = tmp_path_factory.mktemp("metal_emulator")
    return OpRunner(build(root / "build"), root / "cases")
