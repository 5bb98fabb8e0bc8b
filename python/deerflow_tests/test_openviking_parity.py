"""DeerFlow's own built-in OpenViking manager and memgate's, side by side in
one process, given the same ``backend_config``: the same construction
outcome (error type and message) for a table of good and bad configs, the
same session ids, peer ids (and peer-id refusals), message signatures and
sequence digests, and the same refusal of a caller that is not the owner.

Needs no server: construction and the id functions do no network I/O."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from deerflow.agents.memory.backends.openviking import session as builtin_session
from deerflow.agents.memory.manager import _resolve_manager_class
from memgate import _native
from memgate.deerflow import OpenVikingMemoryManager as MemgateOpenViking

BuiltinOpenViking = _resolve_manager_class("openviking")
KEY = "test-user-key"
GOOD = {"base_url": "http://127.0.0.1:1933", "owner_user_id": "alice", "api_key_env": "PARITY_OV_KEY"}

CONFIGS = {
    "minimal": GOOD,
    "full": {
        **GOOD,
        "default_peer_id": "research",
        "timeout_seconds": 12.5,
        "startup_policy": "warn",
        "failure_policy": {"read": "raise", "write": "raise"},
        "retrieval": {"top_k": 3, "score_threshold": 0.4, "max_injection_chars": 2000, "content_mode": "read",
                      "injection_query": "profile"},
        "max_seen_message_ids": 64,
    },
    "https_remote": {**GOOD, "base_url": "https://ov.example.com/"},
    "insecure_allowed": {**GOOD, "base_url": "http://10.0.0.8:1933", "allow_insecure_http": True},
    "trusted_mode": {**GOOD, "auth_mode": "trusted"},
    "account_key": {**GOOD, "account": "acme"},
    "custom_http": {**GOOD, "headers": {"x": "y"}},
    "unknown_keys": {**GOOD, "colour": "blue", "retrieval": {"shade": 1}, "failure_policy": {"mood": "x"}},
    "empty_key_env": {**GOOD, "api_key_env": "  "},
    "missing_key": {**GOOD, "api_key_env": "PARITY_OV_UNSET"},
    "no_owner": {**GOOD, "owner_user_id": "  "},
    "plain_http_remote": {**GOOD, "base_url": "http://ov.example.com"},
    "not_a_url": {**GOOD, "base_url": "ov.example.com"},
    "bad_peer": {**GOOD, "default_peer_id": "Research Team"},
    "reserved_peer": {**GOOD, "default_peer_id": "df-agent-x"},
    "timeout_zero": {**GOOD, "timeout_seconds": 0},
    "top_k_high": {**GOOD, "retrieval": {"top_k": 101}},
    "threshold_high": {**GOOD, "retrieval": {"score_threshold": 1.5}},
    "chars_low": {**GOOD, "retrieval": {"max_injection_chars": 100}},
    "content_mode": {**GOOD, "retrieval": {"content_mode": "full"}},
    "empty_query": {**GOOD, "retrieval": {"injection_query": "  "}},
    "startup_policy": {**GOOD, "startup_policy": "maybe"},
    "read_policy": {**GOOD, "failure_policy": {"read": "ignore"}},
    "write_policy": {**GOOD, "failure_policy": {"write": "ignore"}},
    "seen_ids_low": {**GOOD, "max_seen_message_ids": 8},
    "retrieval_not_mapping": {**GOOD, "retrieval": ["top_k"]},
    "insecure_not_bool": {**GOOD, "allow_insecure_http": "yes"},
}


def outcome(cls, config, mode="middleware", storage=None):
    """``("ok", None)`` or ``(error type name, message)`` of ``from_config``."""
    cfg = dict(config, storage_path=str(storage)) if storage else dict(config)
    try:
        manager = cls.from_config(cfg, mode=mode)
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return type(exc).__name__, str(exc)
    manager.close()
    return "ok", None


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("PARITY_OV_KEY", KEY)
    monkeypatch.delenv("PARITY_OV_UNSET", raising=False)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_construction_outcome_matches_the_builtin(name, tmp_path):
    builtin = outcome(BuiltinOpenViking, CONFIGS[name], storage=tmp_path / "builtin")
    memgate = outcome(MemgateOpenViking, CONFIGS[name], storage=tmp_path / "memgate")
    assert memgate == builtin


def test_tool_mode_is_refused_the_same_way(tmp_path):
    assert outcome(MemgateOpenViking, GOOD, mode="tool", storage=tmp_path) == outcome(
        BuiltinOpenViking, GOOD, mode="tool", storage=tmp_path
    )


AGENTS = [None, "Research", "research", "deerflow", "df-agent-1", "Data Analyst", "研究员", "a" * 80, "", "  ", "default"]


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("default_peer", ["deerflow", "research"])
def test_peer_ids_and_refusals_match(agent, default_peer):
    try:
        expected = builtin_session._canonical_peer_id(agent, default_peer)
    except ValueError as exc:
        with pytest.raises(_native.NativeError) as refused:
            _native.openviking_peer_id(agent, default_peer)
        code, _message, rule = refused.value.args
        assert (code, rule) == ("invalid_input", str(exc)), "the OpenViking manager raises it as ValueError(rule)"
        return
    assert _native.openviking_peer_id(agent, default_peer) == expected


@pytest.mark.parametrize("agent", ["", "  ", "default", "DEFAULT "])
def test_a_bad_agent_scope_is_refused_the_same_way_by_both_managers(agent, tmp_path):
    results = []
    for cls, sub in ((BuiltinOpenViking, "builtin"), (MemgateOpenViking, "memgate")):
        manager = cls.from_config(dict(GOOD, storage_path=str(tmp_path / sub)))
        try:
            manager.get_context("alice", agent_name=agent)
            results.append(("ok", None))
        except Exception as exc:  # noqa: BLE001
            results.append((type(exc).__name__, str(exc)))
        finally:
            manager.close()
    assert results[1] == results[0]


@pytest.mark.parametrize("owner,peer,thread", [
    ("alice", "deerflow", "t-1"),
    ("alice", "research", "t-1"),
    ("bob", "deerflow", "t-1"),
    ("alice", "deerflow", "3f2c1d9e-0000-4000-8000-aaaaaaaaaaaa"),
    ("user-7f3a", "df-agent-0123456789abcdef0123456789abcdef", "線程"),
])
def test_session_ids_match(owner, peer, thread):
    assert _native.openviking_session_id(owner, peer, thread) == builtin_session._session_id(owner, peer, thread)


MESSAGES = [
    HumanMessage("I prefer dark roast coffee.", id="h1"),
    HumanMessage("Ünïcödé ✓ 你好", id="h2", additional_kwargs={"hide_from_ui": True}),
    AIMessage("", id="a1", tool_calls=[{"name": "web_search", "args": {"q": "coffee"}, "id": "call-1"}]),
    AIMessage("Done.", id="a2", additional_kwargs={"tool_calls": [{"id": "c", "type": "function"}]}),
    ToolMessage("results", id="t1", tool_call_id="call-1", name="web_search", status="success"),
    ToolMessage("boom", id="t2", tool_call_id="call-2", status="error"),
    SystemMessage("<system-reminder>x</system-reminder>", id="s1"),
    HumanMessage([{"type": "text", "text": "a list content"}], id="h3"),
    HumanMessage("no id"),
]


@pytest.mark.parametrize("index", range(len(MESSAGES)))
def test_message_signatures_match(index):
    message = MESSAGES[index]
    assert _native.message_signature(message) == builtin_session._message_signature(message)


def test_sequence_digests_match():
    signatures = [builtin_session._message_signature(m) for m in MESSAGES]
    for n in (0, 1, len(signatures)):
        assert _native.sequence_digest(signatures[:n]) == builtin_session._sequence_digest(signatures[:n])


@pytest.mark.parametrize("user", ["bob", None, "", "default"])
def test_a_caller_who_is_not_the_owner_is_refused_the_same_way(user, tmp_path):
    """Neither manager touches the network for a refused caller."""
    results = []
    for cls, sub in ((BuiltinOpenViking, "builtin"), (MemgateOpenViking, "memgate")):
        manager = cls.from_config(dict(GOOD, storage_path=str(tmp_path / sub)))
        try:
            manager.get_context(user, agent_name=None)
            results.append(("ok", None))
        except Exception as exc:  # noqa: BLE001
            results.append((type(exc).__name__, str(exc)))
        finally:
            manager.close()
    assert results[1] == results[0]


@pytest.mark.parametrize("index", range(len(MESSAGES)))
def test_converted_message_signatures_match_too(index):
    """The signature a capture computes for a message it converts (the ones
    it sends) is DeerFlow's too, as is the one signed in place above."""
    message = MESSAGES[index]
    assert _native.converted_message_signature(message) == builtin_session._message_signature(message)


