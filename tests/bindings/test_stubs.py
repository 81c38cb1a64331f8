"""The committed type stubs of the compiled core (src/muser/_core.pyi) are
current: regenerate them with

    python -m nanobind.stubgen -m muser._core -o src/muser/_core.pyi
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import muser

STUB = Path(muser.__file__).with_name("_core.pyi")


def test_committed_core_stubs_match_the_built_extension(tmp_path):
    fresh = tmp_path / "_core.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "muser._core", "-o", str(fresh)],
                   check=True, capture_output=True)
    assert STUB.read_text() == fresh.read_text(), (
        "src/muser/_core.pyi is stale; regenerate it with "
        "`python -m nanobind.stubgen -m muser._core -o src/muser/_core.pyi`"
    )
