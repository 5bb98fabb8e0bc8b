"""memgate for Python hosts.

``memgate.deerflow`` holds the DeerFlow memory managers and the ``remember``
tool; ``memgate._native`` is the Rust extension underneath. The functions
re-exported here are the host contract's identities and hashes (message
signatures, sequence digests, OpenViking session and peer ids), computed by
the same Rust code the backends use.
"""

from memgate._native import (
    __version__,
    message_signature,
    openviking_peer_id,
    openviking_session_id,
    sequence_digest,
    signature_payload,
)

__all__ = [
    "__version__",
    "message_signature",
    "openviking_peer_id",
    "openviking_session_id",
    "sequence_digest",
    "signature_payload",
]
