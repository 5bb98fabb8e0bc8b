"""Self-test of testkit/model_provider.py (stdlib only).

Run: python3 -m unittest discover -s testkit -p 'test_*.py'
The prompt fixtures below are trimmed copies of what OpenViking 0.5.2 sends.
"""

import base64
import json
import os
import struct
import sys
import threading
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_provider as mp  # noqa: E402

EXTRACTION_SYSTEM = '''
You are a memory extraction and maintenance agent. Analyze the conversation together with the pre-fetched existing memories, then produce a single atomic plan ...
Available write methods for this extraction:
- sdk.create_preferences(*, peer_id: str, user: str, topic: str, content: str)
  - Identity fields (primary key): peer_id, user, topic. Calls with identical identity field values address the same memory object.
  - peer_id: Stable peer identity to write peer memory for. Use only when the memory describes a peer instead of the current user. Available peer_id values in this session: research-agent
- sdk.create_entities(*, peer_id: str, category: str, name: str, content: str)
- sdk.set_profile(*, peer_id: str, content: str)
'''

CONVERSATION = '''## Conversation History
**Session Time:** 2026-11-30 04:45 - 2026-11-30 04:45 (Monday)
Relative times (e.g., 'last week', 'next month') are based on Session Time, not today.

[0][user][user]: I prefer dark roast coffee and I live in Lisbon.
[1][assistant][research-agent]: Noted. I like tea.
[2][user][research-agent]: My favourite editor is Helix.
What is my name?

After exploring, analyze the conversation and output ALL memory write/edit/delete operations in a single response.'''

PREFETCH = '''# Existing memory loaded by prefetch; preferences_1 is already bound. Context data only; do not output this record.
{
  "object_name": "preferences_1",
  "memory_type": "preferences",
  "fields": {"user": "user", "topic": "lisbon", "content": "- Lives in Lisbon."}
}'''

MERGE_SYSTEM = '''You are a memory patch merge agent.
Available write methods for this extraction:
- sdk.create_preferences(*, user: str, topic: str, content: str)
  - Identity fields (primary key): user, topic. Calls with identical identity field values address the same memory object.
'''

PATCHES = '''# Memory File Patches

Patch 1
  content:
    @@ -0,0 +1 @@
    +- Prefers green tea with lemon in the afternoon.
  memory_type:
    @@ -0,0 +1 @@
    +preferences
  topic:
    @@ -0,0 +1 @@
    +green_tea_lemon
  user:
    @@ -0,0 +1 @@
    +user

Patch 2
  content:
    @@ -0,0 +1 @@
    +- Prefers green tea with lemon.
  topic:
    @@ -0,0 +1 @@
    +green_tea_lemon
  user:
    @@ -0,0 +1 @@
    +user'''


class EmbeddingTest(unittest.TestCase):
    def cos(self, a, b, dim=256):
        return sum(x * y for x, y in zip(mp.embed(a, dim), mp.embed(b, dim)))

    def test_normalised_and_deterministic(self):
        v = mp.embed("I prefer dark roast coffee", 64)
        self.assertEqual(len(v), 64)
        self.assertAlmostEqual(sum(x * x for x in v), 1.0, places=6)
        self.assertEqual(v, mp.embed("I prefer dark roast coffee", 64))
        self.assertAlmostEqual(sum(x * x for x in mp.embed("", 64)), 1.0)

    def test_similarity_ranks_related_text_first(self):
        self.assertGreater(self.cos("coffee preference", "- Prefers dark roast coffee."),
                           self.cos("coffee preference", "- Lives in Lisbon."))
        self.assertGreater(self.cos("where do I live", "- Lives in Lisbon."), 0.2)

    def test_base64_is_little_endian_float32(self):
        v = mp.embed("x y", 8)
        raw = base64.b64decode(mp.encode_vector(v, "base64"))
        self.assertEqual(list(struct.unpack("<8f", raw)), [struct.unpack("<f", struct.pack("<f", x))[0] for x in v])


