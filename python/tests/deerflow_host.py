"""A reproduction of the DeerFlow host steps that call a memory manager
(deerflow-memory-contract §1.8, §2, §3), written from the spec, so tests
drive the managers exactly the way the Gateway does:

- ``inject_dynamic_context``: the dynamic-context step of a turn (§2.2–2.3):
  on a thread without a reminder, load memory for the target user message,
  wrap it as ``<memory>\\n…\\n</memory>`` and return the ID-swapped update
  (date ``SystemMessage`` with the target's id, hidden ``X__memory``
  ``HumanMessage``, the user's message as ``X__user``), merged with
  LangGraph's own ``add_messages`` reducer;
- ``abefore_agent``: the async path, offloaded under the 5-second budget;
- ``after_agent`` / ``aafter_agent``: ``MemoryMiddleware`` (§3.1), the full
  transcript snapshot;
- ``memory_flush_hook``: the summarization hook (§3.2), the compacted head,
  called synchronously even from the async compaction path;
- ``gateway_startup`` / ``gateway_shutdown``: the lifespan (§1.8);
- ``memory_search`` / ``memory_add`` / ``memory_update`` / ``memory_delete``:
  tool mode's four memory tools (§4), JSON strings, no exception escaping.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.graph.message import add_messages

from memgate.deerflow import MemoryManagerError

log = logging.getLogger("deerflow_host")

INJECT_TIMEOUT_SECONDS = 5.0
WARM_TIMEOUT_SECONDS = 5.0
#: The RFC host forwards at most this much of the latest user input as the query.
QUERY_CHARS = 1000


@dataclass
class Runtime:
    """The slice of LangGraph's runtime the memory path reads."""

    context: dict[str, Any] = field(default_factory=dict)


def _is_reminder(m: BaseMessage) -> bool:
    return isinstance(m, (SystemMessage, HumanMessage)) and bool(m.additional_kwargs.get("dynamic_context_reminder"))


def _target(messages: list[BaseMessage]) -> HumanMessage | None:
    for m in reversed(messages):
        if (
            isinstance(m, HumanMessage)
            and not _is_reminder(m)
            and m.name != "summary"
            and not (m.id or "").endswith("__user")
        ):
            return m
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [c if isinstance(c, str) else c.get("text", "") for c in content if isinstance(c, (str, dict))]
    return "\n".join(p for p in parts if p)


def get_memory_context(manager, *, user_id, agent_name, query, failure_policy_read=None) -> str:
    """``_get_memory_context``: the wrapped block, or ``""`` (errors are
    logged; only ``MemoryManagerError`` under a literal ``fail_closed``
    read policy re-raises)."""
    try:
        content = manager.get_context(user_id=user_id, agent_name=agent_name, query=query)
    except Exception as exc:
        if isinstance(exc, MemoryManagerError) and failure_policy_read == "fail_closed":
            raise
        log.warning("Failed to load memory context: %s", exc)
        return ""
    if not content.strip():
        return ""
    return "<memory>\n" + content + "\n</memory>\n"


def inject_dynamic_context(state_messages, manager, runtime: Runtime, *, agent_name=None, date="2026-11-30, Monday"):
    """The first-turn injection. Returns ``(update, merged_messages)``; the
    update is ``None`` when a reminder already exists or there is no target."""
    if any(_is_reminder(m) for m in state_messages):
        return None, list(state_messages)
    target = _target(state_messages)
    if target is None:
        return None, list(state_messages)
    x = target.id or str(uuid.uuid4())
    memory = get_memory_context(
        manager,
        user_id=runtime.context.get("user_id"),
        agent_name=agent_name,
        query=_text(target.content)[:QUERY_CHARS],
    ).strip()
    update: list[BaseMessage] = [
        SystemMessage(
            id=x,
            content=f"<system-reminder>\n<current_date>{date}</current_date>\n</system-reminder>",
            additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True, "reminder_date": date},
        )
    ]
    if memory:
        update.append(
            HumanMessage(
                id=x + "__memory",
                content=memory,
                additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True},
            )
        )
    update.append(
        HumanMessage(
            id=x + "__user",
            content=target.content,
            name=target.name,
            additional_kwargs=dict(target.additional_kwargs),
        )
    )
    return update, add_messages(list(state_messages), update)


async def abefore_agent(state_messages, manager, runtime: Runtime, *, agent_name=None):
    """The async path: ``_inject`` in a worker thread under the 5-second budget."""
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(inject_dynamic_context, state_messages, manager, runtime, agent_name=agent_name),
            timeout=INJECT_TIMEOUT_SECONDS,
        )
    except asyncio.TimeoutError:
        log.warning("dynamic context injection timed out")
        return None, list(state_messages)


def after_agent(manager, runtime: Runtime, messages, *, agent_name=None) -> None:
    """``MemoryMiddleware.after_agent``: the full transcript; errors propagate."""
    thread_id = runtime.context.get("thread_id")
    if not thread_id or not messages:
        return
    manager.add(thread_id, messages, agent_name=agent_name, user_id=runtime.context.get("user_id"), trace_id=None)


