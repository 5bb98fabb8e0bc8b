"""The spec's test vectors (deerflow-memory-contract §5.2, §5.7), computed
by the Rust functions through the native module on real LangChain objects,
and the faithfulness of the message conversion those hashes depend on."""

from __future__ import annotations

import hashlib
import json

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage

import memgate

H1 = HumanMessage("Remember Vim.", id="h1")
A1 = AIMessage("I will remember.", id="a1")
T1 = ToolMessage("result", id="t1", tool_call_id="call-1", name="search")
A_TOOL = AIMessage(
    "", id="a-tool", tool_calls=[{"name": "search", "args": {"query": "OpenViking"}, "id": "call-1", "type": "tool_call"}]
)


def python_signature(message) -> str:
    """The host's ``_message_signature``, restated from §5.7 in Python."""

    def get(key):
        return message.get(key) if isinstance(message, dict) else getattr(message, key, None)

    kwargs = get("additional_kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    payload = {
        "id": get("id") or None,
        "role": get("type") or get("role") or None,
        "content": get("content") if get("content") is not None else "",
        "tool_calls": get("tool_calls") or kwargs.get("tool_calls") or [],
        "tool_call_id": get("tool_call_id") or get("tool_id") or None,
        "tool_name": get("name") or get("tool_name") or None,
        "tool_status": get("status") or get("tool_status") or None,
    }
    encoded = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def test_signature_vectors_on_langchain_messages():
    assert memgate.signature_payload(H1) == (
        '{"content":"Remember Vim.","id":"h1","role":"human","tool_call_id":null,'
        '"tool_calls":[],"tool_name":null,"tool_status":null}'
    )
    assert memgate.message_signature(H1) == "9bc605b3f5585428ef012494676db93783edbc3e060cf551458c4b0cdc1faf04"
    assert memgate.message_signature(A1) == "67f8fb34a81615a2765f9a18e8c91cff8007a86f1d150533e4019f561f1eb6be"
    assert memgate.message_signature(T1) == "f0188a450edff1b5624535df9e0fc3c3650d12e22dad59fb5762e056f80711ef"
    assert memgate.message_signature(A_TOOL) == "86c3960889a0b750d98e4c1e633f5a676fcde8711bb901d2687ea074743c0bdb"


