"""Fixtures of the backend kernel tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def metal_emulator_programs(tmp_path_factory):
    """The Metal emulator build (metal_op_runner, metal_engine_runner), made
    once per session: every kernel and the Metal host code with ASan and UBSan."""
    import os
    from pathlib import Path

    from metal_emulator_harness import build

    # A developer may keep the build between sessions (it is incremental).
    kept = os.environ.get("MUSER_METAL_EMULATOR_BUILD_DIR")
    return build(Path(kept) if kept else tmp_path_factory.mktemp("metal_emulator_build"))


@pytest.fixture(scope="session")
def metal_emulator(metal_emulator_programs, tmp_path_factory):
    """Runs single ops of csrc/backend/metal/ops_encode.cpp on the emulator."""
    from metal_emulator_harness import OpRunner

    return OpRunner(metal_emulator_programs["metal_op_runner"], tmp_path_factory.mktemp("metal_op_cases"))
