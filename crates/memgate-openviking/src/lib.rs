//! # memgate-openviking — the OpenViking backend (`manager_class: openviking`)
//!
//! Long-term memory on a remote OpenViking server, with the behaviour of
//! DeerFlow's OpenViking backend (`deerflow-memory-contract` §5–6, the
//! operator document in `seeds/openviking-backend.txt`):
//!
//! - one host user (`owner_user_id`) bound to one OpenViking **USER** API key;
//!   any other user is refused before the network or the disk is touched;
//! - each agent is a peer inside that user, each thread a session;
//! - **recall** searches the user's and the peer's memory with the fixed
//!   `injection_query` and formats a bounded `- [category] text` block;
//! - **capture** sends each transcript message once (a hash-only cursor on
//!   local disk remembers what was sent), in batches of at most 100, and
//!   commits so the server extracts memories;
//! - **search** is a find over the same two memory roots.
//!
//! Modules, one job each: [`config`] (parsing and validation), [`scope`]
//! (owner, peer, session, memory URIs), [`cursor`] (the hash-only cursor
//! file: DeerFlow's keys and memgate's, read exactly, saved durably),
//! [`client`] (HTTP, deadline, retry),
//! [`payload`] (message conversion), [`recorder`] (batches and commit),
//! [`capture`] (cursor-driven capture), [`session_count`] (the server's
//! count that reconciliation and delivery decide by), [`retrieval`] (find/search and
//! content modes), [`injection`] (the recall block), [`locks`] (per-session
//! locks), [`lifecycle`] (operation accounting and shutdown), [`pystr`]
//! (Python string semantics). The adapter's cost figures are measured by
//! `memgate-lab` (`openviking_bench`).
//!
//! Where memgate deliberately differs from the original: cursor writes are
//! fsynced (file and directory); `score_threshold` reaches the server (the
//! official adapter's SDK drops it); memory roots use `viking://~/…`, the
//! form OpenViking 0.5 accepts; a hit's category falls back to the server's
//! `memory_type` tag, which also filters searches by kind; reads refuse a
//! malformed body instead of reading it as empty; a cursor with another
//! `schema_version` fails closed. See README.md for the full list.

pub mod backend;
pub mod capture;
pub mod client;
pub mod config;
pub mod cursor;
pub mod delivery;
pub mod injection;
pub mod lifecycle;
pub mod locks;
pub mod outbox;
pub mod payload;
pub mod pystr;
pub mod recorder;
pub mod retrieval;
pub mod scope;
pub mod session_count;

pub use backend::{BegunCapture, OpenVikingBackend, MIDDLEWARE_ONLY};
pub use config::{ContentMode, OpenVikingConfig};
pub use scope::UriStyle;
