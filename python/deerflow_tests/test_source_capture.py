"""Opt-in Source capture from DeerFlow's own code against the real
PowerContext 1.4.1 (its ``GET /v1/scopes/{id}/sources`` shows what arrived;
0.0.2 has no such read route, so there a conflicting write shows it). With ``source_capture.enabled: true`` in
DeerFlow's ``config.yaml``, a Gateway run (the memory middleware), ``/compact``
(the summarization hook, ``add_nowait`` on the event loop) and the hook
called from a plain thread reach memgate's Source capture: one Source per
host message, with the documented id, filtered and redacted; replay after
a restart adds nothing. Without the opt-in nothing arrives (the RFC's
dogfood row "Passive capture excluded").

Each test creates its own Scope, so the server's list is exactly what that
test's DeerFlow sent."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest
from conftest import real_server
from deerflow_runs import manager, seed_memory
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from test_gateway import SUMMARIZATION, gateway_run, new_thread, owner_headers

from recording_model import REPLY

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

INSTALLATION = "deerflow-test-1"


def _pc14(method: str, path: str, body: dict | None = None) -> dict:
    env = real_server("MEMGATE_TEST_PC14_URL", "MEMGATE_TEST_PC14_TOKEN")
    request = urllib.request.Request(
        f"{env['MEMGATE_TEST_PC14_URL']}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {env['MEMGATE_TEST_PC14_TOKEN']}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def arrived(scope: str, prefix: str = "memgate-msg:") -> dict[str, dict]:
    """The Sources the server holds in ``scope`` whose id starts with
    ``prefix``, by Source id. (1.4.1 lists a ``remember`` there too, as a
    ``src_…`` Source whose content is the atomic-memory record.)"""
    found: dict[str, dict] = {}
    cursor = None
    while True:
        page = _pc14("GET", f"/v1/scopes/{scope}/sources?limit=100" + (f"&cursor={cursor}" if cursor else ""))
        found.update({item["source_id"]: item for item in page["items"] if item["source_id"].startswith(prefix)})
        cursor = page.get("next_cursor")
        if not cursor:
            return found


def documented_source_id(user: str, thread: str, message_id: str) -> str:
    """The README's Source id, computed here from its definition:
    ``memgate-msg:`` + SHA-256 over the installation, user, thread and host
    message id (each length-prefixed after a NUL, behind a version tag)."""
    text = "memgate-source-v1"
    for part in (INSTALLATION, user, thread, message_id):
        text += f"\0{len(part.encode())}:{part}"
    return "memgate-msg:" + hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def pc14_scope(host):
    """A fresh 1.4.1 Scope bound to this host's owner."""
    created = _pc14("POST", "/v1/scopes", {"title": "memgate DeerFlow source capture", "summary": "test",
                                           "idempotency_key": f"memgate-df-{uuid.uuid4().hex}"})
    host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_SCOPE_ID", created["scope_id"])
    return created["scope_id"]


def capture_config(host, *, enabled: bool) -> None:
    opt_in = f"\n    source_capture:\n      enabled: true\n      installation_id: {INSTALLATION}" if enabled else " {}"
    host.memory = "manager_class: memgate.deerflow:PowerContextMemoryManager\n  backend_config:" + opt_in
    host.write(extra=SUMMARIZATION)


@pytest.fixture
def gateway(host, monkeypatch):
    monkeypatch.setenv("DEER_FLOW_AUTH_DISABLED", "1")
    from app.gateway.app import app

    return app


class _Runtime:
    def __init__(self, user_id: str):
        self.context = {"user_id": user_id}


def flush_head(host, thread: str, messages, *, on_loop: bool) -> None:
    """DeerFlow's summarization hook handing ``messages`` to memory, from a
    plain thread or on an event loop (where ``add_nowait`` returns at once)."""
    import asyncio

    from deerflow.agents.memory.summarization_hook import memory_flush_hook
    from deerflow.agents.middlewares.summarization_middleware import SummarizationEvent

    event = SummarizationEvent(messages_to_summarize=tuple(messages), preserved_messages=(), thread_id=thread,
                               agent_name=None, runtime=_Runtime(host.owner))
    if on_loop:
        async def run():
            memory_flush_hook(event)

        asyncio.run(run())
    else:
        memory_flush_hook(event)
    assert manager().wait_for_background(30.0)


