"""The extension inside a host process whose threads come and go.

A Gateway's lifespans, worker pools and ``asyncio.to_thread`` make memgate's
first call on one thread, let that thread exit, and call again from another.
An extension that replaced the process allocator crashed there (SIGSEGV in
the allocator's thread set-up). Each case runs in a fresh interpreter, so a
crash is seen as the child's exit signal instead of killing pytest."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# Each case imports memgate itself, on the thread the host would: a Gateway
# builds its memory manager inside a lifespan, often on a worker thread.
CASES = {
    # The pattern that crashed: import and first calls on a thread that
    # exits, then calls from a new thread.
    "first_use_on_an_exited_thread": """
        root = tempfile.mkdtemp()
        made = {}
        def first():
            from memgate.deerflow import LocalMemoryManager
            made["m"] = LocalMemoryManager.from_config({"storage_path": root})
            made["m"].warm()
        def second():
            from memgate.deerflow import LocalMemoryManager
            again = LocalMemoryManager.from_config({"storage_path": root})
            again.warm()
            made["m"].create_fact("Prefers tea.", user_id="alice")
            assert "Prefers tea." in again.get_context("alice")
            again.close()
        for step in (first, second):
            t = threading.Thread(target=step)
            t.start(); t.join()
        made["m"].close()
    """,
    # Two Gateway lifespans in one process, each step on a fresh thread.
    "two_lifespans_on_fresh_threads": """
        root = tempfile.mkdtemp()
        for _ in range(2):
            made = {}
            for step in ("open", "warm", "recall", "close"):
                def run(step=step):
                    from memgate.deerflow import LocalMemoryManager
                    if step == "open":
                        made["m"] = LocalMemoryManager.from_config({"storage_path": root})
                    elif step == "warm":
                        made["m"].warm()
                    elif step == "recall":
                        made["m"].get_context("alice", agent_name=None)
                    else:
                        made["m"].shutdown_flush(5.0)
                t = threading.Thread(target=run)
                t.start(); t.join()
    """,
    # A pool that shrinks and grows: many short-lived threads making calls.
    "many_short_threads": """
        root = tempfile.mkdtemp()
        made = {}
        def open_it():
            from memgate.deerflow import LocalMemoryManager
            made["m"] = LocalMemoryManager.from_config({"storage_path": root})
        t = threading.Thread(target=open_it)
        t.start(); t.join()
        def work(i):
            made["m"].create_fact(f"fact number {i} about tea", "preference", user_id="alice")
            made["m"].search("tea", 3, user_id="alice")
        for wave in range(5):
            ts = [threading.Thread(target=work, args=(wave * 4 + i,)) for i in range(4)]
            for t in ts: t.start()
            for t in ts: t.join()
        assert len(made["m"].get_memory(user_id="alice")["facts"]) == 20
        made["m"].close()
    """,
    # A host callback that waits on the thread memgate calls it from (the
    # runtime's) must not stall memgate's other work: the first capture's
    # callback waits until a second capture has ended.
    "a_waiting_callback_does_not_stall_other_work": """
        from memgate.deerflow import LocalMemoryManager
        m = LocalMemoryManager.from_config({"storage_path": tempfile.mkdtemp()})
        backend = m._native_backend
        entered, second_ended, waited = threading.Event(), threading.Event(), []
        def first(code, message, report):
            entered.set()
            waited.append(second_ended.wait(20))
        def second(code, message, report):
            second_ended.set()
        said = [{"type": "human", "content": "I like green tea", "id": "m1"}]
        backend.capture_then("t1", said, first, "alice", None, "after_turn", None)
        assert entered.wait(20)
        backend.capture_then("t2", said, second, "alice", None, "after_turn", None)
        assert second_ended.wait(20), "the second capture stalled behind the first one's callback"
        m.close()
        assert waited == [True]
    """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_thread_pattern_does_not_crash(case):
    script = "import tempfile, threading\n" + textwrap.dedent(CASES[case]) + "\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if proc.returncode < 0:
        pytest.fail(f"{case}: the interpreter died of {signal.Signals(-proc.returncode).name}\n{proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


def test_extension_does_not_replace_the_allocator():
    """A library loaded into someone else's interpreter keeps the host's
    allocator: the native module links no allocator of its own."""
    from memgate import _native

    with open(_native.__file__, "rb") as f:
        data = f.read()
    assert b"mi_malloc" not in data and b"mimalloc" not in data
