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

``install`` registers the tool the way the host can take it: the RFC's
``registry.plugin(...)`` where it exists, else (deerflow-extension-api
0.1.2, which has no tool contribution) a lead-agent middleware that carries
the tool, since the host builds agents with LangChain's ``create_agent``,
which adds a middleware's ``tools``. What it cannot register it reports
(a log warning and the returned :class:`InstallReport`) instead of failing
the host's start-up.
"""

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from memgate import _native

__all__ = [
    "InstallReport",
    "ModelTool",
    "PluginContribution",
    "install",
    "make_remember_tool",
    "resolve_principal",
]

TOOL_NAMESPACE = "memgate"
DEFAULT_USER_ID = "default"

#: Where the remember tool can come from when the host's registry takes none.
ALTERNATIVES = (
    "memgate's MCP server (the Rust `memgate mcp` binary, not part of this wheel, listed under "
    "mcpServers in extensions_config.json), or a `tools:` entry in config.yaml "
    "(`use: memgate.deerflow.tool:remember_tool`)"
)

logger = logging.getLogger("memgate.deerflow.install")


@dataclass(frozen=True)
class InstallReport:
    """What ``install`` registered with the host and what it could not."""

    installed: tuple[str, ...] = ()
    not_installed: tuple[str, ...] = ()


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


def install(registry: Any, config: Mapping[str, Any] | None) -> InstallReport:
    """The extension entry point (``deerflow.extensions`` group, and
    ``plugins: - use: memgate.deerflow:install``).

    Registers the ``remember`` tool through ``registry.plugin(...)`` (the
    RFC's contribution) when the host has it, else through
    ``registry.middlewares(...)`` as a lead-agent middleware carrying the
    tool. A registry that offers neither, or refuses both, is reported
    (warning + :class:`InstallReport`) and start-up goes on. ``config``
    must be ``{}``: the binding comes from the memory configuration and its
    environment, so a setting here is an operator error and raises.
    """
    settings = dict(config or {})
    if settings:
        keys = ", ".join(sorted(f"config.{k}" for k in settings))
        raise ValueError(
            f"{keys}: memgate's extension takes no settings; plugins[].config must be {{}} "
            "(the memory binding comes from memory.backend_config and its environment variables)"
        )
    refusals = []
    for kind, register in (("plugin", _register_plugin), ("middlewares", _register_middleware)):
        method = getattr(registry, kind, None)
        if not callable(method):
            refusals.append(f"registry.{kind}(...) is absent")
            continue
        try:
            register(method)
        except Exception as exc:  # noqa: BLE001 - the host's refusal is reported, not raised
            refusals.append(f"registry.{kind}(...) refused it ({type(exc).__name__}: {exc})")
            continue
        logger.info("memgate: the `remember` tool was registered through registry.%s(...)", kind)
        return InstallReport(installed=(f"remember tool via registry.{kind}",))
    message = (
        "memgate: the `remember` tool was NOT installed: this host cannot take it ("
        + "; ".join(refusals)
        + f"). Expose it another way: {ALTERNATIVES}. Recall and capture are unaffected."
    )
    logger.warning(message)
    return InstallReport(not_installed=(message,))


def _register_plugin(plugin) -> None:
    """The RFC's shape: one enabled contribution with the namespaced tool."""
    tool = make_remember_tool()
    plugin(PluginContribution(enabled=True, tools=(ModelTool(namespace=TOOL_NAMESPACE, name=tool.name, tool=tool),)))


def _register_middleware(middlewares) -> None:
    """deerflow-extension-api 0.1.2: a lead-agent middleware whose ``tools``
    LangChain's ``create_agent`` adds to the agent (DeerFlow's isolation
    wrapper passes them through)."""
    from deerflow_extension_api import AgentScope, MiddlewarePlacement, Placement
    from langchain.agents.middleware import AgentMiddleware

    class RememberToolMiddleware(AgentMiddleware):
        """Carries memgate's ``remember`` tool into the agent; no hooks."""

        name = "memgate_remember_tool"

        def __init__(self):
            super().__init__()
            self.tools = [make_remember_tool()]

    class RememberToolContributor:
        def contribute_middlewares(self, app_store, ctx):
            return (MiddlewarePlacement(RememberToolMiddleware(), Placement.STANDARD, scope=AgentScope.LEAD),)

    middlewares(RememberToolContributor())


def __getattr__(name: str) -> Any:
    # `remember_tool`: the tool over the host's memory manager, built on first use.
    if name == "remember_tool":
        tool = make_remember_tool()
        globals()["remember_tool"] = tool
        return tool
    raise AttributeError(name)