def test_sequence_digest_vectors():
    s1, s2 = memgate.message_signature(H1), memgate.message_signature(A1)
    assert memgate.sequence_digest([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert memgate.sequence_digest([s1]) == "36b2b06bad8da12b0f003d91c42a80b11631865cb1d81ac70e1e6e58ba7e9b17"
    assert memgate.sequence_digest([s1, s2]) == "17ebe6291916c89416d50310d03ea3cf673e1dee68e9e78bed53cbe834d04b4b"


def test_session_and_peer_vectors():
    assert memgate.openviking_session_id("alice", "research", "thread-1") == (
        "df_37a681a43a6b7c1cea6b092d50b00150bb780f0c09bec010"
    )
    assert memgate.openviking_session_id("default", "deerflow", "t1") == (
        "df_9830ea3328b0b0cd4a878e064f4b82101d37b33684db5ce7"
    )
    vectors = {
        None: "deerflow",
        "Research": "research",
        "deerflow": "df-agent-ea44dcc4367369f986dee4986c0d1a3c",
        "-research": "df-agent-bae6b8f0e1ba865a2ce9fc8c18ff9081",
        "df-agent-custom": "df-agent-e263580004e16e6de841e8d2dc70b2d7",
        "__x": "df-agent-670321fce2d65975b95adb71e1757013",
        "my agent": "df-agent-8cae0b6284ac92403eee714c869f124a",
        "a" * 65: "df-agent-635361c48bb9eab14198e76ea8ab7f1a",
    }
    for agent, peer in vectors.items():
        assert memgate.openviking_peer_id(agent) == peer, agent


@pytest.mark.parametrize("agent", ["", "  ", "__DEFAULT__"])
def test_invalid_peer_scopes_are_value_errors(agent):
    from memgate import _native

    with pytest.raises(_native.NativeError) as err:
        memgate.openviking_peer_id(agent)
    assert err.value.args[0] == "invalid_input"
    assert "Invalid OpenViking peer scope" in err.value.args[1]


def test_conversion_is_faithful_for_every_message_shape():
    """Signatures computed in Rust from LangChain objects and dicts equal the
    host's Python algorithm, for every field the hash covers."""
    shapes = [
        H1,
        A1,
        T1,
        A_TOOL,
        ToolMessage("boom", id="t2", tool_call_id="call-2", name="search", status="error"),
        SystemMessage("<system-reminder>", id="s1", additional_kwargs={"hide_from_ui": True}),
        HumanMessage(
            [{"type": "text", "text": "look"}, "plain", {"type": "image_url", "image_url": {"url": "data:x"}}],
            id="h-blocks",
        ),
        HumanMessage("ünïcödé 日本 😀 \u2028 \x01", id="h-uni", name="alice"),
        AIMessage("", id="legacy", additional_kwargs={"tool_calls": [{"id": "c", "function": {"name": "f"}}]}),
        AIMessage(
            "", id="floats", tool_calls=[{"name": "f", "args": {"x": 1e16, "y": 0.1, "z": [1, 2.5, None, True]}, "id": "c"}]
        ),
        AIMessageChunk("chunk", id="chunk"),
        HumanMessage("no id"),
        {"role": "user", "content": "from a dict", "id": "d1"},
        {"type": "tool", "content": "r", "tool_id": "c9", "tool_name": "s", "tool_status": "error"},
    ]
    for m in shapes:
        assert memgate.message_signature(m) == python_signature(m), m


def test_an_object_is_read_through_what_its_dict_attribute_answers_every_time():
    """The instance dict is read directly only for types whose ``__dict__``
    attribute is that dict; a type that answers something else is read
    through the attribute on every object, not only the first."""

    class Shadowed:
        def __init__(self):
            self.type, self.content, self.id = "human", "instance text", "x1"

        @property
        def __dict__(self):
            return {"type": "human", "content": "attribute text", "id": "x1"}

    expected = python_signature({"type": "human", "content": "attribute text", "id": "x1"})
    for _ in range(3):
        assert memgate.message_signature(Shadowed()) == expected
    for _ in range(3):
        assert memgate.message_signature(H1) == python_signature(H1)
        assert memgate.message_signature(A_TOOL) == python_signature(A_TOOL)


def test_attributes_that_name_no_field_never_hide_the_fields():
    """Keys of an instance dict that name no field are listed and passed
    over by address after the first read; more of them than the list holds,
    on objects read again and again, still leave every field read."""

    # A field name that is not the interned string: it is read as text, and
    # must never be listed as naming no field.
    content_key = "".join(["con", "tent"])

    class Wide:
        def __init__(self, i):
            self.__dict__[content_key] = f"text {i}"
            self.type = "human"
            for k in range(40):
                setattr(self, f"extra_{k}", k)
            self.id = f"w{i}"

    for i in range(5):
        m = Wide(i)
        fields = {"type": "human", "content": f"text {i}", "id": f"w{i}"}
        assert memgate.message_signature(m) == python_signature(fields)
    for _ in range(3):
        assert memgate.message_signature(H1) == python_signature(H1)
        assert memgate.message_signature(A_TOOL) == python_signature(A_TOOL)


def test_values_json_cannot_hold_become_their_str():
    class Opaque:
        def __str__(self):
            return "opaque-value"

    m = AIMessage("", id="o", tool_calls=[{"name": "f", "args": {"obj": Opaque(), "t": (1, 2)}, "id": "c"}])
    assert '"obj":"opaque-value"' in memgate.signature_payload(m)
    assert memgate.message_signature(m) == python_signature(m)


def test_bad_messages_name_the_index(tmp_path, environment):
    from memgate.deerflow import LocalMemoryManager

    manager = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        manager.add("t1", [H1, {"content": "no role"}], user_id="alice")
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        manager.add("t1", [{"type": "human", "id": {"not": "a string"}}], user_id="alice")
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nests deeper"):
        manager.add("t1", [{"type": "human", "content": "x", "additional_kwargs": {"l": loop}}], user_id="alice")
    manager.close()

