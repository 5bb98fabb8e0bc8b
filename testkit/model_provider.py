#!/usr/bin/env python3
"""Deterministic OpenAI-compatible model provider for memgate integration tests.

Standard library only (http.server.ThreadingHTTPServer). Serves, under ``/v1``
(the prefix is optional):

* ``POST /v1/embeddings``       hashed bag-of-words vectors, L2-normalised.
* ``POST /v1/chat/completions`` scripted answers to the prompts OpenViking sends.
* ``GET  /v1/models``           the two fake model ids (fake-embed, fake-chat).
* ``GET  /health``              ``{"status":"ok","dim":N}`` (for start-up polling).

Configuration (command-line flag, else environment variable, else default):

    --host       MODEL_PROVIDER_HOST       127.0.0.1
    --port       MODEL_PROVIDER_PORT       0 (pick a free port)
    --dim        MODEL_PROVIDER_DIM        64
    --log        MODEL_PROVIDER_LOG        no request log; else a JSONL file, one
                                           line per request (chat lines hold the
                                           full request and the reply)
    --port-file  MODEL_PROVIDER_PORT_FILE  write the bound port there (atomically)
    --planner    MODEL_PROVIDER_PLANNER    echo (default) or empty, see below

Embeddings. The text is lower-cased and split on anything that is not a letter
or digit; English stop words (plus "user": OpenViking embeds the owner name
with every memory) are dropped; every remaining token contributes its full
form and its first four characters (a poor man's stemmer: "live"/"lives",
"prefer"/"preference" overlap). Each feature is hashed (sha256) into one of
``dim`` buckets with weight 1 and the vector is L2-normalised; text without
features maps to a fixed unit vector. ``encoding_format`` ``base64``
(little-endian float32, the OpenAI SDK default) and ``float`` are supported;
``input`` is a string or a list of strings (token ids give 400). A request
``dimensions`` field overrides the configured dimension.

Chat. The prompt kind is recognised from the prompt text:

* OpenViking memory extraction ("memory extraction and maintenance agent"):
  the reply is a program in OpenViking's restricted "memory SDK" language.
  Every first-person statement ("I ...", "My ...", "I'm ...") and every
  "remember that ..." in a *user* message of the "## Conversation History"
  block becomes one memory, ``sdk.create_preferences(user=..., topic=...,
  content=...)`` (argument names are read from the signatures listed in the
  system prompt). ``user`` is the speaker shown in the conversation line
  (``[i][user][<speaker>]``: the peer id, else the role), ``topic`` is up to
  three content words joined by "_", ``content`` a third-person bullet
  ("- Prefers dark roast coffee."). A message whose speaker is one of the
  session's peer ids (listed as "Available peer_id values in this session")
  gets a ``peer_id=`` argument with that peer id, which makes OpenViking write a peer-scoped
  memory. Memories the server pre-fetched with the same identity are not
  re-created: a new bullet is appended with ``<obj>.content.update(...)``.
  The program ends with ``sdk.commit()``.
* OpenViking patch merge ("memory patch merge agent", sent when concurrent
  commits propose the same memory): every proposed patch is applied, the
  content lines are unioned per memory identity.
* OpenViking query planner ("context query planner", sent by /search when the
  session has live messages): with ``--planner echo`` the current message is
  returned as one memory query. ``--planner empty`` answers
  ``{"queries":[]}``, which makes OpenViking 0.5.2 return no hits at all.
* Anything else: the first 200 characters of the last user message.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import re
import struct
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from json_http import JsonHandler

EMBED_MODEL = "fake-embed"
CHAT_MODEL = "fake-chat"

STOP_WORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being
    am do does did i me my mine we us our you your it its this that these those there here
    so too very just also not no yes please thanks thank ok okay what which where when who
    whom whose how why user""".split()
)

TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)


# --------------------------------------------------------------------------- embeddings


def features(text: str) -> list[str]:
    out: list[str] = []
    for tok in TOKEN_RE.findall(text.lower()):
        if tok in STOP_WORDS:
            continue
        out.append("w:" + tok)
        out.append("p:" + tok[:4])
    return out


