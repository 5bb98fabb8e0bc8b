"""``python -m memgate.deerflow doctor``: what the Gateway's memory manager
would do, checked from DeerFlow's own configuration without starting the
Gateway. Run it with the Gateway's interpreter and environment (``cd backend
&& uv run python -m memgate.deerflow doctor``; ``DEER_FLOW_CONFIG_PATH``
picks another ``config.yaml``).

It builds the manager through DeerFlow's memory factory (``manager_class``,
``backend_config``, the host's hooks), runs its start-up check and prints
one line per check, e.g. for PowerContext whether Source capture is on.
Exit code 0 when every check is healthy, 1 otherwise, 2 on bad usage or
when the manager cannot be built. No secret is printed."""

from __future__ import annotations

import sys


def doctor() -> int:
    try:
        from deerflow.agents.memory.manager import get_memory_manager
        from deerflow.config.app_config import get_app_config
    except ImportError:
        print("memgate doctor: DeerFlow is not importable here; run it with the Gateway's Python", file=sys.stderr)
        return 2
    try:
        config = get_app_config().memory  # reads config.yaml, as the Gateway's start-up does
    except Exception as err:
        print(f"config: cannot be read: {err}", file=sys.stderr)
        return 2
    print(f"manager_class: {config.manager_class} (mode {config.mode}, memory {'on' if config.enabled else 'off'})")
    try:
        manager = get_memory_manager()
    except Exception as err:  # the factory's own refusal, as the Gateway would log it
        print(f"manager: cannot be built: {err}", file=sys.stderr)
        return 2
    check = getattr(manager, "doctor", None)
    if check is None:
        print("manager: not a memgate manager; nothing more to check")
        return 0
    healthy = True
    try:
        ready = manager.warm()
        print(f"warm: {'ready' if ready else 'degraded' if ready is False else 'nothing to check'}")
        healthy = ready is not False
    except Exception as err:
        print(f"warm: failed: {err}")
        healthy = False
    for name, ok, detail in check():
        print(f"{name}: {detail}")
        healthy = healthy and ok
    manager.shutdown_flush(5.0)
    return 0 if healthy else 1


def main(argv: list[str]) -> int:
    if argv != ["doctor"]:
        print("usage: python -m memgate.deerflow doctor", file=sys.stderr)
        return 2
    return doctor()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