def delivered(scope: str, count: int) -> dict[str, dict]:
    """The scope's Sources once ``count`` have arrived (delivery is
    asynchronous after the durable queue acknowledged the capture)."""
    deadline = time.monotonic() + 30.0
    while True:
        found = arrived(scope)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_a_gateway_run_and_compact_send_each_message_once_as_a_source(host, pc14_scope, gateway, caplog):
    """Opt-in on: the run's user message and the model's reply arrive as two
    Sources with the documented ids of DeerFlow's message ids; the injected
    ``<memory>`` block does not; ``/compact`` (the hook on the event loop)
    sends nothing again; the start-up log says Source capture is on."""
    from fastapi.testclient import TestClient

    token = f"sc{uuid.uuid4().hex[:8]}"
    host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", f"order service {token} conventions money")
    capture_config(host, enabled=True)
    seeded = seed_memory(host, token)
    headers = owner_headers(host)
    caplog.set_level(logging.INFO, logger="memgate.deerflow")
    with TestClient(gateway) as client:
        assert "source capture on" in caplog.text
        thread = new_thread(client, headers)
        said = f"The {token} cluster is patched on Fridays."
        state, requests = gateway_run(client, said, thread, headers)
        assert seeded in json.dumps(requests[0]["messages"]), "the memory was injected into the run"
        assert manager().wait_for_background(30.0)
        sources = delivered(pc14_scope, 2)
        by_text = {s["content"]: s for s in sources.values()}
        assert set(by_text) == {f"[user]\n{said}", f"[assistant]\n{REPLY}"}, list(by_text)
        kept = [m for m in state["messages"] if m["type"] in ("human", "ai") and m["content"] in (said, REPLY)]
        assert {documented_source_id(host.owner, thread, m["id"]) for m in kept} == set(sources)
        assert not any(seeded in s["content"] or "<memory>" in s["content"] for s in sources.values())

        gateway_run(client, "And the staging cluster?", thread, headers)
        assert manager().wait_for_background(30.0)
        before = delivered(pc14_scope, 4)
        assert len(before) == 4
        compacted = client.post(
            f"/api/threads/{thread}/compact",
            json={"force": True, "keep": {"type": "messages", "value": 1}, "model_name": "recording"},
            headers=headers,
        )
        assert compacted.status_code == 200 and compacted.json()["compacted"] is True, compacted.text
        assert manager().wait_for_background(30.0)
        after = arrived(pc14_scope)
        assert {k: v["position"] for k, v in after.items()} == {k: v["position"] for k, v in before.items()}


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_filtered_messages_never_arrive_and_secrets_are_redacted(host, pc14_scope):
    """Through the summarization hook: system text, a hidden message, an
    injected memory block, a tool result, an AI message that only calls a
    tool and a message without a host id are never sent; reasoning and
    tool-call arguments are not part of what is; a key is redacted."""
    capture_config(host, enabled=True)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8t"
    messages = [
        SystemMessage("SYSTEM-TEXT never leaves.", id="s1"),
        HumanMessage("HIDDEN-NOTE from the UI.", id="h0", additional_kwargs={"hide_from_ui": True}),
        HumanMessage("<memory>INJECTED-MEMORY</memory>", id="x__memory",
                     additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True}),
        HumanMessage(f"Deploy with key {key} to the blue cluster.", id="h1"),
        AIMessage("", id="a0", tool_calls=[{"name": "web_search", "args": {"q": "TOOL-ARGS"}, "id": "c1"}]),
        ToolMessage("TOOL-RESULT rows", id="t1", tool_call_id="c1", name="web_search"),
        AIMessage([{"type": "reasoning", "reasoning": "REASONING-TRACE"}, {"type": "text", "text": "Deployed to blue."}],
                  id="a1"),
        HumanMessage("NO-HOST-ID message."),
    ]
    flush_head(host, thread, messages, on_loop=False)
    sources = delivered(pc14_scope, 2)
    assert set(sources) == {documented_source_id(host.owner, thread, i) for i in ("h1", "a1")}
    text = json.dumps(sources)
    for never in ("SYSTEM-TEXT", "HIDDEN-NOTE", "INJECTED-MEMORY", "TOOL-ARGS", "TOOL-RESULT", "REASONING-TRACE",
                  "NO-HOST-ID", key):
        assert never not in text, never
    assert sources[documented_source_id(host.owner, thread, "h1")]["content"] == (
        "[user]\nDeploy with key [redacted:api_key] to the blue cluster."
    )
    assert sources[documented_source_id(host.owner, thread, "a1")]["content"] == "[assistant]\nDeployed to blue."


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_replay_after_a_restart_is_idempotent(host, pc14_scope):
    """The same head flushed again by a new manager (a Gateway restart on
    the same storage) adds nothing; with the local queue's ledger gone the
    writes really are sent again, and the server answers them with the same
    Sources at the same positions."""
    capture_config(host, enabled=True)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    head = [HumanMessage("The blue cluster is patched on Fridays.", id="h1"), AIMessage("Noted.", id="a1")]
    flush_head(host, thread, head, on_loop=True)
    first = delivered(pc14_scope, 2)
    assert len(first) == 2

    manager().shutdown_flush(5.0)
    host.write()  # a new process: a new manager over the same storage
    flush_head(host, thread, head, on_loop=False)
    assert delivered_by_this_manager() == 0, "the durable ledger knew both: nothing was sent again"
    assert arrived(pc14_scope) == first

    manager().shutdown_flush(5.0)
    (host.home / "powercontext" / "sources.sqlite3").unlink()
    host.write()
    flush_head(host, thread, head, on_loop=True)
    deadline = time.monotonic() + 30.0
    while delivered_by_this_manager() < 2:
        assert time.monotonic() < deadline, manager().doctor()
        time.sleep(0.2)
    assert arrived(pc14_scope) == first, "the server took the replay as the same Sources at the same positions"


