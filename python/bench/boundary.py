"""Per-call cost of the Python boundary, side by side with pure Rust.

The same calls on the same backend (the embedded ``local`` store in a temp
dir) and the same 1,000-message LangChain transcript:

- Python: ``LocalMemoryManager.get_context`` (recall) and ``add`` (capture
  of the whole, already captured transcript: the after-run call of a long
  thread), plus their async forms; each call converts the LangChain
  messages, crosses into Rust, releases the GIL for the work, and returns;
- Rust: the same recall and capture requests on the same kind of backend
  (``local``, opened through the assembly in a store of its own holding
  the same thread), timed with no Python in the loop by the lab's
  ``boundary_baseline`` example in a child process (messages converted
  once, before timing; it is not part of the wheel).

Each iteration times the Rust pair and then the Python pair, and what the
boundary adds per call is the median of the per-iteration differences, so
slow drift on the machine does not land on one side only.

Run (after installing the wheel):  python python/bench/boundary.py [--iterations 200] [--messages 1000]
[--baseline PATH]; without ``--baseline`` the example is built first
(``cargo build --release -p memgate-lab --example boundary_baseline``, in
``$CARGO_TARGET_DIR`` or ``target/``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

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


#: The fields of a LangChain message that memgate reads (its JSON form).
FIELDS = ("type", "content", "id", "tool_calls", "tool_call_id", "name", "status", "additional_kwargs")


def baseline_binary(given: str | None) -> Path:
    """The lab's ``boundary_baseline`` example: ``given``, or built now."""
    if given:
        return Path(given)
    root = Path(__file__).resolve().parents[2]
    subprocess.run(["cargo", "build", "--release", "-p", "memgate-lab", "--example", "boundary_baseline"],
                   cwd=root, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    return target / "release" / "examples" / "boundary_baseline"


class RustBaseline:
    """The pure-Rust side in a child process: one timed recall and capture
    per request, so each pairs with the Python calls made next to it."""

    def __init__(self, binary: Path, messages, query: str, workdir: str):
        transcript = Path(workdir) / "transcript.json"
        transcript.write_text(json.dumps([{k: m.model_dump().get(k) for k in FIELDS} for m in messages]))
        storage = Path(workdir) / "rust-store"
        self.child = subprocess.Popen(
            [str(binary), "--storage", str(storage), "--transcript", str(transcript), "--user", "alice",
             "--thread", "bench", "--query", query],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.child.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"boundary_baseline did not start: {ready!r}")

    def once(self) -> tuple[float, float]:
        """One recall and one capture timed inside Rust: ``(recall_s, capture_s)``."""
        self.child.stdin.write("go\n")
        self.child.stdin.flush()
        recall, capture = self.child.stdout.readline().split()
        return float(recall), float(capture)

    def close(self) -> None:
        self.child.stdin.close()
        self.child.wait(timeout=30)


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


async def atimed(call) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


KEYS = ("rs_recall", "rs_capture", "py_recall", "py_capture")


def paired(manager, rust: RustBaseline, messages, query, iterations: int) -> dict[str, list[float]]:
    """Each iteration times the pure-Rust pair and the sync Python pair, in
    alternating order, so drift (other load, CPU frequency, warm caches) hits
    both sides of a difference alike."""

    def python_pair():
        return (timed(lambda: manager.get_context("alice", query=query)),
                timed(lambda: manager.add("bench", messages, user_id="alice")))

    times: dict[str, list[float]] = {k: [] for k in KEYS}
    for i in range(iterations):
        if i % 2:
            py = python_pair()
            rs = rust.once()
        else:
            rs = rust.once()
            py = python_pair()
        for key, value in zip(KEYS, (*rs, *py)):
            times[key].append(value)
    return times


async def paired_async(manager, rust: RustBaseline, messages, query, iterations: int) -> dict[str, list[float]]:
    """As ``paired``, with the async methods awaited on a running loop."""

    async def python_pair():
        return (await atimed(lambda: manager.aget_context("alice", query=query)),
                await atimed(lambda: manager.aadd("bench", messages, user_id="alice")))

    times: dict[str, list[float]] = {k: [] for k in KEYS}
    for i in range(iterations):
        if i % 2:
            py = await python_pair()
            rs = rust.once()
        else:
            rs = rust.once()
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
    parser.add_argument("--baseline", help="the built boundary_baseline example (default: build it)")
    args = parser.parse_args()
    binary = baseline_binary(args.baseline)

    messages = transcript(args.messages)
    query = "what changed in the refund and invoice handling?"
    with tempfile.TemporaryDirectory() as storage, tempfile.TemporaryDirectory() as workdir:
        manager = LocalMemoryManager.from_config({"storage_path": storage})
        manager.add("bench", messages, user_id="alice")  # the store now holds the thread
        rust = RustBaseline(binary, messages, query, workdir)  # and so does its own

        for _ in range(10):  # warm caches on both paths
            manager.get_context("alice", query=query)
            manager.add("bench", messages, user_id="alice")
            rust.once()

        sync = paired(manager, rust, messages, query, args.iterations)
        asyn = asyncio.run(paired_async(manager, rust, messages, query, args.iterations))
        rust.close()
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
