"""The local manager's memory document and fact operations, driven the way
DeerFlow drives them: tool mode's four memory tools (§4) and the Gateway's
``/api/memory`` calls (get, import, export), with runtime-scoped identity."""

from __future__ import annotations

import json

import pytest

from deerflow_host import Runtime, memory_add, memory_delete, memory_search, memory_update
from memgate.deerflow import LocalMemoryManager

ALICE = Runtime(context={"user_id": "alice", "thread_id": "t1"})
BOB = Runtime(context={"user_id": "bob", "thread_id": "t2"})
CONVENTION = "Refunds in integer cents, tested with pytest."


@pytest.fixture
def manager(tmp_path):
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)}, mode="tool")
    yield m
    m.close()


def contents(document):
    return [f["content"] for f in document["facts"]]


def test_memory_tools_add_search_update_delete_on_the_local_store(manager):
    added = json.loads(memory_add(manager, ALICE, "  Refunds in integer cents.  ", category="convention"))
    assert added["status"] == "added" and added["fact_id"]
    fact_id = added["fact_id"]

    document = manager.get_memory(user_id="alice")
    assert document["facts"] == [
        {"id": fact_id, "content": "Refunds in integer cents.", "category": "convention", "confidence": 0.7,
         "createdAt": document["facts"][0]["createdAt"], "updatedAt": document["facts"][0]["createdAt"]}
    ]
    assert document["lastUpdated"].startswith("20")
    assert json.loads(memory_add(manager, ALICE, "refunds in INTEGER cents.")) == {"error": "Duplicate fact"}

    found = json.loads(memory_search(manager, ALICE, "refunds cents", category="convention"))
    assert found["count"] == 1 and found["results"][0]["id"] == fact_id

    assert json.loads(memory_update(manager, ALICE, fact_id, content=CONVENTION)) == {
        "fact_id": fact_id, "status": "updated"}
    assert contents(manager.get_memory(user_id="alice")) == [CONVENTION]
    assert manager.get_memory(user_id="alice")["facts"][0]["category"] == "convention"
    assert CONVENTION in manager.get_context("alice")

    assert json.loads(memory_delete(manager, ALICE, fact_id)) == {"fact_id": fact_id, "status": "deleted"}
    assert manager.get_memory(user_id="alice")["facts"] == []
    assert "integer cents" not in manager.get_context("alice", query="refunds integer cents")


def test_confidence_is_stored_and_revised_alone(manager):
    """DeerMem's ``confidence`` is kept with the fact; updating it alone is a
    revision (not a silent no-op), and a bad one in an import names the fact."""
    _, fact_id = manager.create_fact("Prefers tea.", confidence=0.8, user_id="alice")
    assert manager.get_memory(user_id="alice")["facts"][0]["confidence"] == 0.8
    manager.update_fact(fact_id, confidence=0.25, user_id="alice")
    [fact] = manager.get_memory(user_id="alice")["facts"]
    assert (fact["content"], fact["confidence"]) == ("Prefers tea.", 0.25)
    with pytest.raises(ValueError, match=r"facts\[0\]\.confidence"):
        manager.import_memory({"facts": [{"content": "New.", "confidence": 2}]}, user_id="alice")
    assert contents(manager.get_memory(user_id="alice")) == ["Prefers tea."]


def test_unknown_fact_ids_are_not_found(manager):
    assert json.loads(memory_update(manager, ALICE, "mem_404", content="x"))["error"].startswith("Fact not found")
    assert json.loads(memory_delete(manager, ALICE, "mem_404"))["error"].startswith("Fact not found")
    with pytest.raises(KeyError):
        manager.update_fact("mem_404", confidence=0.9, user_id="alice")


def test_a_deleted_fact_is_gone_to_the_host(manager):
    fact_id = json.loads(memory_add(manager, ALICE, "Uses the staging cluster."))["fact_id"]
    assert json.loads(memory_delete(manager, ALICE, fact_id))["status"] == "deleted"
    assert json.loads(memory_delete(manager, ALICE, fact_id))["error"].startswith("Fact not found")
    assert json.loads(memory_update(manager, ALICE, fact_id, content="x"))["error"].startswith("Fact not found")
    # Saying it again stores it anew.
    again = json.loads(memory_add(manager, ALICE, "Uses the staging cluster."))
    assert again["status"] == "added" and again["fact_id"] != fact_id


