"""Every script in examples/ runs to completion (with the real models, fetched
by CI before the tests) and prints something: the examples are what
newcomers copy, so they must not rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Scripts only: examples/test_*.py are pytest files that pytest collects itself.
EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples").glob("*.py")
                  if not p.name.startswith("test_"))


def test_there_are_examples():
    names = {p.name for p in EXAMPLES}
    assert {"quickstart.py", "openai_api.py", "logits_processor.py", "embeddings.py"} <= names, names


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_runs(script, smollm2_path):
    # The same interpreter and environment as the tests: muser is found where
    # they find it (installed in CI, PYTHONPATH=src in a dev checkout).
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ), check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.strip(), "the example printed nothing"
