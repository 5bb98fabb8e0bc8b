"""The host contract's surface: class flags, construction through
``from_config``, configuration errors, unsupported operations, the error
family, and subclassing DeerFlow's own classes when DeerFlow is importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memgate.deerflow.tool import make_remember_tool
from memgate.deerflow import (
    HOST_CONTRACT,
    LocalMemoryManager,
    MemoryManager,
    MemoryManagerError,
    OpenVikingMemoryManager,
    PowerContextMemoryManager,
)

FAKE_HOST = Path(__file__).resolve().parent / "fake_host"
OV_BASE = {
    "base_url": "http://openviking:1933",
    "owner_user_id": "alice",
    "startup_policy": "warn",
    "retrieval": {"top_k": 4, "max_injection_chars": 1000, "injection_query": "profile preferences and prior decisions"},
}
PC_ENV = {
    "POWERCONTEXT_DEERFLOW_BASE_URL": "http://127.0.0.1:9",
    "POWERCONTEXT_DEERFLOW_OWNER_USER_ID": "alice",
    "POWERCONTEXT_DEERFLOW_SCOPE_ID": "scope-1",
    "POWERCONTEXT_DEERFLOW_TOKEN": "pc-token-secret-77",
}


def test_tests_run_against_the_installed_wheel():
    import memgate
    from memgate import _native

    source = Path(__file__).resolve().parents[1] / "memgate"
    assert Path(memgate.__file__).resolve().parent != source, "run from the repository root, not python/"
    assert _native.__file__.endswith(".abi3.so"), _native.__file__


def test_flags_follow_the_spec():
    assert HOST_CONTRACT == "memgate"  # DeerFlow is not importable in this process
    assert (OpenVikingMemoryManager.supports_search, OpenVikingMemoryManager.requires_passive_writes_in_tool_mode) == (
        True,
        False,
    )
    assert (PowerContextMemoryManager.supports_search, PowerContextMemoryManager.requires_passive_writes_in_tool_mode) == (
        False,
        False,
    )
    assert (LocalMemoryManager.supports_search, LocalMemoryManager.requires_passive_writes_in_tool_mode) == (True, True)
    for cls in (OpenVikingMemoryManager, PowerContextMemoryManager, LocalMemoryManager):
        assert issubclass(cls, MemoryManager)
        # Every one recalls with the host's query when given one.
        assert cls.supports_query_aware_context is True


def test_openviking_config_errors_are_the_original_value_errors(tmp_path, environment):
    environment(OPENVIKING_API_KEY="user-key-secret-1")
    base = dict(OV_BASE, storage_path=str(tmp_path))
    cases = [
        ({"auth_mode": "trusted"}, "OpenViking trusted mode is no longer supported by this backend; use a USER API key and configure owner_user_id"),
        ({"max_connections": 3, "max_retries": 1}, "OpenViking custom HTTP client fields are no longer supported: max_connections, max_retries"),
        ({"retrieval": "x"}, "OpenViking retrieval must be a mapping"),
        ({"colour": "blue"}, "Unknown OpenViking backend_config fields: colour"),
        ({"base_url": "http://10.0.0.5:1933"}, "OpenViking plain HTTP is allowed only for localhost/openviking; set allow_insecure_http=true only for a trusted internal network"),
        ({"owner_user_id": " "}, "OpenViking owner_user_id must not be empty"),
        ({"default_peer_id": "df-agent-default"}, "OpenViking default_peer_id must not start with the reserved prefix 'df-agent-'"),
        ({"allow_insecure_http": 1}, "OpenViking allow_insecure_http must be a boolean"),
        ({"max_seen_message_ids": 8}, "OpenViking max_seen_message_ids must be between 16 and 10000"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError) as err:
            OpenVikingMemoryManager.from_config({**base, **change})
        assert str(err.value) == message, change
    environment()
    with pytest.raises(ValueError, match="OpenViking USER API key is missing; set OPENVIKING_API_KEY"):
        OpenVikingMemoryManager.from_config(base)
    with pytest.raises(ValueError, match="supports memory.mode='middleware' only; use OpenViking MCP"):
        OpenVikingMemoryManager.from_config({"colour": "checked after the mode"}, mode="tool")


def test_openviking_defaults_parse_and_the_key_never_shows(tmp_path, environment, caplog):
    environment(OPENVIKING_API_KEY="user-key-secret-1")
    manager = OpenVikingMemoryManager.from_config(dict(OV_BASE, storage_path=str(tmp_path)))
    assert manager.mode == "middleware"
    assert "user-key-secret-1" not in repr(manager)
    assert "user-key-secret-1" not in repr(manager._native_backend)
    manager.close()


def test_powercontext_takes_only_the_environment(tmp_path, environment):
    environment(**PC_ENV)
    with pytest.raises(ValueError) as err:
        PowerContextMemoryManager.from_config({"scope_id": "other", "storage_path": str(tmp_path)})
    assert "backend_config.scope_id is not accepted" in str(err.value)
    assert "POWERCONTEXT_DEERFLOW_" in str(err.value)
    with pytest.raises(ValueError, match="requires a backend that implements search"):
        PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)}, mode="tool")
    environment(**{**PC_ENV, "POWERCONTEXT_DEERFLOW_OWNER_USER_ID": "default"})
    with pytest.raises(ValueError, match="POWERCONTEXT_DEERFLOW_OWNER_USER_ID"):
        PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    environment(**{**PC_ENV, "POWERCONTEXT_DEERFLOW_MAX_BYTES": "100"})
    with pytest.raises(ValueError) as err:
        PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert "512" in str(err.value) and "pc-token-secret-77" not in str(err.value)


def test_unsupported_operations_name_method_and_class(tmp_path, environment):
    environment(OPENVIKING_API_KEY="k", **PC_ENV)
    managers = [
        LocalMemoryManager.from_config({"storage_path": str(tmp_path / "local")}),
        OpenVikingMemoryManager.from_config(dict(OV_BASE, storage_path=str(tmp_path / "ov"))),
        PowerContextMemoryManager.from_config({"storage_path": str(tmp_path / "pc")}),
    ]
    for manager in managers:
        name = type(manager).__name__
        # The local store has the fact operations and erasure
        # (test_local_facts.py).
        local = isinstance(manager, LocalMemoryManager)
        for method, call in [
            ("get_memory", lambda m: m.get_memory(user_id="alice")),
            ("clear_memory", lambda m: m.clear_memory(user_id="alice")),
            ("import_memory", lambda m: m.import_memory({}, user_id="alice")),
            ("export_memory", lambda m: m.export_memory(user_id="alice")),
            ("create_fact", lambda m: m.create_fact("x", user_id="alice")),
            ("update_fact", lambda m: m.update_fact("f1", "x", user_id="alice")),
            ("delete_fact", lambda m: m.delete_fact("f1", user_id="alice")),
            ("reload_memory", lambda m: m.reload_memory(user_id="alice")),
        ]:
            if local:
                continue
            with pytest.raises(NotImplementedError) as err:
                call(manager)
            assert str(err.value) == f"{method} not supported by {name}"
        manager.close()
    with pytest.raises(NotImplementedError, match="^search not supported by PowerContextMemoryManager$"):
        managers[2].search("coffee", user_id="alice")


def test_identity_refusals_are_memory_manager_errors(tmp_path, environment):
    environment(OPENVIKING_API_KEY="k", **PC_ENV)
    ov = OpenVikingMemoryManager.from_config(dict(OV_BASE, storage_path=str(tmp_path / "ov")))
    with pytest.raises(MemoryManagerError, match="owner_user_id 'alice', but this request belongs to 'bob'"):
        ov.get_context("bob")
    with pytest.raises(MemoryManagerError, match="owner_user_id 'alice'"):
        ov.add("t1", [{"type": "human", "content": "x"}], user_id="bob")
    with pytest.raises(ValueError, match="OpenViking memory write requires thread_id"):
        ov.add("", [{"type": "human", "content": "x"}], user_id="alice")
    with pytest.raises(ValueError, match="Invalid OpenViking peer scope"):
        ov.get_context("alice", agent_name="  ")
    assert not (tmp_path / "ov" / "openviking").exists(), "refused before touching the disk"
    # PowerContext's refusal is no memory (one warning, see test_powercontext_real),
    # while its remember path still reports the refusal.
    pc = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path / "pc")})
    for user in (None, "", "default", " alice", "bob"):
        assert pc.get_context(user, query="coffee") == ""
    outcome = json.loads(make_remember_tool(pc).func(runtime={"context": {"user_id": "bob"}}, text="x"))
    assert outcome["error"]["code"] == "rejected_identity" and "powercontext refused the caller" in outcome["error"]["message"]
    ov.close()
    pc.close()


def _run_with_fake_host(code: str, cwd: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE_HOST), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_with_deerflow_importable_the_managers_are_its_subclasses(tmp_path):
    """In a process where ``deerflow`` imports (the host-contract stand-in),
    the managers are pydantic subclasses of its ``MemoryManager``, pass its
    invariants, and raise its own error classes."""
    result = _run_with_fake_host(
        f"""
        import json, os
        from deerflow.agents.memory import manager as host
        from memgate.deerflow import HOST_CONTRACT, LocalMemoryManager, PowerContextMemoryManager, MemoryManagerError
        from memgate.deerflow import OpenVikingMemoryManager
        os.environ["OPENVIKING_API_KEY"] = "k"
        local = LocalMemoryManager.from_config({{"storage_path": {str(tmp_path)!r}}}, mode="tool")
        local.add("t1", [{{"type": "human", "content": "I like tea", "id": "h1"}}], user_id="alice")
        ov = OpenVikingMemoryManager.from_config({{"owner_user_id": "alice", "storage_path": {str(tmp_path)!r}}})
        try:
            ov.get_context("bob")
            refused = None
        except host.MemoryManagerError as e:
            refused = type(e).__name__
        try:
            PowerContextMemoryManager(backend_config={{}}, mode="tool")
            tool_mode = "accepted"
        except Exception as e:
            tool_mode = type(e).__name__
        print(json.dumps({{
            "contract": HOST_CONTRACT,
            "subclass": issubclass(LocalMemoryManager, host.MemoryManager),
            "pydantic": hasattr(local, "model_fields"),
            "same_error": MemoryManagerError is host.MemoryManagerError,
            "refused": refused,
            "tool_mode": tool_mode,
            "recall": local.get_context("alice", query="tea"),
        }}))
        """,
        tmp_path,
    )
    assert result["contract"] == "deerflow"
    assert result["subclass"] and result["pydantic"] and result["same_error"]
    assert result["refused"] == "MemoryManagerError"
    assert result["tool_mode"] == "ValidationError"  # the host's invariant: tool mode needs search
    assert "I like tea" in result["recall"]


def test_native_errors_map_to_the_host_family(tmp_path):
    from memgate import _native
    from memgate.deerflow import MemoryConflictError, MemoryCorruptionError
    from memgate.deerflow.managers import host_error

    manager = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    expected = {
        "invalid_input": ValueError,
        "invalid_config": ValueError,
        "conflict": MemoryConflictError,
        "corruption": MemoryCorruptionError,
        "not_found": KeyError,
        "rejected_identity": MemoryManagerError,
        "backend_failure": MemoryManagerError,
        "deadline_exceeded": MemoryManagerError,
    }
    for code, cls in expected.items():
        err = host_error(_native.NativeError(code, f"{code} happened"), "add", manager)
        assert type(err) is cls, code
    unsupported = host_error(_native.NativeError("unsupported", "x"), "get_memory", manager)
    assert type(unsupported) is NotImplementedError
    assert str(unsupported) == "get_memory not supported by LocalMemoryManager"
    manager.close()


def test_a_corrupt_cursor_fails_closed_and_is_kept(tmp_path, environment):
    """An unreadable cursor is never replayed over: the capture raises
    MemoryCorruptionError (a MemoryManagerError) under every write policy,
    before any request, and the file is left as it was."""
    import memgate
    from memgate.deerflow import MemoryCorruptionError

    environment(OPENVIKING_API_KEY="k")
    sid = memgate.openviking_session_id("alice", "research", "thread-1")
    sessions = tmp_path / "openviking" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / f"{sid}.json").write_text("not-json")
    manager = OpenVikingMemoryManager.from_config(
        dict(OV_BASE, base_url="http://127.0.0.1:9", storage_path=str(tmp_path), timeout_seconds=1,
             failure_policy={"write": "log_and_drop"})
    )
    with pytest.raises(MemoryCorruptionError, match="refusing unsafe replay") as err:
        manager.add("thread-1", [{"type": "human", "content": "private", "id": "h1"}], user_id="alice", agent_name="Research")
    assert isinstance(err.value, MemoryManagerError)
    assert (sessions / f"{sid}.json").read_text() == "not-json"
    manager.close()