def _deerflow_cursor(storage) -> dict:
    """The DeerFlow keys of the one cursor file under a manager's storage."""
    (path,) = (storage / "openviking" / "sessions").glob("*.json")
    state = json.loads(path.read_text())
    return {k: state.get(k) for k in ("schema_version", "submitted_signatures", "commit_pending",
                                      "submitted_prefix_count", "submitted_prefix_digest")}


def test_captures_read_against_the_cursor_leave_deerflows_cursor(tmp_path, monkeypatch):
    """memgate reads a transcript against its cursor: the head the cursor
    holds is recognised by the fingerprint the cursor recorded for it (no
    signature computed), else signed in place (no message converted); only
    the rest is converted. Whatever the transcript does next (unchanged,
    grown, a hidden message inside the head, an edit inside the head,
    compaction below the prefix) the cursor's DeerFlow keys stay those
    DeerFlow's own manager writes for the same captures (its recorder
    replaced by an in-process one), and memgate's cursor records the
    fingerprint of its new prefix."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from capture_cost import FakeRecorder, FakeServer

    monkeypatch.setenv("PARITY_OV_KEY", KEY)
    server = FakeServer()
    managers = []
    try:
        config = dict(GOOD, base_url=server.url)
        builtin = BuiltinOpenViking.from_config(dict(config, storage_path=str(tmp_path / "builtin")))
        builtin._recorder.close()
        builtin._recorder = FakeRecorder()
        ours = MemgateOpenViking.from_config(dict(config, storage_path=str(tmp_path / "memgate")))
        managers = [builtin, ours]
        base = [HumanMessage(f"question {i}", id=f"h{i}") if i % 2 == 0 else
                AIMessage(f"answer {i}", id=f"a{i}", tool_calls=[{"name": "f", "args": {"i": i}, "id": f"c{i}"}])
                for i in range(8)]
        hidden = HumanMessage("<memory>", id="x__memory", additional_kwargs={"hide_from_ui": True})
        edited = base[:2] + [HumanMessage("question 2, edited", id="h2")] + base[3:]
        steps = {
            "first": base,
            "unchanged": base,
            "grown": base + [HumanMessage("more", id="h8")],
            "hidden inside the head": base[:3] + [hidden] + base[3:] + [HumanMessage("more", id="h8"), AIMessage("ok", id="a9")],
            "edit inside the head": edited + [HumanMessage("more", id="h8"), AIMessage("ok", id="a9")],
            "compacted": edited[6:] + [HumanMessage("after", id="h10")],
            "grown after compaction": edited[6:] + [HumanMessage("after", id="h10"), AIMessage("fine", id="a11")],
            "a tuple": tuple(edited[6:] + [HumanMessage("after", id="h10"), AIMessage("fine", id="a11")]),
        }
        for step, transcript in steps.items():
            for manager in managers:
                manager.add("t-1", transcript if isinstance(transcript, tuple) else list(transcript), user_id="alice")
            assert _deerflow_cursor(tmp_path / "memgate") == _deerflow_cursor(tmp_path / "builtin"), step
            (path,) = (tmp_path / "memgate" / "openviking" / "sessions").glob("*.json")
            assert json.loads(path.read_text())["memgate_prefix_head"] is not None, step
    finally:
        for manager in managers:
            manager.close()
        server.stop()
