"""Run the llama.cpp peer (benchmarks/peer_llama_cpp.py) from a muser benchmark."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

PEER_SCRIPT = Path(__file__).with_name("peer_llama_cpp.py")


def default_peer_python() -> str | None:
    """$MUSER_PEER_PYTHON, else ../peer-venv/bin/python beside the repository, if present."""
    env = os.environ.get("MUSER_PEER_PYTHON")
    if env:
        return env
    candidate = Path(__file__).resolve().parents[2] / "peer-venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def run_peer(peer_python: str, model: str, tasks: list[dict], threads: int = 2, n_ctx: int = 4096) -> list[dict]:
    """Runs `tasks` on llama.cpp in a subprocess; returns one result dict per task."""
    spec = {"model": str(model), "threads": threads, "n_ctx": n_ctx, "tasks": tasks}
    done = subprocess.run([peer_python, str(PEER_SCRIPT)], input=json.dumps(spec), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"peer failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)
