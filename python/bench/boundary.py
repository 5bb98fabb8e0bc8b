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

Each iteration times the Rust pair and then the Python pair, and what the
boundary adds per call is the median of the per-iteration differences, so
slow drift on the machine does not land on one side only.

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


def rust_once(backend, messages, query) -> tuple[float, float]:
    """One recall and one capture timed inside Rust: ``(recall_s, capture_s)``."""
    recall, capture = _native.rust_baseline(backend, messages, "bench", 1, "alice", None, query)
    return recall[0], capture[0]


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


async def atimed(call) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


KEYS = ("rs_recall", "rs_capture", "py_recall", "py_capture")


def paired(manager, messages, query, iterations: int) -> dict[str, list[float]]:
    """Each iteration times the pure-Rust pair and the sync Python pair, in
    alternating order, so drift (other load, CPU frequency, warm caches) hits
    both sides of a difference alike."""
    backend = manager._native_backend

    def python_pair():
        return (timed(lambda: manager.get_context("alice", query=query)),
                timed(lambda: manager.add("bench", messages, user_id="alice")))

    times: dict[str, list[float]] = {k: [] for k in KEYS}
    for i in range(iterations):
        if i % 2:
            py = python_pair()
            rs = rust_once(backend, messages, query)
        else:
            rs = rust_once(backend, messages, query)
            py = python_pair()
        for key, value in zip(KEYS, (*rs, *py)):
            times[key].append(value)
    return times


async def paired_async(manager, messages, query, iterations: int) -> dict[str, list[float]]:
    """As ``paired``, with the async methods awaited on a running loop."""
    backend = manager._native_backend

    async def python_pair():
        return (await atimed(lambda: manager.aget_context("alice", query=query)),
                await atimed(lambda: manager.aadd("bench", messages, user_id="alice")))

    times: dict[str, list[float]] = {k: [] for k in KEYS}
    for i in range(iterations):
        if i % 2:
            py = await python_pair()
            rs = rust_once(backend, messages, query)
        else:
            rs = rust_once(backend, messages, query)
            py = await python_pair()
        for key, value in zip(KEYS, (*rs, *py)):
            times[key].append(value)
    return times


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1e3, ordered[int(len(ordered) * 0.95) - 1] * 1e3


def added(python: list[float], rust: list[float]) -> float:
    """Median of the per-iteration differences, in ms."""
    return statistics.median(p - r for p, r in zip(python, rust)) * 1e3


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

        for _ in range(10):  # warm caches on both paths
            manager.get_context("alice", query=query)
            manager.add("bench", messages, user_id="alice")
            rust_once(manager._native_backend, messages, query)

        sync = paired(manager, messages, query, args.iterations)
        asyn = asyncio.run(paired_async(manager, messages, query, args.iterations))
        manager.shutdown_flush(5.0)

    print(f"memgate Python boundary benchmark: {args.messages}-message LangChain transcript, local backend, "
          f"{args.iterations} paired calls each; {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}")
    print(f"{'operation':<40} {'median ms':>10} {'p95 ms':>10}")
    rows = [
        ("recall  - pure Rust", sync["rs_recall"] + asyn["rs_recall"]),
        ("recall  - Python get_context", sync["py_recall"]),
        ("recall  - Python aget_context", asyn["py_recall"]),
        ("capture - pure Rust", sync["rs_capture"] + asyn["rs_capture"]),
        ("capture - Python add", sync["py_capture"]),
        ("capture - Python aadd", asyn["py_capture"]),
    ]
    for name, times in rows:
        median, p95 = summary(times)
        print(f"{name:<40} {median:>10.3f} {p95:>10.3f}")
    print("added by the Python boundary (median of paired differences, sync / async):")
    for op in ("recall", "capture"):
        print(f"  {op:<8} {added(sync['py_' + op], sync['rs_' + op]):+.3f} ms / "
              f"{added(asyn['py_' + op], asyn['rs_' + op]):+.3f} ms per call")


if __name__ == "__main__":
    main()
