"""DeerFlow's Gateway app (``app.gateway.app``, unmodified) under a test
client: a thread run (``POST /api/threads/{id}/runs/wait``) whose model
request carries the memory and whose turn is captured, ``/compact`` (whose
summarization hook hands the removed head to memory on the event loop),
and the ``/api/memory`` routes over two lifespans in one process. Against
the local store and the real OpenViking and both PowerContext generations;
what a backend cannot do is pinned as the Gateway answers it.

Requests carry DeerFlow's own internal-caller headers
(``create_internal_auth_headers(owner_user_id=…)``, what its IM channel
workers send) so the run belongs to the bound owner; without them an
auth-disabled Gateway calls everyone ``default``, which PowerContext
refuses (pinned below)."""

from __future__ import annotations

import logging
import uuid

import pytest
from conftest import BACKENDS
from deerflow_runs import assert_injected, manager, memory_message, openviking_session, openviking_user, seed_memory

from recording_model import REPLY, RecordingChatModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Summarization on (never triggered by itself: no trigger), so ``/compact`` works.
SUMMARIZATION = "summarization:\n  enabled: true\n"
MANAGER_CLASS = {
    "local": "LocalMemoryManager",
    "openviking": "OpenVikingMemoryManager",
    "pc002": "PowerContextMemoryManager",
    "pc14": "PowerContextMemoryManager",
}


@pytest.fixture
def gateway(host, monkeypatch):
    """The Gateway app with DeerFlow's auth disabled (no user database); the
    host's config has summarization on. OpenViking gets a fresh account."""
    monkeypatch.setenv("DEER_FLOW_AUTH_DISABLED", "1")
    if host.backend == "openviking":
        openviking_user(host)
    host.write(extra=SUMMARIZATION)
    from app.gateway.app import app

    return app


def owner_headers(host) -> dict[str, str]:
    from app.gateway.internal_auth import create_internal_auth_headers

    return create_internal_auth_headers(owner_user_id=host.owner)


def gateway_run(client, text: str, thread: str, headers: dict[str, str]) -> tuple[dict, list[dict]]:
    """One run through the Gateway, waited for; the final state and the
    requests the model received during it."""
    before = len(RecordingChatModel.requests)
    answered = client.post(
        f"/api/threads/{thread}/runs/wait",
        json={
            "assistant_id": "lead_agent",
            "input": {"messages": [{"role": "user", "content": text}]},
            "context": {"model_name": "recording"},
        },
        headers=headers,
    )
    assert answered.status_code == 200, answered.text
    state = answered.json()
    assert "messages" in state, state
    return state, RecordingChatModel.requests[before:]


def new_thread(client, headers) -> str:
    created = client.post("/api/threads", json={}, headers=headers)
    assert created.status_code == 200, created.text
    return created.json()["thread_id"]


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_a_gateway_run_recalls_and_captures_and_compact_flushes_the_head(host, gateway):
    """Run: the model's first request carries the owner's memory; the
    finished turn is captured (local: recalled; OpenViking: the thread's
    session on the server holds it; PowerContext: passive capture is off).
    ``/compact``: 200 ``compacted``, and the head it removes reaches memory
    through DeerFlow's hook (local: recalled again after the Gateway's
    ``DELETE /api/memory`` erased it; OpenViking: nothing sent twice;
    PowerContext: nothing sent)."""
    from fastapi.testclient import TestClient

    token = f"gw{uuid.uuid4().hex[:8]}"
    if host.backend in ("pc002", "pc14"):
        # This DeerFlow passes no query: recall needs the operator's profile query.
        host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", f"order service {token} conventions money")
        host.write()
    seeded = seed_memory(host, token)
    headers = owner_headers(host)
    said = f"gwturn{uuid.uuid4().hex[:8]}"
    with TestClient(gateway) as client:
        thread = new_thread(client, headers)
        state, requests = gateway_run(client, f"The {said} cluster is patched on Fridays.", thread, headers)
        assert state["messages"][-1]["content"] == REPLY, state["messages"][-1]
        assert requests, "the model was never called"
        assert_injected(requests[0], seeded)
        assert manager().wait_for_background(30.0)

        turn_query = f"when is the {said} cluster patched"
        if host.backend == "local":
            assert said in manager().get_context(host.owner, query=turn_query)
        elif host.backend == "openviking":
            session = openviking_session(host, thread)
            assert session is not None, "the finished run was not sent to OpenViking"
            sent = session["total_message_count"]
            assert sent >= 2, session
        else:
            assert said not in manager().get_context(host.owner, query=turn_query)

        # A second turn, so the compaction has a head to remove and a tail to keep.
        gateway_run(client, "And the staging cluster?", thread, headers)
        assert manager().wait_for_background(30.0)
        if host.backend == "local":
            cleared = client.delete("/api/memory", headers=headers)
            assert cleared.status_code == 200 and cleared.json()["facts"] == [], cleared.text
            assert said not in manager().get_context(host.owner, query=turn_query)
        before_compaction = openviking_session(host, thread) if host.backend == "openviking" else None

        compacted = client.post(
            f"/api/threads/{thread}/compact",
            json={"force": True, "keep": {"type": "messages", "value": 1}, "model_name": "recording"},
            headers=headers,
        )
        assert compacted.status_code == 200, compacted.text
        result = compacted.json()
        assert result["compacted"] is True and result["removed_message_count"] >= 2, result
        assert manager().wait_for_background(30.0), "the hook's background capture did not finish"

        if host.backend == "local":
            assert said in manager().get_context(host.owner, query=turn_query), "the compacted head was not captured"
        elif host.backend == "openviking":
            after = openviking_session(host, thread)
            # Every removed message was already sent by the runs' captures.
            assert after["total_message_count"] == before_compaction["total_message_count"], (before_compaction, after)
        else:
            assert said not in manager().get_context(host.owner, query=turn_query)


