//! # memgate-conformance — one behaviour suite for every store backend
//!
//! `local` (SQLite) and `postgres` promise the same contract; this suite is
//! how that promise is kept. Each public async function in [`behaviour`]
//! checks one behaviour against a [`Subject`] (a way to open fresh storage
//! and more handles on it), and [`conformance_tests!`] turns the whole list
//! into `#[tokio::test]`s in a backend crate's own tests:
//!
//! ```ignore
//! memgate_conformance::conformance_tests!(my_subject());
//! // A backend that needs a real server: each test is listed as ignored by
//! // a plain `cargo test` and runs under `--include-ignored`.
//! memgate_conformance::conformance_tests!(my_subject(), #[ignore = "real server: …"]);
//! ```
//!
//! where `my_subject()` returns an `impl Subject`, evaluated per test.
//!
//! A second handle on the same storage stands for a second replica or
//! process: concurrency behaviours race two handles, not two tasks on one.

use memgate_core::MemoryBackend;
use memgate_embed::Embedder;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub mod behaviour;
pub mod first_turn;
pub mod forget;
pub mod handoff;
pub mod hybrid;
pub mod redaction;

/// A boxed, sendable future (the suite stays free of extra crates).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens backends of one kind for the suite.
pub trait Subject: Send + Sync + 'static {
    /// Opens a backend over new, empty storage of its own.
    fn fresh(&self) -> BoxFuture<'_, Storage>;

    /// Opens a backend with hybrid recall (`embedder`) over new, empty
    /// storage of its own (the [`hybrid`] behaviours).
    fn hybrid(&self, embedder: Arc<dyn Embedder>) -> BoxFuture<'_, HybridHandle>;
}

/// How far a backend's vector indexer got (its `doctor` line's figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorProgress {
    /// Turns and active memories with a vector of the configured model.
    pub embedded: u64,
    /// Turns and active memories stored.
    pub total: u64,
    /// The stored vectors are of another model than the configured one.
    pub model_mismatch: bool,
}

/// The explicit vector steps of a backend with hybrid recall (its
/// background indexer runs too; these make a test deterministic).
pub trait VectorIndex: Send + Sync {
    /// Runs the indexer until nothing is left; the rows written.
    fn index_all(&self) -> BoxFuture<'_, memgate_core::Result<usize>>;
    /// Drops every vector so the configured model embeds everything again.
    fn reembed(&self) -> BoxFuture<'_, memgate_core::Result<usize>>;
    fn progress(&self) -> BoxFuture<'_, memgate_core::Result<VectorProgress>>;
}

/// A handle with hybrid recall on some storage, and a way to open another
/// handle on the same storage with another embedder (a model change).
pub struct HybridHandle {
    pub backend: Arc<dyn MemoryBackend>,
    pub vectors: Arc<dyn VectorIndex>,
    pub reopen: Arc<dyn Fn(Arc<dyn Embedder>) -> BoxFuture<'static, HybridHandle> + Send + Sync>,
}

impl HybridHandle {
    pub async fn reopen(&self, embedder: Arc<dyn Embedder>) -> HybridHandle {
        (self.reopen)(embedder).await
    }
}

/// Storage one behaviour works on: its first handle, and a way to open more
/// handles on the same storage (another replica, another process's store).
pub struct Storage {
    pub backend: Arc<dyn MemoryBackend>,
    pub reopen: Arc<dyn Fn() -> BoxFuture<'static, Arc<dyn MemoryBackend>> + Send + Sync>,
}

impl Storage {
    pub async fn another_handle(&self) -> Arc<dyn MemoryBackend> {
        (self.reopen)().await
    }
}

/// Expands to one `#[tokio::test]` per behaviour, each on `$subject`
/// (an expression of type `impl Subject`, evaluated per test), with the
/// attributes given after it (e.g. `#[ignore = "…"]`).
#[macro_export]
macro_rules! conformance_tests {
    ($subject:expr $(, #[$attr:meta])* $(,)?) => {
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; behaviour;
            remember_stores_once_and_cites,
            bad_remember_input_names_the_field_and_keeps_what_was_stored,
            revise_keeps_history_and_refuses_duplicates_and_retired,
            confidence_is_stored_and_a_revision_of_confidence_alone_changes_it,
            retired_memories_leave_recall_and_search_but_stay_listed,
            capture_is_idempotent_per_thread_signature,
            capture_filters_plumbing_hidden_and_injected_messages,
            capture_requires_a_thread,
            recall_cites_relevant_memory_within_the_budget,
            recall_without_query_carries_standing_memories,
            recall_finds_a_reply_through_its_question,
            common_query_terms_do_not_drown_a_rare_one,
            search_filters_by_kind_before_the_cut_and_validates,
            scopes_are_isolated_by_user_and_peer,
            stored_scopes_list_users_and_agents_in_order,
            fact_history_lists_every_version_with_who_changed_it,
            threads_list_and_read_a_page_at_a_time,
            holdings_count_what_the_export_holds,
            export_import_merges_and_never_duplicates,
            bad_import_names_the_entry_and_stores_nothing,
            concurrent_captures_of_one_thread_store_each_turn_once,
            concurrent_remember_of_one_text_stores_one_entry,
            shutdown_refuses_new_work,
        );
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; first_turn;
            first_turn_block_after_nine_deerflow_conversations,
            first_turn_block_after_114_conversations_still_leads_with_the_user,
            first_turn_block_leads_with_current_facts_only,
        );
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; forget;
            forget_fact_erases_it_with_every_version,
            forget_thread_erases_that_thread_only,
            forget_scope_erases_one_agent_and_leaves_the_rest,
            forget_user_erases_every_agent_of_that_user_only,
            forget_is_seen_by_another_handle,
        );
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; handoff;
            a_handoff_goes_from_draft_to_a_committed_milestone_only_on_request,
            another_user_cannot_read_continue_or_commit_a_handoff,
            a_draft_cannot_be_continued_or_committed_and_secrets_are_not_held,
            forgetting_a_user_drops_their_handoffs,
        );
        $crate::hybrid_conformance_tests!($subject $(, #[$attr])*);
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; redaction;
            captured_secrets_are_stored_and_recalled_as_placeholders,
            remembering_a_secret_is_refused_and_a_mention_is_redacted,
            revising_with_a_secret_is_refused_and_a_mention_is_redacted,
            redaction_keeps_signatures_over_the_original_message,
        );
    };
    (@each $attrs:tt $subject:expr; $module:ident; $($name:ident),+ $(,)?) => {
        $($crate::conformance_tests!(@one $attrs $subject; $module::$name);)+
    };
    (@one [$($attr:tt)*] $subject:expr; $module:ident::$name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($attr)*
        async fn $name() {
            $crate::$module::$name(&$subject).await;
        }
    };
}

/// The [`hybrid`] behaviours alone, as [`conformance_tests!`] runs them: for
/// a second configuration of one backend's dense search (e.g. `postgres`
/// with its approximate index and with the exact scan).
#[macro_export]
macro_rules! hybrid_conformance_tests {
    ($subject:expr $(, #[$attr:meta])* $(,)?) => {
        $crate::conformance_tests!(@each [$(#[$attr])*] $subject; hybrid;
            hybrid_recall_finds_what_shares_no_word_and_stays_in_its_scope,
            hybrid_recall_prefers_the_speaker_a_question_names,
            hybrid_vectors_follow_revise_and_retire,
            hybrid_forget_erases_the_vectors_of_what_is_forgotten,
            hybrid_model_change_keeps_recall_lexical_until_reembed,
            hybrid_embedder_failure_falls_back_to_full_text,
        );
    };
}
