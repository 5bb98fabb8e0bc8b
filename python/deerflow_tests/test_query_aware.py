"""First-turn recall in both caller shapes, with the manager DeerFlow's own
factory builds from ``manager_class``.

- No query: DeerFlow f1f4af99's own ``_get_memory_context`` (what
  ``make_lead_agent`` injects), ``get_context(user_id=…, agent_name=…)``.
- ``query=``: DeerFlow's pending change reads the class flag with
  ``getattr(manager, "supports_query_aware_context", False)`` and, only when
  it is true, calls ``get_context``/``aget_context(user, agent_name=…,
  thread_id=…, query=<the user's input>)``; an undeclared manager gets no
  per-turn recall at all. That caller is not in the published snapshot, so
  :func:`query_aware_recall` below is it, written from the change's
  description: the same flag read and the same keyword arguments.

Against the local store, the real OpenViking and both PowerContext
generations."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest
from conftest import BACKENDS
from deerflow_runs import manager, openviking_user, seed_memory
from langchain_core.messages import AIMessage, HumanMessage

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def query_aware_recall(user: str, thread: str, query: str, *, asynchronous: bool) -> str:
    """The query-aware caller of DeerFlow's pending change (see above)."""
    from deerflow.agents.memory import get_memory_manager

    built = get_memory_manager()
    if not getattr(built, "supports_query_aware_context", False):
        return ""
    if asynchronous:
        return asyncio.run(built.aget_context(user, agent_name=None, thread_id=thread, query=query))
    return built.get_context(user, agent_name=None, thread_id=thread, query=query)


def published_recall(user: str) -> str:
    """DeerFlow f1f4af99's own caller (no query, no thread)."""
    from deerflow.agents.lead_agent.prompt import _get_memory_context

    return _get_memory_context(agent_name=None, user_id=user)


@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_every_manager_declares_query_aware_context_the_way_deerflow_reads_it(host):
    """The flag is a class attribute of the manager DeerFlow's factory built
    (pydantic keeps it off the model's fields), true on the instance and the
    class, and both recall methods take the keywords the caller passes."""
    built = manager()
    assert getattr(built, "supports_query_aware_context", False) is True
    assert type(built).supports_query_aware_context is True
    assert "supports_query_aware_context" not in type(built).model_fields
    for method in (built.get_context, built.aget_context):
        parameters = inspect.signature(method).parameters
        assert {"agent_name", "thread_id", "query"} <= set(parameters), method


@pytest.mark.parametrize("asynchronous", [False, True], ids=["get_context", "aget_context"])
@pytest.mark.parametrize("host", BACKENDS, indirect=True)
def test_both_caller_shapes_recall(host, asynchronous):
    """``query=``: what matches the user's input is recalled (PowerContext
    sends exactly that query). No query: the published caller recalls as
    before (PowerContext, with no profile query set: nothing, the RFC's
    rule)."""
    token = f"qa{uuid.uuid4().hex[:8]}"
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    query = f"How are money amounts stored in the order service {token}?"
    if host.backend == "openviking":
        openviking_user(host)
    if host.backend == "local":
        # A captured turn (not a standing fact): only a query naming it recalls it.
        manager().add(f"t-{token}", [HumanMessage(f"The {token} ledger keeps refunds in a separate table.", id="h1"),
                                     AIMessage("Noted.", id="a1")], user_id=host.owner)
        expected = f"{token} ledger"
        query = f"Where does the {token} ledger keep refunds?"
    else:
        expected = seed_memory(host, token)
        expected = token if host.backend == "openviking" else expected

    recalled = query_aware_recall(host.owner, thread, query, asynchronous=asynchronous)
    assert expected.lower() in recalled.lower(), recalled

    baseline = published_recall(host.owner)
    if host.backend in ("pc002", "pc14"):
        assert baseline == "", "no query and no profile query: nothing (the RFC's rule)"
    else:
        assert baseline.startswith("<memory>"), baseline
