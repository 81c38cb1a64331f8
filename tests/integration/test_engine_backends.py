"""Backend selection: what this build runs, and clear errors for what it does not."""

from __future__ import annotations

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model

CUDA_USABLE, CUDA_REASON = {name: (ok, why) for name, ok, why in _core.backends()}["cuda"]


def test_this_build_lists_the_backends_it_can_run():
    assert _core.available_backends() == (["cuda"] if CUDA_USABLE else []) + ["cpu", "null"]


def test_cuda_availability_says_why_not_in_the_registry_words():
    # Without a toolkit at build time: "compiled without CUDA"; with one but
    # no GPU or driver (this CI machine): "no CUDA device ...".
    if not CUDA_USABLE:
        assert CUDA_REASON.startswith(("compiled without CUDA", "no CUDA device")), CUDA_REASON


def test_metal_fails_clearly_instead_of_falling_back_to_the_cpu(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="Apple"):
        muser.Engine(path, backend="metal")


def test_an_unusable_cuda_backend_fails_with_the_reason_instead_of_falling_back(tmp_path):
    if CUDA_USABLE:
        pytest.skip("this machine has a usable CUDA device (tests/cuda covers it)")
    path = write_tiny_model(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match=CUDA_REASON.split(" (")[0]):
        muser.Engine(path, backend="cuda")


def test_auto_picks_cuda_exactly_when_it_is_usable(tmp_path):
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="auto")
    assert engine.backend == ("cuda" if CUDA_USABLE else "cpu")


def test_an_unknown_backend_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="expected one of 'auto'.*'cuda'"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="tpu")
