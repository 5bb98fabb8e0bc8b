"""A FAKE OpenViking for measuring and comparing clients, not OpenViking.

A real HTTP/1.1 server's handler that answers the session routes DeerFlow's
OpenViking manager and memgate's call (health, session read, message batch,
commit) at once, with OpenViking 0.5's answer shapes, and keeps per-session
message counts (``GET /_fake/stats``). Used by ``python/bench/capture_cost.py``
(in a child process, so its CPU is not counted) and by
``python/deerflow_tests/test_openviking_wire_parity.py`` (recording the
batches both managers send). The real server's behaviour is pinned by the
tests that run against it.
"""

import json
import threading
import uuid
from typing import Any

from json_http import JsonHandler


class FakeOpenViking(JsonHandler):
    """Answers the session routes both managers call; counts per session.
    Keep-alive HTTP/1.1 (`JsonHandler`), as both clients pool connections.
    With ``record`` set (a subclass), it also keeps every batch's messages
    per session in ``batches``."""

    sessions: dict[str, dict[str, int]] = {}
    routes: dict[str, int] = {}
    record = False
    batches: dict[str, list[list[Any]]] = {}
    lock = threading.Lock()

    def _ok(self, result: Any) -> None:
        self.send_json(200, {"status": "ok", "result": result, "error": None})

    def _not_found(self, message: str) -> None:
        self.send_json(404, {"status": "error", "result": None, "error": {"code": "NOT_FOUND", "message": message}})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _count(self, route: str) -> None:
        with self.lock:
            self.routes[route] = self.routes.get(route, 0) + 1

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/_fake/stats":
            with self.lock:
                self._ok({"sessions": {k: v["total"] for k, v in self.sessions.items()}, "routes": dict(self.routes)})
        elif path == "/health":
            self._count("health")
            self._ok({"status": "ok", "healthy": True, "version": "0.5.2"})
        elif path.startswith("/api/v1/sessions/") and path.count("/") == 4:
            self._count("session")
            sid = path.rsplit("/", 1)[1]
            with self.lock:
                state = self.sessions.get(sid)
                state = dict(state) if state else None
            if state is None:
                self._not_found(f"Session {sid} not found")
            else:
                self._ok({"session_id": sid, "message_count": state["live"], "total_message_count": state["total"],
                          "pending_tokens": state["tokens"], "commit_count": state["commits"]})
        else:
            self._count("unknown " + path)
            self._not_found("Not Found")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()
        parts = path.split("/")
        if len(parts) == 6 and parts[:4] == ["", "api", "v1", "sessions"] and parts[5] == "commit":
            self._count("commit")
            sid = parts[4]
            with self.lock:
                state = self.sessions.setdefault(sid, {"total": 0, "live": 0, "tokens": 0, "commits": 0})
                state.update(live=0, tokens=0, commits=state["commits"] + 1)
            self._ok({"session_id": sid, "status": "accepted", "task_id": f"task-{uuid.uuid4().hex[:8]}", "archived": True})
        elif len(parts) == 7 and parts[:4] == ["", "api", "v1", "sessions"] and parts[5:] == ["messages", "batch"]:
            self._count("batch")
            sid = parts[4]
            messages = (body or {}).get("messages") or []
            added = len(messages)
            with self.lock:
                if self.record:
                    self.batches.setdefault(sid, []).append(messages)
                state = self.sessions.setdefault(sid, {"total": 0, "live": 0, "tokens": 0, "commits": 0})
                state.update(total=state["total"] + added, live=state["live"] + added, tokens=state["tokens"] + 10 * added)
                answer = {"session_id": sid, "message_count": state["live"], "added": added, "pending_tokens": state["tokens"]}
            self._ok(answer)
        else:
            self._count("unknown " + path)
            self._not_found("Not Found")