def embed(text: str, dim: int) -> list[float]:
    vec = [0.0] * dim
    for feat in features(text):
        h = int.from_bytes(hashlib.sha256(feat.encode("utf-8")).digest()[:8], "little")
        vec[h % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


def encode_vector(vec: list[float], encoding_format: str):
    if encoding_format == "base64":
        return base64.b64encode(struct.pack("<%df" % len(vec), *vec)).decode("ascii")
    return vec


# --------------------------------------------------------------------------- chat


def message_text(msg: dict) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def classify(messages: list[dict]) -> str:
    head = "\n".join(message_text(m) for m in messages[:2])[:4000].lower()
    if "memory patch merge agent" in head:
        return "patch_merge"
    if "context query planner" in head:
        return "query_planner"
    if "memory extraction" in head:
        return "memory_extraction"
    return "other"


# Conversation lines as OpenViking renders them in the extraction prompt:
#   [<index>][<role>][<speaker>]: <text>
# where <speaker> is the message's peer_id, or its role when it has none, e.g.
#   [0][user][user]: I prefer dark roast coffee.
#   [2][user][research-agent]: My favourite editor is Helix.
CONV_HEADER_RE = re.compile(r"^\[(?P<idx>\d+)\]\[(?P<role>[^\]\n]+)\]\[(?P<speaker>[^\]\n]+)\]: ?", re.MULTILINE)

# sdk.create_<type>(*, peer_id: str, user: str, topic: str, content: str) in the system prompt.
SIG_RE = re.compile(r"sdk\.create_(?P<type>[a-z_]+)\((?P<args>[^)]*)\)")
PEERS_RE = re.compile(r"Available peer_id values in this session: *([^\n]*)")
PREFETCH_RE = re.compile(r"# Existing memory loaded by prefetch; (?P<obj>[A-Za-z_][A-Za-z0-9_]*) is already bound\.[^\n]*\n(?P<json>\{.*)", re.DOTALL)

FIRST_PERSON_RE = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine)\b", re.IGNORECASE)
REMEMBER_RE = re.compile(r"^(please\s+)?remember\s+(that\s+)?", re.IGNORECASE)
CONTENT_ARGS = ("content", "text", "description", "value", "summary")
TOPIC_ARGS = ("topic", "name", "title", "key", "event_name")
TOPIC_SKIP = frozenset(
    """prefer prefers preferred like likes love loves favourite favorite live lives use uses using work works
    always usually really have has want wants need needs enjoy enjoys think remember""".split()
)


def parse_signatures(system: str) -> dict[str, list[str]]:
    sigs: dict[str, list[str]] = {}
    for m in SIG_RE.finditer(system):
        args = []
        for raw in m.group("args").split(","):
            name = raw.strip().split("=")[0].split(":")[0].strip()
            if name and re.fullmatch(r"[a-z_][a-z0-9_]*", name):
                args.append(name)
        sigs.setdefault(m.group("type"), args)
    return sigs


def parse_conversation(text: str) -> list[dict]:
    """Return [{idx, role, speaker, text}] from the '## Conversation History' block."""
    start = text.find("## Conversation History")
    if start < 0:
        return []
    block = text[start:]
    tail = block.find("\n\nAfter exploring, analyze the conversation")
    if tail >= 0:
        block = block[:tail]
    heads = list(CONV_HEADER_RE.finditer(block))
    msgs = []
    for i, m in enumerate(heads):
        body_end = heads[i + 1].start() if i + 1 < len(heads) else len(block)
        msgs.append({
            "idx": int(m.group("idx")),
            "role": m.group("role").strip().lower(),
            "speaker": m.group("speaker").strip(),
            "text": block[m.end():body_end].strip(),
        })
    return msgs


def parse_prefetched(messages: list[dict]) -> list[tuple[str, dict]]:
    """Existing memory objects the server bound for this extraction: [(object_name, record)]."""
    out = []
    for msg in messages:
        m = PREFETCH_RE.search(message_text(msg))
        if not m:
            continue
        try:
            record, _ = json.JSONDecoder().raw_decode(m.group("json"))
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append((m.group("obj"), record))
    return out


