//! How text reaches PostgreSQL's text search, and how a query becomes a
//! safe `tsquery`.
//!
//! Text is folded by `local`'s own rules first ([`memgate_recall::terms`]:
//! accents dropped, lower-cased, Han and kana split into characters, English
//! function words dropped), then handed to `to_tsvector('english', …)`,
//! which stems. A query becomes up to [`memgate_recall::terms::MAX_QUERY_TERMS`] distinct folded
//! terms, each single-quoted (they are letters and digits only, so none can
//! be `tsquery` syntax) and joined with `|`.

pub use memgate_recall::terms::query_terms;
use memgate_recall::terms::terms;
#[cfg(test)]
use memgate_recall::terms::MAX_QUERY_TERMS;

/// The text search configuration (stemming) both documents and queries use.
pub const TEXT_SEARCH_CONFIG: &str = "english";

/// `text` folded into space-separated terms.
pub fn fold(text: &str) -> String {
    terms(text).join(" ")
}

/// The SQL expression of a document's vector from two bound parameters:
/// body (weight `A`) and context (weight `B`), both already [`fold`]ed.
pub fn search_vector(body: &str, context: &str) -> String {
    format!(
        "setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', {body}), 'A') || \
         setweight(to_tsvector('{TEXT_SEARCH_CONFIG}', {context}), 'B')"
    )
}

/// One term as a `to_tsquery` operand: single-quoted (terms are letters
/// and digits only, so none can be `tsquery` syntax).
pub fn quoted(term: &str) -> String {
    format!("'{term}'")
}

/// `'t1' | 't2' | …`: documents with any of `terms`.
pub fn any_of<S: AsRef<str>>(terms: &[S]) -> String {
    join(terms, " | ")
}

/// `'t1' & 't2' & …`: documents with every one of `terms`.
pub fn all_of<S: AsRef<str>>(terms: &[S]) -> String {
    join(terms, " & ")
}

fn join<S: AsRef<str>>(terms: &[S], operator: &str) -> String {
    let quoted: Vec<String> = terms.iter().map(|t| quoted(t.as_ref())).collect();
    quoted.join(operator)
}

/// The `to_tsquery` input for `query`: `'t1' | 't2' | …`; `None` when the
/// query has no topic term.
pub fn tsquery_text(query: &str) -> Option<String> {
    let terms = query_terms(query);
    (!terms.is_empty()).then(|| any_of(&terms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_quoted_terms_never_syntax() {
        assert_eq!(
            tsquery_text("Vim vim 'emacs' | !x & (w) <-> z:*").unwrap(),
            "'vim' | 'emacs' | 'x' | 'w' | 'z'"
        );
        assert_eq!(tsquery_text("what is the"), None);
        assert_eq!(tsquery_text("  ?! "), None);
        let long: String = (0..100).map(|i| format!("w{i} ")).collect();
        assert_eq!(
            tsquery_text(&long).unwrap().matches('|').count(),
            MAX_QUERY_TERMS - 1
        );
    }

    #[test]
    fn plans_combine_quoted_terms() {
        assert_eq!(any_of(&["a", "b"]), "'a' | 'b'");
        assert_eq!(all_of(&["a", "b"]), "'a' & 'b'");
        assert_eq!(query_terms("Vim vim emacs"), ["vim", "emacs"]);
    }

    #[test]
    fn folding_is_locals() {
        assert_eq!(fold("The Café's CRÈME"), "cafe creme");
    }
}
