//! What both stores agree on about vectors: the key a file's vectors are
//! stored under (the model and the recipe of the text embedded), what a
//! turn's embedded text is, and the counters `doctor` and `/metrics` read.

use memgate_core::Diagnostic;
use std::sync::atomic::AtomicU64;

/// How a turn's text is put together before it is embedded
/// ([`turn_text`]), named in the vector key so that a file embedded with
/// an older recipe shows as a pending change in `doctor` and is redone by
/// `memgate reembed`, like a model change. Bump it with every change to
/// what is embedded; [`RECIPES`] says what each one was.
pub const RECIPE: &str = "r3";

/// Every recipe and what it embeds (`r1`: keys without a recipe, written
/// before recipes were named).
pub const RECIPES: &[(&str, &str)] = &[
    ("r1", "each turn alone"),
    (
        "r2",
        "each turn after the previous turn of its thread, with its speaker",
    ),
    (
        "r3",
        "each turn after the previous turn of its thread, with its date and speaker",
    ),
];

/// The key vectors of `model` made with the current [`RECIPE`] are stored
/// under: `all-minilm-l6-v2/384; r2`.
pub fn vector_key(model: &str) -> String {
    format!("{model}; {RECIPE}")
}

/// A stored key for people: `all-minilm-l6-v2/384 (recipe r1: each turn
/// alone)`.
pub fn describe_key(key: &str) -> String {
    let (model, recipe) = key.rsplit_once("; ").unwrap_or((key, "r1"));
    match RECIPES.iter().find(|(tag, _)| *tag == recipe) {
        Some((tag, what)) => format!("{model} (recipe {tag}: {what})"),
        None => format!("{model} (recipe {recipe}, unknown to this memgate)"),
    }
}

/// What a turn's vector is made from: the previous turn of its thread, then
/// `[date] speaker: text`. A reply ("Yes, last May!") means little alone;
/// with the question it answers and who said it, it is findable: on the
/// LoCoMo development split hybrid turn R@10 reads 0.729 (score fusion λ
/// 0.25) and 0.740 (λ 0.5) against 0.692 for each turn alone. The date (the
/// turn's `occurred_at`, as the host gave it) because when something was
/// said is part of what was said, and a question about time names the
/// period it asks about: 0.747 and MRR 0.549 with it, against 0.740 and
/// 0.543 without (`memgate eval locomo`; docs/design/hybrid-recall.md).
pub fn turn_text(
    text: &str,
    speaker: Option<&str>,
    occurred_at: Option<&str>,
    previous: Option<&str>,
) -> String {
    let mut out = String::new();
    if let Some(p) = previous {
        out.push_str(p);
        out.push('\n');
    }
    if let Some(d) = occurred_at {
        out.push('[');
        out.push_str(d);
        out.push_str("] ");
    }
    if let Some(s) = speaker {
        out.push_str(s);
        out.push_str(": ");
    }
    out.push_str(text);
    out
}

/// What the indexer has done and has left (what `doctor` shows).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct VectorProgress {
    /// The configured embedder's vector key, model and recipe
    /// ([`vector_key`]; `None`: no embedder).
    pub model: Option<String>,
    /// The key the file's vectors belong to (none before the first).
    pub stored_model: Option<String>,
    /// Turns and active memories that have a vector of the configured
    /// model (of the stored one when no embedder is configured).
    pub embedded: u64,
    /// Turns and active memories in the file.
    pub total: u64,
    /// `true` when the configured model differs from the file's vectors.
    pub model_mismatch: bool,
}

/// Counters of how recalls with a query were answered.
#[derive(Debug, Default)]
pub struct RetrievalStats {
    pub hybrid: AtomicU64,
    /// Recalls that fell back to lexical ranking because the embedder
    /// failed or timed out.
    pub embedder_failures: AtomicU64,
    /// Vectors written by the indexer.
    pub vectors_written: AtomicU64,
    /// Time spent embedding queries (the encoder's share of recall).
    pub query_embed_nanos: AtomicU64,
    /// Time spent in the int8 scan (with its top-up from `seq`), and in
    /// re-scoring its candidates exactly from SQLite: the dense side's
    /// share of recall, apart from the encoder.
    pub dense_scan_nanos: AtomicU64,
    pub dense_rescore_nanos: AtomicU64,
}

/// A snapshot of [`RetrievalStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RetrievalCounts {
    pub hybrid: u64,
    pub embedder_failures: u64,
    pub vectors_written: u64,
    pub query_embed_nanos: u64,
    pub dense_scan_nanos: u64,
    pub dense_rescore_nanos: u64,
}

impl VectorProgress {
    /// The `vectors` line of `memgate doctor`: embedded / total and the
    /// model, or why recall is lexical. A pending model change is a problem
    /// (recall stays lexical until `memgate reembed`); work still left to
    /// the indexer is not.
    pub fn diagnostic(&self) -> Diagnostic {
        let Some(model) = &self.model else {
            let kept = match &self.stored_model {
                Some(stored) => format!(" (the file keeps {} vectors of {stored})", self.embedded),
                None => String::new(),
            };
            return Diagnostic::ok(
                "vectors",
                format!("off: no embedder configured, recall is lexical{kept}"),
            );
        };
        if self.model_mismatch {
            return Diagnostic::problem(
                "vectors",
                format!(
                    "model change pending: the file's vectors are of {}, the configured \
                     embedder makes {}; recall stays lexical until `memgate reembed`",
                    self.stored_model
                        .as_deref()
                        .map_or_else(|| "another model".to_owned(), describe_key),
                    describe_key(model)
                ),
            );
        }
        let done = if self.embedded >= self.total {
            "all embedded".to_owned()
        } else {
            format!(
                "{} left to the background indexer",
                self.total - self.embedded
            )
        };
        Diagnostic::ok(
            "vectors",
            format!(
                "{} / {} items embedded with {model} ({done})",
                self.embedded, self.total
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_embedded_after_the_previous_one_with_its_date_and_speaker() {
        assert_eq!(
            turn_text(
                "Yes, last May!",
                Some("Mel"),
                Some("8 May 2023"),
                Some("Did you go?")
            ),
            "Did you go?\n[8 May 2023] Mel: Yes, last May!"
        );
        assert_eq!(turn_text("Hi", None, Some("today"), None), "[today] Hi");
        assert_eq!(turn_text("Hi", None, None, None), "Hi");
        // The recipe that says so is the one vectors are keyed by.
        assert!(vector_key("m").ends_with("; r3"));
        assert!(describe_key(&vector_key("m")).contains("with its date and speaker"));
    }
}
