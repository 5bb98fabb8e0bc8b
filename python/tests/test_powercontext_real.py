"""``PowerContextMemoryManager`` and the ``remember`` tool against the real
PowerContext servers from testkit/ (0.0.2 and 1.4.x): the RFC's first
workflow (explicit save in chat, then recall in a new conversation), the
exact save outcomes, owner refusals, passive capture off, and ``install``.
The tool runs inside a real LangGraph ``ToolNode``, which injects the
runtime (``runtime.context``) the way DeerFlow's agents do."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import real_server
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from deerflow_host import Runtime, after_agent, gateway_startup, inject_dynamic_context
from memgate.deerflow import PowerContextMemoryManager
from memgate.deerflow.tool import InstallReport, install, make_remember_tool

OWNER = "alice-7c1e"
FAKE_HOST = Path(__file__).resolve().parent / "fake_host"


@pytest.fixture(params=["pc002", "pc14"])
def binding(request) -> dict[str, str]:
    """The ``POWERCONTEXT_DEERFLOW_*`` variables for one server generation."""
    if request.param == "pc002":
        env = real_server("MEMGATE_TEST_PC002_URL", "MEMGATE_TEST_PC002_TOKEN")
        url, token = env["MEMGATE_TEST_PC002_URL"], env["MEMGATE_TEST_PC002_TOKEN"]
        scope = f"memgate:pytest:{uuid.uuid4().hex[:12]}"  # 0.0.2: any string is a scope
    else:
        env = real_server("MEMGATE_TEST_PC14_URL", "MEMGATE_TEST_PC14_TOKEN", "MEMGATE_TEST_PC14_SCOPE_ID_2")
        url, token = env["MEMGATE_TEST_PC14_URL"], env["MEMGATE_TEST_PC14_TOKEN"]
        scope = env["MEMGATE_TEST_PC14_SCOPE_ID_2"]
    return {
        "POWERCONTEXT_DEERFLOW_BASE_URL": url,
        "POWERCONTEXT_DEERFLOW_OWNER_USER_ID": OWNER,
        "POWERCONTEXT_DEERFLOW_SCOPE_ID": scope,
        "POWERCONTEXT_DEERFLOW_TOKEN": token,
    }


def run_tool(tool, args: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """One model tool call through LangGraph's ToolNode with the host's context."""
    graph = StateGraph(MessagesState, context_schema=dict)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    call = AIMessage("", tool_calls=[{"name": tool.name, "args": args, "id": f"call-{uuid.uuid4().hex[:6]}"}])
    result = graph.compile().invoke({"messages": [call]}, context=context)
    return json.loads(result["messages"][-1].content)


def test_explicit_save_then_a_new_conversation_recalls_it(binding, environment, tmp_path):
    token = uuid.uuid4().hex[:10]
    environment(**binding)
    manager = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert asyncio.run(gateway_startup(manager)) is True
    tool = make_remember_tool(manager)
    owner = {"user_id": OWNER, "thread_id": "chat-1"}
    text = f"Order service {token}: money amounts are integer cents; use pytest for backend tests."

    saved = run_tool(tool, {"text": text, "kind": "decision"}, owner)
    assert saved["outcome"] == "stored", saved
    assert saved["citation"] and saved["citation"] in saved["message"]
    again = run_tool(tool, {"text": f"  {text}  ", "kind": "decision"}, owner)
    assert again["outcome"] == "already_present", again
    assert "nothing new was added" in again["message"]

    # A new conversation: the request itself is the recall query.
    request = HumanMessage(f"Add a refund calculation to the order service {token}, following its conventions.", id="q1")
    update, outbound = inject_dynamic_context([request], manager, Runtime({"user_id": OWNER, "thread_id": "chat-2"}))
    memory = [m for m in update if m.id == "q1__memory"]
    assert memory, update
    print(f"injected memory ({binding['POWERCONTEXT_DEERFLOW_BASE_URL']}):\n{memory[0].content[:600]}")
    assert "integer cents" in memory[0].content and token in memory[0].content
    assert "PowerContext prepared untrusted historical context" in memory[0].content
    # What the model is sent: the memory as a hidden user-role message before the request.
    assert [m.id for m in outbound] == ["q1", "q1__memory", "q1__user"]
    assert type(outbound[1]).__name__ == "HumanMessage"
    assert manager.shutdown_flush(5.0) is True


def test_refused_identities_and_identity_arguments_never_save(binding, environment, tmp_path, caplog):
    token = uuid.uuid4().hex[:10]
    environment(**binding)
    manager = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    tool = make_remember_tool(manager)
    text = f"Refused save {token} must not be stored."
    for context in ({"thread_id": "t"}, {"user_id": "default"}, {"user_id": "bob"}, {"user_id": f" {OWNER}"}):
        result = run_tool(tool, {"text": text}, context)
        assert result["outcome"] == "error" and result["error"]["code"] == "rejected_identity", (context, result)
        assert OWNER not in json.dumps(result), "the owner id is never echoed"
        assert binding["POWERCONTEXT_DEERFLOW_TOKEN"] not in json.dumps(result)
    sneaky = run_tool(tool, {"text": text, "user_id": OWNER, "scope_id": "other"}, {"user_id": "bob"})
    assert sneaky["error"]["code"] == "invalid_input"
    assert "identity and scope come from the host" in sneaky["error"]["message"]
    # Nothing was stored: the owner's recall for that text finds nothing.
    assert token not in manager.get_context(OWNER, query=f"Refused save {token}")
    # A refused recall is no memory: one clear warning, then quiet (an
    # auth-disabled Gateway asks as `default` on every turn).
    caplog.set_level("WARNING", logger="memgate.deerflow")
    update, _ = inject_dynamic_context([HumanMessage("hi", id="d1")], manager, Runtime({}))
    assert [m.id for m in update] == ["d1", "d1__user"]
    assert manager.get_context(None, query="anything") == ""
    assert manager.get_context("default", query="anything") == ""
    warnings = [r for r in caplog.records if "powercontext refused the caller" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING" and warnings[0].exc_info is None
    assert "DEER_FLOW_AUTH_DISABLED" in warnings[0].getMessage()
    assert OWNER not in caplog.text and binding["POWERCONTEXT_DEERFLOW_TOKEN"] not in caplog.text
    manager.close()


def test_passive_capture_is_off(binding, environment, tmp_path):
    token = uuid.uuid4().hex[:10]
    environment(**binding)
    manager = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    transcript = [HumanMessage(f"I prefer green tea {token}", id="h1"), AIMessage("Noted.", id="a1")]
    after_agent(manager, Runtime({"user_id": OWNER, "thread_id": "t1"}), transcript)
    manager.add_nowait("t1", transcript, user_id=OWNER)
    asyncio.run(manager.aadd("t1", transcript, user_id=OWNER))
    assert manager.get_context(OWNER, query=f"green tea {token}") == "", "nothing was uploaded"
    assert manager.get_context(OWNER) == "", "no query, no recall (the RFC's first version)"
    manager.close()


def test_a_host_without_a_query_recalls_only_with_the_opt_in_profile_query(binding, environment, tmp_path, caplog):
    """DeerFlow f1f4af99 calls ``get_context(user_id=, agent_name=)``: no
    query. Default: nothing recalled, one warning naming the opt-in. With
    ``POWERCONTEXT_DEERFLOW_PROFILE_QUERY`` the fixed query recalls; a
    query the host passes is still used as given."""
    token = uuid.uuid4().hex[:10]
    text = f"Profile {token}: the user writes Rust and prefers short answers."
    environment(**binding)
    writer = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert run_tool(make_remember_tool(writer), {"text": text, "kind": "preference"}, {"user_id": OWNER})["outcome"] == "stored"
    caplog.set_level("WARNING")
    for _ in range(3):
        assert writer.get_context(OWNER, agent_name=None) == ""
    notes = [r for r in caplog.records if "the host passed no query" in r.getMessage()]
    assert len(notes) == 1 and "POWERCONTEXT_DEERFLOW_PROFILE_QUERY" in notes[0].getMessage(), caplog.text
    writer.close()

    environment(**binding, POWERCONTEXT_DEERFLOW_PROFILE_QUERY=f"user profile preferences {token}")
    profiled = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert text in profiled.get_context(OWNER, agent_name=None)
    assert profiled.get_context(OWNER, query="kubernetes helm chart") == ""
    profiled.close()


class OldRegistry:
    """DeerFlow's registry as of extension API 0.1.2: no plugin(...)."""

    def middlewares(self, contributor): ...

    def task_lifecycle(self, contributor): ...

    def service(self, service): ...

    def routers(self, routers): ...


