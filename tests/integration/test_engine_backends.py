"""Backend selection: what this build runs, and clear errors for what it does not.

The CUDA entry depends on the build and the machine: without a toolkit at
build time the registry says "compiled without CUDA"; built with one (CI
here compiles the CUDA sources) but without a GPU or driver, the backend's
probe says "no CUDA device ..."; on a GPU machine it is usable and "auto"
picks it."""

from __future__ import annotations

import sys

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model

CUDA = {b.name: b for b in muser.backends()}["cuda"]


# On macOS the build includes the Metal backend, usable where a Metal device
# exists (tests/integration/test_metal_backend.py); elsewhere it is not built.
METAL_BUILT = sys.platform == "darwin"


def test_this_build_lists_the_backends_it_can_run():
    metal = ["metal"] if METAL_BUILT else []
    assert _core.available_backends() == (["cuda"] if CUDA.usable else []) + metal + ["cpu", "null"]


def test_backends_lists_every_known_backend_with_why_it_cannot_run():
    infos = {b.name: b for b in muser.backends()}
    assert set(infos) == {"cpu", "null", "cuda", "metal"}
    assert infos["cpu"].usable and infos["cpu"].reason == ""
    assert infos["null"].usable
    if not METAL_BUILT:
        assert not infos["metal"].usable and infos["metal"].reason
    if not CUDA.usable:
        assert CUDA.reason.startswith(("compiled without CUDA", "no CUDA device")), CUDA.reason
    # Listed in "auto" preference order: "auto" takes the first usable one.
    best = "cuda" if CUDA.usable else "metal" if METAL_BUILT else "cpu"
    assert [b.name for b in muser.backends() if b.usable][0] == best


def test_auto_reports_the_backend_it_chose(tmp_path):
    best = "metal" if METAL_BUILT else "cpu"
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf"))
    expected = "cuda" if CUDA.usable else best
    assert engine.backend == expected
    assert engine.config["backend"] == expected
    assert _core.resolve_backend("auto") == expected


@pytest.mark.skipif(METAL_BUILT, reason="macOS builds Metal (tests/integration/test_metal_backend.py)")
def test_metal_fails_clearly_instead_of_falling_back_to_the_cpu(tmp_path):
    with pytest.raises(ValueError, match="Apple"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="metal")


def test_an_unusable_cuda_backend_fails_with_its_reason_instead_of_falling_back(tmp_path):
    if CUDA.usable:
        pytest.skip("this machine has a usable CUDA device (tests/cuda covers that case)")
    with pytest.raises(ValueError, match=CUDA.reason.split(" (")[0]):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="cuda")


def test_an_unknown_backend_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="expected one of 'auto', .*'cuda'.*'metal'"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="tpu")
