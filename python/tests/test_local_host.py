"""The local manager driven the way DeerFlow drives a memory manager: the
dynamic-context step on a first turn, after-run capture of the full
transcript, the compaction hook's head, the Gateway's warm and shutdown
flush; with real langchain-core messages and LangGraph's message reducer."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from deerflow_host import (
    Runtime,
    aafter_agent,
    abefore_agent,
    after_agent,
    gateway_shutdown,
    gateway_startup,
    inject_dynamic_context,
    memory_flush_hook,
)
from memgate.deerflow import LocalMemoryManager

CLARIFICATION = {
    "human_input_response": {
        "version": 1,
        "kind": "human_input_response",
        "source": "ui",
        "request_id": "r1",
        "value": "Use the staging cluster",
        "response_kind": "text",
    },
    "hide_from_ui": True,
}


def host_keep_hidden(additional_kwargs):
    """The host's default hook: keep only valid clarification answers."""
    r = additional_kwargs.get("human_input_response")
    return (
        isinstance(r, dict)
        and r.get("version") == 1
        and r.get("kind") == "human_input_response"
        and all(isinstance(r.get(k), str) and r[k].strip() for k in ("source", "request_id", "value"))
        and (r.get("response_kind") == "text" or (r.get("response_kind") == "option" and r.get("option_id")))
    )


def finished_first_turn(x: str, memory: str | None) -> list:
    """The transcript at the end of a first turn with memory (§3.3)."""
    messages = [
        SystemMessage(
            "<system-reminder>\n<current_date>2026-11-30, Monday</current_date>\n</system-reminder>",
            id=x,
            additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True, "reminder_date": "2026-11-30, Monday"},
        )
    ]
    if memory:
        messages.append(
            HumanMessage(memory, id=x + "__memory", additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True})
        )
    messages += [
        HumanMessage("Plan the refund service; I live in Lisbon and deploy with Helm.", id=x + "__user"),
        AIMessage("", id="a-tool", tool_calls=[{"name": "search", "args": {"q": "refund"}, "id": "call-1"}]),
        ToolMessage("refund docs: integer cents", id="t-1", tool_call_id="call-1", name="search"),
        HumanMessage("Use the staging cluster", id="clarify-1", additional_kwargs=CLARIFICATION),
        AIMessage("Refunds will be computed in integer cents.", id="a-final"),
    ]
    return messages


@pytest.fixture
def manager(tmp_path):
    m = LocalMemoryManager.from_config(
        {"storage_path": str(tmp_path)}, mode="middleware", should_keep_hidden_message=host_keep_hidden
    )
    yield m
    m.close()


def test_first_turn_injection_wraps_and_id_swaps(manager):
    alice = Runtime({"user_id": "alice", "thread_id": "t-old"})
    after_agent(manager, alice, finished_first_turn("u0", None))

    state = [HumanMessage("Which refund conventions apply in Lisbon?", id="u1")]
    update, merged = inject_dynamic_context(state, manager, Runtime({"user_id": "alice", "thread_id": "t-new"}))
    assert [type(m).__name__ for m in update] == ["SystemMessage", "HumanMessage", "HumanMessage"]
    system, memory, user = update
    assert system.id == "u1" and system.additional_kwargs["reminder_date"] == "2026-11-30, Monday"
    assert memory.id == "u1__memory"
    assert memory.additional_kwargs == {"hide_from_ui": True, "dynamic_context_reminder": True}
    assert memory.content.startswith("<memory>\n") and memory.content.endswith("\n</memory>")
    assert "I live in Lisbon" in memory.content
    assert "reminder_date" not in memory.additional_kwargs
    assert user.id == "u1__user" and user.content == state[0].content
    # LangGraph's reducer: the date takes the original slot, the rest follow.
    assert [m.id for m in merged] == ["u1", "u1__memory", "u1__user"]
    # Frozen for the thread: the next turn loads nothing.
    again, _ = inject_dynamic_context(merged + [AIMessage("ok", id="a9"), HumanMessage("next", id="u2")], manager, alice)
    assert again is None


