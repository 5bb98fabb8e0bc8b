"""Distillation reached from DeerFlow: ``backend_config.distill`` in
DeerFlow's ``config.yaml`` is memgate's ``memory.distill``, the worker runs
while the Gateway's manager is open, and the facts it distils from runs
captured through the Gateway show on DeerFlow's memory page
(``GET /api/memory``) with the thread they came from; a superseded fact is
not shown as current. The model is the testkit's scripted OpenAI-compatible
server (``testkit/scripted_model.py``), started here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_gateway import gateway_run, new_thread, owner_headers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SCRIPTED_MODEL = Path(__file__).resolve().parents[2] / "testkit" / "scripted_model.py"


def distill_answer(op: str, fact: str | None, text: str, source: str) -> dict:
    answer = {"operations": [{"op": op, "fact": fact, "kind": "fact", "text": text,
                              "confidence": 0.9, "sources": [source]}]}
    return {"content": json.dumps(answer), "usage": {"prompt_tokens": 100, "completion_tokens": 10}}


@pytest.fixture
def scripted_model(tmp_path):
    """The scripted model: the Lisbon turn adds a fact (`mem_2`: the test
    saves `mem_1` by hand first), the Porto turn supersedes it."""
    if not SCRIPTED_MODEL.is_file():
        pytest.skip(f"the testkit's scripted model is missing ({SCRIPTED_MODEL})")
    script = tmp_path / "distill-script.json"
    script.write_text(json.dumps([
        {"when": {"user_contains": "to Porto"},
         "reply": distill_answer("supersede", "mem_2", "The user lives in Porto", "turn_3")},
        {"when": {"user_contains": "live in Lisbon"},
         "reply": distill_answer("add", None, "The user lives in Lisbon", "turn_1")},
    ]))
    port_file = tmp_path / "model-port"
    server = subprocess.Popen(
        [sys.executable, str(SCRIPTED_MODEL), "--script", str(script), "--log", str(tmp_path / "distill.jsonl"),
         "--port", "0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert server.poll() is None and time.monotonic() < deadline, "the scripted model did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}/v1"
    finally:
        server.terminate()
        server.wait(5)


def facts_when(client, headers, ready, seconds: float = 30.0) -> list[dict]:
    """The memory page's facts once ``ready(facts)`` holds (the worker
    distils in the background)."""
    deadline = time.monotonic() + seconds
    while True:
        page = client.get("/api/memory", headers=headers)
        assert page.status_code == 200, page.text
        facts = page.json()["facts"]
        if ready(facts) or time.monotonic() > deadline:
            return facts
        time.sleep(0.1)


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_distilled_facts_show_on_the_memory_page_with_their_thread(host, scripted_model, monkeypatch):
    from fastapi.testclient import TestClient

    monkeypatch.setenv("DEER_FLOW_AUTH_DISABLED", "1")
    host.memory = (
        "manager_class: memgate.deerflow:LocalMemoryManager\n"
        "  backend_config:\n"
        "    distill:\n"
        "      enabled: true\n"
        f"      base_url: {scripted_model}\n"
        "      model: scripted\n"
    )
    host.write()
    from app.gateway.app import app

    headers = owner_headers(host)
    with TestClient(app) as client:
        explicit = client.post("/api/memory/facts", json={"content": "Deploys need a ticket."}, headers=headers)
        assert explicit.status_code == 200, explicit.text
        lisbon = new_thread(client, headers)
        gateway_run(client, "I live in Lisbon these days.", lisbon, headers)
        facts = facts_when(client, headers, lambda fs: any("Lisbon" in f["content"] for f in fs))
        distilled = [f for f in facts if "Lisbon" in f["content"]]
        assert [(f["content"], f["source"]) for f in distilled] == [("The user lives in Lisbon", lisbon)], facts
        assert distilled[0]["confidence"] == 0.9
        ticket = [f for f in facts if f["content"] == "Deploys need a ticket."]
        assert [f["source"] for f in ticket] == ["unknown"], "an explicit fact has no thread"

        porto = new_thread(client, headers)
        gateway_run(client, "I moved from Lisbon to Porto last month.", porto, headers)
        facts = facts_when(client, headers, lambda fs: any("Porto" in f["content"] for f in fs))
        shown = sorted((f["content"], f["source"]) for f in facts)
        assert shown == [("Deploys need a ticket.", "unknown"), ("The user lives in Porto", porto)], (
            "the superseded Lisbon fact is not shown as current"
        )
