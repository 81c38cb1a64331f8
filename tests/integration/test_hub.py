"""Engine.from_pretrained against a Hugging Face cache laid out by the test
(blobs, refs, snapshots with symlinks, as huggingface_hub writes them): glob
selection, split models, offline mode, a Hub that cannot be reached, and the
errors that say which constructor to use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import huggingface_hub  # noqa: E402,F401

import muser  # noqa: E402
from muser import gguf_split, hub  # noqa: E402
from tests.fixtures.tiny_models import (  # noqa: E402
    _add_gpt2_tokenizer,
    _add_metadata,
    _add_spm_tokenizer,
    _add_tensors,
    tiny_model_spec,
    write_tiny_model,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _lay_out(cache: Path, repo_id: str, files: dict[str, Path], revision: str = "main") -> Path:
    """Put ``files`` (repo path -> local file) into ``cache`` as huggingface_hub does."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / revision).write_text(COMMIT)
    snapshot = root / "snapshots" / COMMIT
    for repo_path, source in files.items():
        data = source.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / repo_path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def _write_split_model(folder: Path, stem: str, max_tensors: int) -> list[Path]:
    from gguf import GGUFWriter

    spec = tiny_model_spec("llama", "Q8_0", 0)
    writer = GGUFWriter(folder / f"{stem}.gguf", "llama", split_max_tensors=max_tensors)
    _add_metadata(writer, spec)
    (_add_gpt2_tokenizer if spec.tokenizer == "gpt2" else _add_spm_tokenizer)(writer)
    _add_tensors(writer, spec)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(folder.glob(f"{stem}-*-of-*.gguf"))


def _logits(engine: muser.Engine) -> np.ndarray:
    session = engine.session(max_context=16)
    session.prefill([1, 2, 3, 4])
    assert session.logits is not None
    return session.logits


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hubsrc")
    q8 = write_tiny_model(folder / "tiny-Q8_0.gguf", weight_type="Q8_0")
    f32 = write_tiny_model(folder / "tiny-F32.gguf", weight_type="F32")
    split_folder = folder / "split"
    split_folder.mkdir()
    parts = _write_split_model(split_folder, "tiny-Q8_0", max_tensors=5)
    return {"q8": q8, "f32": f32, "parts": parts}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MUSER_CACHE", str(tmp_path / "muser-cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return tmp_path / "hf-cache"


def test_a_glob_selects_one_quantization_from_the_offline_cache(models, cache):
    _lay_out(cache, "org/tiny-GGUF", {"tiny-Q8_0.gguf": models["q8"], "tiny-F32.gguf": models["f32"],
                                      "README.md": models["q8"]})
    engine = muser.Engine.from_pretrained("org/tiny-GGUF", filename="*Q8_0.gguf", cache_dir=cache,
                                          local_files_only=True, threads=1)
    assert Path(engine.path).parent.name == COMMIT
    assert np.array_equal(_logits(engine), _logits(muser.Engine(models["q8"], threads=1)))


def test_hf_hub_offline_in_the_environment_means_the_cache(models, cache, monkeypatch):
    _lay_out(cache, "org/only-GGUF", {"sub/model.gguf": models["f32"]})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    engine = muser.Engine.from_pretrained("org/only-GGUF", cache_dir=cache, threads=1)
    assert engine.path.endswith("sub/model.gguf")


def test_an_unreachable_hub_falls_back_to_the_cache_with_a_warning(models, cache, monkeypatch, caplog):
    _lay_out(cache, "org/tiny-GGUF", {"tiny-Q8_0.gguf": models["q8"]})
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files",
                        lambda self, *a, **k: (_ for _ in ()).throw(OSError("connection refused")))
    engine = muser.Engine.from_pretrained("org/tiny-GGUF", filename="*.gguf", cache_dir=cache,
                                          local_files_only=False, threads=1)
    assert Path(engine.path).name == "tiny-Q8_0.gguf"
    assert any("cannot reach the Hugging Face Hub" in r.getMessage() for r in caplog.records)


