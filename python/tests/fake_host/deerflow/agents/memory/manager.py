"""A stand-in for ``deerflow.agents.memory.manager`` written from the
contract (deerflow-memory-contract §1): a pydantic v2 ``MemoryManager`` with
the same fields, class flags, invariants and defaults, the error family,
and the process-wide ``get_memory_manager`` singleton. memgate's tests put it
on ``sys.path`` to check that memgate's managers subclass the host's own
classes and raise the host's own errors when DeerFlow is importable."""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator


class MemoryManagerError(RuntimeError):
    pass


class MemoryConflictError(MemoryManagerError):
    pass


class MemoryCorruptionError(MemoryManagerError):
    pass


class MemoryManager(BaseModel, abc.ABC):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend_config: dict[str, Any] = {}
    mode: Literal["middleware", "tool"] = "middleware"
    callbacks: Any = None

    supports_search: ClassVar[bool] = False
    requires_passive_writes_in_tool_mode: ClassVar[bool] = False

    @field_validator("backend_config", mode="before")
    @classmethod
    def _none_is_empty(cls, value):
        return {} if value is None else value

    @model_validator(mode="after")
    def _invariants(self):
        overridden = type(self).search is not MemoryManager.search
        if self.supports_search != overridden:
            raise ValueError(f"supports_search is inconsistent with search() for {type(self).__name__}")
        if self.mode == "tool" and not overridden:
            raise ValueError("tool mode requires a backend that implements search()")
        return self

    def _unsupported(self, method):
        return NotImplementedError(f"{method} not supported by {type(self).__name__}")

    @classmethod
    @abc.abstractmethod
    def from_config(cls, backend_config, *, mode="middleware", **host_hooks): ...

    @abc.abstractmethod
    def add(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None): ...

    @abc.abstractmethod
    def get_context(self, user_id, *, agent_name=None, thread_id=None): ...

    def add_nowait(self, thread_id, messages, *, agent_name=None, user_id=None):
        self.add(thread_id, messages, agent_name=agent_name, user_id=user_id)

    def search(self, query, top_k=5, *, user_id=None, agent_name=None, category=None):
        raise self._unsupported("search")

    def get_memory(self, *, user_id=None, agent_name=None):
        raise self._unsupported("get_memory")

    def shutdown_flush(self, timeout):
        return True

    def warm(self):
        return None

    def close(self):
        return None


_MANAGER = None


def set_memory_manager(manager):
    global _MANAGER
    _MANAGER = manager


def get_memory_manager():
    return _MANAGER
