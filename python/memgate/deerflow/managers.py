"""memgate's memory managers for DeerFlow (``memory.manager_class``).

Three drop-in managers over memgate's Rust backends:

- ``OpenVikingMemoryManager``: the same ``backend_config`` as DeerFlow's
  built-in OpenViking backend (keys, defaults, error messages), so an
  operator switches by changing only ``manager_class``;
- ``PowerContextMemoryManager``: ``backend_config: {}``, the binding from the
  ``POWERCONTEXT_DEERFLOW_*`` environment (the RFC); passive capture is an
  explicit no-op unless the operator opts in to Source capture
  (``backend_config.source_capture.enabled``);
- ``LocalMemoryManager``: memgate's embedded SQLite store.

Each follows the host contract (deerflow-memory-contract §1–3): sync
methods release the GIL for the backend's I/O; ``aget_context`` and
``asearch`` run the sync path in a worker thread and ``aadd`` reads the
messages and awaits a capture that runs off the loop, so the event loop
never waits on memory I/O;
``add_nowait`` called on an event-loop thread (the host's compaction hook)
reads the messages and returns, the capture finishing in the background
(``shutdown_flush`` drains it). Unsupported operations raise
``NotImplementedError("<method> not supported by <ClassName>")``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from pathlib import Path
from typing import Any, ClassVar

from memgate import _native
from memgate.deerflow.contract import (
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
)

__all__ = ["LocalMemoryManager", "OpenVikingMemoryManager", "PowerContextMemoryManager", "search_confidence"]

logger = logging.getLogger("memgate.deerflow")

#: Where backends read environment variables; ``None`` is the process
#: environment (one source per process, so a manager and the ``remember``
#: tool share one PowerContext settings snapshot). Tests set an
#: ``_native.Environment.from_mapping(...)`` here.
_ENVIRONMENT: Any = None

_IS_PYDANTIC = hasattr(MemoryManager, "model_fields")
if _IS_PYDANTIC:
    from pydantic import PrivateAttr


def runtime_home() -> Path:
    """DeerFlow's runtime home: ``$DEER_FLOW_HOME``, else
    ``<$DEER_FLOW_PROJECT_ROOT or cwd>/.deer-flow`` (the storage root the
    host's factory injects when ``storage_path`` is empty)."""
    home = os.environ.get("DEER_FLOW_HOME")
    if home:
        return Path(home).resolve()
    root = os.environ.get("DEER_FLOW_PROJECT_ROOT") or os.getcwd()
    return (Path(root) / ".deer-flow").resolve()


def storage_root(backend_config: dict[str, Any]) -> str:
    """The absolute storage root, resolved the way the host's factory does:
    empty → the runtime home; relative → under it."""
    raw = backend_config.get("storage_path")
    if raw is None or raw == "":
        return str(runtime_home())
    if not isinstance(raw, (str, os.PathLike)):
        raise ValueError("backend_config.storage_path must be a string path")
    path = Path(raw)
    return str(path if path.is_absolute() else runtime_home() / path)


def host_error(err: _native.NativeError, method: str, manager: MemoryManager) -> Exception:
    """The host-contract exception for a memgate error."""
    code, message = err.args[:2]
    if getattr(manager, "errors_in_builtin_words", False) and len(err.args) > 2:
        message = err.args[2]
    if code == "unsupported":
        return NotImplementedError(f"{method} not supported by {type(manager).__name__}")
    if code in ("invalid_input", "invalid_config"):
        return ValueError(message)
    if code == "conflict":
        return MemoryConflictError(message)
    if code == "corruption":
        return MemoryCorruptionError(message)
    if code == "not_found":
        return KeyError(message)
    return MemoryManagerError(message)


def _user(user_id: Any) -> str | None:
    """The host's user id as a string; ``None``/``""`` stay absent (the
    backend reads them as the ``default`` fallback)."""
    return None if user_id is None else str(user_id)


def _thread(thread_id: Any) -> str:
    """The host's thread id as a string (absent: empty, which capture refuses)."""
    return "" if thread_id is None else str(thread_id)


def _trace(trace_id: Any) -> str | None:
    return None if trace_id is None else str(trace_id)


def _on_event_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _settle(future: asyncio.Future, outcome: tuple) -> None:
    if not future.done():  # the awaiting task may have been cancelled
        future.set_result(outcome)


class _RefusalNotice:
    """Says once why an owner-bound backend refuses a caller. With DeerFlow's
    auth disabled every turn is the ``default`` fallback user, so the first
    refusal is one clear warning and the rest are quiet (the host would
    otherwise log an ERROR per recall, capture and compaction). Shared by a
    manager and its background-capture reporter."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.reported = False

    def quiet(self, reason: str) -> bool:
        """True when this refusal is answered with nothing instead of an error."""
        if not self.enabled:
            return False
        if not self.reported:
            self.reported = True
            logger.warning(
                "memgate: %s. No memory is recalled or captured for such callers. "
                "An auth-disabled Gateway (DEER_FLOW_AUTH_DISABLED=1) calls every user `default`, "
                "which is never the owner: enable authentication and bind "
                "POWERCONTEXT_DEERFLOW_OWNER_USER_ID to the signed-in user's id. "
                "Further refusals are not logged.",
                reason,
            )
        return True


def _background_reporter(refusals: _RefusalNotice):
    """Reports a failed background capture (``add_nowait`` on an event loop):
    a refused caller through ``refusals``, anything else as an error."""

    def report(code: str, message: str) -> None:
        if code == "rejected_identity" and refusals.quiet(message):
            return
        logger.error("memgate background capture failed (%s): %s", code, message)

    return report


class _MemgateManager(MemoryManager):
    """What the three managers share: one native backend per instance."""

    #: The memgate backend name (``local``, ``openviking``, ``powercontext``).
    memgate_backend: ClassVar[str]
    #: The refusal of ``mode != "middleware"`` for backends without tool mode.
    middleware_only: ClassVar[str | None] = None
    #: True for owner-bound backends whose refused callers get nothing (and
    #: one warning) instead of an error: see :class:`_RefusalNotice`.
    quiet_refusals: ClassVar[bool] = False
    #: Read by a query-aware host (``getattr(manager,
    #: "supports_query_aware_context", False)``): such a host passes the
    #: user's latest input as ``get_context(..., thread_id=, query=)`` only
    #: to managers that declare they use it, and recalls nothing per turn for
    #: the others. Every memgate manager recalls with a query it is given.
    supports_query_aware_context: ClassVar[bool] = True

    if _IS_PYDANTIC:
        _native_backend: Any = PrivateAttr(default=None)
        _keep_hidden: Any = PrivateAttr(default=None)
        _refusals: Any = PrivateAttr(default=None)
    else:
        _native_backend: Any = None
        _keep_hidden: Any = None
        _refusals: Any = None

    @classmethod
    def from_config(cls, backend_config: dict[str, Any] | None = None, *, mode: str = "middleware", **host_hooks: Any):
        """The host factory's entry point. Uses the host hook
        ``should_keep_hidden_message`` (a callable deciding whether a hidden
        message is captured anyway); other hooks (``callbacks``, …) are for
        backends that call a model locally and are ignored."""
        if mode != "middleware" and cls.middleware_only is not None:
            # Before construction, as the built-in backend refuses it: a plain
            # ValueError, not the host model's validation error.
            raise ValueError(cls.middleware_only)
        manager = cls(backend_config=dict(backend_config or {}), mode=mode)
        hook = host_hooks.get("should_keep_hidden_message")
        manager._keep_hidden = hook if callable(hook) else None
        manager._native_backend.set_keep_hidden(manager._keep_hidden)
        return manager

    def model_post_init(self, context: Any) -> None:
        parent = getattr(super(), "model_post_init", None)
        if parent is not None:
            parent(context)
        self._refusals = _RefusalNotice(self.quiet_refusals)
        self._native_backend = self._open_native("from_config")

    def _open_native(self, method: str) -> Any:
        config = dict(self.backend_config or {})
        root = storage_root(config)
        config["storage_path"] = root
        try:
            return _native.Backend.open(
                self.memgate_backend,
                config,
                self.mode,
                root,
                _ENVIRONMENT,
                _background_reporter(self._refusals),
            )
        except _native.NativeError as err:
            raise host_error(err, method, self) from None

    def _call(self, method: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _native.NativeError as err:
            raise host_error(err, method, self) from None

    # Read path.
    def get_context(self, user_id, *, agent_name=None, thread_id=None, query=None) -> str:
        """The block to inject (unwrapped; the host adds ``<memory>``)."""
        try:
            return self._native_backend.recall(_user(user_id), agent_name, thread_id, query)
        except _native.NativeError as err:
            if err.args[0] == "closed":
                return ""
            if err.args[0] == "rejected_identity" and self._quiet_refusal(err.args[1]):
                return ""
            raise host_error(err, "get_context", self) from None

    def _quiet_refusal(self, reason: str) -> bool:
        """True when a refused caller is answered with nothing instead of an
        error (``quiet_refusals`` backends; one warning the first time)."""
        return self._refusals.quiet(reason)

    async def aget_context(self, user_id, *, agent_name=None, thread_id=None, query=None) -> str:
        return await asyncio.to_thread(
            self.get_context, user_id, agent_name=agent_name, thread_id=thread_id, query=query
        )

    # Write path.
    def add(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
        """Captures the transcript snapshot of a finished run."""
        self._capture("add", thread_id, messages, agent_name, user_id, trace_id, "after_turn")

    def add_nowait(self, thread_id, messages, *, agent_name=None, user_id=None) -> None:
        """Captures the head a compaction is about to remove. On an event-loop
        thread it returns once the messages are read and finishes in the
        background (``shutdown_flush`` drains it; failures are logged, as the
        host's compaction hook would log them); elsewhere it is ``add``."""
        if thread_id and _on_event_loop_thread():
            self._call(
                "add_nowait",
                self._native_backend.capture_in_background,
                _thread(thread_id),
                messages,
                _user(user_id),
                agent_name,
                "before_compaction",
            )
        else:
            self._capture("add_nowait", thread_id, messages, agent_name, user_id, None, "before_compaction")

    async def aadd(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
        """``add`` for the event loop: the messages are read here (reading
        them needs the GIL wherever it runs, so a worker thread would stall
        the loop just as long), then the capture runs off the loop and this
        awaits its end."""
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def done(code, message, report):  # called from a memgate thread
            try:
                loop.call_soon_threadsafe(_settle, finished, (code, message, report))
            except RuntimeError:  # the loop is closed: nobody awaits the outcome
                pass

        try:
            self._native_backend.capture_then(
                _thread(thread_id),
                messages,
                done,
                _user(user_id),
                agent_name,
                "after_turn",
                _trace(trace_id),
            )
        except _native.NativeError as err:
            self._capture_failed("aadd", err)
            return
        code, message, report = await finished
        if code is not None:
            self._capture_failed("aadd", _native.NativeError(code, message))
            return
        self._captured("aadd", report)

    def _capture(self, method, thread_id, messages, agent_name, user_id, trace_id, kind) -> None:
        try:
            report = self._native_backend.capture(
                _thread(thread_id),
                messages,
                _user(user_id),
                agent_name,
                kind,
                _trace(trace_id),
            )
        except _native.NativeError as err:
            self._capture_failed(method, err)
            return
        self._captured(method, report)

    def _capture_failed(self, method, err: _native.NativeError) -> None:
        """A write after shutdown is logged and dropped; anything else raises."""
        if err.args[0] == "closed":
            logger.warning("memgate %s write ignored after shutdown", self.memgate_backend)
            return
        if err.args[0] == "rejected_identity" and self._quiet_refusal(err.args[1]):
            return
        raise host_error(err, method, self) from None

    @staticmethod
    def _captured(method, report) -> None:
        stored, known, filtered = report
        logger.debug("memgate %s captured %d new, %d known, %d filtered", method, stored, known, filtered)
        for cut in report.cut:
            # Memory holds only the start of this message: recall cannot find its end.
            logger.info(
                "memgate %s kept %d of %d bytes of message %d (%s)",
                method, cut["kept_bytes"], cut["text_bytes"], cut["index"], cut.get("message_id", "no id"),
            )

    # Lifecycle.
    def warm(self) -> bool | None:
        """Start-up health: True ready, False degraded (``startup_policy:
        warn``), None nothing to check; a ``fail_fast`` failure raises.
        After ``shutdown_flush``/``close`` it reopens the backend (the next
        lifespan's start-up)."""
        try:
            status, reason = self._native_backend.warm()
        except _native.NativeError as err:
            if err.args[0] != "closed":
                raise host_error(err, "warm", self) from None
            # A new Gateway lifespan in the same process: the host keeps its
            # memory-manager singleton across lifespans and closed it at the
            # last shutdown; start-up opens the backend again.
            self._native_backend = self._open_native("warm")
            self._native_backend.set_keep_hidden(self._keep_hidden)
            status, reason = self._call("warm", self._native_backend.warm)
        if status == "ready":
            return True
        if status == "degraded":
            logger.warning("memgate %s is degraded: %s", self.memgate_backend, reason)
            return False
        return None

    def shutdown_flush(self, timeout: float) -> bool:
        """Stops new work and drains background and in-flight work within
        ``timeout`` seconds; False if some was still running (it closes the
        backend when it ends). Idempotent."""
        return self._native_backend.shutdown(float(timeout))

    def close(self) -> None:
        """Closes now if idle, else when the last running operation ends."""
        self._native_backend.shutdown(0.0)

    def doctor(self) -> list[tuple[str, bool, str]]:
        """What ``memgate doctor`` says about this backend beyond health, as
        ``(check, healthy, detail)`` lines (PowerContext: whether Source
        capture is on). Never carries a secret."""
        return self._call("doctor", self._native_backend.diagnose)

    def wait_for_background(self, timeout: float) -> bool:
        """Waits for background captures (``add_nowait`` on an event loop);
        True when none is running."""
        return self._native_backend.wait_background(float(timeout))


class _Searchable:
    """``search``/``asearch`` for backends that support them."""

    def search(self, query, top_k=5, *, user_id=None, agent_name=None, category=None) -> list[dict[str, Any]]:
        """Results as the host's memory tools consume them:
        ``{id, content, category, confidence, source, score}``."""
        limit = max(1, min(int(top_k), 100))
        try:
            hits = self._native_backend.search(str(query), limit, _user(user_id), agent_name, category or None)
        except _native.NativeError as err:
            if err.args[0] == "closed":
                return []
            raise host_error(err, "search", self) from None
        return [
            {
                "id": hit["id"],
                "content": hit["content"],
                "category": hit["category"],
                "confidence": search_confidence(query, hit["content"]),
                "source": hit.get("source") or hit["id"],
                "score": hit.get("score"),
            }
            for hit in hits
        ]

    async def asearch(self, query, top_k=5, *, user_id=None, agent_name=None, category=None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(
            self.search, query, top_k, user_id=user_id, agent_name=agent_name, category=category
        )


def search_confidence(query: Any, content: Any) -> float:
    """A search hit's ``confidence``, the one mapping every manager uses: the
    share of the query's topic terms the hit's text holds (1.0: all of them,
    0.0: none), with recall's own reading of words. The backend's ``score``
    is no such value (BM25 relevance depends on the rest of the scope,
    OpenViking's is ``(1 + cosine) / 2``), so it stays in ``score``."""
    return _native.search_confidence(str(query), str(content or ""))


def _fact_entry(fact: dict[str, Any]) -> dict[str, Any]:
    """A memgate fact as a DeerMem fact, with the confidence it was saved
    with; ``source`` is the thread a distilled fact came from (an explicit
    fact has none, and none is invented)."""
    entry = {
        "id": fact["id"],
        "content": fact["text"],
        "category": fact["kind"],
        "confidence": fact.get("confidence", 1.0),
        "createdAt": fact["created_at"],
        "updatedAt": fact["updated_at"],
    }
    if fact.get("thread"):
        entry["source"] = fact["thread"]
    return entry


def _captured_summary(holdings: dict[str, Any]) -> str:
    """What the document says of captured conversations: memgate keeps them
    as turns (recalled as excerpts), not as facts or summaries, so the
    memory page states how much is held instead of showing nothing."""
    turns, threads = holdings["turns"], holdings["threads"]
    if not turns:
        return ""
    return (
        f"memgate holds {turns} captured message{'s' if turns != 1 else ''} from {threads} "
        f"conversation{'s' if threads != 1 else ''} (latest captured {holdings['last_captured_at']}). "
        "They are not listed as facts: new conversations recall excerpts of them when relevant. "
        "Clearing memory erases them."
    )


def _memory_document(facts: list[dict[str, Any]], holdings: dict[str, Any]) -> dict[str, Any]:
    """The DeerMem document the Gateway's ``MemoryResponse`` reads: the
    caller's active facts; ``history.recentMonths`` says what is held of
    captured conversations (memgate writes no other summaries).
    ``lastUpdated`` is the latest change of anything held, a deleted fact's
    deletion included, so it never moves backwards."""
    empty = {"summary": "", "updatedAt": ""}
    history = {k: dict(empty) for k in ("recentMonths", "earlierContext", "longTermBackground")}
    history["recentMonths"] = {"summary": _captured_summary(holdings), "updatedAt": holdings["last_captured_at"] or ""}
    return {
        "version": "1.0",
        "lastUpdated": holdings["last_changed_at"] or "",
        "user": {k: dict(empty) for k in ("workContext", "personalContext", "topOfMind")},
        "history": history,
        "facts": [_fact_entry(f) for f in facts],
    }


class FieldError(ValueError):
    """A ``ValueError`` whose first argument is the field, as DeerMem raises
    them (``ValueError("confidence")``; the Gateway picks its answer from
    ``args[0]``), and whose text also states the rule."""

    def __init__(self, field: str, rule: str):
        super().__init__(field, rule)

    def __str__(self) -> str:
        return f"{self.args[0]} {self.args[1]}"


#: DeerMem's refusal of a fact whose content is already stored; the Gateway
#: answers it with 409, tool mode's ``memory_add`` with ``{"error": ...}``.
DUPLICATE_FACT = "Duplicate fact"


def _check_confidence(confidence: Any) -> None:
    """``confidence`` is stored with the fact; a value outside 0..1 is
    refused, as DeerMem refuses it."""
    if confidence is None:
        return
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float))
        or not math.isfinite(confidence)
        or not 0.0 <= confidence <= 1.0
    ):
        raise FieldError("confidence", f"must be a number between 0 and 1 (got {confidence!r})")


def _content_key(content: Any) -> str:
    """DeerMem's duplicate key: the content stripped and casefolded."""
    return str(content or "").strip().casefold()


def _imported_facts(memory_data: Any) -> list[tuple[str, str, Any]]:
    """``(category, content, confidence)`` for every fact of a DeerMem
    document, all checked before anything is stored; errors name the fact."""
    if not isinstance(memory_data, dict):
        raise ValueError("memory_data must be a dict (a DeerMem memory document)")
    facts = memory_data.get("facts", [])
    if not isinstance(facts, list):
        raise ValueError("memory_data.facts must be a list")
    out = []
    for i, fact in enumerate(facts):
        if not isinstance(fact, dict):
            raise ValueError(f"memory_data.facts[{i}] must be a dict")
        content, category = fact.get("content"), fact.get("category") or "context"
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"memory_data.facts[{i}].content must be a non-empty string")
        if not isinstance(category, str):
            raise ValueError(f"memory_data.facts[{i}].category must be a string")
        confidence = fact.get("confidence")
        try:
            _check_confidence(confidence)
        except FieldError as e:
            raise ValueError(f"memory_data.facts[{i}].confidence {e.args[1]}") from None
        out.append((category, content, confidence))
    return out


