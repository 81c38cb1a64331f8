"""The fuzz harness in CI: every input that ever failed is replayed, and each
target is fuzzed for a fixed budget (about two minutes in all; set
MUSER_FUZZ_SECONDS to change the per-target budget). The long run is
``python -m tests.hostile.fuzz_harness --seconds 600`` (see fuzz_harness.py)."""

from __future__ import annotations

import json
import os

import pytest

from tests.hostile import fuzz_harness
from tests.hostile.regression_cases import CASES

SECONDS_PER_TARGET = float(os.environ.get("MUSER_FUZZ_SECONDS", "25"))


def _saved_cases() -> list[tuple[str, dict]]:
    cases = []
    for path in sorted(fuzz_harness.REGRESSIONS.glob("*.json")):
        record = json.loads(path.read_text())
        cases.append((record["target"], record["case"]))
    return cases


REPLAY = CASES + _saved_cases()


@pytest.mark.slow
@pytest.mark.parametrize("target, case", REPLAY, ids=[f"{t}-{i}" for i, (t, _) in enumerate(REPLAY)])
def test_every_input_that_ever_failed_now_meets_its_contract(target, case):
    outcome = fuzz_harness.run_case(target, case)
    assert isinstance(outcome, str)


@pytest.mark.slow
@pytest.mark.parametrize("target", fuzz_harness.TARGETS)
def test_fuzz_target_for_a_fixed_budget(target):
    result = fuzz_harness.fuzz(target, SECONDS_PER_TARGET, seed=0)
    print(f"{target}: {result.total} cases {json.dumps(result.counts, sort_keys=True)}")
    assert result.failure is None, (
        f"{target} broke its contract: {result.failure}\n"
        f"input: {json.dumps(result.failing_case)[:2000]}\nsaved to {result.saved_to} (commit it)")
    assert result.total > 0