class FutureRegistry(OldRegistry):
    """A host whose registry takes plugin contributions (the RFC's shape)."""

    def __init__(self):
        self.contributions = []

    def plugin(self, contribution):
        self.contributions.append(contribution)


def test_install_reports_what_a_host_cannot_take_instead_of_raising(caplog):
    """A registry with neither plugin(...) nor middlewares(...), or one
    that refuses both: nothing installed, one warning naming the
    alternatives, no exception (a `required: true` plugin must not abort
    the Gateway over the tool). Bad settings still raise."""
    class Bare:
        def service(self, service): ...

    caplog.set_level("WARNING", logger="memgate.deerflow.install")
    report = install(Bare(), {})
    assert report.installed == () and len(report.not_installed) == 1
    assert "NOT installed" in report.not_installed[0] and "memgate mcp" in report.not_installed[0]
    assert "remember_tool" in report.not_installed[0]
    assert [r.levelname for r in caplog.records] == ["WARNING"]

    class Refusing(OldRegistry):
        def plugin(self, contribution):
            raise TypeError("unknown contribution type")

        def middlewares(self, contributor):
            raise ValueError("no middlewares today")

    refused = install(Refusing(), {})
    assert refused.installed == ()
    assert "registry.plugin(...) refused it (TypeError" in refused.not_installed[0]
    # (Outside DeerFlow the middleware path already stops at importing deerflow_extension_api.)
    assert "registry.middlewares(...) refused it (" in refused.not_installed[0]
    with pytest.raises(ValueError, match="config.scope_id"):
        install(FutureRegistry(), {"scope_id": "s"})
    assert install(FutureRegistry(), {}) == InstallReport(installed=("remember tool via registry.plugin",))


