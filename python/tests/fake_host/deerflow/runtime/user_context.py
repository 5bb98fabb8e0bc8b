"""A stand-in for ``deerflow.runtime.user_context`` (contract §8.4): the
runtime user id, from ``runtime.context["user_id"]``, else ``"default"``."""


def resolve_runtime_user_id(runtime):
    context = getattr(runtime, "context", None) or {}
    user = context.get("user_id") if isinstance(context, dict) else getattr(context, "user_id", None)
    return str(user) if user is not None else "default"
