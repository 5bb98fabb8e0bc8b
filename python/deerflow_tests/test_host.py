"""memgate inside DeerFlow's own code (the snapshot, unmodified): the memory
factory from ``manager_class``, ``make_lead_agent`` runs whose outbound model
messages show the injected memory, the memory middleware's capture, the
summarization hook, tool mode, the Gateway's ``/api/memory`` routes over two
lifespans, the ``remember`` tool from a ``tools:`` entry and from
``install()`` through DeerFlow's extension loader. Each against the local
store and the real OpenViking and PowerContext servers the testkit starts."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.request
import uuid

import pytest
from conftest import BACKENDS, OWNER, real_server
from langchain_core.messages import AIMessage, HumanMessage

from recording_model import RecordingChatModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def manager():
    from deerflow.agents.memory.manager import get_memory_manager

    return get_memory_manager()


def run_lead_agent(host, text: str, *, thread: str | None = None, asynchronous: bool = False) -> tuple[dict, dict]:
    """One turn of DeerFlow's lead agent on a new thread; the final state and
    the last request the model received."""
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
    found = [m for m in request["messages"] if (m["id"] or "").endswith("__memory")]
    assert len(found) <= 1, found
    return found[0] if found else None


def openviking_user(host) -> None:
    """A fresh OpenViking account and USER key for this test, so recall is
    not crowded by other tests' memories."""
    env = real_server("MEMGATE_TEST_OPENVIKING_URL", "MEMGATE_TEST_OPENVIKING_ROOT_KEY")
    url, root = env["MEMGATE_TEST_OPENVIKING_URL"], env["MEMGATE_TEST_OPENVIKING_ROOT_KEY"]
    account = f"mgdf{uuid.uuid4().hex[:10]}"

    def call(path, body):
        request = urllib.request.Request(
            f"{url}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "X-API-Key": root},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    call("/api/v1/admin/accounts", {"account_id": account, "admin_user_id": "admin"})
    key = call(f"/api/v1/admin/accounts/{account}/users", {"user_id": "alice", "role": "user"})["result"]["user_key"]
    host.monkeypatch.setenv("OPENVIKING_API_KEY", key)
    host.memory = host.memory.replace(f"owner_user_id: {host.owner}", "owner_user_id: alice")
    host.owner = "alice"
    host.write()


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
        deadline = time.monotonic() + 180
        while token not in manager().get_context(host.owner).lower():
            assert time.monotonic() < deadline, f"{token} never became recallable"
            time.sleep(1.0)
        return token
    text = f"Order service {token}: money amounts are integer cents."
    backend = manager()._native_backend
    outcome = backend.remember("fact", text, host.owner, None)
    assert outcome["outcome"] == "stored", outcome
    return text


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_the_memory_factory_builds_memgate_from_manager_class(host):
    from memgate.deerflow.managers import _MemgateManager

    built = manager()
    assert isinstance(built, _MemgateManager)
    from deerflow.agents.memory.manager import MemoryManager

    assert isinstance(built, MemoryManager), "memgate's managers subclass DeerFlow's own"
    assert built.memgate_backend == {"pc002": "powercontext", "pc14": "powercontext"}.get(host.backend, host.backend)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_first_turn_of_a_new_thread_sends_the_memory_to_the_model(host, asynchronous, caplog):
    """The outbound request carries the memory as a hidden user-role message
    (``<id>__memory``, wrapped in ``<memory>``) before the user's message
    (``<id>__user``): DeerFlow's id swap. PowerContext recalls only with the
    operator's profile query, since this DeerFlow passes no query."""
    token = f"zq{uuid.uuid4().hex[:8]}"
    if host.backend == "openviking":
        openviking_user(host)
    if host.backend in ("pc002", "pc14"):
        text = seed_memory(host, token)
        caplog.set_level(logging.WARNING)
        _, request = run_lead_agent(host, "Add a refund calculation to the order service.", asynchronous=asynchronous)
        assert memory_message(request) is None, "no query, no recall (the RFC's rule)"
        assert "the host passed no query" in caplog.text
        host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", f"order service {token} conventions money")
        host.write()
    else:
        text = seed_memory(host, token)

    _, request = run_lead_agent(host, "Add a refund calculation to the order service.", asynchronous=asynchronous)
    memory = memory_message(request)
    assert memory is not None, [m["id"] for m in request["messages"]]
    assert memory["type"] == "human" and memory["additional_kwargs"].get("hide_from_ui") is True
    assert memory["content"].startswith("<memory>") and memory["content"].rstrip().endswith("</memory>")
    if host.backend == "openviking":  # extracted memories are rephrased by the server
        assert token in memory["content"].lower(), memory["content"]
    else:
        assert text in memory["content"], memory["content"]
    ids = [m["id"] or "" for m in request["messages"]]
    user = [i for i in ids if i.endswith("__user")]
    assert user and ids.index(memory["id"]) < ids.index(user[0]), ids
    assert user[0].removesuffix("__user") == memory["id"].removesuffix("__memory")


@pytest.mark.parametrize("host", ["local", "pc002", "pc14"], indirect=True)
def test_the_memory_middleware_captures_a_finished_run(host):
    """Local: the finished turn is stored and recalled for its words.
    PowerContext: passive capture is off, nothing is sent."""
    token = f"cap{uuid.uuid4().hex[:8]}"
    run_lead_agent(host, f"The deploy window for project {token} is Tuesday morning.")
    assert manager().wait_for_background(30.0)
    recalled = manager().get_context(host.owner, query=f"deploy window project {token}")
    if host.backend == "local":
        assert token in recalled
    else:
        assert token not in recalled


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_the_summarization_hook_sync_and_on_the_event_loop(host):
    from deerflow.agents.memory.summarization_hook import memory_flush_hook
    from deerflow.agents.middlewares.summarization_middleware import SummarizationEvent

    class Runtime:
        context = {"user_id": host.owner}

    def event(token, thread):
        head = (HumanMessage(f"Remember the {token} build flag.", id=f"h-{token}"), AIMessage("Sure.", id=f"a-{token}"))
        return SummarizationEvent(messages_to_summarize=head, preserved_messages=(), thread_id=thread,
                                  agent_name=None, runtime=Runtime())

    memory_flush_hook(event("syncflag", "t-sync"))

    async def on_loop():
        memory_flush_hook(event("loopflag", "t-loop"))

    asyncio.run(on_loop())
    assert manager().wait_for_background(30.0)
    for token in ("syncflag", "loopflag"):
        assert token in manager().get_context(host.owner, query=f"{token} build flag")


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_tool_mode_binds_and_runs_the_memory_tools(host):
    from deerflow.agents.memory.tools import memory_add_tool, memory_delete_tool, memory_search_tool, memory_update_tool

    host.write(mode="tool")
    _, request = run_lead_agent(host, "hello")
    assert {"memory_search", "memory_add", "memory_update", "memory_delete"} <= set(request["tools"])

    class Runtime:
        context = {"user_id": host.owner}

    def call(tool, **args):
        return json.loads(tool.func(runtime=Runtime(), **args))

    added = call(memory_add_tool, content="Prefers Helm over Kustomize.", category="preference")
    assert added["status"] == "added", added
    assert call(memory_add_tool, content="prefers helm over KUSTOMIZE.") == {"error": "Duplicate fact"}
    found = call(memory_search_tool, query="Helm")
    assert found["count"] == 1 and 0 <= found["results"][0]["confidence"] <= 1
    assert call(memory_update_tool, fact_id=added["fact_id"], content="Prefers Helm 3.")["status"] == "updated"
    assert call(memory_delete_tool, fact_id=added["fact_id"])["status"] == "deleted"


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_gateway_memory_routes_over_two_lifespans(host, monkeypatch):
    """The Gateway app under a test client, twice in one process (the
    pattern that crashed the extension): memory routes answer as DeerMem's
    do, including 409 for a duplicate and 400 for a bad confidence."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv("DEER_FLOW_AUTH_DISABLED", "1")
    from app.gateway.app import app

    for lifespan in range(2):
        with TestClient(app) as client:
            content = f"Lifespan {lifespan}: deploys need a change ticket."
            created = client.post("/api/memory/facts", json={"content": content, "category": "process"})
            assert created.status_code == 200, created.text
            assert content in [f["content"] for f in created.json()["facts"]]
            duplicate = client.post("/api/memory/facts", json={"content": content.upper()})
            assert duplicate.status_code == 409, duplicate.text
            bad = client.post("/api/memory/facts", json={"content": "x", "confidence": 1.5})
            assert bad.status_code in (400, 422), bad.text
            listed = client.get("/api/memory")
            assert listed.status_code == 200
            assert len(listed.json()["facts"]) == lifespan + 1, "what the first lifespan stored is still there"


@pytest.mark.parametrize("host", ["local", "pc002", "pc14"], indirect=True)
def test_remember_from_a_tools_entry_saves_for_the_hosts_user(host):
    host.write(extra="tools:\n  - name: remember\n    group: memory\n    use: memgate.deerflow.tool:remember_tool\n")
    token = f"rem{uuid.uuid4().hex[:8]}"
    state, request = run_lead_agent(host, f"Remember that the {token} service is owned by the payments team.")
    assert "remember" in request["tools"]
    results = [json.loads(m.content) for m in state["messages"] if m.type == "tool" and m.name == "remember"]
    assert results and results[0]["outcome"] == "stored", results
    assert token in manager().get_context(host.owner, query=f"who owns the {token} service")


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_install_through_deerflows_extension_loader_registers_the_tool(host):
    """``plugins: - use: memgate.deerflow:install, required: true``: DeerFlow's
    loader runs install() without an error diagnostic, and the lead agent's
    model is offered ``remember`` through the contributed middleware."""
    from deerflow.extensions import load_extensions, set_loaded_extensions
    from deerflow.extensions.loader import ExtensionSpec

    loaded, diagnostics = load_extensions([ExtensionSpec(use="memgate.deerflow:install", required=True)])
    assert [d for d in diagnostics if d.level == "error"] == []
    set_loaded_extensions(loaded)
    token = f"ext{uuid.uuid4().hex[:8]}"
    state, request = run_lead_agent(host, f"Remember that the {token} queue retries three times.")
    assert "remember" in request["tools"], request["tools"]
    results = [json.loads(m.content) for m in state["messages"] if m.type == "tool" and m.name == "remember"]
    assert results and results[0]["outcome"] == "stored", results