@pytest.mark.parametrize("host", ["pc002", "pc14"], indirect=True)
def test_an_auth_disabled_gateway_run_on_powercontext_warns_once(host, gateway, caplog):
    """Without an owner (auth disabled: every caller is ``default``)
    PowerContext refuses the caller: the run goes on without memory, one
    warning says why, the next run logs nothing more, and DeerFlow's
    ``_get_memory_context`` logs no ERROR."""
    from fastapi.testclient import TestClient

    host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", "conventions")
    host.write()
    caplog.set_level(logging.WARNING)
    with TestClient(gateway) as client:
        for turn in range(2):
            thread = new_thread(client, {})
            state, requests = gateway_run(client, f"Turn {turn}: hello.", thread, {})
            assert state["messages"][-1]["content"] == REPLY
            assert memory_message(requests[0]) is None
            warnings = [r for r in caplog.records if "calls every user `default`" in r.getMessage()]
            assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "memory" in r.getMessage().lower()]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_gateway_memory_routes_over_two_lifespans(host, gateway):
    """The Gateway app under a test client, twice in one process (the
    pattern that crashed the extension). Each start-up reopens the manager
    the last shutdown closed. Local: the routes answer as DeerMem's do
    (409 duplicate, 400 bad confidence) and what the first lifespan stored
    is still there. OpenViking and PowerContext keep no fact document: the
    Gateway answers 501 naming the operation and the manager class."""
    from fastapi.testclient import TestClient

    headers = owner_headers(host)
    for lifespan in range(2):
        with TestClient(gateway) as client:
            status, _reason = manager()._native_backend.warm()
            assert status == "ready", (lifespan, status, _reason)
            if host.backend != "local":
                for method, path, body, label in (
                    ("get", "/api/memory", None, "get memory"),
                    ("post", "/api/memory/facts", {"content": "Deploys need a ticket."}, "create fact"),
                    ("delete", "/api/memory", None, "clear memory"),
                ):
                    kwargs = {"headers": headers} | ({"json": body} if body else {})
                    answered = getattr(client, method)(path, **kwargs)
                    assert answered.status_code == 501, (path, answered.text)
                    assert answered.json()["detail"] == (
                        f"Operation '{label}' not supported by memory backend '{MANAGER_CLASS[host.backend]}'."
                    )
                continue
            content = f"Lifespan {lifespan}: deploys need a change ticket."
            created = client.post("/api/memory/facts", json={"content": content, "category": "process"}, headers=headers)
            assert created.status_code == 200, created.text
            assert content in [f["content"] for f in created.json()["facts"]]
            duplicate = client.post("/api/memory/facts", json={"content": content.upper()}, headers=headers)
            assert duplicate.status_code == 409, duplicate.text
            bad = client.post("/api/memory/facts", json={"content": "x", "confidence": 1.5}, headers=headers)
            assert bad.status_code in (400, 422), bad.text
            listed = client.get("/api/memory", headers=headers)
            assert listed.status_code == 200
            assert len(listed.json()["facts"]) == lifespan + 1, "what the first lifespan stored is still there"