def test_installed_tool_saves_through_the_hosts_memory_manager(tmp_path):
    """A future host: DeerFlow importable (the contract stand-in), the
    manager built by the host's factory from the process environment,
    ``install`` registering the tool; the model's call saves to the real
    1.4.x server under the host's principal."""
    env = real_server("MEMGATE_TEST_PC14_URL", "MEMGATE_TEST_PC14_TOKEN", "MEMGATE_TEST_PC14_SCOPE_ID_2")
    token = uuid.uuid4().hex[:10]
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from deerflow.agents.memory import manager as host
        from memgate.deerflow import PowerContextMemoryManager, install
        from test_powercontext_real import FutureRegistry, run_tool
        host.set_memory_manager(PowerContextMemoryManager.from_config({{"storage_path": {str(tmp_path)!r}}}))
        registry = FutureRegistry()
        install(registry, {{}})
        (contribution,) = registry.contributions
        (model_tool,) = contribution.tools
        result = run_tool(model_tool.tool, {{"text": "Installed tool save {token}", "kind": "fact"}},
                          {{"user_id": {OWNER!r}, "thread_id": "t1"}})
        recalled = host.get_memory_manager().get_context({OWNER!r}, query="Installed tool save {token}")
        print(json.dumps({{"enabled": contribution.enabled, "name": model_tool.name,
                          "namespace": model_tool.namespace, "result": result, "recalled": recalled}}))
        """
    )
    process_env = dict(
        os.environ,
        PYTHONPATH=str(FAKE_HOST),
        POWERCONTEXT_DEERFLOW_BASE_URL=env["MEMGATE_TEST_PC14_URL"],
        POWERCONTEXT_DEERFLOW_OWNER_USER_ID=OWNER,
        POWERCONTEXT_DEERFLOW_SCOPE_ID=env["MEMGATE_TEST_PC14_SCOPE_ID_2"],
        POWERCONTEXT_DEERFLOW_TOKEN=env["MEMGATE_TEST_PC14_TOKEN"],
    )
    out = subprocess.run([sys.executable, "-c", code], env=process_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert (report["enabled"], report["name"], report["namespace"]) == (True, "remember", "memgate")
    assert report["result"]["outcome"] == "stored", report
    assert f"Installed tool save {token}" in report["recalled"]


def test_a_new_lifespans_warm_reopens_the_backend_the_last_shutdown_closed(binding, environment, tmp_path):
    """DeerFlow keeps one manager across Gateway lifespans and closes it at
    each shutdown: the next start-up's warm() opens the PowerContext backend
    again (a wheel whose closed backend answered warm() with a failed
    start-up check instead of ``closed`` left it shut) and explicit saves
    work."""
    environment(**binding)
    manager = PowerContextMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert manager.warm() is True
    assert manager.shutdown_flush(5.0) is True
    manager.close()
    assert manager.warm() is True, "the next lifespan's start-up opens the backend again"
    outcome = manager._native_backend.remember("fact", f"Reopened {uuid.uuid4().hex[:8]}.", OWNER, None)
    assert outcome["outcome"] == "stored", outcome
    manager.close()