def split_statements(text: str) -> list[str]:
    """User statements worth remembering: first-person sentences ("I X and I Y" gives two)
    and "remember that ..." requests. Questions are skipped."""
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text.strip()):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?"):
            continue
        explicit = bool(REMEMBER_RE.match(sentence))
        sentence = REMEMBER_RE.sub("", sentence)
        pieces = re.split(r"\s*(?:,\s*)?\band\s+(?=(?:i|my|i'm|i've|i'll)\b)", sentence, flags=re.IGNORECASE)
        for piece in pieces:
            piece = piece.strip().rstrip(".!").strip()
            if len(TOKEN_RE.findall(piece)) < 2:
                continue
            if FIRST_PERSON_RE.search(piece) or explicit:
                out.append(piece)
    return out


def third_person(statement: str) -> str:
    """'I prefer dark roast coffee' -> 'Prefers dark roast coffee'."""
    s = statement
    adverb = ""
    m = re.match(r"^(i)\s+(also|really|usually|always|never|often|still|just|mostly|generally|only)\s+", s, re.IGNORECASE)
    if m:
        adverb = m.group(2).lower()
        s = "I " + s[m.end():]
    rules = [
        (r"^i am\b", "Is"), (r"^i'm\b", "Is"), (r"^i've\b", "Has"), (r"^i have\b", "Has"),
        (r"^i'll\b", "Will"), (r"^i'd\b", "Would"), (r"^i (don't|do not)\b", "Does not"),
        (r"^i can't\b", "Cannot"), (r"^i\s+(\w+)", None), (r"^my\b", "Their"),
    ]
    for pat, rep in rules:
        m = re.match(pat, s, flags=re.IGNORECASE)
        if not m:
            continue
        if rep is None:
            verb = m.group(1).lower()
            if verb.endswith(("s", "sh", "ch", "x", "o", "z")):
                conj = verb + "es"
            elif verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
                conj = verb[:-1] + "ies"
            else:
                conj = verb + "s"
            s = conj + s[m.end():]
        else:
            s = rep + s[m.end():]
        break
    if adverb:
        s = adverb + " " + s[:1].lower() + s[1:]
    s = re.sub(r"\bmy\b", "their", s, flags=re.IGNORECASE)
    s = re.sub(r"\bmine\b", "theirs", s, flags=re.IGNORECASE)
    s = re.sub(r"\b(I|me)\b", "them", s)
    return s[:1].upper() + s[1:]


def topic_for(statement: str) -> str:
    """Deterministic topic: up to three content words, lowercase_with_underscores."""
    words = [w for w in TOKEN_RE.findall(statement.lower()) if w not in STOP_WORDS and len(w) > 1]
    content = [w for w in words if w not in TOPIC_SKIP] or words or ["note"]
    return "_".join(content[:3])


def dsl_str(value: str) -> str:
    value = value.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if value.endswith('"'):
        value = value[:-1] + '\\"'
    return '"""' + value + '"""'


def choose_type(sigs: dict[str, list[str]]) -> tuple[str, list[str]] | None:
    for preferred in ("preferences", "preference"):
        if preferred in sigs:
            return preferred, sigs[preferred]
    for name, args in sigs.items():
        if "ranges" not in args:
            return name, args
    return None


