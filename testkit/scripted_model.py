#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat server for host tests (stdlib only).

    python3 testkit/scripted_model.py --script SCRIPT.json --log REQUESTS.jsonl \
        [--host 127.0.0.1] [--port 0] [--port-file FILE] [--require-key KEY]

Serves POST /v1/chat/completions (plain JSON, or SSE with "stream": true,
tool calls streamed as deltas), GET /v1/models and GET /health. On start it
prints one line, `scripted_model listening on http://HOST:PORT/v1`, after the
socket is bound (port 0 picks a free port); --port-file also receives the port.

Every completion request body is appended to the --log file as one JSON line,
exactly as received except that raw newlines (JSON whitespace) become spaces,
so tests can inspect the messages a host really sent. Headers are not logged.

The script is JSON: a list of rules (or {"rules": [...]}); the first rule whose
"when" matches the request answers it. Conditions (all given must hold):

    "user_contains": "text"     the latest user-role message contains text
                                (case-insensitive; the last "user" message in
                                the request, whatever comes after it)
    "last_role": "tool"         the request's last message has this role;
                                "tool" means "a tool result is present last"
    "tool_result_contains": "t" the last tool-role message contains t
    "always": true              matches anything (a fallback rule)

A rule answers with "reply": either {"content": "text"} or
{"tool_calls": [{"name": "...", "arguments": {...} | "raw json text"}],
 "content": optional text}. In content, {{user}} is replaced by the latest
user message and {{tool_result}} by the latest tool result. Optional
"chunk_chars" (default 8) sets the size of streamed content pieces, and
"pause_seconds" (default 0) a pause after the first streamed piece (before
the whole answer when not streaming): a slow model, to interrupt mid-answer.

