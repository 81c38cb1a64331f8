"""Hostile-input tests: every bound of muser.limits and the loader, and the
fuzz harness (see fuzz_harness.py). Tiny models come from the integration
tier's fixture."""

from __future__ import annotations

from tests.integration.conftest import tiny_model  # noqa: F401  (re-exported fixture)
