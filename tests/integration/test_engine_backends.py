"""Backend selection: what this build runs, and clear errors for what it does not."""

from __future__ import annotations

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model


def test_this_build_lists_the_backends_it_can_run():
    assert _core.available_backends() == ["cpu", "null"]


def test_backends_lists_every_known_backend_with_why_it_cannot_run():
    infos = {b.name: b for b in muser.backends()}
    assert set(infos) == {"cpu", "null", "cuda", "metal"}
    assert infos["cpu"].usable and infos["cpu"].reason == ""
    assert infos["null"].usable
    for name in ("cuda", "metal"):
        assert not infos[name].usable
        assert infos[name].reason  # says why, e.g. "compiled without CUDA"
    # "auto" prefers the first usable entry that computes a model.
    assert muser.backends()[0].name == "cpu"


def test_auto_reports_the_backend_it_chose(tmp_path):
    engine = muser.Engine(write_tiny_model(tmp_path / "m.gguf"))
    assert engine.backend == "cpu"
    assert engine.config["backend"] == "cpu"
    assert _core.resolve_backend("auto") == "cpu"


@pytest.mark.parametrize("name, reason", [("metal", "Apple"), ("cuda", "compiled without CUDA")])
def test_unbuilt_accelerators_fail_clearly_instead_of_falling_back_to_the_cpu(tmp_path, name, reason):
    path = write_tiny_model(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match=reason):
        muser.Engine(path, backend=name)


def test_an_unknown_backend_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'null', 'cuda', 'metal'"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="tpu")
