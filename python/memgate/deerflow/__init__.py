"""memgate for DeerFlow: memory managers for ``memory.manager_class`` and
the explicit-save ``remember`` tool.

    memory:
      manager_class: memgate.deerflow:OpenVikingMemoryManager   # or LocalMemoryManager,
                                                               # PowerContextMemoryManager

The managers subclass DeerFlow's ``MemoryManager`` and raise its errors when
DeerFlow is importable; otherwise the compatible stand-ins in
``memgate.deerflow.contract``. The tool needs ``langchain-core`` (imported
on first use).
"""

from typing import Any

from memgate.deerflow.contract import (
    HOST_CONTRACT,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
)
from memgate.deerflow.managers import (
    LocalMemoryManager,
    OpenVikingMemoryManager,
    PowerContextMemoryManager,
)

__all__ = [
    "HOST_CONTRACT",
    "InstallReport",
    "LocalMemoryManager",
    "MemoryConflictError",
    "MemoryCorruptionError",
    "MemoryManager",
    "MemoryManagerError",
    "OpenVikingMemoryManager",
    "PowerContextMemoryManager",
    "install",
    "make_remember_tool",
    "remember_tool",
]

_TOOL_NAMES = {"InstallReport", "install", "make_remember_tool", "remember_tool"}


def __getattr__(name: str) -> Any:
    if name in _TOOL_NAMES:
        from memgate.deerflow import tool

        return getattr(tool, name)
    raise AttributeError(name)
