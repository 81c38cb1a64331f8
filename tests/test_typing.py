"""mypy --strict passes on the package and the examples (configured in
pyproject.toml's [tool.mypy]), and the public overloads give callers the
precise types: generate -> str or list[str] by n, chat(stream=True) -> an iterator."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # mypy takes ~10-30 s on a loaded machine


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)


def test_mypy_strict_passes_on_the_package_and_the_examples():
    result = _mypy("--config-file", "pyproject.toml")  # files, strictness and mypy_path come from there
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_the_public_overloads_give_precise_types(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent('''
        import muser
        import muser.openai
        engine = muser.Engine("model.gguf")
        reveal_type(muser.generate(engine, "hi"))
        reveal_type(muser.generate(engine, "hi", n=2))
        reveal_type(muser.generate(engine, ["a", "b"]))
        reveal_type(muser.chat(engine, [{"role": "user", "content": "hi"}]))
        reveal_type(muser.chat(engine, [{"role": "user", "content": "hi"}], stream=True))
        reveal_type(muser.stream(engine, "hi", temperature=0.5))
        reveal_type(muser.openai.create_chat_completion(engine, [], stream=True))
        muser.generate(engine, "hi", max_new_tokens=5)
    '''))
    # MYPYPATH=src finds the package whether or not it is installed.
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", os.devnull, str(probe),
                             "--no-error-summary"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "MYPYPATH": str(ROOT / "src")}, check=False)
    lines = [line.split(": ", 2)[-1] for line in result.stdout.splitlines()]
    # (mypy versions differ in qualifying names: compare without the module prefixes)
    revealed = [re.sub(r"\b(typing|builtins|muser\.types)\.", "", line.removeprefix("Revealed type is ")
                       .strip('"')) for line in lines if "Revealed type" in line]
    assert revealed[:6] == ["str", "list[str]", "list[str]", "str", "Iterator[GenerationChunk]",
                            "Iterator[GenerationChunk]"], result.stdout
    assert revealed[6] == "Iterator[dict[str, Any]]", result.stdout
    assert any('Unexpected keyword argument "max_new_tokens"' in line for line in lines), result.stdout