A rule may also say "times": N (it answers at most N requests, then later
requests fall through to the next rules: a model that fails, then answers),
and a reply may be {"status": 429} (or any HTTP error status: answered with
an error body and nothing else) and may carry "usage": {"prompt_tokens": P,
"completion_tokens": C} (reported as given; default zeros), or "usage":
"estimated": characters of the request's messages and of the answer over 4
(a tokenizer's rough rate), so a prompt that grows shows as growing tokens.

No rule matching is an HTTP 400 with an error naming the latest user text.
With --require-key, requests without `Authorization: Bearer KEY` get a 401
whose message echoes the key that was sent: a deliberately careless server,
so tests can check that a client never repeats such text with the key in it.
"""

import argparse
import json
import signal
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from json_http import JsonHandler

MODEL_ID = "scripted"


def load_rules(path):
    with open(path, encoding="utf-8") as f:
        script = json.load(f)
    rules = script["rules"] if isinstance(script, dict) else script
    if not isinstance(rules, list):
        raise SystemExit(f"{path}: the script must be a list of rules or {{\"rules\": [...]}}")
    known = {"user_contains", "last_role", "tool_result_contains", "always"}
    for i, rule in enumerate(rules):
        unknown = set(rule.get("when", {})) - known
        if unknown:
            raise SystemExit(f"{path}: rules[{i}].when has unknown conditions {sorted(unknown)}")
        reply = rule.get("reply")
        if not isinstance(reply, dict) or not ("content" in reply or "tool_calls" in reply
                                               or "status" in reply):
            raise SystemExit(f"{path}: rules[{i}].reply needs content, tool_calls or status")
        if "times" in rule and (not isinstance(rule["times"], int) or rule["times"] < 1):
            raise SystemExit(f"{path}: rules[{i}].times must be a positive integer")
    return rules


def text_of(content):
    """Message content as text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def latest(messages, role):
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == role:
            return text_of(message.get("content"))
    return None


def matches(when, messages):
    user = latest(messages, "user") or ""
    tool = latest(messages, "tool")
    last_role = messages[-1].get("role") if messages and isinstance(messages[-1], dict) else None
    if "user_contains" in when and when["user_contains"].lower() not in user.lower():
        return False
    if "last_role" in when and when["last_role"] != last_role:
        return False
    if "tool_result_contains" in when and (tool is None or when["tool_result_contains"] not in tool):
        return False
    return bool(when)  # an empty "when" matches nothing; use "always" for a fallback


def fill(template, messages):
    return (
        template.replace("{{user}}", latest(messages, "user") or "")
        .replace("{{tool_result}}", latest(messages, "tool") or "")
    )


def usage(reply, messages=(), content=None):
    given = reply.get("usage", {})
    if given == "estimated":
        sent = sum(len(m.get("content") or "") for m in messages if isinstance(m, dict))
        given = {"prompt_tokens": sent // 4, "completion_tokens": len(content or "") // 4}
    prompt, completion = int(given.get("prompt_tokens", 0)), int(given.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def next(self):
        with self.lock:
            self.n += 1
            return self.n


class Handler(JsonHandler):
    server_version = "scripted_model/1"

    def error(self, status, message, kind="invalid_request_error"):
        self.send_json(status, {"error": {"message": message, "type": kind}})

    def do_GET(self):
        if self.path in ("/health", "/v1/health"):
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        else:
            self.error(404, f"no route {self.path}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path not in ("/v1/chat/completions", "/chat/completions"):
            self.error(404, f"no route {self.path}")
            return
        self.server.log_request_body(raw)
        key = self.server.required_key
        if key is not None:
            sent = self.headers.get("Authorization", "")
            if sent != f"Bearer {key}":
                given = sent[len("Bearer "):] if sent.startswith("Bearer ") else sent
                self.error(401, f"Incorrect API key provided: {given}", "authentication_error")
                return
        try:
            body = json.loads(raw)
            messages = body["messages"]
            assert isinstance(messages, list)
        except Exception as e:  # noqa: BLE001 - any malformed body is the client's fault
            self.error(400, f"request body must be JSON with a messages list ({e})")
            return
        rule = self.server.take_rule(messages)
        if rule is None:
            self.error(400, f"scripted_model: no rule matched the latest user message "
                            f"{latest(messages, 'user')!r}")
            return
        reply = rule["reply"]
        if "status" in reply:
            time.sleep(float(reply.get("pause_seconds", 0)))
            self.error(int(reply["status"]), f"scripted_model: scripted status {reply['status']}",
                       "server_error")
            return
        content = fill(reply.get("content", ""), messages) if "content" in reply else None
        calls = []
        for call in reply.get("tool_calls", []):
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            calls.append({
                "id": f"call_{self.server.counter.next()}",
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            })
        pause = float(reply.get("pause_seconds", 0))
        if body.get("stream"):
            self.stream(content, calls, int(reply.get("chunk_chars", 8)), pause)
        else:
            time.sleep(pause)
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            self.send_json(200, {
                "id": f"chatcmpl-{self.server.counter.next()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", MODEL_ID),
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": usage(reply, messages, content),
            })

    def stream(self, content, calls, chunk_chars, pause=0.0):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        ident = f"chatcmpl-{self.server.counter.next()}"

        def chunk(delta, finish=None):
            event = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": MODEL_ID,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        text = content or ""
        step = max(1, chunk_chars)
        for i in range(0, len(text), step):
            chunk({"content": text[i:i + step]})
            if i == 0 and pause > 0:
                time.sleep(pause)
        for index, call in enumerate(calls):
            # The first delta names the call; its arguments follow in pieces.
            chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]})
            arguments = call["function"]["arguments"]
            for i in range(0, len(arguments), step):
                chunk({"tool_calls": [{"index": index,
                                       "function": {"arguments": arguments[i:i + step]}}]})
        chunk({}, "tool_calls" if calls else "stop")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, rules, log_path, required_key):
        super().__init__(address, Handler)
        self.rules = rules
        self.log_path = log_path
        self.log_lock = threading.Lock()
        self.required_key = required_key
        self.counter = Counter()
        self.used = [0] * len(rules)
        self.rules_lock = threading.Lock()

    def take_rule(self, messages):
        """The first matching rule with answers left, counted as used."""
        with self.rules_lock:
            for i, rule in enumerate(self.rules):
                if "times" in rule and self.used[i] >= rule["times"]:
                    continue
                if matches(rule.get("when", {}), messages):
                    self.used[i] += 1
                    return rule
        return None

    def handle_error(self, request, client_address):
        # A client that hangs up mid-answer (an interrupted chat) is normal.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def log_request_body(self, raw):
        line = raw.replace(b"\r", b" ").replace(b"\n", b" ")
        with self.log_lock, open(self.log_path, "ab") as f:
            f.write(line + b"\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--require-key")
    args = parser.parse_args()

    server = Server((args.host, args.port), load_rules(args.script), args.log, args.require_key)
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file, "w", encoding="utf-8") as f:
            f.write(f"{port}\n")
    print(f"scripted_model listening on http://{args.host}:{port}/v1", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
