"""The host's memory contract: DeerFlow's own classes when DeerFlow is
importable, compatible stand-ins when it is not.

memgate does not depend on DeerFlow. Inside a DeerFlow Gateway the managers
subclass ``deerflow.agents.memory.manager.MemoryManager`` (a pydantic model)
and raise DeerFlow's ``MemoryManagerError`` family, so the host's factory,
``isinstance`` checks and error handling see its own types. Elsewhere (tests,
other hosts) the stand-ins below implement the same surface: the same
fields, class flags, construction invariants, default method bodies and
"``<method> not supported by <ClassName>``" errors (deerflow-memory-contract
§1).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

__all__ = [
    "HOST_CONTRACT",
    "MemoryConflictError",
    "MemoryCorruptionError",
    "MemoryManager",
    "MemoryManagerError",
]

try:  # Inside DeerFlow: its own contract and errors.
    from deerflow.agents.memory.manager import (  # type: ignore[import-not-found]
        MemoryConflictError,
        MemoryCorruptionError,
        MemoryManager,
        MemoryManagerError,
    )

    #: Where the contract classes come from: ``"deerflow"`` or ``"memgate"``.
    HOST_CONTRACT = "deerflow"
except ImportError:
    HOST_CONTRACT = "memgate"

    class MemoryManagerError(RuntimeError):
        """A memory backend failed (the host's backend-neutral boundary error)."""

    class MemoryConflictError(MemoryManagerError):
        """An optimistic-concurrency race was lost (the Gateway answers 409)."""

    class MemoryCorruptionError(MemoryManagerError):
        """Persisted memory is unreadable (the Gateway answers 500)."""

    _MODES = ("middleware", "tool")

    class MemoryManager(abc.ABC):
        """Stand-in for DeerFlow's ``MemoryManager`` (same surface, no pydantic).

        Fields: ``backend_config`` (``None`` reads as ``{}``), ``mode``
        (``middleware`` or ``tool``), ``callbacks``. After construction the
        invariants hold: ``supports_search`` matches whether ``search`` is
        overridden, and tool mode needs ``search``. Then
        ``model_post_init`` runs, as pydantic would run it.
        """

        supports_search: ClassVar[bool] = False
        requires_passive_writes_in_tool_mode: ClassVar[bool] = False

        def __init__(
            self,
            *,
            backend_config: dict[str, Any] | None = None,
            mode: str = "middleware",
            callbacks: Any = None,
        ) -> None:
            if mode not in _MODES:
                raise ValueError(f"mode must be 'middleware' or 'tool' (got {mode!r})")
            self.backend_config = dict(backend_config or {})
            self.mode = mode
            self.callbacks = callbacks
            self._check_invariants()
            self.model_post_init(None)

        def model_post_init(self, context: Any) -> None:
            """Backends open their resources here (pydantic's hook name)."""

        def _check_invariants(self) -> None:
            overridden = type(self).search is not MemoryManager.search
            if self.supports_search != overridden:
                fix = "True" if overridden else "False"
                raise ValueError(
                    f"{type(self).__name__}: supports_search={self.supports_search} is inconsistent "
                    f"with {'an' if overridden else 'no'} override of search(); set supports_search = {fix}"
                )
            if self.mode == "tool" and not overridden:
                raise ValueError(
                    f"{type(self).__name__}: memory.mode='tool' requires a backend that implements search()"
                )

        def _unsupported(self, method: str) -> NotImplementedError:
            return NotImplementedError(f"{method} not supported by {type(self).__name__}")

        # Tier 1.
        @classmethod
        @abc.abstractmethod
        def from_config(cls, backend_config: dict[str, Any], *, mode: str = "middleware", **host_hooks: Any):
            ...

        @abc.abstractmethod
        def add(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
            ...

        @abc.abstractmethod
        def get_context(self, user_id, *, agent_name=None, thread_id=None) -> str:
            ...

        # Tier 2.
        def add_nowait(self, thread_id, messages, *, agent_name=None, user_id=None) -> None:
            self.add(thread_id, messages, agent_name=agent_name, user_id=user_id)

        def search(self, query, top_k=5, *, user_id=None, agent_name=None, category=None) -> list:
            raise self._unsupported("search")

        def get_memory(self, *, user_id=None, agent_name=None) -> dict:
            raise self._unsupported("get_memory")

        def delete_memory(self, *, user_id=None, agent_name=None) -> None:
            raise self._unsupported("delete_memory")

        def clear_memory(self, *, user_id=None, agent_name=None) -> dict:
            raise self._unsupported("clear_memory")

        def import_memory(self, memory_data, *, user_id=None, agent_name=None) -> dict:
            raise self._unsupported("import_memory")

        def export_memory(self, *, user_id=None, agent_name=None) -> dict:
            raise self._unsupported("export_memory")

        def shutdown_flush(self, timeout: float) -> bool:
            return True

        # Tier 3.
        def warm(self) -> bool | None:
            return None

        def reload_memory(self, *, user_id=None, agent_name=None) -> dict:
            raise self._unsupported("reload_memory")

        def create_fact(self, content, category="context", confidence=0.5, *, agent_name=None, user_id=None):
            raise self._unsupported("create_fact")

        def delete_fact(self, fact_id, *, agent_name=None, user_id=None) -> dict:
            raise self._unsupported("delete_fact")

        def update_fact(self, fact_id, content=None, category=None, confidence=None, *, agent_name=None, user_id=None) -> dict:
            raise self._unsupported("update_fact")

        def on_pre_compress(self, messages) -> str:
            return ""

        def on_turn_start(self, turn_number, message, **kwargs) -> None:
            return None

        def close(self) -> None:
            return None

        # Async defaults run the sync code on the caller's thread.
        async def aadd(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
            self.add(thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id)

        async def aget_context(self, user_id, *, agent_name=None, thread_id=None) -> str:
            return self.get_context(user_id, agent_name=agent_name, thread_id=thread_id)

        async def asearch(self, query, top_k=5, *, user_id=None, agent_name=None, category=None) -> list:
            return self.search(query, top_k, user_id=user_id, agent_name=agent_name, category=category)

