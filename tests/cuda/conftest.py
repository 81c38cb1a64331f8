"""GPU tests: run by tests/cuda/run_on_gpu.sh on a machine with an NVIDIA GPU.

A missing device is a failure here, never a skip: these files are only
collected when MUSER_CUDA_TESTS=1 (see tests/conftest.py).
"""

from __future__ import annotations

import pytest

from muser import _core


@pytest.fixture(autouse=True, scope="session")
def cuda_device() -> str:
    usable, reason = {name: (ok, why) for name, ok, why in _core.backends()}["cuda"]
    if not usable:
        pytest.fail(f"tests/cuda need a usable CUDA device, but: {reason}", pytrace=False)
    return reason
