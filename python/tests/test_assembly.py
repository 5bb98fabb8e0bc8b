"""The Python surface over memgate's one assembly: the same gates, total
deadlines and bounded drain as the service, MCP and the CLI.

The OpenViking server here is a named fake, ``BlackHole``: it accepts
connections and never answers (a hung server), and counts the connections,
so a gated-off call can be shown not to reach the backend at all.
"""

from __future__ import annotations

import socket
import threading
import time

from memgate import _native

RECALL_DEADLINE = 1.0
# Slack for a loaded machine: the point is "about the deadline", far below the
# backend's own 30-second request timeout.
SLACK = 4.0


class BlackHole:
    """A loopback listener that accepts and holds connections, never replying."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._sock.getsockname()[1]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._sock.close()


def open_backend(hole: BlackHole, tmp_path, **kwargs):
    return _native.Backend.open(
        "openviking",
        {"base_url": hole.url, "owner_user_id": "default", "timeout_seconds": 30},
        "middleware",
        str(tmp_path),
        environment=_native.Environment.from_mapping({"OPENVIKING_API_KEY": "test-user-key"}),
        deadlines={"recall_seconds": RECALL_DEADLINE, "capture_seconds": 30, "other_seconds": 1},
        **kwargs,
    )


def test_recall_returns_within_the_total_deadline(tmp_path):
    hole = BlackHole()
    try:
        backend = open_backend(hole, tmp_path)
        started = time.monotonic()
        assert backend.recall("default", query="where do I live") == ""
        assert time.monotonic() - started < RECALL_DEADLINE + SLACK
        assert hole.connections > 0
        backend.shutdown(1.0)
    finally:
        hole.close()


def test_gates_off_never_reach_the_backend(tmp_path):
    hole = BlackHole()
    try:
        no_recall = open_backend(hole, tmp_path / "a", injection_enabled=False)
        assert no_recall.recall("default", query="x") == ""
        no_memory = open_backend(hole, tmp_path / "b", enabled=False)
        assert no_memory.recall("default") == ""
        stored, known, filtered = no_memory.capture("t1", [{"type": "human", "content": "hi"}], user="default")
        assert (stored, known, filtered) == (0, 0, 1)
        assert hole.connections == 0
    finally:
        hole.close()


def test_shutdown_with_a_hung_background_capture_is_bounded_and_honest(tmp_path):
    hole = BlackHole()
    try:
        backend = open_backend(hole, tmp_path)
        backend.capture_in_background("t1", [{"type": "human", "content": "I live in Lisbon", "id": "h1"}], user="default")
        started = time.monotonic()
        drained = backend.shutdown(1.0)
        assert drained is False, "a capture was still running at the deadline"
        assert time.monotonic() - started < 1.0 + SLACK
    finally:
        hole.close()


def test_unknown_manager_class_names_the_valid_ones(tmp_path):
    try:
        _native.Backend.open("deermem", {}, "middleware", str(tmp_path))
    except Exception as err:  # noqa: BLE001 - the host's error types are mapped in errors.rs
        text = str(err)
        assert "local, openviking, powercontext, noop" in text, text
    else:
        raise AssertionError("an unknown backend must be refused")


def test_noop_comes_from_the_same_factory(tmp_path):
    backend = _native.Backend.open("noop", {}, "middleware", str(tmp_path))
    assert backend.name == "noop"
    assert backend.recall("alice") == ""
