"""The explicit-save ``remember`` tool for DeerFlow, and the extension entry
point ``install(registry, config)``.

The model supplies only ``text`` and an allowed ``kind``; whose memory it
is comes from the tool runtime the host injects (``runtime.context``, with
the host's own resolver when DeerFlow is importable — deerflow-memory-contract
§8.3–8.4), never from the arguments: an argument such as ``user_id`` or
``scope_id`` is refused, not applied. Argument rules and outcomes
(``stored`` with the store's citation, ``already_present``, ``unknown``
never retried, ``failed``) are memgate-core's, through the native module.
The result is a JSON string; no exception escapes the tool.

DeerFlow's extension API (deerflow-extension-api 0.1.2) has no
tool-contribution method, so ``install`` refuses clearly on such a host
instead of losing the tool silently.
"""

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from memgate import _native

__all__ = [
    "ModelTool",
    "PluginContribution",
    "UnsupportedHostError",
    "install",
    "make_remember_tool",
    "resolve_principal",
]

TOOL_NAMESPACE = "memgate"
DEFAULT_USER_ID = "default"

UNSUPPORTED_HOST = (
    "memgate: this DeerFlow version cannot accept tool contributions: its extension registry "
    "has no plugin(...) method (deerflow-extension-api 0.1.2 offers middlewares, task_lifecycle, "
    "system_model_observer, service and routers only), so the `remember` tool was NOT installed. "
    "Expose it another way: memgate's MCP server (`memgate mcp`, listed under mcpServers in "
    "extensions_config.json), or add `memgate.deerflow.tool:remember_tool` to the agent's tools."
)


class UnsupportedHostError(RuntimeError):
    """The host cannot take the ``remember`` tool through its extension registry."""


@dataclass(frozen=True)
class ModelTool:
    """A model tool in a package namespace; the host qualifies the name."""

    namespace: str
    name: str
    tool: Any


@dataclass(frozen=True)
class PluginContribution:
    """What ``install`` hands to ``registry.plugin(...)`` (the RFC's shape:
    the outer ``plugins[].enabled`` decides whether install runs; this flag
    decides whether the tools are available)."""

    enabled: bool = True
    tools: tuple[ModelTool, ...] = field(default_factory=tuple)


_SAFE_USER_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def make_safe_user_id(raw: str) -> str:
    """DeerFlow's ``make_safe_user_id``: safe ids unchanged; otherwise unsafe
    characters become ``-`` and ``-`` + 16 hex of SHA-256 is appended."""
    if not raw:
        raise ValueError("user id must not be empty")
    if _SAFE_USER_ID.match(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "-", raw)
    return f"{cleaned}-{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:16]}"


def _get(container: Any, key: str) -> Any:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return container.get(key)
    return getattr(container, key, None)


def _host_user_resolver():
    try:  # Inside DeerFlow: the host's own resolver (with its context variable).
        from deerflow.runtime.user_context import resolve_runtime_user_id  # type: ignore[import-not-found]
    except ImportError:
        return None
    return resolve_runtime_user_id


def _resolve_user(runtime: Any) -> str:
    """deerflow-memory-contract §8.4, first source that yields a value."""
    identity = _get(_get(_get(runtime, "server_info"), "user"), "identity")
    if identity:
        return make_safe_user_id(str(identity))
    configurable = _get(_get(runtime, "config"), "configurable") or {}
    auth = _get(configurable, "langgraph_auth_user_id") or _get(
        _get(configurable, "langgraph_auth_user"), "identity"
    )
    if auth:
        return make_safe_user_id(str(auth))
    user = _get(_get(runtime, "context"), "user_id")
    if user is not None:
        return str(user)
    return DEFAULT_USER_ID


