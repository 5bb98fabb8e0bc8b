//! The `confidence` a search hit carries to DeerFlow's `memory_search`
//! tool: one 0..1 value with one meaning whatever the backend and whatever
//! else is stored, so a model can read it. Backend scores cannot serve:
//! the local store's BM25 relevance depends on how common a word is in the
//! scope (an exact match scored 3e-06 in one scope and 0.64 in another),
//! and OpenViking's `(1 + cosine) / 2` puts an unrelated text near 0.5.

use memgate_recall::terms::{query_terms, terms};
use pyo3::prelude::*;

/// The share of the query's topic terms (folded, stop words left out, as
/// recall reads them) that `text` contains: 1.0 when it holds every one,
/// 0.0 when it holds none or the query has no topic term. Rounded to two
/// decimals: finer steps carry no meaning.
#[pyfunction]
pub fn search_confidence(query: &str, text: &str) -> f64 {
    let wanted = query_terms(query);
    if wanted.is_empty() {
        return 0.0;
    }
    let held = terms(text);
    let found = wanted.iter().filter(|t| held.contains(t)).count();
    (found as f64 / wanted.len() as f64 * 100.0).round() / 100.0
}
