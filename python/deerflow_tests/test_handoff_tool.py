"""The ``handoff`` tool loaded through DeerFlow's own tool loader
(``tools: - use: memgate.deerflow.handoff_tool:handoff_tool``) on the local
store: prepare, correct and finalize in one thread, continue and
acknowledge in another, a milestone memory only when committed, and another
user refused."""

from __future__ import annotations

import json

import pytest
from deerflow_runs import manager

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOOLS = "tools:\n  - name: handoff\n    group: memory\n    use: memgate.deerflow.handoff_tool:handoff_tool\n"


class _Runtime:
    """The runtime DeerFlow hands a tool: its ``context`` names the user and thread."""

    def __init__(self, user_id: str, thread_id: str):
        self.context = {"user_id": user_id, "thread_id": thread_id}


@pytest.mark.parametrize("host", ["local"], indirect=True)
def test_a_task_handed_to_another_thread_through_deerflows_tool(host):
    from deerflow.tools.tools import get_available_tools

    host.write(extra=TOOLS)
    [tool] = [t for t in get_available_tools(groups=["memory"], include_mcp=False) if t.name == "handoff"]

    def call(user: str, thread: str, **arguments) -> dict:
        return json.loads(tool.func(runtime=_Runtime(user, thread), **arguments))

    me = host.owner
    drafted = call(me, "t-send", action="prepare", objective="Migrate the billing cron",
                   next_action="Run the dry run", progress=["Wrote the new job"])
    assert drafted["outcome"] == "ok", drafted
    handoff = drafted["handoff"]
    assert (handoff["stage"], handoff["revision"], handoff["from_thread"]) == ("draft", 1, "t-send")
    corrected = call(me, "t-send", action="correct", id=handoff["id"], objective="Migrate the billing cron",
                     next_action="Run the dry run on staging", blockers=["Staging is down until 3pm"])
    assert corrected["handoff"]["revision"] == 2, corrected
    assert call(me, "t-send", action="finalize", id=handoff["id"])["handoff"]["stage"] == "prepared"

    refused = call("bob", "t-bob", action="continue", id=handoff["id"])
    assert (refused["outcome"], refused["error"]["code"]) == ("error", "not_found"), refused

    continued = call(me, "t-receive", action="continue", id=handoff["id"])
    assert continued["outcome"] == "ok", continued
    assert "Run the dry run on staging" in continued["untrusted_history"]
    assert "not as instructions" in continued["note"]
    assert "Migrate the billing cron" not in manager().get_context(me, query="billing cron migrate"), (
        "nothing is memory before a commit"
    )

    unclear = call(me, "t-receive", action="acknowledge", id=handoff["id"], decision="declined")
    assert unclear["outcome"] == "error" and "invalid message" in unclear["error"]["message"], unclear
    acknowledged = call(me, "t-receive", action="acknowledge", id=handoff["id"], decision="accepted")
    assert acknowledged["handoff"]["stage"] == "acknowledged", acknowledged

    committed = call(me, "t-receive", action="commit", id=handoff["id"])
    assert committed["outcome"] == "ok", committed
    assert "billing cron" in manager().get_context(me, query="billing cron migrate")

    smuggled = call(me, "t-receive", action="continue", id=handoff["id"], user_id="bob")
    assert smuggled["error"]["message"].startswith("invalid user_id"), smuggled
