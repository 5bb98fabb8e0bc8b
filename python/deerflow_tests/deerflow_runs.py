"""Driving DeerFlow's own code in these tests: lead-agent turns, what the
recording model received, a fresh OpenViking user, seeding a memory the way
each backend learns one, and reading an OpenViking session back from the
server (to see what a capture sent)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid

from conftest import real_server
from langchain_core.messages import HumanMessage

from recording_model import RecordingChatModel


def manager():
    """DeerFlow's memory-manager singleton (built from ``manager_class``)."""
    from deerflow.agents.memory.manager import get_memory_manager

    return get_memory_manager()


def run_lead_agent(host, text: str, *, thread: str | None = None, asynchronous: bool = False) -> tuple[dict, dict]:
    """One turn of DeerFlow's lead agent on a new thread; the final state and
    the first request the model received."""
    from deerflow.agents.lead_agent.agent import make_lead_agent

    thread = thread or f"thread-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread, "model_name": "recording"}}
    agent = make_lead_agent(config)
    inputs = {"messages": [HumanMessage(text)]}
    context = {"thread_id": thread, "user_id": host.owner}
    before = len(RecordingChatModel.requests)
    if asynchronous:
        state = asyncio.run(agent.ainvoke(inputs, config=config, context=context))
    else:
        state = agent.invoke(inputs, config=config, context=context)
    requests = RecordingChatModel.requests[before:]
    assert requests, "the model was never called"
    return state, requests[0]


def memory_message(request: dict) -> dict | None:
    """The injected memory message of one model request (``<id>__memory``)."""
    found = [m for m in request["messages"] if (m["id"] or "").endswith("__memory")]
    assert len(found) <= 1, found
    return found[0] if found else None


def assert_injected(request: dict, expected: str) -> dict:
    """The request carries ``expected`` (case-insensitive) in a hidden
    user-role ``<memory>`` message placed before the user's message: DeerFlow's
    id swap (``<id>__memory`` / ``<id>__user``)."""
    memory = memory_message(request)
    assert memory is not None, [m["id"] for m in request["messages"]]
    assert memory["type"] == "human" and memory["additional_kwargs"].get("hide_from_ui") is True
    assert memory["content"].startswith("<memory>") and memory["content"].rstrip().endswith("</memory>")
    assert expected.lower() in memory["content"].lower(), memory["content"]
    ids = [m["id"] or "" for m in request["messages"]]
    user = [i for i in ids if i.endswith("__user")]
    assert user and ids.index(memory["id"]) < ids.index(user[0]), ids
    assert user[0].removesuffix("__user") == memory["id"].removesuffix("__memory")
    return memory


def _openviking_call(path: str, key: str, body: dict | None = None) -> dict:
    env = real_server("MEMGATE_TEST_OPENVIKING_URL")
    request = urllib.request.Request(
        f"{env['MEMGATE_TEST_OPENVIKING_URL']}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json", "X-API-Key": key},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def openviking_user(host, user: str = "alice") -> None:
    """A fresh OpenViking account whose USER key is bound to the host user
    ``user``, so recall is not crowded by other tests' memories."""
    root = real_server("MEMGATE_TEST_OPENVIKING_ROOT_KEY")["MEMGATE_TEST_OPENVIKING_ROOT_KEY"]
    account = f"mgdf{uuid.uuid4().hex[:10]}"
    _openviking_call("/api/v1/admin/accounts", root, {"account_id": account, "admin_user_id": "admin"})
    key = _openviking_call(f"/api/v1/admin/accounts/{account}/users", root, {"user_id": user, "role": "user"})["result"][
        "user_key"
    ]
    host.monkeypatch.setenv("OPENVIKING_API_KEY", key)
    host.openviking_key = key
    host.memory = host.memory.replace(f"owner_user_id: {host.owner}", f"owner_user_id: {user}")
    host.owner = user
    host.write()


def openviking_session(host, thread: str) -> dict | None:
    """The server's record of the session memgate writes a thread of the
    default agent to (``None`` when there is none): its
    ``total_message_count`` and ``commit_count`` show what capture sent."""
    from memgate import _native

    session = _native.openviking_session_id(host.owner, host.openviking_peer, thread)
    try:
        return _openviking_call(f"/api/v1/sessions/{session}", host.openviking_key)["result"]
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def wait_until_recalled(host, token: str, seconds: float = 180.0) -> None:
    """Polls recall until ``token`` is in it (OpenViking extracts memories
    from a committed session in the background)."""
    deadline = time.monotonic() + seconds
    while token not in manager().get_context(host.owner).lower():
        assert time.monotonic() < deadline, f"{token} never became recallable"
        time.sleep(1.0)


def seed_memory(host, token: str) -> str:
    """Stores a memory for the owner the way each backend learns one; the
    text recall must bring back."""
    if host.backend == "local":
        text = f"The order service {token} stores money amounts as integer cents."
        manager().create_fact(text, "convention", user_id=host.owner)
        return text
    if host.backend == "openviking":
        # Learned from a finished run (capture), then extracted by the server.
        run_lead_agent(host, f"I prefer {token} tea and I live in Lisbon.")
        wait_until_recalled(host, token)
        return token
    text = f"Order service {token}: money amounts are integer cents."
    outcome = manager()._native_backend.remember("fact", text, host.owner, None)
    assert outcome["outcome"] == "stored", outcome
    return text
