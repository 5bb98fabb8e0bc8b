//! Terms: how text becomes recall-index tokens and how a user's query becomes
//! a safe FTS5 MATCH expression.
//!
//! Text is folded before SQLite sees it: Unicode compatibility decomposition
//! with combining marks dropped (`Café` → `cafe`), lower-cased, split on
//! anything that is not a letter or digit. Han and kana characters become
//! one-character terms (those scripts do not separate words with spaces).
//! Common English function words are dropped, from documents and queries
//! alike. The FTS5 table's `porter ascii` tokenizer then stems each term.
//!
//! Every term is prefixed with its scope's tag (`q<scope id>x`), so the index
//! holds a separate vocabulary per (user, peer) scope: a query can only ever
//! reach its own scope's postings, and document frequencies are per scope.
//! The tag uses no vowels, so Porter stemming of the suffix is unaffected.
//!
//! A query is never passed to FTS5 as syntax: each term becomes a
//! double-quoted string of letters and digits (the ranking joins them with
//! `OR` / `AND`), so quotes, operators (`AND`, `NEAR`, `*`, `^`, `:`) and
//! unbalanced brackets in user text cannot produce a syntax error or change
//! the meaning.

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// Longest term kept; longer runs (hashes, base64) only bloat the index.
const MAX_TERM_CHARS: usize = 48;
/// Most distinct terms a query contributes (a pasted page stays cheap).
pub const MAX_QUERY_TERMS: usize = 32;

/// English function words that carry no topic. Lower-case, folded.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "couldn",
    "d",
    "did",
    "didn",
    "do",
    "does",
    "doesn",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn",
    "has",
    "hasn",
    "have",
    "haven",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "isn",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "m",
    "me",
    "might",
    "more",
    "most",
    "must",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "re",
    "s",
    "same",
    "shall",
    "she",
    "should",
    "shouldn",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "ve",
    "very",
    "was",
    "wasn",
    "we",
    "were",
    "weren",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "wouldn",
    "y",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

fn is_stopword(term: &str) -> bool {
    STOPWORDS.binary_search(&term).is_ok()
}

/// Han ideographs and kana: scripts written without spaces between words.
fn is_unspaced_script(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30FF}'   // Hiragana, Katakana
        | '\u{3400}'..='\u{4DBF}' // CJK Extension A
        | '\u{4E00}'..='\u{9FFF}' // CJK Unified Ideographs
        | '\u{F900}'..='\u{FAFF}' // CJK Compatibility Ideographs
        | '\u{20000}'..='\u{2FA1F}')
}

/// The topic terms of `text`, folded, in order (duplicates kept).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let flush = |current: &mut String, out: &mut Vec<String>| {
        if !current.is_empty() {
            let word = std::mem::take(current);
            if word.chars().count() <= MAX_TERM_CHARS && !is_stopword(&word) {
                out.push(word);
            }
        }
    };
    if text.is_ascii() {
        // Most text: nothing to decompose, so skip the Unicode machinery.
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() {
                current.push(char::from(b.to_ascii_lowercase()));
            } else {
                flush(&mut current, &mut out);
            }
        }
    } else {
        for c in text.nfkd().filter(|c| !is_combining_mark(*c)) {
            if is_unspaced_script(c) {
                flush(&mut current, &mut out);
                out.push(c.to_string());
            } else if c.is_alphanumeric() {
                current.extend(c.to_lowercase());
            } else {
                flush(&mut current, &mut out);
            }
        }
    }
    flush(&mut current, &mut out);
    out
}

/// The per-scope prefix of every indexed term.
pub fn scope_tag(scope_id: i64) -> String {
    format!("q{scope_id}x")
}

/// The text handed to the FTS5 index for one column: tagged terms separated
/// by spaces.
pub fn index_text(tag: &str, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    for term in terms(text) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(tag);
        out.push_str(&term);
    }
    out
}

/// The distinct folded terms of `query`, at most [`MAX_QUERY_TERMS`], in
/// query order (what a ranking plans over, in both stores).
pub fn query_terms(query: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for term in terms(query) {
        if !seen.contains(&term) {
            seen.push(term);
            if seen.len() == MAX_QUERY_TERMS {
                break;
            }
        }
    }
    seen
}

/// The MATCH phrases of `query` in one scope: its [`query_terms`], each
/// tagged and double-quoted (letters and digits only, so a phrase can never
/// be FTS5 syntax). Empty when the query has no topic term (blank,
/// punctuation only, or only function words).
pub fn query_phrases(tag: &str, query: &str) -> Vec<String> {
    query_terms(query)
        .iter()
        .map(|t| format!("\"{tag}{t}\""))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopword_list_is_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn folding_drops_case_marks_and_function_words() {
        assert_eq!(
            terms("The Café's CRÈME brûlée, and naïve co-op!"),
            ["cafe", "creme", "brulee", "naive", "co", "op"]
        );
        assert_eq!(
            terms("I'm going to the U.S. in 2024"),
            ["going", "u", "2024"]
        );
        assert!(terms("  ...  ").is_empty());
    }

    #[test]
    fn han_and_kana_become_single_character_terms() {
        assert_eq!(
            terms("我喜欢Vim编辑器"),
            ["我", "喜", "欢", "vim", "编", "辑", "器"]
        );
        assert_eq!(terms("すし"), ["す", "し"]);
    }

    #[test]
    fn overlong_runs_are_dropped() {
        let hash = "a".repeat(64);
        assert_eq!(terms(&format!("sha {hash} done")), ["sha", "done"]);
    }

    #[test]
    fn index_text_tags_every_term() {
        assert_eq!(
            index_text("q7x", "Vim keys, please"),
            "q7xvim q7xkeys q7xplease"
        );
        assert_eq!(index_text("q7x", "the of"), "");
    }

    #[test]
    fn query_phrases_quote_terms_and_dedupe() {
        assert_eq!(
            query_phrases("q1x", "Vim vim \"emacs\" OR NEAR(x*) col:^y"),
            [
                "\"q1xvim\"",
                "\"q1xemacs\"",
                "\"q1xnear\"",
                "\"q1xx\"",
                "\"q1xcol\""
            ]
        );
        assert!(query_phrases("q1x", "   ").is_empty());
        assert!(query_phrases("q1x", "what is the").is_empty());
        let long: String = (0..100).map(|i| format!("w{i} ")).collect();
        assert_eq!(query_phrases("q1x", &long).len(), MAX_QUERY_TERMS);
    }

    #[test]
    fn ascii_fast_path_agrees_with_the_unicode_path() {
        let ascii = "Hello, World! It's 2024: run_fast & co-op (v2.1)";
        let mut expected = terms(ascii);
        expected.push("e".to_owned());
        // The trailing `é` forces the Unicode path; it folds to `e`.
        assert_eq!(terms(&format!("{ascii} \u{e9}")), expected);
    }
}
