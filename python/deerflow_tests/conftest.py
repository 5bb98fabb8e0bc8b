"""The DeerFlow stage: memgate's wheel inside DeerFlow's own, unmodified
backend (``testkit/deerflow-env`` unpacks and installs it), driven through
DeerFlow's code paths with a recording fake chat model that DeerFlow builds
from the ``config.yaml`` written here.

Run with DeerFlow's interpreter (``$MEMGATE_DEERFLOW_PYTHON -m pytest
python/deerflow_tests``). Real servers come from ``testkit/.run/env``; a
missing one is a skip, or a failure under ``MEMGATE_REQUIRE_REAL_SERVERS=1``.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENV_FILE = REPO / "testkit" / ".run" / "env"
DEERFLOW_ROOT = Path(os.environ.get("MEMGATE_DEERFLOW_ROOT", "")).resolve() if os.environ.get("MEMGATE_DEERFLOW_ROOT") else None
if DEERFLOW_ROOT is None:
    pytest.exit("MEMGATE_DEERFLOW_ROOT is not set (run testkit/deerflow-env)", returncode=2)
# The Gateway app package (`app.gateway`) is imported from backend/, as `make dev` runs it.
sys.path.insert(0, str(DEERFLOW_ROOT / "backend"))
sys.path.insert(0, str(HERE))

OWNER = "alice-7c1e"
BACKENDS = ["local", "openviking", "pc002", "pc14"]


def testkit_env() -> dict[str, str]:
    values: dict[str, str] = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            match = re.match(r"^export ([A-Z0-9_]+)=(.*)$", line.strip())
            if match:
                values[match.group(1)] = shlex.split(match.group(2))[0] if match.group(2) else ""
    return values


def real_server(*names: str) -> dict[str, str]:
    file_values = testkit_env()
    found = {n: os.environ.get(n) or file_values.get(n) for n in names}
    missing = [n for n, v in found.items() if not v]
    if missing:
        reason = f"skipped: real server not running (run testkit/up); missing {', '.join(missing)}"
        if os.environ.get("MEMGATE_REQUIRE_REAL_SERVERS") == "1":
            pytest.fail(f"MEMGATE_REQUIRE_REAL_SERVERS=1 but {reason}")
        pytest.skip(reason)
    return found  # type: ignore[return-value]


class Host:
    """One DeerFlow configuration: ``config.yaml``, runtime home and the
    environment variables its memory backend needs."""

    def __init__(self, backend: str, tmp_path: Path, monkeypatch):
        self.backend = backend
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.config_path = tmp_path / "config.yaml"
        self.recording = tmp_path / "model-requests.jsonl"
        self.monkeypatch = monkeypatch
        self.owner = "default" if backend == "local" else OWNER
        self.memory = self._memory_section(backend)
        monkeypatch.setenv("DEER_FLOW_HOME", str(self.home))
        monkeypatch.setenv("DEER_FLOW_CONFIG_PATH", str(self.config_path))
        monkeypatch.setenv("MEMGATE_RECORDING_LOG", str(self.recording))
        self.write()

    def _memory_section(self, backend: str) -> str:
        if backend == "local":
            return "manager_class: memgate.deerflow:LocalMemoryManager\n  backend_config: {}"
        if backend == "openviking":
            env = real_server("MEMGATE_TEST_OPENVIKING_URL", "MEMGATE_TEST_OPENVIKING_USER", "MEMGATE_TEST_OPENVIKING_USER_KEY")
            self.owner = env["MEMGATE_TEST_OPENVIKING_USER"]
            self.openviking_key = env["MEMGATE_TEST_OPENVIKING_USER_KEY"]
            self.openviking_peer = f"df{uuid.uuid4().hex[:10]}"
            self.monkeypatch.setenv("OPENVIKING_API_KEY", self.openviking_key)
            return textwrap.dedent(
                f"""\
                manager_class: memgate.deerflow:OpenVikingMemoryManager
                  backend_config:
                    base_url: {env["MEMGATE_TEST_OPENVIKING_URL"]}
                    owner_user_id: {self.owner}
                    api_key_env: OPENVIKING_API_KEY
                    default_peer_id: {self.openviking_peer}"""
            )
        prefix = "MEMGATE_TEST_PC002" if backend == "pc002" else "MEMGATE_TEST_PC14"
        names = [f"{prefix}_URL", f"{prefix}_TOKEN"] + ([f"{prefix}_SCOPE_ID_2"] if backend == "pc14" else [])
        env = real_server(*names)
        scope = f"memgate:deerflow:{uuid.uuid4().hex[:12]}" if backend == "pc002" else env[f"{prefix}_SCOPE_ID_2"]
        for name, value in {
            "POWERCONTEXT_DEERFLOW_BASE_URL": env[f"{prefix}_URL"],
            "POWERCONTEXT_DEERFLOW_OWNER_USER_ID": OWNER,
            "POWERCONTEXT_DEERFLOW_SCOPE_ID": scope,
            "POWERCONTEXT_DEERFLOW_TOKEN": env[f"{prefix}_TOKEN"],
        }.items():
            self.monkeypatch.setenv(name, value)
        self.monkeypatch.delenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", raising=False)
        return "manager_class: memgate.deerflow:PowerContextMemoryManager\n  backend_config: {}"

    def write(self, *, mode: str | None = None, extra: str | None = None) -> None:
        """Writes ``config.yaml`` and drops DeerFlow's cached config, manager
        and extensions, as a new Gateway process would start. ``mode`` and
        ``extra`` (more top-level YAML) stay as last given."""
        self.mode = mode or getattr(self, "mode", "middleware")
        self.extra = extra if extra is not None else getattr(self, "extra", "")
        self.config_path.write_text(
            textwrap.dedent(
                """\
                config_version: 34
                log_level: info
                models:
                  - name: recording
                    use: recording_model:RecordingChatModel
                    model: recording
                sandbox:
                  use: deerflow.sandbox.local:LocalSandboxProvider
                  allow_host_bash: false
                title:
                  enabled: false
                """
            )
            # DeerFlow resolves its SQLite directory against the working directory.
            + f"database:\n  sqlite_dir: {self.home / 'data'}\n"
            + f"memory:\n  enabled: true\n  injection_enabled: true\n  mode: {self.mode}\n  {self.memory}\n"
            + self.extra
        )
        reset_host()
        from deerflow.config.app_config import get_app_config
        from memgate import _native
        from memgate.deerflow import managers

        # memgate reads POWERCONTEXT_DEERFLOW_* once per environment source (a
        # per-process snapshot, as the RFC asks); a fresh source per host
        # configuration is what a fresh Gateway process would see.
        self.monkeypatch.setattr(managers, "_ENVIRONMENT", _native.Environment.from_mapping(dict(os.environ)))
        # Loads config.yaml now: DeerFlow's memory config follows the app config.
        assert get_app_config().memory.manager_class.startswith("memgate.deerflow:")


def reset_host() -> None:
    """Drops DeerFlow's cached config, memory manager and extensions."""
    from deerflow.agents.memory.manager import reset_memory_manager
    from deerflow.config.app_config import reset_app_config
    from deerflow.extensions import reset_loaded_extensions

    reset_memory_manager()
    reset_app_config()
    reset_loaded_extensions()


@pytest.fixture
def host(request, tmp_path, monkeypatch):
    """A DeerFlow host for the parametrized memory backend."""
    from deerflow.agents.memory import manager as host_manager

    made = Host(request.param, tmp_path, monkeypatch)
    yield made
    try:
        # The manager the test built, if any (a refused one never was).
        built = host_manager._memory_manager
        if built is not None:
            built.shutdown_flush(5.0)
    finally:
        reset_host()