def test_a_split_model_is_merged_once_and_equals_the_whole_file(models, cache):
    parts = models["parts"]
    assert len(parts) > 2
    _lay_out(cache, "org/split-GGUF", {f"Q8/{p.name}": p for p in parts})
    engine = muser.Engine.from_pretrained("org/split-GGUF", filename="*Q8_0*.gguf", cache_dir=cache,
                                          local_files_only=True, threads=1)
    merged = Path(engine.path)
    assert merged.name == "tiny-Q8_0.gguf" and merged.parent.name == COMMIT
    whole = muser.Engine(models["q8"], threads=1)
    assert np.array_equal(_logits(engine), _logits(whole))
    assert engine.config == whole.config
    stamp = merged.stat().st_mtime_ns
    again = muser.Engine.from_pretrained("org/split-GGUF", filename="*-00002-of-*.gguf", cache_dir=cache,
                                         local_files_only=True, threads=1)
    assert Path(again.path) == merged and merged.stat().st_mtime_ns == stamp


def test_a_split_model_with_a_missing_part_is_named(models, cache):
    parts = models["parts"]
    _lay_out(cache, "org/broken-GGUF", {p.name: p for p in parts[:-1]})
    with pytest.raises(FileNotFoundError, match=parts[-1].name):
        muser.Engine.from_pretrained("org/broken-GGUF", cache_dir=cache, local_files_only=True)


def test_merging_checks_the_split_keys(models, tmp_path):
    parts = models["parts"]
    with pytest.raises(muser.ModelFormatError, match="split.count"):
        gguf_split.merge_splits(parts[:-1], tmp_path / "x.gguf")
    with pytest.raises(muser.ModelFormatError, match="split.no"):
        gguf_split.merge_splits([parts[0], parts[2], parts[1], *parts[3:]], tmp_path / "x.gguf")
    broken = tmp_path / "broken-00001-of-00001.gguf"
    broken.write_bytes(parts[0].read_bytes()[:100])
    with pytest.raises(muser.ModelFormatError, match="broken-00001-of-00001.gguf"):
        gguf_split.merge_splits([broken], tmp_path / "y.gguf")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "y.gguf").exists()


def test_selection_errors_list_the_candidates():
    files = ["a-Q4_K_M.gguf", "a-Q8_0.gguf", "README.md"]
    with pytest.raises(ValueError, match="matches 2 models.*a-Q4_K_M.gguf, a-Q8_0.gguf"):
        hub.select(files, "*.gguf", "org/a")
    with pytest.raises(FileNotFoundError, match="no file matches '\\*Q5_K.gguf'; its GGUF files: a-Q4_K_M"):
        hub.select(files, "*Q5_K.gguf", "org/a")
    assert hub.select(files, "a-Q8_0.gguf", "org/a") == ["a-Q8_0.gguf"]


def test_a_repo_missing_from_the_offline_cache_says_how_to_get_it(cache):
    with pytest.raises(muser.FetchError, match="hf download org/absent"):
        muser.Engine.from_pretrained("org/absent", cache_dir=cache, local_files_only=True)


def test_passing_a_registry_key_or_a_hub_repo_to_engine_names_the_right_constructor():
    with pytest.raises(ValueError, match=r"muser.Engine.from_registry\('smollm2-135m'\)"):
        muser.Engine("smollm2-135m")
    with pytest.raises(ValueError, match=r"muser.Engine.from_pretrained\('bartowski/Foo-GGUF'"):
        muser.Engine("bartowski/Foo-GGUF")
    with pytest.raises(muser.ModelFormatError, match="cannot open"):
        muser.Engine("missing/model.gguf")


def test_without_huggingface_hub_the_error_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name == "huggingface_hub":
            raise ImportError("No module named 'huggingface_hub'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    with pytest.raises(ImportError, match=r'pip install "muser\[hub\]"'):
        muser.Engine.from_pretrained("org/x")
