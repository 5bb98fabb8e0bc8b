"""What goes on the wire: DeerFlow's own OpenViking manager (its real
recorder, langchain-openviking over the OpenViking SDK) and memgate's
capture the same LangChain transcript, and the messages each sends to the
session's batch route are the same, part for part.

The server is testkit's FAKE OpenViking on 127.0.0.1 (``fake_openviking.py``,
recording batches): it answers the routes both clients call with
OpenViking's answer shapes, so the comparison is between the two clients
only. The transcript carries what the writers must escape (quotes,
backslashes, control characters, text beyond ASCII) in text, tool-call
arguments (nested, numbers, booleans, null) and tool results."""

from __future__ import annotations

import sys
import threading
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from deerflow.agents.memory.manager import _resolve_manager_class
from memgate.deerflow import OpenVikingMemoryManager as MemgateOpenViking

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testkit"))
from fake_openviking import FakeOpenViking  # noqa: E402  (testkit's FAKE server)

OWNER = "alice"
KEY_ENV = "WIRE_PARITY_OV_KEY"
TRICKY = 'say "hi" \\ C:\\path\n\ttab \x01 café ✓ 你好 😀'


class Recording(FakeOpenViking):
    record = True
    sessions: dict[str, dict[str, int]] = {}
    routes: dict[str, int] = {}
    batches: dict[str, list[list[Any]]] = {}


@pytest.fixture
def server():
    Recording.sessions, Recording.routes, Recording.batches = {}, {}, {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def transcript() -> list:
    return [
        HumanMessage(f"Look this up: {TRICKY}", id=str(uuid.uuid4())),
        AIMessage("", id=str(uuid.uuid4()), tool_calls=[
            {"name": "search", "args": {"query": TRICKY, "limit": 5, "ratio": 0.25, "exact": True, "near": None,
                                        "filters": {"tags": ["a", "b\"c"], "nested": {"deep": [1, 2.5, False]}}},
             "id": "call_1"},
            {"name": "noop", "args": {}, "id": "call_2"},
        ]),
        ToolMessage(f"Found: {TRICKY}", id=str(uuid.uuid4()), tool_call_id="call_1", name="search"),
        ToolMessage("failed", id=str(uuid.uuid4()), tool_call_id="call_2", name="noop", status="error"),
        AIMessage(f"Here is what changed: {TRICKY}", id=str(uuid.uuid4())),
    ]


def sent(manager_class, url: str, storage: Path, thread: str, messages: list) -> list[dict[str, Any]]:
    """Every message ``manager_class`` sent for ``thread``, in order."""
    config = {"base_url": url, "owner_user_id": OWNER, "api_key_env": KEY_ENV,
              "default_peer_id": "deerflow", "storage_path": str(storage)}
    manager = manager_class.from_config(config)
    try:
        manager.add(thread, messages, user_id=OWNER)
    finally:
        manager.close()
    (session,) = Recording.batches.values()
    Recording.batches = {}
    return [message for batch in session for message in batch]


def test_both_managers_send_the_same_messages_part_for_part(server, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "wire-parity-key")
    messages = transcript()
    builtin = sent(_resolve_manager_class("openviking"), server, tmp_path / "builtin", "t-wire", messages)
    memgate = sent(MemgateOpenViking, server, tmp_path / "memgate", "t-wire", messages)
    assert len(builtin) == len(messages), builtin
    assert memgate == builtin
    # The escaped strings survived both writers intact.
    call = memgate[1]["parts"][0]
    assert call["tool_input"]["query"] == TRICKY
    assert call["tool_input"]["filters"] == {"tags": ["a", "b\"c"], "nested": {"deep": [1, 2.5, False]}}