def extraction_reply(messages: list[dict]) -> str:
    """Build the memory-SDK program for one extraction round."""
    if any(m.get("role") == "assistant" for m in messages):
        # A follow-up round after the server ran an earlier reply: nothing more to add.
        return "sdk.commit()"
    system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
    everything = "\n".join(message_text(m) for m in messages)
    chosen = choose_type(parse_signatures(system))
    peers_m = PEERS_RE.search(system)
    allowed_peers = {p.strip() for p in peers_m.group(1).split(",")} if peers_m else set()
    allowed_peers.discard("")
    existing = {}
    if chosen is not None:
        for obj, record in parse_prefetched(messages):
            if record.get("memory_type") != chosen[0]:
                continue
            fields = record.get("fields") or {}
            key = (str(fields.get("user") or ""), str(fields.get("topic") or ""), str(fields.get("peer_id") or ""))
            existing[key] = (obj, str(fields.get("content") or ""))
    lines: list[str] = []
    updates: dict[str, list[str]] = {}
    seen = set()
    for msg in parse_conversation(everything):
        if msg["role"] != "user" or chosen is None:
            continue
        peer = msg["speaker"] if msg["speaker"] in allowed_peers else None
        owner = msg["speaker"]
        for statement in split_statements(msg["text"]):
            type_name, arg_names = chosen
            topic = topic_for(statement)
            bullet = "- " + third_person(statement) + "."
            key = (owner, topic, peer or "")
            if key in seen:
                continue
            seen.add(key)
            if key in existing:
                obj, content = existing[key]
                if bullet not in content:
                    updates.setdefault(obj, [content.rstrip()]).append(bullet)
                continue
            args = []
            for name in arg_names:
                if name in CONTENT_ARGS:
                    args.append(f"{name}={dsl_str(bullet)}")
                elif name in TOPIC_ARGS:
                    args.append(f"{name}={dsl_str(topic)}")
                elif name in ("user", "user_id", "owner"):
                    args.append(f"{name}={dsl_str(owner)}")
                elif name == "category":
                    args.append(f"{name}={dsl_str('general')}")
            if peer and "peer_id" in arg_names:
                args.append(f"peer_id={dsl_str(peer)}")
            lines.append(f"sdk.create_{type_name}({', '.join(args)})")
    for obj, parts in updates.items():
        lines.append(f"{obj}.content.update({dsl_str(chr(10).join(p for p in parts if p))})")
    lines.append("sdk.commit()")
    return "\n".join(lines)


IDENTITY_RE = re.compile(r"sdk\.create_(?P<type>[a-z_]+)\([^)]*\)\n\s*- Identity fields \(primary key\): (?P<fields>[^.\n]+)")
PATCH_HEAD_RE = re.compile(r"^Patch (\d+)\s*$", re.MULTILINE)


def parse_patches(text: str) -> list[dict]:
    """Parse '# Memory File Patches' into [{field: {"added": [...], "removed": [...], "kept": [...]}}]."""
    start = text.find("# Memory File Patches")
    if start < 0:
        return []
    block = text[start:]
    heads = list(PATCH_HEAD_RE.finditer(block))
    patches = []
    for i, m in enumerate(heads):
        body = block[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(block)]
        fields: dict[str, dict[str, list[str]]] = {}
        current = None
        for line in body.splitlines():
            fm = re.match(r"^  ([A-Za-z_][A-Za-z0-9_]*):\s*$", line)
            if fm:
                current = fields.setdefault(fm.group(1), {"added": [], "removed": [], "kept": []})
                continue
            if current is None or not line.startswith("    "):
                continue
            diff_line = line[4:]
            if diff_line.startswith("@@"):
                continue
            if diff_line.startswith("+"):
                current["added"].append(diff_line[1:])
            elif diff_line.startswith("-"):
                current["removed"].append(diff_line[1:])
            elif diff_line.startswith(" "):
                current["kept"].append(diff_line[1:])
        patches.append(fields)
    return patches


def merge_lines(*groups: list[str]) -> list[str]:
    out: list[str] = []
    for group in groups:
        for line in group:
            if line.strip() and line not in out:
                out.append(line)
    return out