def resolve_principal(runtime: Any) -> tuple[str, str | None, str | None]:
    """``(user_id, agent_name, thread_id)`` from the tool runtime the host
    injected. A run without identity resolves to ``default``, which
    owner-bound backends refuse."""
    resolver = _host_user_resolver()
    user = str(resolver(runtime)) if resolver is not None else _resolve_user(runtime)
    context = _get(runtime, "context")
    agent = _get(context, "agent_name")
    thread = _get(context, "thread_id") or _get(_get(_get(runtime, "config"), "configurable"), "thread_id")
    return user, (str(agent) if agent else None), (str(thread) if thread else None)


def _error(code: str, message: str) -> str:
    return json.dumps(
        {"outcome": "error", "error": {"code": code, "message": message}, "message": f"Not saved: {message}."},
        ensure_ascii=False,
    )


def _host_backend() -> Any:
    """The native backend of the host's configured memory manager."""
    from memgate.deerflow.managers import _MemgateManager

    try:
        from deerflow.agents.memory.manager import get_memory_manager  # type: ignore[import-not-found]
    except ImportError:
        return None
    manager = get_memory_manager()
    return manager._native_backend if isinstance(manager, _MemgateManager) else None


def make_remember_tool(manager: Any = None, *, namespace: str = TOOL_NAMESPACE):
    """The ``remember`` LangChain tool. With ``manager`` it saves through
    that memgate manager's backend (one backend, one settings snapshot);
    without, through the host's configured memory manager at call time."""
    from langchain_core.tools import InjectedToolArg, StructuredTool

    spec = _native.remember_tool_spec(namespace, "the user's long-term memory")

    def remember(runtime: Annotated[Any, InjectedToolArg] = None, **arguments: Any) -> str:
        backend = manager._native_backend if manager is not None else _host_backend()
        if backend is None:
            return _error(
                "unsupported",
                "memory.manager_class is not a memgate manager, so memgate's remember tool has no memory to save to",
            )
        try:
            user, agent, thread = resolve_principal(runtime)
            _is_error, content = backend.call_remember_tool(arguments, user, agent, thread)
        except Exception as exc:  # noqa: BLE001 - a tool never raises into the agent
            return _error("internal", f"{type(exc).__name__}: {exc}")
        return json.dumps(content, ensure_ascii=False)

    return StructuredTool(
        name=spec["name"],
        description=spec["description"],
        args_schema=spec["input_schema"],
        func=remember,
    )


def install(registry: Any, config: Mapping[str, Any] | None) -> None:
    """The extension entry point (``plugins: - use: memgate.deerflow:install``).

    Registers the ``remember`` tool through ``registry.plugin(...)``. A
    registry without that method (every DeerFlow release to date) raises
    ``UnsupportedHostError`` naming the alternatives; so does a registry
    that refuses the contribution. ``config`` must be ``{}``: the binding
    comes from the memory configuration and its environment.
    """
    settings = dict(config or {})
    if settings:
        keys = ", ".join(sorted(f"config.{k}" for k in settings))
        raise ValueError(
            f"{keys}: memgate's extension takes no settings; plugins[].config must be {{}} "
            "(the memory binding comes from memory.backend_config and its environment variables)"
        )
    plugin = getattr(registry, "plugin", None)
    if not callable(plugin):
        raise UnsupportedHostError(UNSUPPORTED_HOST)
    tool = make_remember_tool()
    contribution = PluginContribution(
        enabled=True, tools=(ModelTool(namespace=TOOL_NAMESPACE, name=tool.name, tool=tool),)
    )
    try:
        plugin(contribution)
    except (TypeError, ValueError) as exc:
        raise UnsupportedHostError(
            f"memgate: the host's registry.plugin(...) refused the `remember` tool ({exc}); "
            "the tool was NOT installed."
        ) from exc


def __getattr__(name: str) -> Any:
    # `remember_tool`: the tool over the host's memory manager, built on first use.
    if name == "remember_tool":
        tool = make_remember_tool()
        globals()["remember_tool"] = tool
        return tool
    raise AttributeError(name)
