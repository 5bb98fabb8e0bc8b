"""What DeerFlow's users saw with memgate's local store, through DeerFlow's
own Gateway and memory tools (issue 33, part 4):

- after captured conversations ``GET /api/memory`` showed ``facts: []`` and
  empty summaries although those conversations were injected into new
  chats;
- ``memory_search`` answered ``confidence`` on no consistent scale (BM25:
  3e-06 for an exact match in one scope, 0.64 in another);
- ``lastUpdated`` moved backwards when the newest fact was deleted;
- ``confidence`` was not stored: every fact read 0.5 whatever was sent, and
  a ``PATCH`` of confidence alone answered 200 and changed nothing."""

from __future__ import annotations

import json
import uuid

import pytest
from deerflow_runs import manager
from langchain_core.messages import AIMessage, HumanMessage
from test_gateway import SUMMARIZATION, gateway_run, new_thread, owner_headers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def gateway(host, monkeypatch):
    monkeypatch.setenv("DEER_FLOW_AUTH_DISABLED", "1")
    host.write(extra=SUMMARIZATION)
    from app.gateway.app import app

    return app


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_the_memory_page_says_what_is_held_of_captured_conversations(host, gateway):
    """Two Gateway runs in two threads are captured; ``GET /api/memory``
    then says how many messages of how many conversations memgate holds,
    with when the latest was captured, and ``lastUpdated`` is set. Facts
    stay the explicit ones only."""
    from fastapi.testclient import TestClient

    headers = owner_headers(host)
    with TestClient(gateway) as client:
        empty = client.get("/api/memory", headers=headers).json()
        assert empty["history"]["recentMonths"]["summary"] == "" and empty["lastUpdated"] == "", empty
        for text in ("The blue cluster is patched on Fridays.", "I live in Lisbon."):
            gateway_run(client, text, new_thread(client, headers), headers)
            assert manager().wait_for_background(30.0)
        document = client.get("/api/memory", headers=headers)
        assert document.status_code == 200, document.text
        body = document.json()
        recent = body["history"]["recentMonths"]
        assert recent["summary"].startswith("memgate holds 4 captured messages from 2 conversations"), recent
        assert recent["updatedAt"] and recent["updatedAt"] in recent["summary"]
        assert body["lastUpdated"] == recent["updatedAt"]
        assert body["facts"] == []

        cleared = client.delete("/api/memory", headers=headers).json()
        assert cleared["history"]["recentMonths"]["summary"] == "", "erased: nothing is held"


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_last_updated_never_moves_backwards_after_a_delete(host, gateway):
    """Create two facts, delete the newer one through the Gateway: the
    document's ``lastUpdated`` is the deletion's time, not the older fact's."""
    from fastapi.testclient import TestClient

    headers = owner_headers(host)
    with TestClient(gateway) as client:
        client.post("/api/memory/facts", json={"content": "Deploys need a change ticket."}, headers=headers)
        created = client.post("/api/memory/facts", json={"content": "Releases ship on Thursdays."}, headers=headers)
        assert created.status_code == 200, created.text
        newest = created.json()
        newer_id = next(f["id"] for f in newest["facts"] if f["content"] == "Releases ship on Thursdays.")
        deleted = client.delete(f"/api/memory/facts/{newer_id}", headers=headers)
        assert deleted.status_code == 200, deleted.text
        after = deleted.json()
        assert [f["content"] for f in after["facts"]] == ["Deploys need a change ticket."]
        assert after["lastUpdated"] >= newest["lastUpdated"], (newest["lastUpdated"], after["lastUpdated"])
        assert client.get("/api/memory", headers=headers).json()["lastUpdated"] == after["lastUpdated"]


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_confidence_is_stored_and_a_patch_of_confidence_alone_changes_it(host, gateway):
    """A fact saved through the Gateway with confidence 0.9 reads 0.9 (not
    DeerFlow's 0.5 default); a ``PATCH`` of confidence alone changes it and
    nothing else; the value survives a new request."""
    from fastapi.testclient import TestClient

    headers = owner_headers(host)
    with TestClient(gateway) as client:
        created = client.post(
            "/api/memory/facts", json={"content": "Prefers metric units.", "confidence": 0.9}, headers=headers
        )
        assert created.status_code == 200, created.text
        [fact] = created.json()["facts"]
        assert fact["confidence"] == 0.9, fact
        patched = client.patch(f"/api/memory/facts/{fact['id']}", json={"confidence": 0.3}, headers=headers)
        assert patched.status_code == 200, patched.text
        [after] = client.get("/api/memory", headers=headers).json()["facts"]
        assert after["confidence"] == 0.3, after
        assert (after["id"], after["content"], after["category"]) == (fact["id"], fact["content"], fact["category"])


class _Runtime:
    def __init__(self, user_id: str):
        self.context = {"user_id": user_id}


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_memory_search_confidence_means_the_same_in_every_scope(host):
    """DeerFlow's ``memory_search`` tool: an exact match reads 1.0 whether
    the scope holds one memory or many that share its words, a hit holding
    half of the query's words 0.5, and every value is in 0..1 (the store's
    BM25 ``score`` differs between the two scopes)."""
    from deerflow.agents.memory.tools import memory_search_tool

    host.write(mode="tool")

    def search(user: str, query: str) -> list[dict]:
        return json.loads(memory_search_tool.func(runtime=_Runtime(user), query=query))["results"]

    small, crowded = f"u{uuid.uuid4().hex[:6]}", f"u{uuid.uuid4().hex[:6]}"
    fact = "Refunds are computed in integer cents."
    manager().create_fact(fact, user_id=small)
    manager().create_fact(fact, user_id=crowded)
    for i in range(12):
        manager().add(f"t{i}", [HumanMessage(f"Refunds batch {i} computed overnight.", id=f"h{i}"),
                                AIMessage("Noted.", id=f"a{i}")], user_id=crowded)

    exact = {user: next(h for h in search(user, "refunds computed integer cents") if h["content"] == fact)
             for user in (small, crowded)}
    assert exact[small]["confidence"] == exact[crowded]["confidence"] == 1.0, exact
    assert exact[small]["score"] != exact[crowded]["score"], "the raw relevance depends on the scope"
    half = next(h for h in search(small, "refunds in dollars") if h["content"] == fact)
    assert half["confidence"] == 0.5, half
    for hit in search(crowded, "refunds computed"):
        assert 0.0 <= hit["confidence"] <= 1.0, hit
