"""Repository-level pytest setup.

Installed muser registers muser.testing's fixtures through its ``pytest11``
entry point. Run from a source tree (``PYTHONPATH=src``) there is no entry
point, so register the same plugin here, once.
"""

from __future__ import annotations


def pytest_configure(config):
    manager = config.pluginmanager
    if not (manager.has_plugin("muser") or manager.has_plugin("muser.testing.pytest_plugin")):
        manager.import_plugin("muser.testing.pytest_plugin")