def test_facts_belong_to_one_user_and_agent(manager):
    fact_id = json.loads(memory_add(manager, ALICE, "Deploys go through Helm."))["fact_id"]
    assert manager.get_memory(user_id="bob")["facts"] == []
    assert manager.get_memory(user_id="alice", agent_name="researcher")["facts"] == []
    assert json.loads(memory_delete(manager, BOB, fact_id))["error"].startswith("Fact not found")
    assert json.loads(memory_update(manager, BOB, fact_id, content="hijacked"))["error"].startswith("Fact not found")
    assert contents(manager.get_memory(user_id="alice")) == ["Deploys go through Helm."]


def test_bad_fact_arguments_name_the_rule_and_keep_what_was_stored(manager):
    _, fact_id = manager.create_fact("Lives in Lisbon.", "personal", user_id="alice")
    assert fact_id
    for call, words in [
        (lambda: manager.create_fact("   ", user_id="alice"), "content"),
        (lambda: manager.create_fact("x", confidence=1.5, user_id="alice"), "confidence"),
        (lambda: manager.create_fact("x", "k" * 129, user_id="alice"), "kind"),
        (lambda: manager.update_fact(fact_id, content="  ", user_id="alice"), "text"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()
    assert contents(manager.get_memory(user_id="alice")) == ["Lives in Lisbon."]
    assert json.loads(memory_add(manager, ALICE, "   ")) == {"error": "empty content"}


def test_a_category_only_update_keeps_the_content(manager):
    _, fact_id = manager.create_fact("Prefers short answers.", user_id="alice")
    assert manager.get_memory(user_id="alice")["facts"][0]["category"] == "context"
    manager.update_fact(fact_id, category="preference", user_id="alice")
    [fact] = manager.get_memory(user_id="alice")["facts"]
    assert (fact["id"], fact["content"], fact["category"]) == (fact_id, "Prefers short answers.", "preference")


def test_import_merges_a_deermem_document_and_refuses_a_bad_one_whole(manager):
    deermem = {
        "version": "1.0",
        "user": {"workContext": {"summary": "", "updatedAt": ""}},
        "facts": [
            {"id": "fact_1", "content": "Works on the billing team.", "category": "context", "confidence": 0.9},
            {"id": "fact_2", "content": "Uses pytest.", "category": "preference"},
        ],
    }
    merged = manager.import_memory(deermem, user_id="alice")
    assert sorted(contents(merged)) == ["Uses pytest.", "Works on the billing team."]
    confidence = {f["content"]: f["confidence"] for f in merged["facts"]}
    assert confidence == {"Works on the billing team.": 0.9, "Uses pytest.": 1.0}
    again = manager.import_memory(deermem, user_id="alice")
    assert len(again["facts"]) == 2
    assert manager.export_memory(user_id="alice") == manager.get_memory(user_id="alice")

    bad = {"facts": [{"content": "Would be new."}, {"content": ""}]}
    with pytest.raises(ValueError, match=r"facts\[1\]\.content"):
        manager.import_memory(bad, user_id="alice")
    with pytest.raises(ValueError, match="memory_data.facts must be a list"):
        manager.import_memory({"facts": "nope"}, user_id="alice")
    assert sorted(contents(manager.get_memory(user_id="alice"))) == ["Uses pytest.", "Works on the billing team."]


def test_an_empty_store_gives_the_gateway_an_empty_document(manager):
    document = manager.get_memory(user_id="alice")
    assert document["facts"] == [] and document["lastUpdated"] == ""
    assert set(document) == {"version", "lastUpdated", "user", "history", "facts"}
    assert manager.reload_memory(user_id="alice") == document


def _files_containing(storage, needle: bytes):
    db = storage / "local" / "memgate.sqlite3"
    files = [p for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")) if p.exists()]
    return [p.name for p in files if needle in p.read_bytes() or needle.lower() in p.read_bytes()]


def test_clear_memory_erases_for_good_and_only_the_callers(tmp_path):
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    try:
        m.create_fact("alice keeps a quoll7781 plush", user_id="alice")
        m.create_fact("alice's coder notes mention tuatara2245", user_id="alice", agent_name="coder")
        m.create_fact("alice keeps a quoll plush too", user_id="bob")
        assert _files_containing(tmp_path, b"quoll7781")
        # An explicit agent clears only that agent.
        cleared = m.clear_memory(user_id="alice", agent_name="coder")
        assert cleared["facts"] == []
        assert not _files_containing(tmp_path, b"tuatara2245")
        assert contents(m.get_memory(user_id="alice")) == ["alice keeps a quoll7781 plush"]
        # No agent: all of the user's memory.
        m.create_fact("coder again: tuatara2245", user_id="alice", agent_name="coder")
        assert m.clear_memory(user_id="alice")["facts"] == []
        assert m.get_memory(user_id="alice", agent_name="coder")["facts"] == []
        for gone in (b"quoll7781", b"tuatara2245"):
            assert not _files_containing(tmp_path, gone), gone
        assert contents(m.get_memory(user_id="bob")) == ["alice keeps a quoll plush too"]
    finally:
        m.close()


def test_a_secret_is_not_saved_as_a_fact(manager):
    key = "sk-proj-Q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0"
    with pytest.raises(Exception, match="secret"):
        manager.create_fact(f"key: {key}", user_id="alice")
    _, fact_id = manager.create_fact(f"the billing job reads {key} from the vault", user_id="alice")
    assert contents(manager.get_memory(user_id="alice")) == ["the billing job reads [redacted:api_key] from the vault"]


def test_a_duplicate_fact_is_refused_as_deermem_refuses_it(manager):
    """DeerMem raises ``ValueError("Duplicate fact")`` (the Gateway answers
    409) for content already stored, compared stripped and casefolded,
    whatever the category; nothing new is stored."""
    _, fact_id = manager.create_fact("Lives in Lisbon.", "personal", user_id="alice")
    for again, category in [("Lives in Lisbon.", "personal"), ("  lives in LISBON.  ", "context")]:
        with pytest.raises(ValueError) as refused:
            manager.create_fact(again, category, user_id="alice")
        assert refused.value.args == ("Duplicate fact",)
    assert [f["id"] for f in manager.get_memory(user_id="alice")["facts"]] == [fact_id]
    # Another user or agent is another memory.
    assert manager.create_fact("Lives in Lisbon.", user_id="bob")[1]
    assert manager.create_fact("Lives in Lisbon.", user_id="alice", agent_name="researcher")[1]


def test_bad_confidence_is_refused_the_way_the_gateway_reads_it(manager):
    """The Gateway maps ``ValueError`` by ``args[0] == "confidence"`` to its
    "must be between 0 and 1" answer; the message also says the rule."""
    for bad in (1.5, -0.1, float("nan"), True, "high"):
        with pytest.raises(ValueError) as refused:
            manager.create_fact("Prefers tea.", confidence=bad, user_id="alice")
        assert refused.value.args[0] == "confidence"
        assert "between 0 and 1" in str(refused.value)
    assert manager.get_memory(user_id="alice")["facts"] == []


def test_search_confidence_is_the_share_of_the_querys_words_a_hit_holds(manager):
    """``confidence`` is one 0..1 value with one meaning (the share of the
    query's topic words the hit holds); the store's relevance stays in
    ``score``."""
    for text in [
        "Refunds are computed in integer cents.",
        "Refund refunds refunds: the refund service owns refunds.",
        "Deploys go through Helm on Tuesdays.",
        "The order service stores refunds next to orders.",
    ]:
        manager.create_fact(text, user_id="alice")
    hits = {h["content"]: h for h in manager.search("refunds in integer cents", 10, user_id="alice")}
    assert hits["Refunds are computed in integer cents."]["confidence"] == 1.0
    assert hits["The order service stores refunds next to orders."]["confidence"] == 0.33
    for hit in hits.values():
        assert 0.0 <= hit["confidence"] <= 1.0 and hit["score"] >= 0.0, hit


def test_search_confidence_is_one_function_of_query_and_text():
    from memgate.deerflow.managers import search_confidence

    text = "Refunds are computed in integer cents."
    assert search_confidence("refunds", text) == 1.0
    assert search_confidence("How are REFUNDS computed?", text) == 1.0
    assert search_confidence("refunds in dollars", text) == 0.5
    assert search_confidence("helm charts", text) == 0.0
    assert search_confidence("the of and", text) == 0.0, "no topic word: no match to speak of"


def test_a_new_lifespans_warm_reopens_a_closed_manager(tmp_path):
    """DeerFlow keeps its memory-manager singleton across Gateway lifespans
    in one process and closes it at each shutdown; the next start-up's
    warm() opens the backend again and what was stored is still there."""
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    m.create_fact("Deploys need a change ticket.", user_id="alice")
    assert m.shutdown_flush(5.0) is True
    m.close()
    assert m.get_context("alice") == "", "closed: nothing is read"
    assert m.warm() in (True, None)
    assert "Deploys need a change ticket." in m.get_context("alice")
    m.create_fact("Releases on Thursdays.", user_id="alice")
    assert len(m.get_memory(user_id="alice")["facts"]) == 2
    m.close()