def test_other_users_and_agents_see_nothing(manager):
    after_agent(manager, Runtime({"user_id": "alice", "thread_id": "t1"}), finished_first_turn("u0", None))
    bob, _ = inject_dynamic_context([HumanMessage("Lisbon refunds?", id="b1")], manager, Runtime({"user_id": "bob"}))
    assert [m.id for m in bob] == ["b1", "b1__user"], "no memory message for another user"
    agent, _ = inject_dynamic_context(
        [HumanMessage("Lisbon refunds?", id="r1")], manager, Runtime({"user_id": "alice"}), agent_name="researcher"
    )
    assert [m.id for m in agent] == ["r1", "r1__user"], "no memory across agents"


def test_after_run_capture_keeps_tool_history_and_never_the_injected_memory(manager):
    runtime = Runtime({"user_id": "alice", "thread_id": "t1"})
    transcript = finished_first_turn("u1", "<memory>\n- zebra-canary-token recalled earlier\n</memory>")
    after_agent(manager, runtime, transcript)
    found = {hit["content"] for hit in manager.search("refund cents Lisbon staging", top_k=20, user_id="alice")}
    assert "Plan the refund service; I live in Lisbon and deploy with Helm." in found
    assert "Refunds will be computed in integer cents." in found
    assert "Use the staging cluster" in found, "the host's hook kept the clarification answer"
    assert manager.search("zebra-canary-token", user_id="alice") == [], "injected memory never feeds on itself"
    assert manager.search("system-reminder current_date", user_id="alice") == []
    # The same snapshot again stores nothing new.
    before = manager.search("refund cents Lisbon staging", top_k=50, user_id="alice")
    after_agent(manager, runtime, transcript)
    assert manager.search("refund cents Lisbon staging", top_k=50, user_id="alice") == before


def test_keep_hook_runs_in_python_from_rust_with_the_message_kwargs(tmp_path):
    """The hook runs on the backend's own thread while the calling thread
    waits in ``add``: that works only because ``add`` released the GIL
    (holding it would deadlock)."""
    calls = []

    def hook(additional_kwargs):
        calls.append((dict(additional_kwargs), threading.get_ident()))
        return additional_kwargs.get("keep") is True

    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)}, should_keep_hidden_message=hook)
    m.add(
        "t1",
        [
            HumanMessage("hidden but kept", id="k1", additional_kwargs={"hide_from_ui": True, "keep": True}),
            HumanMessage("hidden and dropped", id="k2", additional_kwargs={"hide_from_ui": True, "n": [1, {"a": None}]}),
            HumanMessage("visible", id="k3"),
        ],
        user_id="alice",
    )
    assert [c[0] for c in calls] == [
        {"hide_from_ui": True, "keep": True},
        {"hide_from_ui": True, "n": [1, {"a": None}]},
    ], "called once per hidden message, with its additional_kwargs as a dict"
    assert all(thread != threading.get_ident() for _, thread in calls), "called from the backend's thread"
    texts = {h["content"] for h in m.search("hidden visible kept dropped", top_k=10, user_id="alice")}
    assert texts == {"hidden but kept", "visible"}
    m.close()


def test_a_raising_keep_hook_keeps_nothing_and_is_reported(tmp_path, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    def broken(additional_kwargs):
        raise RuntimeError("hook bug")

    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)}, should_keep_hidden_message=broken)
    m.add("t1", [HumanMessage("secret-ish hidden", id="x1", additional_kwargs={"hide_from_ui": True})], user_id="alice")
    assert m.search("hidden", user_id="alice") == []
    assert [str(e) for e in reported] == ["hook bug"]
    m.close()


def test_compaction_head_is_captured_off_the_event_loop(tmp_path):
    """On the async compaction path the host calls the sync hook on the loop
    thread. ``add_nowait`` must return without waiting for the capture: the
    keep-hook below blocks the capture until the loop itself releases it, so
    a blocking ``add_nowait`` would never return (it gives up after 10 s and
    the test fails)."""
    release = threading.Event()
    waited = []

    def hook(additional_kwargs):
        waited.append(release.wait(timeout=10))
        return False

    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)}, should_keep_hidden_message=hook)
    head = [
        HumanMessage("old question about Helm charts", id="o1"),
        SystemMessage("hidden", id="o0", additional_kwargs={"hide_from_ui": True}),
        AIMessage("old answer about Helm charts", id="o2"),
    ]

    async def compaction():
        memory_flush_hook(m, Runtime({"user_id": "alice", "thread_id": "t1"}), head)
        returned_before_release = not release.is_set()
        release.set()
        return returned_before_release

    assert asyncio.run(compaction()) is True
    assert m.wait_for_background(10.0)
    assert waited == [True]
    texts = {h["content"] for h in m.search("Helm charts", user_id="alice")}
    assert texts == {"old question about Helm charts", "old answer about Helm charts"}
    m.close()