def _has_summaries(memory_data: dict[str, Any]) -> bool:
    """True when a DeerMem document's user or history sections hold text."""
    for part in ("user", "history"):
        sections = memory_data.get(part)
        if isinstance(sections, dict) and any(
            isinstance(v, dict) and str(v.get("summary") or "").strip() for v in sections.values()
        ):
            return True
    return False


class _FactStore:
    """The host's memory document and fact operations over memgate's
    explicit memories: the Gateway's ``/api/memory`` routes and tool mode's
    ``memory_add``/``memory_update``/``memory_delete``. A fact's id is its
    memgate citation. Deleting retires (no longer recalled, kept in the
    history), as the host's fact contract says; ``clear_memory`` is where
    memory is erased for good (on backends that can erase)."""

    def get_memory(self, *, user_id=None, agent_name=None) -> dict[str, Any]:
        return self._document("get_memory", user_id, agent_name)

    def export_memory(self, *, user_id=None, agent_name=None) -> dict[str, Any]:
        return self._document("export_memory", user_id, agent_name)

    def reload_memory(self, *, user_id=None, agent_name=None) -> dict[str, Any]:
        """memgate reads the store on every call: nothing is cached to reload."""
        return self._document("reload_memory", user_id, agent_name)

    def create_fact(self, content, category="context", confidence=0.5, *, agent_name=None, user_id=None):
        """Saves ``content`` as an explicit memory of kind ``category``.
        Returns ``(document, fact_id)``. Content already stored for this user
        and agent (compared stripped and casefolded, whatever its category)
        raises ``ValueError("Duplicate fact")``, as DeerMem does."""
        if not isinstance(content, str) or not content.strip():
            raise FieldError("content", "must be a non-empty string")
        _check_confidence(confidence)
        key = _content_key(content)
        if any(_content_key(f["text"]) == key for f in self._facts("create_fact", user_id, agent_name)):
            raise ValueError(DUPLICATE_FACT)
        outcome = self._save("create_fact", str(category or "context"), content, confidence, user_id, agent_name)
        if outcome["outcome"] == "already_present":  # stored concurrently since the check
            raise ValueError(DUPLICATE_FACT)
        return self._document("create_fact", user_id, agent_name), outcome.get("citation")

    def update_fact(self, fact_id, content=None, category=None, confidence=None, *, agent_name=None, user_id=None):
        """Revises a fact (history is kept); omitted fields stay as they are,
        and a confidence alone is a revision too. An unknown or deleted id
        raises ``KeyError``."""
        _check_confidence(confidence)
        self._active_fact("update_fact", fact_id, user_id, agent_name)
        if content is not None or category is not None or confidence is not None:
            self._call(
                "update_fact",
                self._native_backend.revise_fact,
                str(fact_id),
                _user(user_id),
                agent_name,
                category,
                content,
                None if confidence is None else float(confidence),
            )
        return self._document("update_fact", user_id, agent_name)

    def delete_fact(self, fact_id, *, agent_name=None, user_id=None) -> dict[str, Any]:
        """Retires a fact: it is no longer recalled or listed. An unknown id
        raises ``KeyError``, as does a deleted one."""
        self._active_fact("delete_fact", fact_id, user_id, agent_name)
        self._call("delete_fact", self._native_backend.retire_fact, str(fact_id), _user(user_id), agent_name)
        return self._document("delete_fact", user_id, agent_name)

    def import_memory(self, memory_data, *, user_id=None, agent_name=None) -> dict[str, Any]:
        """Merges a DeerMem document's facts (new ids; an identical active
        fact is not duplicated). Every fact is checked before any is stored.
        Summaries are not imported: memgate keeps none."""
        facts = _imported_facts(memory_data)
        if _has_summaries(memory_data):
            logger.warning("memgate import_memory: summary sections are not imported (memgate keeps facts only)")
        for category, content, confidence in facts:
            self._save("import_memory", category, content, confidence, user_id, agent_name)
        return self._document("import_memory", user_id, agent_name)

    def _save(self, method, kind, text, confidence, user_id, agent_name) -> dict[str, Any]:
        """Saves one fact with its confidence (unset: 1); the outcome,
        ``stored`` or ``already_present`` with its id. Any other outcome
        raises."""
        outcome = self._call(
            method,
            self._native_backend.remember,
            kind,
            text,
            _user(user_id),
            agent_name,
            None if confidence is None else float(confidence),
        )
        if outcome["outcome"] not in ("stored", "already_present"):
            raise MemoryManagerError(f"{method} {outcome['outcome']}: {outcome.get('reason', '')}")
        return outcome

    def _active_fact(self, method, fact_id, user_id, agent_name) -> dict[str, Any]:
        """The fact, or ``KeyError``: to the host a deleted (retired) fact is gone."""
        fact = self._call(method, self._native_backend.get_fact, str(fact_id), _user(user_id), agent_name)
        if fact["state"] != "active":
            raise KeyError(f"memory {fact_id} was deleted")
        return fact

    def _facts(self, method, user_id, agent_name) -> list[dict[str, Any]]:
        return self._call(method, self._native_backend.list_facts, _user(user_id), agent_name)

    def _document(self, method, user_id, agent_name) -> dict[str, Any]:
        facts = self._facts(method, user_id, agent_name)
        return _memory_document(facts, self._call(method, self._native_backend.holdings, _user(user_id), agent_name))


