"""Any GGUF on the Hugging Face Hub: ``Engine.from_pretrained("org/repo-GGUF", filename="*Q4_K_M.gguf")``.

Needs the optional extra: ``pip install "muser[hub]"`` (``huggingface_hub``).
Files go to (and come from) the Hub's own cache (``HF_HOME``/``HF_HUB_CACHE``
or ``cache_dir=``), so models already downloaded by transformers,
llama-cpp-python or ``hf download`` are reused, and offline mode
(``HF_HUB_OFFLINE=1`` or ``local_files_only=True``) works from that cache.
When the Hub cannot be reached, the cached snapshot is used (with a warning).

``filename`` is a glob (``fnmatch``) matched against the repository's file
paths and their base names; ``None`` means "the one ``.gguf`` in the repo".
It must select one model: several different files is an error listing them.
A split model (``*-00001-of-00003.gguf``) is selected by any of its parts;
all parts are downloaded and merged once into muser's cache
(:mod:`muser.gguf_split`), because the engine maps one file.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import posixpath
from pathlib import Path
from typing import Any

from muser.errors import FetchError
from muser.gguf_split import SPLIT_PATTERN, merge_splits

__all__ = ["resolve"]

log = logging.getLogger("muser")

_INSTALL_HINT = 'loading from the Hugging Face Hub needs huggingface_hub: pip install "muser[hub]"'


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return huggingface_hub


def _offline(local_files_only: bool | None) -> bool:
    if local_files_only is not None:
        return local_files_only
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return flag in ("1", "true", "yes", "on") or bool(getattr(_hub().constants, "HF_HUB_OFFLINE", False))


def _cached_files(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> list[str]:
    hub = _hub()
    try:
        snapshot = Path(hub.snapshot_download(repo_id, revision=revision, cache_dir=cache_dir,
                                              local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError and friends: nothing cached
        raise FetchError(
            f"{repo_id!r}{'' if revision is None else f' at {revision!r}'} is not in the Hugging Face cache "
            f"({cache_dir or hub.constants.HF_HUB_CACHE}) and the Hub is not used (offline); "
            f"download it once online, e.g. `hf download {repo_id} --include '*.gguf'`"
        ) from exc
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file() or p.is_symlink())


def _list_files(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None,
                token: str | bool | None, offline: bool) -> tuple[list[str], bool]:
    """The repository's file paths, and whether they came from the cache (offline)."""
    if offline:
        return _cached_files(repo_id, revision, cache_dir), True
    hub = _hub()
    try:
        return list(hub.HfApi().list_repo_files(repo_id, revision=revision, token=token)), False
    except (hub.errors.RepositoryNotFoundError, hub.errors.RevisionNotFoundError) as exc:
        raise FetchError(f"the Hugging Face Hub has no repository {repo_id!r}"
                         f"{'' if revision is None else f' at revision {revision!r}'}: {exc}") from exc
    except Exception as exc:  # network trouble: the cache may still have it
        log.warning("cannot reach the Hugging Face Hub (%s); using the cached snapshot of %s", exc, repo_id)
        return _cached_files(repo_id, revision, cache_dir), True


def select(files: list[str], filename: str | None, repo_id: str) -> list[str]:
    """The file(s) of the one model ``filename`` selects: one path, or every part of a split model.

    Raises:
        FileNotFoundError: nothing matches (the message lists the repo's GGUF files).
        ValueError: several different models match.
    """
    ggufs = [f for f in files if f.endswith(".gguf")]
    if filename is None:
        matched = ggufs
    else:
        matched = [f for f in files if fnmatch.fnmatchcase(f, filename)
                   or fnmatch.fnmatchcase(posixpath.basename(f), filename)]
    models: dict[str, list[str]] = {}
    for path in matched:
        split = SPLIT_PATTERN.match(posixpath.basename(path))
        if split is None:
            models[path] = [path]
            continue
        folder, count = posixpath.dirname(path), int(split["count"])
        names = [posixpath.join(folder, f"{split['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
        missing = [n for n in names if n not in files]
        if missing:
            raise FileNotFoundError(f"{repo_id}: split model {names[0]} lacks {', '.join(missing)}")
        models[names[0]] = names
    if not models:
        listing = ", ".join(ggufs) if ggufs else "none"
        raise FileNotFoundError(f"{repo_id}: no file matches {filename!r}; its GGUF files: {listing}")
    if len(models) > 1:
        raise ValueError(f"{repo_id}: {filename!r} matches {len(models)} models ({', '.join(sorted(models))}); "
                         "pass filename= naming one of them (a glob such as '*Q4_K_M.gguf' works)")
    (parts,) = models.values()
    return parts


def resolve(
    repo_id: str,
    filename: str | None = None,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool | None = None,
    token: str | bool | None = None,
    progress: bool | None = None,
) -> Path:
    """Download (or find in the cache) the GGUF ``filename`` selects in ``repo_id``; its local path.

    Raises:
        ImportError: huggingface_hub is not installed (says ``pip install "muser[hub]"``).
        FetchError: the repository or revision does not exist, or (offline) is not cached.
        FileNotFoundError, ValueError: ``filename`` selects no model or several.
    """
    hub = _hub()
    offline = _offline(local_files_only)
    files, from_cache = _list_files(repo_id, revision, cache_dir, token, offline)
    parts = select(files, filename, repo_id)
    tqdm_class = None
    if progress is False:
        from tqdm import tqdm

        class _Silent(tqdm):  # type: ignore[type-arg]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

        tqdm_class = _Silent
    local = []
    for part in parts:
        log.info("%s: %s %s", repo_id, "using cached" if from_cache else "fetching", part)
        try:
            local.append(Path(hub.hf_hub_download(repo_id, part, revision=revision, cache_dir=cache_dir,
                                                  local_files_only=from_cache, token=token,
                                                  tqdm_class=tqdm_class)))
        except Exception as exc:
            raise FetchError(f"{repo_id}: cannot get {part}: {exc}") from exc
    if len(local) == 1:
        return local[0]
    return _merged(repo_id, local)


def _merged(repo_id: str, parts: list[Path]) -> Path:
    from muser.models import cache_dir as muser_cache

    # The snapshot folder is named after the commit: one merged file per commit.
    commit = next((d.name for d in parts[0].parents if d.parent.name == "snapshots"), parts[0].parent.name)
    match = SPLIT_PATTERN.match(parts[0].name)
    stem = match["stem"] if match else parts[0].stem
    target = muser_cache() / "hub" / repo_id.replace("/", "--") / commit / f"{stem}.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("%s: merging %d split parts into %s", repo_id, len(parts), target)
    return merge_splits(parts, target)