def patch_merge_reply(messages: list[dict]) -> str:
    """Apply every proposed patch: union the content lines per target memory object."""
    system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
    everything = "\n".join(message_text(m) for m in messages)
    sigs = parse_signatures(system)
    if not sigs:
        return "sdk.commit()"
    type_name = next(iter(sigs))
    arg_names = sigs[type_name]
    ident_m = IDENTITY_RE.search(system)
    identity = [f.strip() for f in ident_m.group("fields").split(",")] if ident_m else [
        a for a in arg_names if a not in CONTENT_ARGS]
    content_arg = next((a for a in arg_names if a in CONTENT_ARGS), "content")
    peers_m = PEERS_RE.search(system)
    peers = [p.strip() for p in peers_m.group(1).split(",") if p.strip()] if peers_m else []
    bound = [(obj, rec.get("fields") or {}) for obj, rec in parse_prefetched(messages)
             if rec.get("memory_type") == type_name]

    targets: dict[str, dict] = {}  # key -> {"obj": name|None, "fields": {...}, "lines": [...]}
    order: list[str] = []

    def target(key, obj, fields, base_lines):
        if key not in targets:
            targets[key] = {"obj": obj, "fields": fields, "lines": list(base_lines), "orig": list(base_lines)}
            order.append(key)
        return targets[key]

    for patch in parse_patches(everything):
        content = patch.get(content_arg, {"added": [], "removed": [], "kept": []})
        ident = {f: "\n".join(patch[f]["added"]) for f in identity if f in patch and patch[f]["added"]}
        if "peer_id" in identity and "peer_id" not in ident and "peer_id" in arg_names and len(peers) == 1:
            ident["peer_id"] = peers[0]
        obj = None
        full_identity = all(f in ident for f in identity if f != "peer_id" or "peer_id" in arg_names)
        if full_identity:
            for name, fields in bound:
                if all(str(fields.get(f) or "") == ident.get(f, "") for f in identity):
                    obj = name
                    break
        else:
            # An edit of an existing object: find the one whose content holds the removed/kept lines.
            anchors = content["removed"] + content["kept"]
            for name, fields in bound:
                existing = str(fields.get(content_arg) or "").splitlines()
                if anchors and all(a in existing for a in anchors):
                    obj = name
                    break
            if obj is None:
                continue
        if obj is not None:
            fields = dict(next(f for n, f in bound if n == obj))
            t = target("obj:" + obj, obj, fields, str(fields.get(content_arg) or "").splitlines())
        else:
            t = target("new:" + json.dumps(ident, sort_keys=True), None, ident, [])
        t["lines"] = [l for l in t["lines"] if l not in content["removed"]]
        t["lines"] = merge_lines(t["lines"], content["added"])

    lines = []
    for key in order:
        t = targets[key]
        text = "\n".join(t["lines"])
        if t["obj"] is not None:
            if t["lines"] != t["orig"] and text.strip():
                lines.append(f"{t['obj']}.{content_arg}.update({dsl_str(text)})")
            continue
        if not text.strip():
            continue
        args = [f"{name}={dsl_str(t['fields'][name])}" for name in arg_names
                if name in t["fields"] and name != content_arg]
        args.append(f"{content_arg}={dsl_str(text)}")
        lines.append(f"sdk.create_{type_name}({', '.join(args)})")
    lines.append("sdk.commit()")
    return "\n".join(lines)


PLANNER_MODE = "echo"  # "echo" or "empty"; set from --planner / MODEL_PROVIDER_PLANNER
CURRENT_MESSAGE_RE = re.compile(r"### Current Message\n(?P<msg>.*?)(?:\n\n\n|\n## |\Z)", re.DOTALL)


def planner_reply(messages: list[dict]) -> str:
    """OpenViking's query planner. An empty plan makes /search return nothing at all
    (observed on 0.5.2), so by default the current message is echoed as one memory query."""
    if PLANNER_MODE == "empty":
        return '{"queries":[]}'
    text = "\n".join(message_text(m) for m in messages)
    m = CURRENT_MESSAGE_RE.search(text)
    query = " ".join((m.group("msg") if m else "").split())[:500]
    if not query:
        return '{"queries":[]}'
    return json.dumps({"queries": [{"query": query, "context_type": "memory", "priority": 1}]})


def chat_reply(messages: list[dict]) -> tuple[str, str]:
    kind = classify(messages)
    if kind == "memory_extraction":
        return kind, extraction_reply(messages)
    if kind == "patch_merge":
        return kind, patch_merge_reply(messages)
    if kind == "query_planner":
        return kind, planner_reply(messages)
    last_user = ""
    for m in reversed(messages):
        if m.get("role") == "user":
            last_user = message_text(m)
            break
    summary = " ".join(last_user.split())[:200]
    return kind, summary or "OK."


# --------------------------------------------------------------------------- HTTP


