"""Backend selection: what this build runs, and clear errors for what it does not."""

from __future__ import annotations

import pytest

import muser
from muser import _core
from tests.fixtures.tiny_models import write_tiny_model


def test_this_build_lists_the_backends_it_can_run():
    assert _core.available_backends() == ["cpu", "null"]


@pytest.mark.parametrize("name, reason", [("metal", "Apple"), ("cuda", "CUDA toolkit")])
def test_unbuilt_accelerators_fail_clearly_instead_of_falling_back_to_the_cpu(tmp_path, name, reason):
    path = write_tiny_model(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match=reason):
        muser.Engine(path, backend=name)


def test_an_unknown_backend_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'null', 'metal' or 'cuda'"):
        muser.Engine(write_tiny_model(tmp_path / "m.gguf"), backend="tpu")