class LocalMemoryManager(_FactStore, _Searchable, _MemgateManager):
    """memgate's embedded store (SQLite + FTS5) under the host's storage root
    (``<storage_path>/local/memgate.sqlite3``). Keys: ``max_injection_chars``,
    ``injection_query``, ``recall_top_k``, ``standing_memories``,
    ``busy_timeout_ms``. Recall uses the host's query when it passes one,
    else ``injection_query``.
    Search and the fact operations are supported, so tool mode's four
    memory tools work; passive capture stays on in tool mode (the store
    learns from captured turns)."""

    memgate_backend: ClassVar[str] = "local"
    supports_search: ClassVar[bool] = True
    requires_passive_writes_in_tool_mode: ClassVar[bool] = True

    def clear_memory(self, *, user_id=None, agent_name=None) -> dict[str, Any]:
        """Erases memory for good (facts with their history, captured turns,
        index entries, and every copy in the database files): all of the
        user's memory without ``agent_name``, else only that agent's. Returns
        the now-empty document. Export first if a copy is wanted."""
        target = "user" if not agent_name else "scope"
        self._call("clear_memory", self._native_backend.forget, target, None, _user(user_id), agent_name or None)
        return self._document("clear_memory", user_id, agent_name)


class OpenVikingMemoryManager(_Searchable, _MemgateManager):
    """A remote OpenViking server with one USER API key, configured exactly
    like DeerFlow's built-in ``openviking`` backend. Middleware mode only
    (``from_config(mode="tool")`` raises before reading the config)."""

    memgate_backend: ClassVar[str] = "openviking"
    #: Bad input is reported in the built-in backend's words (no ``invalid <field>:``).
    errors_in_builtin_words: ClassVar[bool] = True
    #: The built-in backend's words (memgate-openviking's ``MIDDLEWARE_ONLY``).
    middleware_only: ClassVar[str | None] = (
        "The OpenViking automatic-memory backend supports memory.mode='middleware' only; "
        "use OpenViking MCP for explicit model tools"
    )
    supports_search: ClassVar[bool] = True
    requires_passive_writes_in_tool_mode: ClassVar[bool] = False