def test_async_methods_never_block_the_event_loop(tmp_path):
    """``aadd`` while the capture is held inside the backend: the loop keeps
    running (it is what releases the capture); ``aget_context`` and
    ``asearch`` run the sync path on a worker thread."""
    release = threading.Event()
    waited = []

    def hook(additional_kwargs):
        waited.append(release.wait(timeout=10))
        return False

    class Probe(LocalMemoryManager):
        threads: list = []

        def get_context(self, user_id, **kw):
            Probe.threads.append(threading.get_ident())
            return super().get_context(user_id, **kw)

        def search(self, query, top_k=5, **kw):
            Probe.threads.append(threading.get_ident())
            return super().search(query, top_k, **kw)

    m = Probe.from_config({"storage_path": str(tmp_path)}, should_keep_hidden_message=hook)
    transcript = [
        HumanMessage("hidden", id="h0", additional_kwargs={"hide_from_ui": True}),
        HumanMessage("I keep bees in Porto", id="h1"),
    ]

    async def main():
        loop_thread = threading.get_ident()

        async def releaser():
            await asyncio.sleep(0.05)
            release.set()

        await asyncio.gather(aafter_agent(m, Runtime({"user_id": "alice", "thread_id": "t1"}), transcript), releaser())
        text = await m.aget_context("alice", query="bees")
        hits = await m.asearch("bees", user_id="alice")
        return loop_thread, text, hits

    loop_thread, text, hits = asyncio.run(main())
    assert waited == [True], "the loop ran while the capture was held"
    assert "I keep bees in Porto" in text and hits[0]["content"] == "I keep bees in Porto"
    assert Probe.threads and loop_thread not in Probe.threads
    m.close()


def test_async_injection_matches_the_sync_path(manager):
    after_agent(manager, Runtime({"user_id": "alice", "thread_id": "t0"}), finished_first_turn("u0", None))
    state = [HumanMessage("Lisbon refunds?", id="u1")]
    sync_update, _ = inject_dynamic_context(state, manager, Runtime({"user_id": "alice"}))
    async_update, _ = asyncio.run(abefore_agent(state, manager, Runtime({"user_id": "alice"})))
    assert [(m.id, m.content) for m in async_update] == [(m.id, m.content) for m in sync_update]


def test_gateway_warm_and_shutdown_flush_drain_background_work(tmp_path):
    release = threading.Event()

    def hook(additional_kwargs):
        release.wait(timeout=10)
        return False

    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)}, should_keep_hidden_message=hook)

    async def lifespan():
        warmed = await gateway_startup(m)
        memory_flush_hook(
            m,
            Runtime({"user_id": "alice", "thread_id": "t1"}),
            [HumanMessage("hidden", id="z0", additional_kwargs={"hide_from_ui": True}), HumanMessage("I ride a red bike", id="z1")],
        )
        early = await gateway_shutdown(m, 0.2)  # the capture is still held
        release.set()
        late = await asyncio.to_thread(m.shutdown_flush, 5.0)
        return warmed, early, late

    warmed, early, late = asyncio.run(lifespan())
    assert (warmed, early, late) == (True, False, True)
    assert m.get_context("alice", query="bike") == "", "closed: no new work"
    reopened = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    assert "I ride a red bike" in reopened.get_context("alice", query="bike"), "the drained capture was kept"
    reopened.close()


