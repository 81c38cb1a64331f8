"""Backend selection: what this build runs, and clear errors for what it does not."""

from __future__ import annotations

import sys

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model


# On macOS the build includes the Metal backend, usable where a Metal device
# exists (tests/integration/test_metal_backend.py); elsewhere it is not built.
METAL_BUILT = sys.platform == "darwin"


def test_this_build_lists_the_backends_it_can_run():
    expected = (["metal"] if METAL_BUILT else []) + ["cpu", "null"]
    assert _core.available_backends() == expected


def test_backends_lists_every_known_backend_with_why_it_cannot_run():
    infos = {b.name: b for b in muser.backends()}
    assert set(infos) == {"cpu", "null", "cuda", "metal"}
    assert infos["cpu"].usable and infos["cpu"].reason == ""
    assert infos["null"].usable
    for name in ("cuda",) if METAL_BUILT else ("cuda", "metal"):
        assert not infos[name].usable
        assert infos[name].reason  # says why, e.g. "compiled without CUDA"
    # "auto" prefers the first usable entry that computes a model.
    assert muser.backends()[0].name == ("metal" if METAL_BUILT else "cpu")


def test_auto_reports_the_backend_it_chose(tmp_path):
    best = "metal" if METAL_BUILT else "cpu"
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf"))
    assert engine.backend == best
    assert engine.config["backend"] == best
    assert _core.resolve_backend("auto") == best


UNBUILT = [("cuda", "compiled without CUDA")] + ([] if METAL_BUILT else [("metal", "Apple")])


@pytest.mark.parametrize("name, reason", UNBUILT)
def test_unbuilt_accelerators_fail_clearly_instead_of_falling_back_to_the_cpu(tmp_path, name, reason):
    path = write_tiny_model(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match=reason):
        muser.Engine(path, backend=name)


def test_an_unknown_backend_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'null', 'cuda', 'metal'"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="tpu")
