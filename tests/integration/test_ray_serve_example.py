"""examples/ray_serve_app.py runs as a user would run it (its own local Ray
cluster, two replicas of smollm2-135m with one thread each)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason='muser.ray needs Ray Serve: pip install "muser[ray]"')

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_serve_app.py"


def test_the_ray_serve_example_answers_and_reuses_the_shared_system_prompt(smollm2_path):
    import muser

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(muser.__file__)), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(EXAMPLE), "--replicas", "2", "--threads", "1", "--max-tokens", "8"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.count("\nA: ") + out.stdout.startswith("A: ") >= 5
    reused = int(re.search(r"reused prompt tokens across replicas: (\d+)", out.stdout).group(1))
    assert reused >= 4 * 30, out.stdout  # the later chats found the system prompt in a slot
    assert re.search(r"12 requests in [\d.]+ s", out.stdout)