class Provider:
    def __init__(self, dim: int, log_path: str | None):
        self.dim = dim
        self.log_path = log_path
        self.lock = threading.Lock()
        self.counter = 0

    def log(self, record: dict) -> None:
        if not self.log_path:
            return
        line = json.dumps(record, ensure_ascii=False, sort_keys=True)
        with self.lock:
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def next_id(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter


class Handler(JsonHandler):
    server_version = "memgate-model-provider/1"
    provider: Provider  # set on the class by main()

    def _error(self, status: int, message: str) -> None:
        self.send_json(status, {"error": {"message": message, "type": "invalid_request_error", "code": None}})

    def _path(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        return path or "/"

    def do_GET(self):
        path = self._path()
        self.provider.log({"ts": time.time(), "method": "GET", "path": self.path})
        if path in ("/health", "/"):
            self.send_json(200, {"status": "ok", "dim": self.provider.dim})
        elif path == "/models":
            now = 0
            self.send_json(200, {"object": "list", "data": [
                {"id": EMBED_MODEL, "object": "model", "created": now, "owned_by": "memgate-testkit"},
                {"id": CHAT_MODEL, "object": "model", "created": now, "owned_by": "memgate-testkit"},
            ]})
        else:
            self._error(404, f"unknown route {self.path}")

    def do_POST(self):
        path = self._path()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self.provider.log({"ts": time.time(), "method": "POST", "path": self.path, "error": "bad json"})
            self._error(400, "request body is not valid JSON")
            return
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
            return
        if path == "/embeddings":
            self._embeddings(body)
        elif path == "/chat/completions":
            self._chat(body)
        else:
            self.provider.log({"ts": time.time(), "method": "POST", "path": self.path, "request": body})
            self._error(404, f"unknown route {self.path}")

    def _embeddings(self, body: dict) -> None:
        inputs = body.get("input")
        if isinstance(inputs, str):
            texts = [inputs]
        elif isinstance(inputs, list) and all(isinstance(x, str) for x in inputs):
            texts = inputs
        else:
            self._error(400, "input must be a string or a list of strings")
            return
        dim = body.get("dimensions") or self.provider.dim
        if not isinstance(dim, int) or dim < 1 or dim > 8192:
            self._error(400, "dimensions must be an integer between 1 and 8192")
            return
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            self._error(400, "encoding_format must be float or base64")
            return
        data = [
            {"object": "embedding", "index": i, "embedding": encode_vector(embed(t, dim), fmt)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(max(1, len(TOKEN_RE.findall(t))) for t in texts)
        self.provider.log({"ts": time.time(), "method": "POST", "path": self.path, "kind": "embeddings",
                           "model": body.get("model"), "encoding_format": fmt, "dim": dim, "input": texts})
        self.send_json(200, {"object": "list", "data": data, "model": body.get("model") or EMBED_MODEL,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _chat(self, body: dict) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            self._error(400, "messages must be a list of objects")
            return
        kind, content = chat_reply(messages)
        n = self.provider.next_id()
        prompt_tokens = sum(len(message_text(m).split()) for m in messages)
        completion_tokens = len(content.split())
        self.provider.log({"ts": time.time(), "method": "POST", "path": self.path, "kind": kind,
                           "request": body, "reply": content})
        if body.get("stream"):
            self._error(400, "stream is not supported by the memgate test provider")
            return
        self.send_json(200, {
            "id": f"chatcmpl-memgate-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or CHAT_MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default=env.get("MODEL_PROVIDER_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(env.get("MODEL_PROVIDER_PORT", "0")))
    ap.add_argument("--dim", type=int, default=int(env.get("MODEL_PROVIDER_DIM", "64")))
    ap.add_argument("--log", default=env.get("MODEL_PROVIDER_LOG") or None)
    ap.add_argument("--port-file", default=env.get("MODEL_PROVIDER_PORT_FILE") or None)
    ap.add_argument("--planner", choices=("echo", "empty"), default=env.get("MODEL_PROVIDER_PLANNER", "echo"),
                    help="query-planner answer: echo the current message as a memory query, or an empty plan")
    args = ap.parse_args(argv)
    global PLANNER_MODE
    PLANNER_MODE = args.planner
    if args.dim < 1:
        ap.error("--dim must be positive")

    Handler.provider = Provider(args.dim, args.log)
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"memgate model provider on http://{args.host}:{port}/v1 dim={args.dim}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