async def aafter_agent(manager, runtime: Runtime, messages, *, agent_name=None) -> None:
    thread_id = runtime.context.get("thread_id")
    if not thread_id or not messages:
        return
    await manager.aadd(thread_id, messages, agent_name=agent_name, user_id=runtime.context.get("user_id"), trace_id=None)


def memory_flush_hook(manager, runtime: Runtime, messages_to_summarize, *, agent_name=None) -> None:
    """The summarization hook: the compacted head via ``add_nowait``;
    errors are logged and compaction continues."""
    thread_id = runtime.context.get("thread_id")
    if not thread_id:
        return
    try:
        manager.add_nowait(
            thread_id, list(messages_to_summarize), agent_name=agent_name, user_id=runtime.context.get("user_id")
        )
    except Exception as exc:  # noqa: BLE001 - the host logs and continues
        log.warning("before_summarization hook memory_flush_hook failed: %s", exc)


async def gateway_startup(manager) -> Any:
    """Lifespan start: ``warm()`` off the loop under 5 s; any error is logged
    and start-up continues. Returns what ``warm`` returned, or the error."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(manager.warm), timeout=WARM_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the Gateway never aborts here
        log.warning("memory warm-up skipped: %s", exc)
        return exc


async def gateway_shutdown(manager, timeout: float) -> bool | Exception:
    """Lifespan end: ``shutdown_flush(memory.shutdown_flush_timeout_seconds)``
    then ``close()``, both off the loop, errors caught."""
    try:
        flushed = await asyncio.to_thread(manager.shutdown_flush, timeout)
    except Exception as exc:  # noqa: BLE001
        return exc
    await asyncio.to_thread(manager.close)
    return flushed


def _tool_scope(runtime: Runtime) -> dict[str, Any]:
    """The memory tools' scope (§4): a truthy ``agent_name`` from the
    runtime context, else None; the runtime's user."""
    agent = runtime.context.get("agent_name")
    return {"agent_name": str(agent) if agent else None, "user_id": runtime.context.get("user_id")}


def memory_search(manager, runtime: Runtime, query, category=None, limit=10) -> str:
    """Tool mode's ``memory_search`` (§4)."""
    try:
        results = manager.search(query, top_k=limit, category=category, **_tool_scope(runtime))
    except Exception as exc:  # noqa: BLE001 - no exception escapes a tool
        return json.dumps({"error": str(exc)}, ensure_ascii=False)
    return json.dumps({"results": results, "count": len(results)}, ensure_ascii=False)


def memory_add(manager, runtime: Runtime, content, category="context", confidence=0.7) -> str:
    """Tool mode's ``memory_add`` (§4): strip, duplicate check against
    ``get_memory``'s facts (stripped, casefolded), then ``create_fact``."""
    content = (content or "").strip()
    if not content:
        return json.dumps({"error": "empty content"})
    scope = _tool_scope(runtime)
    try:
        document = manager.get_memory(**scope)
        wanted = content.casefold()
        if any(str(f.get("content", "")).strip().casefold() == wanted for f in document.get("facts", [])):
            return json.dumps({"error": "Duplicate fact"})
        try:
            _, fact_id = manager.create_fact(content, category, confidence, **scope)
        except NotImplementedError:
            return json.dumps({"error": f"memory backend {type(manager).__name__} does not support create_fact"})
        if fact_id is None:
            return json.dumps({"error": "fact not stored: the capacity policy evicted it"})
        return json.dumps({"fact_id": fact_id, "status": "added"})
    except Exception as exc:  # noqa: BLE001 - ValueError and the rest become the error text
        return json.dumps({"error": str(exc)}, ensure_ascii=False)


def _fact_tool(method: str, fact_id, status: str, call) -> str:
    try:
        call()
    except KeyError as exc:
        return json.dumps({"error": f"Fact not found: {exc.args[0] if exc.args else ''}"})
    except NotImplementedError:
        return json.dumps({"error": f"memory backend does not support {method}"})
    except Exception as exc:  # noqa: BLE001
        return json.dumps({"error": str(exc)}, ensure_ascii=False)
    return json.dumps({"fact_id": fact_id, "status": status})


def memory_update(manager, runtime: Runtime, fact_id, content=None, category=None, confidence=None) -> str:
    """Tool mode's ``memory_update`` (§4)."""
    return _fact_tool(
        "update_fact",
        fact_id,
        "updated",
        lambda: manager.update_fact(fact_id, content, category, confidence, **_tool_scope(runtime)),
    )


def memory_delete(manager, runtime: Runtime, fact_id) -> str:
    """Tool mode's ``memory_delete`` (§4)."""
    return _fact_tool("delete_fact", fact_id, "deleted", lambda: manager.delete_fact(fact_id, **_tool_scope(runtime)))


class LoopLagProbe:
    """A loop-blocking detector: a heartbeat task that records how late each
    tick runs. Anything that blocks the loop shows up as lag."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.max_lag = 0.0
        self._task: asyncio.Task | None = None

    async def _beat(self):
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval)
            self.max_lag = max(self.max_lag, loop.time() - start - self.interval)

    async def __aenter__(self):
        self._task = asyncio.create_task(self._beat())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc):
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