class PowerContextMemoryManager(_MemgateManager):
    """One authenticated owner bound to one PowerContext Scope (the RFC).
    ``backend_config`` must be ``{}`` (the host's ``storage_path`` aside);
    the binding comes from ``POWERCONTEXT_DEERFLOW_*``. Recall sends the
    host's query; without one it recalls nothing (one warning), unless the
    operator set ``POWERCONTEXT_DEERFLOW_PROFILE_QUERY``.

    Passive capture (``add``, ``aadd``, ``add_nowait``) is an explicit no-op
    (nothing is uploaded, nothing is learned; saving is the explicit
    ``remember`` tool) unless the operator opts in with
    ``backend_config.source_capture.enabled: true``: then each finished
    message with a host id becomes one PowerContext Source, filtered,
    redacted and durably queued by memgate's Source capture (a Source is not
    Memory). ``doctor()`` and the start-up log say which is in effect."""

    memgate_backend: ClassVar[str] = "powercontext"
    supports_search: ClassVar[bool] = False
    requires_passive_writes_in_tool_mode: ClassVar[bool] = False

    #: A refused caller recalls and captures nothing, and no request is sent.
    quiet_refusals: ClassVar[bool] = True

    def _source_capture_on(self) -> bool:
        """The operator's opt-in (``backend_config.source_capture.enabled``;
        the backend refused anything but a boolean when it was built)."""
        setting = (self.backend_config or {}).get("source_capture")
        return isinstance(setting, dict) and setting.get("enabled") is True

    def add(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
        """Source capture when opted in; otherwise nothing is read or sent."""
        if self._source_capture_on():
            super().add(thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id)

    def add_nowait(self, thread_id, messages, *, agent_name=None, user_id=None) -> None:
        """Source capture when opted in; otherwise nothing is read or sent."""
        if self._source_capture_on():
            super().add_nowait(thread_id, messages, agent_name=agent_name, user_id=user_id)

    async def aadd(self, thread_id, messages, *, agent_name=None, user_id=None, trace_id=None) -> None:
        """Source capture when opted in; otherwise nothing is read or sent."""
        if self._source_capture_on():
            await super().aadd(thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id)

    def warm(self) -> bool | None:
        """As every manager's, and start-up logs the ``capture`` line: whether
        finished messages become PowerContext Sources (the operator's
        ``source_capture.enabled``) or passive capture is the no-op."""
        ready = super().warm()
        for check, healthy, detail in self.doctor():
            if check == "capture":
                logger.log(logging.INFO if healthy else logging.WARNING, "memgate powercontext %s", detail)
        return ready
