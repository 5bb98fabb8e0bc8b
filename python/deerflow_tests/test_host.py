"""memgate inside DeerFlow's own code (the snapshot, unmodified): the memory
factory from ``manager_class``, ``make_lead_agent`` runs whose outbound model
messages show the injected memory, the memory middleware's capture, the
summarization hook, tool mode, the ``remember`` tool from a ``tools:`` entry
and from ``install()`` through DeerFlow's extension loader. Each against the
local store and the real OpenViking and both PowerContext generations the
testkit starts; where a backend refuses, the test asserts the refusal or
report the host sees. (The Gateway app: ``test_gateway.py``.)"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest
from conftest import BACKENDS
from deerflow_runs import assert_injected, manager, memory_message, openviking_session, openviking_user, run_lead_agent, seed_memory
from langchain_core.messages import AIMessage, HumanMessage

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


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
    text = seed_memory(host, token)
    if host.backend in ("pc002", "pc14"):
        caplog.set_level(logging.WARNING)
        _, request = run_lead_agent(host, "Add a refund calculation to the order service.", asynchronous=asynchronous)
        assert memory_message(request) is None, "no query, no recall (the RFC's rule)"
        assert "the host passed no query" in caplog.text
        host.monkeypatch.setenv("POWERCONTEXT_DEERFLOW_PROFILE_QUERY", f"order service {token} conventions money")
        host.write()

    _, request = run_lead_agent(host, "Add a refund calculation to the order service.", asynchronous=asynchronous)
    # OpenViking rephrases what it extracts: the token is what survives.
    assert_injected(request, token if host.backend == "openviking" else text)


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_the_memory_middleware_captures_a_finished_run(host):
    """Local: the finished turn is stored and recalled for its words.
    OpenViking: the thread's session on the server holds the turn (what the
    server extracts from; the first-turn test recalls what it extracted).
    PowerContext: passive capture is off, nothing is recalled."""
    token = f"cap{uuid.uuid4().hex[:8]}"
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    run_lead_agent(host, f"The deploy window for project {token} is Tuesday morning.", thread=thread)
    assert manager().wait_for_background(30.0)
    if host.backend == "openviking":
        session = openviking_session(host, thread)
        assert session is not None and session["total_message_count"] >= 2, session
        return
    recalled = manager().get_context(host.owner, query=f"deploy window project {token}")
    assert (token in recalled) == (host.backend == "local"), recalled


class _Runtime:
    """The runtime DeerFlow hands hooks and tools: its ``context`` names the user."""

    def __init__(self, user_id: str):
        self.context = {"user_id": user_id}


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_the_summarization_hook_sync_and_on_the_event_loop(host):
    """DeerFlow's ``memory_flush_hook`` hands the head a summarization
    removes to ``add_nowait``, once from a plain thread and once on an event
    loop (where it must return at once and finish in the background).
    Local: both heads are recalled. OpenViking: both threads' sessions on
    the server hold the messages. PowerContext: passive capture is off,
    nothing is recalled."""
    from deerflow.agents.memory.summarization_hook import memory_flush_hook
    from deerflow.agents.middlewares.summarization_middleware import SummarizationEvent

    def event(token, thread):
        head = (HumanMessage(f"Remember the {token} build flag.", id=f"h-{token}"), AIMessage("Sure.", id=f"a-{token}"))
        return SummarizationEvent(messages_to_summarize=head, preserved_messages=(), thread_id=thread,
                                  agent_name=None, runtime=_Runtime(host.owner))

    suffix = uuid.uuid4().hex[:8]
    heads = {f"syncflag{suffix}": f"t-sync-{suffix}", f"loopflag{suffix}": f"t-loop-{suffix}"}
    (sync_token, sync_thread), (loop_token, loop_thread) = heads.items()
    memory_flush_hook(event(sync_token, sync_thread))

    async def on_loop():
        memory_flush_hook(event(loop_token, loop_thread))

    asyncio.run(on_loop())
    assert manager().wait_for_background(30.0)
    for token, thread in heads.items():
        if host.backend == "openviking":
            session = openviking_session(host, thread)
            assert session is not None and session["total_message_count"] == 2, (thread, session)
            continue
        recalled = manager().get_context(host.owner, query=f"{token} build flag")
        assert (token in recalled) == (host.backend == "local"), recalled


#: Why each backend's manager refuses ``memory.mode: tool`` (OpenViking: the
#: built-in backend's words, raised before construction; PowerContext has no
#: search: memgate's backend factory refuses it while the manager is built,
#: so the host sees a pydantic ``ValidationError`` carrying that rule).
TOOL_MODE_REFUSAL = {
    "openviking": "The OpenViking automatic-memory backend supports memory.mode='middleware' only; "
    "use OpenViking MCP for explicit model tools",
    "pc002": "memory.mode: tool mode requires a backend that implements search, and powercontext does not",
}
TOOL_MODE_REFUSAL["pc14"] = TOOL_MODE_REFUSAL["pc002"]


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_tool_mode_binds_and_runs_the_memory_tools(host, caplog):
    """``memory.mode: tool``: the lead agent's model is offered the four
    memory tools. Local: each works. OpenViking and PowerContext refuse to
    build their manager in tool mode; what DeerFlow then does is pinned: the
    run goes on without memory, ``_get_memory_context`` logs its ERROR, and
    every memory tool answers ``{"error": <the refusal>}``."""
    from deerflow.agents.memory.tools import memory_add_tool, memory_delete_tool, memory_search_tool, memory_update_tool

    host.write(mode="tool")
    caplog.set_level(logging.ERROR)
    _, request = run_lead_agent(host, "hello")
    assert {"memory_search", "memory_add", "memory_update", "memory_delete"} <= set(request["tools"])

    def call(tool, **args):
        return json.loads(tool.func(runtime=_Runtime(host.owner), **args))

    if host.backend != "local":
        refusal = TOOL_MODE_REFUSAL[host.backend]
        assert memory_message(request) is None
        failed = [r for r in caplog.records if r.getMessage() == "Failed to load memory context"]
        assert failed and refusal in str(failed[0].exc_info[1]), [r.getMessage() for r in caplog.records]
        for tool, args in (
            (memory_search_tool, {"query": "Helm"}),
            (memory_add_tool, {"content": "Prefers Helm."}),
            (memory_update_tool, {"fact_id": "f1", "content": "Prefers Helm 3."}),
            (memory_delete_tool, {"fact_id": "f1"}),
        ):
            answered = call(tool, **args)
            assert list(answered) == ["error"] and refusal in answered["error"], (tool.name, answered)
        return

    added = call(memory_add_tool, content="Prefers Helm over Kustomize.", category="preference")
    assert added["status"] == "added", added
    assert call(memory_add_tool, content="prefers helm over KUSTOMIZE.") == {"error": "Duplicate fact"}
    found = call(memory_search_tool, query="Helm")
    assert found["count"] == 1 and 0 <= found["results"][0]["confidence"] <= 1
    assert call(memory_update_tool, fact_id=added["fact_id"], content="Prefers Helm 3.")["status"] == "updated"
    assert call(memory_delete_tool, fact_id=added["fact_id"])["status"] == "deleted"


#: What ``remember`` answers on OpenViking: memgate's OpenViking backend
#: learns only from captured conversations (the server extracts), it has no
#: explicit save.
def _assert_remember_result(host, results: list[dict], token: str) -> None:
    assert len(results) == 1, results
    result = results[0]
    if host.backend == "openviking":
        assert result["outcome"] == "error" and result["error"]["code"] == "unsupported", result
        return
    assert result["outcome"] == "stored", result
    assert token in manager().get_context(host.owner, query=f"{token} service queue")


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_remember_from_a_tools_entry_saves_for_the_hosts_user(host):
    """``tools: - use: memgate.deerflow.tool:remember_tool``: the model is
    offered ``remember``, calls it, and the fact is stored for the run's
    user (OpenViking: the tool's refusal, pinned)."""
    host.write(extra="tools:\n  - name: remember\n    group: memory\n    use: memgate.deerflow.tool:remember_tool\n")
    token = f"rem{uuid.uuid4().hex[:8]}"
    state, request = run_lead_agent(host, f"Remember that the {token} service is owned by the payments team.")
    assert "remember" in request["tools"]
    results = [json.loads(m.content) for m in state["messages"] if m.type == "tool" and m.name == "remember"]
    _assert_remember_result(host, results, token)


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_install_through_deerflows_extension_loader_registers_the_tool(host, caplog):
    """``plugins: - use: memgate.deerflow:install, required: true``: DeerFlow's
    loader runs install() without an error diagnostic, memgate logs what it
    registered, and the lead agent's model is offered ``remember`` through
    the contributed middleware, whose call saves (OpenViking: refused, as
    from a ``tools:`` entry)."""
    from deerflow.extensions import load_extensions, set_loaded_extensions
    from deerflow.extensions.loader import ExtensionSpec

    caplog.set_level(logging.INFO, logger="memgate.deerflow")
    loaded, diagnostics = load_extensions([ExtensionSpec(use="memgate.deerflow:install", required=True)])
    assert [d for d in diagnostics if d.level == "error"] == []
    assert "the `remember` tool was registered through registry.middlewares(...)" in caplog.text
    set_loaded_extensions(loaded)
    token = f"ext{uuid.uuid4().hex[:8]}"
    state, request = run_lead_agent(host, f"Remember that the {token} service queue retries three times.")
    assert "remember" in request["tools"], request["tools"]
    results = [json.loads(m.content) for m in state["messages"] if m.type == "tool" and m.name == "remember"]
    _assert_remember_result(host, results, token)
