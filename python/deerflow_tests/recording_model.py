"""A recording fake chat model that DeerFlow builds from its ``config.yaml``
(``models: - use: recording_model:RecordingChatModel``).

It keeps every outbound request (the messages DeerFlow actually sends to
the model, and the tool names bound to it) in process memory and, when
``MEMGATE_RECORDING_LOG`` names a file, appends them there as JSON lines,
so a test reads what the host sent instead of trusting what it meant to
send. It answers each call with a fixed text and calls no tool, except that
a user message saying ``Remember that <text>`` makes it call the
``remember`` tool once with ``<text>`` (an explicit save request)."""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

REPLY = "Noted."
SAVE_REQUEST = re.compile(r"Remember that (.+?)\s*(?:\n|$)")


def _as_record(message: BaseMessage) -> dict[str, Any]:
    return {
        "type": message.type,
        "id": message.id,
        "content": message.content if isinstance(message.content, str) else json.dumps(message.content),
        "additional_kwargs": {k: v for k, v in message.additional_kwargs.items() if isinstance(v, (str, bool, int, float))},
    }


class RecordingChatModel(BaseChatModel):
    """Records requests; answers ``Noted.``."""

    model: str = "recording"
    bound_tools: list[str] = []

    #: Every request in this process: ``{"messages": [...], "tools": [...]}``.
    requests: ClassVar[list[dict[str, Any]]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @property
    def _llm_type(self) -> str:
        return "memgate-recording"

    def bind_tools(self, tools, **kwargs):
        names = []
        for tool in tools:
            name = getattr(tool, "name", None) or (tool.get("name") if isinstance(tool, dict) else None)
            if name is None and isinstance(tool, dict):
                name = tool.get("function", {}).get("name")
            names.append(str(name))
        return self.model_copy(update={"bound_tools": names})

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs) -> ChatResult:
        record = {"messages": [_as_record(m) for m in messages], "tools": list(self.bound_tools)}
        with self._lock:
            type(self).requests.append(record)
            path = os.environ.get("MEMGATE_RECORDING_LOG")
            if path:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage):
            return AIMessage(REPLY)
        latest_user = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        text = latest_user.content if latest_user is not None and isinstance(latest_user.content, str) else ""
        match = SAVE_REQUEST.search(text)
        if match and "remember" in self.bound_tools:
            return AIMessage(
                "",
                tool_calls=[{"name": "remember", "args": {"text": match.group(1), "kind": "fact"}, "id": f"call-{len(self.requests)}"}],
            )
        return AIMessage(REPLY)