def delivered_by_this_manager() -> int:
    """Deliveries the manager's Source queue made since it opened (its
    ``capture`` doctor line)."""
    line = next(detail for check, _, detail in manager().doctor() if check == "capture")
    return int(re.search(r"(\d+) delivered", line).group(1))


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_passive_capture_excluded_without_the_opt_in(host, pc14_scope, gateway, caplog):
    """The RFC's dogfood row: without ``source_capture.enabled`` neither
    normal turns nor compaction submit Sources, and start-up says so."""
    from fastapi.testclient import TestClient

    capture_config(host, enabled=False)
    headers = owner_headers(host)
    caplog.set_level(logging.INFO, logger="memgate.deerflow")
    with TestClient(gateway) as client:
        assert "source capture off" in caplog.text
        assert [line for line in manager().doctor() if line[0] == "capture"] == [
            ("capture", True, "source capture off: passive capture is a no-op (nothing is sent)")
        ]
        thread = new_thread(client, headers)
        gateway_run(client, "The blue cluster is patched on Fridays.", thread, headers)
        gateway_run(client, "And the staging cluster?", thread, headers)
        compacted = client.post(
            f"/api/threads/{thread}/compact",
            json={"force": True, "keep": {"type": "messages", "value": 1}, "model_name": "recording"},
            headers=headers,
        )
        assert compacted.status_code == 200 and compacted.json()["compacted"] is True, compacted.text
        flush_head(host, thread, [HumanMessage("Also this.", id="h9")], on_loop=False)
        assert manager().wait_for_background(30.0)
    assert arrived(pc14_scope, prefix="") == {}


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_a_refused_caller_sends_nothing_and_its_runs_go_on(host, pc14_scope, gateway, caplog):
    """Opt-in on, but an auth-disabled Gateway calls everyone ``default``,
    never the owner: runs and ``/compact`` go on, nothing arrives, one
    warning says why and no ERROR is logged."""
    from fastapi.testclient import TestClient

    capture_config(host, enabled=True)
    caplog.set_level(logging.WARNING)
    with TestClient(gateway) as client:
        thread = new_thread(client, {})
        for text in ("The blue cluster is patched on Fridays.", "And the staging cluster?"):
            state, _ = gateway_run(client, text, thread, {})
            assert state["messages"][-1]["content"] == REPLY
        compacted = client.post(
            f"/api/threads/{thread}/compact",
            json={"force": True, "keep": {"type": "messages", "value": 1}, "model_name": "recording"},
        )
        assert compacted.status_code == 200 and compacted.json()["compacted"] is True, compacted.text
        assert manager().wait_for_background(30.0)
    assert arrived(pc14_scope, prefix="") == {}
    warnings = [r for r in caplog.records if "calls every user `default`" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def _pc002_probe(scope: str, source_id: str) -> int:
    """Whether 0.0.2 (no read route for Sources) holds ``source_id`` in
    ``scope``: a write of different content under that id answers 409
    ``source_conflict`` when it does, 202 (and stores the probe) when not."""
    env = real_server("MEMGATE_TEST_PC002_URL", "MEMGATE_TEST_PC002_TOKEN")
    request = urllib.request.Request(
        f"{env['MEMGATE_TEST_PC002_URL']}/v1/sources/content",
        data=json.dumps({"scope_id": scope, "source_id": source_id, "content": "[user]\nprobe"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {env['MEMGATE_TEST_PC002_TOKEN']}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        assert err.code != 409 or json.loads(err.read())["error"]["code"] == "source_conflict"
        return err.code


@pytest.mark.parametrize("host", ["pc002"], indirect=True)
def test_on_0_0_2_the_hooks_messages_arrive_and_filtered_ones_do_not(host):
    """PowerContext 0.0.2 has the Source route but no way to list Sources:
    after DeerFlow's summarization hook (on the event loop), the documented
    ids of the user and assistant messages are held (a different body under
    them is a conflict) and the hidden message's and the tool result's are
    not."""
    capture_config(host, enabled=True)
    scope = os.environ["POWERCONTEXT_DEERFLOW_SCOPE_ID"]
    thread = f"t-{uuid.uuid4().hex[:8]}"
    head = [
        HumanMessage("The blue cluster is patched on Fridays.", id="h1"),
        HumanMessage("HIDDEN-NOTE", id="h0", additional_kwargs={"hide_from_ui": True}),
        AIMessage("", id="a0", tool_calls=[{"name": "web_search", "args": {"q": "x"}, "id": "c1"}]),
        ToolMessage("TOOL-RESULT rows", id="t1", tool_call_id="c1", name="web_search"),
        AIMessage("Noted.", id="a1"),
    ]
    flush_head(host, thread, head, on_loop=True)
    deadline = time.monotonic() + 30.0
    while delivered_by_this_manager() < 2:
        assert time.monotonic() < deadline, manager().doctor()
        time.sleep(0.2)
    for message_id, held in (("h1", True), ("a1", True), ("h0", False), ("t1", False)):
        assert _pc002_probe(scope, documented_source_id(host.owner, thread, message_id)) == (409 if held else 202), message_id


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_a_sync_lead_agent_run_captures_through_add(host, pc14_scope):
    """``make_lead_agent(...).invoke``: DeerFlow's memory middleware calls the
    sync ``add`` after the run; its messages arrive as Sources."""
    from deerflow_runs import run_lead_agent

    capture_config(host, enabled=True)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    state, _ = run_lead_agent(host, "The green cluster is patched on Mondays.", thread=thread)
    assert manager().wait_for_background(30.0)
    sources = delivered(pc14_scope, 2)
    kept = [m for m in state["messages"] if m.type in ("human", "ai") and not m.additional_kwargs.get("hide_from_ui")]
    assert set(sources) == {documented_source_id(host.owner, thread, m.id) for m in kept}, (list(sources), kept)
    assert sorted(s["content"] for s in sources.values()) == sorted(
        ["[user]\nThe green cluster is patched on Mondays.", f"[assistant]\n{REPLY}"]
    )


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_a_changed_message_is_a_counted_conflict_never_resent(host, pc14_scope):
    """A message whose text changed after it was sent (same DeerFlow id) is
    not sent again: the server keeps the first text, the queue counts one
    conflict."""
    capture_config(host, enabled=True)
    thread = f"t-{uuid.uuid4().hex[:8]}"
    flush_head(host, thread, [HumanMessage("Deploys go out on Tuesdays.", id="h1")], on_loop=False)
    first = delivered(pc14_scope, 1)
    flush_head(host, thread, [HumanMessage("Deploys go out on Thursdays.", id="h1")], on_loop=False)
    line = next(detail for check, _, detail in manager().doctor() if check == "capture")
    assert "1 conflicts" in line, line
    assert arrived(pc14_scope) == first
    assert next(iter(first.values()))["content"] == "[user]\nDeploys go out on Tuesdays."


@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_captures_queued_while_the_server_is_unreachable_arrive_after_a_restart(host, pc14_scope):
    """The durable queue: with PowerContext unreachable the hook's capture is
    acknowledged (queued, nothing raised); a Gateway restart that reaches
    the server delivers it, once."""
    capture_config(host, enabled=True)
    reachable = os.environ["POWERCONTEXT_DEERFLOW_BASE_URL"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_BASE_URL", f"http://127.0.0.1:{closed_port}")
    host.write()
    thread = f"t-{uuid.uuid4().hex[:8]}"
    head = [HumanMessage("The red cluster is patched on Sundays.", id="h1"), AIMessage("Noted.", id="a1")]
    flush_head(host, thread, head, on_loop=False)
    line = next(detail for check, _, detail in manager().doctor() if check == "capture")
    assert "2 queued" in line, line
    manager().shutdown_flush(5.0)
    assert arrived(pc14_scope) == {}

    host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_BASE_URL", reachable)
    host.write()
    manager().warm()  # the Gateway's start-up; delivery resumes from the queue
    sources = delivered(pc14_scope, 2)
    assert set(sources) == {documented_source_id(host.owner, thread, i) for i in ("h1", "a1")}


@pytest.mark.parametrize("enabled", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("host", ["pc14"], indirect=True)
def test_python_m_memgate_deerflow_doctor_says_which(host, enabled):
    """``python -m memgate.deerflow doctor`` with the Gateway's interpreter
    and DeerFlow's ``config.yaml``: the manager DeerFlow's factory builds,
    its start-up check, and the ``capture`` line saying whether Source
    capture is on; no token printed."""
    import subprocess
    import sys

    capture_config(host, enabled=enabled)
    ran = subprocess.run([sys.executable, "-m", "memgate.deerflow", "doctor"], env=dict(os.environ),
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "manager_class: memgate.deerflow:PowerContextMemoryManager (mode middleware, memory on)", lines
    assert "warm: ready" in lines
    capture = [line for line in lines if line.startswith("capture: ")]
    assert len(capture) == 1 and capture[0].startswith(f"capture: source capture {'on' if enabled else 'off'}"), lines
    assert os.environ["POWERCONTEXT_DEERFLOW_TOKEN"] not in ran.stdout + ran.stderr


@pytest.mark.parametrize("host", ["pc002"], indirect=True)
def test_on_0_0_2_a_gateway_run_and_compact_send_each_message_once(host, gateway):
    """The Gateway against PowerContext 0.0.2: two runs deliver four
    Sources under the documented ids of DeerFlow's messages (each held: a
    different body under it conflicts); ``/compact`` delivers nothing more."""
    from fastapi.testclient import TestClient

    capture_config(host, enabled=True)
    scope = os.environ["POWERCONTEXT_DEERFLOW_SCOPE_ID"]
    headers = owner_headers(host)

    def settled(count: int) -> None:
        deadline = time.monotonic() + 30.0
        while delivered_by_this_manager() < count:
            assert time.monotonic() < deadline, manager().doctor()
            time.sleep(0.2)

    with TestClient(gateway) as client:
        thread = new_thread(client, headers)
        states = [gateway_run(client, text, thread, headers)[0]
                  for text in ("The blue cluster is patched on Fridays.", "And the staging cluster?")]
        assert manager().wait_for_background(30.0)
        settled(4)
        compacted = client.post(
            f"/api/threads/{thread}/compact",
            json={"force": True, "keep": {"type": "messages", "value": 1}, "model_name": "recording"},
            headers=headers,
        )
        assert compacted.status_code == 200 and compacted.json()["compacted"] is True, compacted.text
        assert manager().wait_for_background(30.0)
        time.sleep(1.0)
        assert delivered_by_this_manager() == 4, manager().doctor()
    ids = {m["id"] for m in states[-1]["messages"]
           if m["type"] in ("human", "ai") and not m.get("additional_kwargs", {}).get("hide_from_ui")}
    assert len(ids) == 4, states[-1]["messages"]
    for message_id in ids:
        assert _pc002_probe(scope, documented_source_id(host.owner, thread, message_id)) == 409, message_id