def test_a_long_transcript_streams_into_the_store_once(manager):
    """Local capture stores messages while later ones are still being read
    (in batches); the result is the whole-transcript capture's."""
    backend = manager._native_backend
    talk = [HumanMessage(f"question {i} about tomatoes", id=f"h{i}") if i % 2 == 0
            else AIMessage(f"answer {i} about watering", id=f"a{i}") for i in range(101)]
    talk.insert(50, SystemMessage("You are helpful."))
    assert backend.capture("long", talk, "alice") == (101, 0, 1)
    assert backend.capture("long", iter(talk), "alice") == (0, 101, 1)
    assert backend.capture("long", talk + [HumanMessage("one more", id="h-last")], "alice") == (1, 101, 1)


def test_a_capture_names_the_message_it_kept_only_the_start_of(manager):
    """A message over memory's 64 KiB per-turn limit is stored cut; the
    capture result says which one and how much was kept, still unpacking
    as the three counts."""
    backend = manager._native_backend
    long_text = "pasted build log line\n" * 4000  # 88,000 bytes
    talk = [HumanMessage("what broke in the build?", id="q1"), HumanMessage(long_text, id="pasted-log"),
            AIMessage("the linker ran out of memory", id="a1")]
    report = backend.capture("cut", talk, "alice")
    stored, known, filtered = report
    assert (stored, known, filtered) == (3, 0, 0) and report == (3, 0, 0)
    assert report.cut == [{"index": 1, "message_id": "pasted-log",
                           "text_bytes": len(long_text.strip()), "kept_bytes": 64 * 1024}]
    again = backend.capture("cut", talk, "alice")
    assert again == (0, 3, 0) and again.cut == [], "nothing new stored, nothing cut"
    short = backend.capture("cut", talk + [HumanMessage("thanks", id="q2")], "alice")
    assert short == (1, 3, 0) and short.cut == []


def test_an_unreadable_message_stores_nothing_of_the_transcript(manager):
    # Long enough that the first messages reach the store before the bad one is read.
    good = finished_first_turn("x1", None) + [HumanMessage(f"filler {i}", id=f"f{i}") for i in range(60)]
    bad = good[:50] + [{"type": "human", "content": 42}] + good[50:]
    with pytest.raises(ValueError, match=r"messages\[50\]: message `content` must be a string or a list of blocks"):
        manager.add("t-bad", bad, user_id="alice")
    assert "Lisbon" not in manager.get_context("alice", query="refund service Lisbon Helm")
    manager.add("t-bad", good, user_id="alice")
    assert "Lisbon" in manager.get_context("alice", query="refund service Lisbon Helm")


def test_aadd_answers_as_add_does(tmp_path, caplog):
    """``aadd`` reads the messages on the loop and awaits the capture's end:
    read errors and store refusals raise as from ``add``; after shutdown the
    write is logged and dropped."""
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    bad = [HumanMessage("fine", id="a"), {"type": "human", "content": 42}]

    async def main():
        with pytest.raises(ValueError, match=r"messages\[1\]"):
            await m.aadd("t1", bad, user_id="alice")
        with pytest.raises(ValueError, match="a capture requires a non-empty thread id"):
            await m.aadd("", [HumanMessage("x", id="b")], user_id="alice")
        await m.aadd("t1", [HumanMessage("I keep bees in Porto", id="c")], user_id="alice")
        # Awaited means stored: the next read sees it.
        return m.get_context("alice", query="bees Porto fine")

    text = asyncio.run(main())
    assert "I keep bees in Porto" in text and "fine" not in text
    assert m.shutdown_flush(5.0)
    with caplog.at_level("WARNING", logger="memgate.deerflow"):
        asyncio.run(m.aadd("t1", [HumanMessage("too late", id="d")], user_id="alice"))
    assert "write ignored after shutdown" in caplog.text


def test_close_after_an_idle_manager_says_nothing_alarming(tmp_path, caplog):
    """``close()`` drains with a zero budget; an idle manager (also right
    after ``shutdown_flush`` returned True) is released without a warning
    that blames the backend."""
    caplog.set_level(logging.DEBUG)
    for round in range(10):
        m = LocalMemoryManager.from_config({"storage_path": str(tmp_path / str(round))})
        if round % 2:
            assert m.shutdown_flush(5) is True
        m.close()
    alarming = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert alarming == [], alarming
