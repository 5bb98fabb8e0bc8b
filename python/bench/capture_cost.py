"""Capture cost through the host boundary: DeerFlow's own OpenViking memory
manager and memgate's, side by side in one process.

Both managers get the same ``backend_config`` (each its own
``storage_path``, since both keep their cursors under
``<storage_path>/openviking/sessions/``) and the same LangChain transcripts
(4-message turns: user, assistant tool call, tool result, answer; UUID ids),
and capture them with ``add`` against a FAKE OpenViking: a real HTTP/1.1
server on 127.0.0.1 in a child process (so its CPU is not counted), which
answers the routes both managers call (session read, message batch, commit)
at once and keeps per-session message counts. It is not OpenViking; it
exists so the figures are the managers' own cost.

Columns, alternated in rotating order inside every repeat:

- ``deerflow-fake``: DeerFlow's manager with its recorder replaced by an
  in-process fake recorder (accepts the batch, no I/O): DeerFlow's own
  filtering, signing and cursor work only;
- ``deerflow``: DeerFlow's manager as shipped (langchain-openviking's
  recorder over the OpenViking SDK) -> the fake server;
- ``memgate``: ``memgate.deerflow.OpenVikingMemoryManager`` -> the fake server;
- ``memgate+outbox``: the same with ``outbox.enabled: true``.

Situations per repeat, each on a new thread: first capture of N messages,
unchanged re-capture, +2 messages. Figures are medians over repeats of
process CPU (``time.process_time``: every thread, so memgate's runtime
threads and the SDK's loop thread count), the calling thread's CPU
(``time.thread_time``) and wall (``time.perf_counter``). memgate's cursor
fsyncs per capture are counted exactly (``_native.cursor_fsyncs``). After
the run the fake server's per-session counts are checked: every column that
talks to it must have delivered exactly N + 2 messages per thread (anything
else is a bug and fails the run). No timing is asserted.

Run with DeerFlow's interpreter and memgate's wheel importable, e.g.
``testkit/capture-cost`` (which prepares both), or directly:
``$MEMGATE_DEERFLOW_PYTHON python/bench/capture_cost.py [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testkit"))
from fake_openviking import FakeOpenViking  # noqa: E402  (testkit's FAKE server)

OWNER = "alice"
PEER = "deerflow"
KEY_ENV = "CAPTURE_COST_OV_KEY"
SITUATIONS = ("first capture", "unchanged re-capture", "+2 messages")
COLUMNS = ("deerflow-fake", "deerflow", "memgate", "memgate+outbox")
TOPICS = ["refund", "invoice", "helm chart", "postgres index", "coffee order", "deploy window", "pytest fixture"]


# --- the FAKE OpenViking server (child process) ---------------------------------------------


def serve() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenViking)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    # Ends when the parent closes our stdin (or dies).
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever()


class FakeServer:
    """The fake server in a child process of this interpreter."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            raise SystemExit(f"the fake OpenViking server did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{int(line)}"

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/_fake/stats", timeout=10) as response:
            return json.loads(response.read())["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- transcripts ------------------------------------------------------------------------------


def turn(i: int) -> list:
    """One 4-message turn: user, assistant tool call, tool result, answer."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    topic = TOPICS[i % len(TOPICS)]
    call = f"call_{uuid.uuid4().hex[:24]}"
    return [
        HumanMessage(f"Turn {i}: please look at the {topic} and tell me what changed since yesterday.", id=str(uuid.uuid4())),
        AIMessage("", id=str(uuid.uuid4()), tool_calls=[{"name": "search", "args": {"query": topic, "limit": 5}, "id": call}]),
        ToolMessage(f"Found 3 documents about {topic}: " + "lorem ipsum " * 20, id=str(uuid.uuid4()), tool_call_id=call, name="search"),
        AIMessage(f"The {topic} changed in two places; amounts stay integer cents. " * 2, id=str(uuid.uuid4())),
    ]


def transcript(size: int) -> list:
    messages: list = []
    i = 0
    while len(messages) < size:
        messages.extend(turn(i))
        i += 1
    return messages[:size]


def two_more(i: int) -> list:
    """A user message and its answer."""
    return turn(i)[:1] + turn(i)[3:]


# --- managers ---------------------------------------------------------------------------------


class FakeRecorder:
    """In-process stand-in for langchain-openviking's recorder: accepts every
    message, no I/O (the ``deerflow-fake`` column)."""

    def record(self, session_id: str, messages: Any, peer_id: str | None = None, context_parts: Any = ()) -> Any:
        from langchain_openviking.recording import OpenVikingRecordResult

        batch = list(messages)
        return OpenVikingRecordResult(messages_written=len(batch), input_messages_consumed=len(batch))

    def flush(self, session_id: str) -> None:
        pass

    def close(self) -> None:
        pass


def backend_config(url: str, storage: Path, outbox: bool = False) -> dict[str, Any]:
    config: dict[str, Any] = {"base_url": url, "owner_user_id": OWNER, "api_key_env": KEY_ENV,
                              "default_peer_id": PEER, "storage_path": str(storage)}
    if outbox:
        config["outbox"] = {"enabled": True}
    return config


def build(column: str, url: str, scratch: Path) -> Any:
    from deerflow.agents.memory.manager import _resolve_manager_class

    from memgate.deerflow import OpenVikingMemoryManager

    storage = scratch / column
    if column.startswith("deerflow"):
        manager = _resolve_manager_class("openviking").from_config(backend_config(url, storage))
        if column == "deerflow-fake":
            manager._recorder.close()
            manager._recorder = FakeRecorder()
        return manager
    return OpenVikingMemoryManager.from_config(backend_config(url, storage, outbox=column == "memgate+outbox"))


def fsyncs() -> int | None:
    from memgate import _native

    counter = getattr(_native, "cursor_fsyncs", None)
    return counter() if counter else None


def measured(call: Callable[[], None], collect: bool = True) -> dict[str, float]:
    """One call's costs, after a full garbage collection unless ``collect``
    is false (``--no-gc``: the collection leaves the managers' threads and
    caches cold, which the table's figures include)."""
    if collect:
        gc.collect()
    synced = fsyncs()
    cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
    call()
    wall, cpu, thread = time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - thread
    after = fsyncs()
    return {"cpu": cpu * 1e3, "thread": thread * 1e3, "wall": wall * 1e3,
            "fsyncs": float(after - synced) if synced is not None else float("nan")}


def profile_loop(args: argparse.Namespace) -> int:
    """One situation in a tight loop (no table; no gc.collect unless
    ``--collect``, which makes each capture start cold as in the table) for a
    profiler: ``perf record -g -- python -X perf capture_cost.py --profile
    +2 --columns memgate --sizes 1000 --repeats 200``. ``+2`` grows one
    thread by two messages per capture."""
    os.environ[KEY_ENV] = "capture-cost-key"
    scratch = Path(tempfile.mkdtemp(prefix="memgate-capture-cost-", dir=args.scratch))
    server = FakeServer()
    try:
        for column in args.columns:
            manager = build(column, server.url, scratch)
            messages = transcript(args.sizes[0])
            thread = str(uuid.uuid4())
            manager.add(thread, messages, user_id=OWNER)
            extra = [m for i in range(args.repeats) for m in two_more(i)] if args.profile == "+2" else []
            grown = [messages + extra[: 2 * k] for k in range(1, args.repeats + 1)] if extra else []
            print(f"looping: pid {os.getpid()}", file=sys.stderr, flush=True)
            spent = 0.0
            for i in range(args.repeats):
                if args.collect:
                    gc.collect()  # as the table does before each call: the capture starts cold
                started = time.process_time()
                if args.profile == "first":
                    manager.add(str(uuid.uuid4()), messages, user_id=OWNER)
                elif args.profile == "unchanged":
                    manager.add(thread, messages, user_id=OWNER)
                else:
                    manager.add(thread, grown[i], user_id=OWNER)
                spent += time.process_time() - started
            spent = spent / args.repeats * 1e3
            print(f"{column} {args.profile} N={args.sizes[0]}: {spent:.2f} ms process CPU per capture (mean)")
            manager.shutdown_flush(5.0)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def run(args: argparse.Namespace) -> int:
    from memgate import _native

    os.environ[KEY_ENV] = "capture-cost-key"
    columns = [c for c in COLUMNS if c in args.columns]
    scratch = Path(tempfile.mkdtemp(prefix="memgate-capture-cost-", dir=args.scratch))
    server = FakeServer()
    started = time.monotonic()
    figures: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    threads: dict[str, list[tuple[str, int]]] = {c: [] for c in columns}
    managers = {}
    try:
        managers = {c: build(c, server.url, scratch) for c in columns}
        # Warm both paths (imports, connection pools, first-use caches).
        for column, manager in managers.items():
            warm = transcript(8)
            thread = str(uuid.uuid4())
            manager.add(thread, warm, user_id=OWNER)
            manager.add(thread, warm + two_more(99), user_id=OWNER)
            threads[column].append((thread, 10))
        for size in args.sizes:
            for repeat in range(args.repeats):
                if time.monotonic() - started > args.deadline:
                    print(f"deadline of {args.deadline:.0f} s reached at N={size}, repeat {repeat}", file=sys.stderr)
                    break
                messages = transcript(size)
                grown = messages + two_more(size)
                shift = repeat % len(columns)
                for column in columns[shift:] + columns[:shift]:
                    manager = managers[column]
                    thread = str(uuid.uuid4())
                    threads[column].append((thread, size + 2))
                    for situation, batch in zip(SITUATIONS, (messages, messages, grown)):
                        sample = measured(lambda: manager.add(thread, batch, user_id=OWNER), not args.no_gc)
                        figures.setdefault((column, size, situation), []).append(sample)
        stats = server.stats()
    finally:
        for manager in managers.values():
            manager.shutdown_flush(5.0)
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    # Every thread sent to the fake server holds exactly what was captured.
    wrong = []
    for column in columns:
        if column == "deerflow-fake":
            continue
        for thread, expected in threads[column]:
            sid = _native.openviking_session_id(OWNER, PEER, thread)
            got = stats["sessions"].get(sid, 0)
            if got != expected:
                wrong.append(f"{column} thread {thread}: server holds {got} messages, expected {expected}")

    load = os.getloadavg()
    print(f"capture cost through the host boundary; {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"medians over {args.repeats} repeats; FAKE OpenViking on loopback (child process)")
    print("CPU = process CPU, all threads (ms); main = calling thread's CPU; wall (ms); fs = memgate cursor fsyncs")
    head = f"{'situation':<21} {'N':>5}"
    for column in columns:
        head += f" | {column + ' CPU':>19} {'main':>6} {'wall':>6}" + (f" {'fs':>3}" if column.startswith("memgate") else "")
    if "deerflow" in columns and "memgate" in columns:
        head += f" | {'CPU x':>6} {'wall x':>6}"
    print(head)
    for size in args.sizes:
        for situation in SITUATIONS:
            line = f"{situation:<21} {size:>5}"
            med: dict[str, dict[str, float]] = {}
            for column in columns:
                samples = figures.get((column, size, situation), [])
                if not samples:
                    line += f" | {'-':>19} {'-':>6} {'-':>6}" + (" " * 4 if column.startswith("memgate") else "")
                    continue
                med[column] = {k: statistics.median(s[k] for s in samples) for k in ("cpu", "thread", "wall", "fsyncs")}
                m = med[column]
                line += f" | {m['cpu']:>19.2f} {m['thread']:>6.2f} {m['wall']:>6.2f}"
                if column.startswith("memgate"):
                    line += f" {m['fsyncs']:>3.0f}" if m["fsyncs"] == m["fsyncs"] else "  n/a"
            if "deerflow" in med and "memgate" in med:
                line += f" | {med['deerflow']['cpu'] / med['memgate']['cpu']:>6.1f} {med['deerflow']['wall'] / med['memgate']['wall']:>6.2f}"
            print(line)
    print("CPU x / wall x: DeerFlow (real recorder) over memgate; > 1 means memgate is cheaper / faster")
    print(f"fake server requests: {json.dumps(stats['routes'], sort_keys=True)}")
    print(f"took {time.monotonic() - started:.1f} s")
    if wrong:
        print("WRONG DELIVERY:\n  " + "\n  ".join(wrong[:20]), file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--columns", nargs="+", default=list(COLUMNS), choices=COLUMNS)
    parser.add_argument("--deadline", type=float, default=240.0, help="stop starting repeats after this many seconds")
    parser.add_argument("--no-gc", action="store_true",
                        help="no gc.collect() before each measured call (shows what the cold start after it costs)")
    parser.add_argument("--scratch", default=None, help="where the cursor directories go (default: the temp dir)")
    parser.add_argument("--profile", choices=("first", "unchanged", "+2"), default=None,
                        help="run one situation in a loop for a profiler instead of the table")
    parser.add_argument("--collect", action="store_true",
                        help="with --profile: gc.collect() before each capture, as the table does, so each "
                             "capture starts with cold caches (perf_phases.py leaves the collection out)")
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    if args.profile:
        return profile_loop(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
