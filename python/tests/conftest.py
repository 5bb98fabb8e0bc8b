"""Shared fixtures: the real servers from testkit/, and isolation of the
PowerContext settings snapshot per test.

Real-server tests read ``MEMGATE_TEST_*`` from the environment, else from
``testkit/.run/env`` (written by ``testkit/up``). When a server is absent
they skip with the reason printed, unless ``MEMGATE_REQUIRE_REAL_SERVERS=1``
(CI), where absence is a failure.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV_FILE = REPO / "testkit" / ".run" / "env"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _testkit_env() -> dict[str, str]:
    values: dict[str, str] = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            match = re.match(r"^export ([A-Z0-9_]+)=(.*)$", line.strip())
            if match:
                values[match.group(1)] = shlex.split(match.group(2))[0] if match.group(2) else ""
    return values


def real_server(*names: str) -> dict[str, str]:
    """The ``MEMGATE_TEST_*`` values a test needs, or a skip (a failure
    under ``MEMGATE_REQUIRE_REAL_SERVERS=1``)."""
    file_values = _testkit_env()
    found = {n: os.environ.get(n) or file_values.get(n) for n in names}
    missing = [n for n, v in found.items() if not v]
    if missing:
        reason = f"skipped: real server not running (run testkit/up); missing {', '.join(missing)}"
        if os.environ.get("MEMGATE_REQUIRE_REAL_SERVERS") == "1":
            pytest.fail(f"MEMGATE_REQUIRE_REAL_SERVERS=1 but {reason}")
        print(reason)
        pytest.skip(reason)
    return {n: v for n, v in found.items() if v}


@pytest.fixture
def environment(monkeypatch):
    """Installs an injected environment for the managers built in a test
    (``set(**vars)``); without it they read the process environment."""
    from memgate import _native
    from memgate.deerflow import managers

    def use(**variables: str):
        env = _native.Environment.from_mapping(variables)
        monkeypatch.setattr(managers, "_ENVIRONMENT", env)
        return env

    return use
