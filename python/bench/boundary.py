"""Per-call cost of the Python boundary, side by side with pure Rust.

The same calls on the same backend (the embedded ``local`` store in a temp
dir) and the same 1,000-message LangChain transcript:

- Python: ``LocalMemoryManager.get_context`` (recall) and ``add`` (capture
  of the whole, already captured transcript: the after-run call of a long
  thread), plus their async forms; each call converts the LangChain
  messages, crosses into Rust, releases the GIL for the work, and returns;
- Rust: the same recall and capture requests timed inside the extension
  with no Python in the loop (``_native.rust_baseline``; messages converted
  once, before timing).

The difference of the medians is what the boundary adds per call.

Run (after installing the wheel):  python python/bench/boundary.py [--iterations 200] [--messages 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
import time

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from memgate import _native
from memgate.deerflow import LocalMemoryManager

TOPICS = ["refund", "invoice", "helm chart", "postgres index", "coffee order", "deploy window", "pytest fixture"]


def transcript(size: int) -> list:
    """A long thread as DeerFlow holds it: the hidden date reminder and
    memory message, then user turns, tool calls, tool results and answers."""
    messages = [
        SystemMessage("<system-reminder>\n<current_date>2026-11-30, Monday</current_date>\n</system-reminder>", id="x",
                      additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True, "reminder_date": "2026-11-30, Monday"}),
        HumanMessage("<memory>\n- [fact] integer cents\n</memory>", id="x__memory",
                     additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True}),
    ]
    i = 0
    while len(messages) < size:
        topic = TOPICS[i % len(TOPICS)]
        kind = i % 4
        if kind == 0:
            messages.append(HumanMessage(f"Turn {i}: please look at the {topic} and tell me what changed since yesterday.", id=f"h{i}"))
        elif kind == 1:
            messages.append(AIMessage("", id=f"a{i}", tool_calls=[{"name": "search", "args": {"query": topic, "limit": 5}, "id": f"call-{i}"}]))
        elif kind == 2:
            messages.append(ToolMessage(f"Found 3 documents about {topic}: " + "lorem ipsum " * 20, id=f"t{i}",
                                        tool_call_id=f"call-{i - 1}", name="search"))
        else:
            messages.append(AIMessage(f"The {topic} changed in two places; amounts stay integer cents. " * 2, id=f"a{i}"))
        i += 1
    return messages[:size]


def timed_pairs(recall, capture, iterations: int) -> tuple[list[float], list[float]]:
    """Recall then capture, alternating, as the Rust baseline does."""
    recall_times, capture_times = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        recall()
        recall_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        capture()
        capture_times.append(time.perf_counter() - start)
    return recall_times, capture_times


async def timed_pairs_async(recall, capture, iterations: int) -> tuple[list[float], list[float]]:
    recall_times, capture_times = [], []
    for _ in range(iterations):
        start = time.perf_counter()
        await recall()
        recall_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        await capture()
        capture_times.append(time.perf_counter() - start)
    return recall_times, capture_times


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.95) - 1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()

    messages = transcript(args.messages)
    query = "what changed in the refund and invoice handling?"
    with tempfile.TemporaryDirectory() as storage:
        manager = LocalMemoryManager.from_config({"storage_path": storage})
        manager.add("bench", messages, user_id="alice")  # the store now holds the thread
        backend = manager._native_backend

        def recall():
            manager.get_context("alice", query=query)

        def capture():
            manager.add("bench", messages, user_id="alice")

        for _ in range(10):  # warm caches on both paths
            recall(), capture()
        _native.rust_baseline(backend, messages, "bench", 10, "alice", None, query)

        rs_recall, rs_capture = _native.rust_baseline(backend, messages, "bench", args.iterations, "alice", None, query)
        py_recall, py_capture = timed_pairs(recall, capture, args.iterations)
        as_recall, as_capture = asyncio.run(
            timed_pairs_async(
                lambda: manager.aget_context("alice", query=query),
                lambda: manager.aadd("bench", messages, user_id="alice"),
                args.iterations,
            )
        )
        manager.shutdown_flush(5.0)

    print(f"memgate Python boundary benchmark: {args.messages}-message LangChain transcript, local backend, "
          f"{args.iterations} calls each; {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}")
    print(f"{'operation':<40} {'median ms':>10} {'p95 ms':>10}")
    rows = [
        ("recall  - pure Rust", rs_recall),
        ("recall  - Python get_context", py_recall),
        ("recall  - Python aget_context", as_recall),
        ("capture - pure Rust", rs_capture),
        ("capture - Python add", py_capture),
        ("capture - Python aadd", as_capture),
    ]
    for name, times in rows:
        median, p95 = summary(times)
        print(f"{name:<40} {median:>10.3f} {p95:>10.3f}")
    print("added by the Python boundary (median, sync / async):")
    for op, rust, sync, asyn in (("recall", rs_recall, py_recall, as_recall), ("capture", rs_capture, py_capture, as_capture)):
        base = summary(rust)[0]
        print(f"  {op:<8} {summary(sync)[0] - base:+.3f} ms / {summary(asyn)[0] - base:+.3f} ms per call")


if __name__ == "__main__":
    main()