class ExtractionTest(unittest.TestCase):
    def reply(self, *user_msgs):
        msgs = [{"role": "system", "content": EXTRACTION_SYSTEM}] + [{"role": "user", "content": m} for m in user_msgs]
        kind, text = mp.chat_reply(msgs)
        self.assertEqual(kind, "memory_extraction")
        return text

    def test_creates_self_and_peer_memories(self):
        text = self.reply(CONVERSATION)
        lines = text.splitlines()
        self.assertEqual(lines[-1], "sdk.commit()")
        self.assertIn('sdk.create_preferences(user="""user""", topic="""dark_roast_coffee""", '
                      'content="""- Prefers dark roast coffee.""")', lines)
        self.assertIn('sdk.create_preferences(user="""user""", topic="""lisbon""", content="""- Lives in Lisbon.""")',
                      lines)
        self.assertIn('sdk.create_preferences(user="""research-agent""", topic="""editor_helix""", '
                      'content="""- Their favourite editor is Helix.""", peer_id="""research-agent""")', lines)
        self.assertEqual(len(lines), 4)  # assistant text and the question are not memories

    def test_prefetched_identity_is_not_recreated(self):
        text = self.reply(CONVERSATION, PREFETCH)
        self.assertNotIn('topic="""lisbon"""', text)
        self.assertIn("dark_roast_coffee", text)

    def test_nothing_to_extract(self):
        self.assertEqual(self.reply(CONVERSATION.replace("I prefer dark roast coffee and I live in Lisbon.", "Hi")
                                    .replace("My favourite editor is Helix.", "Thanks")), "sdk.commit()")

    def test_third_person(self):
        self.assertEqual(mp.third_person("I also prefer tabs over spaces"), "Also prefers tabs over spaces")
        self.assertEqual(mp.third_person("I'm allergic to peanuts"), "Is allergic to peanuts")
        self.assertEqual(mp.split_statements("Remember that the deploy key rotates monthly."),
                         ["the deploy key rotates monthly"])


class OtherPromptsTest(unittest.TestCase):
    def test_patch_merge_unions_content(self):
        kind, text = mp.chat_reply([{"role": "system", "content": MERGE_SYSTEM}, {"role": "user", "content": PATCHES}])
        self.assertEqual(kind, "patch_merge")
        self.assertEqual(text, 'sdk.create_preferences(user="""user""", topic="""green_tea_lemon""", content="""'
                               '- Prefers green tea with lemon in the afternoon.\n- Prefers green tea with lemon.""")'
                               '\nsdk.commit()')

    def test_query_planner_echoes_current_message(self):
        prompt = "You are OpenViking's context query planner. ...\n\n### Current Message\ncoffee\n\n\nExternal ..."
        kind, text = mp.chat_reply([{"role": "user", "content": prompt}])
        self.assertEqual(kind, "query_planner")
        self.assertEqual(json.loads(text), {"queries": [{"query": "coffee", "context_type": "memory", "priority": 1}]})


class HttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mp.Handler.provider = mp.Provider(16, None)
        cls.httpd = mp.ThreadingHTTPServer(("127.0.0.1", 0), mp.Handler)
        cls.base = "http://127.0.0.1:%d" % cls.httpd.server_address[1]
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def test_embeddings_list_input(self):
        r = self.post("/v1/embeddings", {"model": "m", "input": ["a b", "c"], "encoding_format": "float"})
        self.assertEqual([d["index"] for d in r["data"]], [0, 1])
        self.assertEqual(len(r["data"][1]["embedding"]), 16)

    def test_chat_shape(self):
        r = self.post("/v1/chat/completions", {"model": "fake-chat", "messages": [{"role": "user", "content": "hello"}]})
        self.assertEqual(r["object"], "chat.completion")
        self.assertEqual(r["choices"][0]["message"]["content"], "hello")

    def test_models(self):
        with urllib.request.urlopen(self.base + "/v1/models", timeout=10) as resp:
            self.assertEqual({m["id"] for m in json.loads(resp.read())["data"]}, {"fake-embed", "fake-chat"})


if __name__ == "__main__":
    unittest.main()
