//! BERT's uncased WordPiece tokenizer, as the model was trained with it:
//! drop control characters, put spaces around CJK ideographs, lower-case,
//! strip accents (NFD, combining marks removed), split on white space and
//! around punctuation, then split each word greedily into the longest
//! vocabulary pieces (continuations prefixed `##`); a word with no split is
//! `[UNK]`. The sequence is `[CLS] … [SEP]`, cut to `max_tokens`.

use crate::{EmbedError, Result};
use std::collections::HashMap;
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// Longer words are `[UNK]` (BERT's rule).
const MAX_WORD_CHARS: usize = 100;

/// A vocabulary and the rules above.
pub struct WordPiece {
    vocab: HashMap<String, u32>,
    cls: u32,
    sep: u32,
    unk: u32,
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32, 0x2000..=0x206F | 0x3000..=0x303F | 0xFF00..=0xFF0F | 0x00A1..=0x00BF)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

impl WordPiece {
    /// Reads `vocab.txt` (one piece per line, the line number is its id).
    pub fn from_vocab(text: &str) -> Result<Self> {
        let vocab: HashMap<String, u32> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (l.trim_end_matches('\r').to_owned(), i as u32))
            .collect();
        let id = |t: &str| {
            vocab
                .get(t)
                .copied()
                .ok_or_else(|| EmbedError::Config(format!("vocab.txt has no {t} token")))
        };
        Ok(Self {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            unk: id("[UNK]")?,
            vocab,
        })
    }

    /// The words of `text` after cleaning, folding and punctuation splits.
    fn words(text: &str) -> Vec<String> {
        let mut spaced = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            if c == '\0' || c == '\u{FFFD}' || (c.is_control() && !c.is_whitespace()) {
                continue;
            }
            if is_cjk(c) {
                spaced.push(' ');
                spaced.push(c);
                spaced.push(' ');
            } else {
                spaced.push(c);
            }
        }
        let folded: String = spaced
            .to_lowercase()
            .nfd()
            .filter(|c| !is_combining_mark(*c))
            .collect();
        let mut out = Vec::new();
        for word in folded.split_whitespace() {
            let mut current = String::new();
            for c in word.chars() {
                if is_punctuation(c) {
                    if !current.is_empty() {
                        out.push(std::mem::take(&mut current));
                    }
                    out.push(c.to_string());
                } else {
                    current.push(c);
                }
            }
            if !current.is_empty() {
                out.push(current);
            }
        }
        out
    }

    /// The pieces of one word, appended to `ids`.
    fn pieces(&self, word: &str, ids: &mut Vec<u32>) {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() > MAX_WORD_CHARS {
            ids.push(self.unk);
            return;
        }
        let start_len = ids.len();
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while end > start {
                let mut piece: String = chars[start..end].iter().collect();
                if start > 0 {
                    piece.insert_str(0, "##");
                }
                if let Some(id) = self.vocab.get(&piece) {
                    found = Some(*id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    start = end;
                }
                None => {
                    ids.truncate(start_len);
                    ids.push(self.unk);
                    return;
                }
            }
        }
    }

    /// `[CLS] pieces… [SEP]`, at most `max_tokens` ids in all.
    pub fn encode(&self, text: &str, max_tokens: usize) -> Vec<u32> {
        let mut ids = vec![self.cls];
        for word in Self::words(text) {
            self.pieces(&word, &mut ids);
            if ids.len() >= max_tokens - 1 {
                break;
            }
        }
        ids.truncate(max_tokens - 1);
        ids.push(self.sep);
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> WordPiece {
        let vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncafe\nplay\n##ing\n##s\n,\n!\n日\n";
        WordPiece::from_vocab(vocab).unwrap()
    }

    #[test]
    fn words_fold_case_accents_and_split_punctuation() {
        assert_eq!(
            WordPiece::words("The Café, PLAYING!日本"),
            ["the", "cafe", ",", "playing", "!", "日", "本"]
        );
    }

    #[test]
    fn pieces_are_longest_first_with_unknown_words_whole() {
        let wp = tiny();
        assert_eq!(
            wp.encode("the cafe playings, xyz", 64),
            [2, 4, 5, 6, 7, 8, 9, 1, 3]
        );
        // Cut to the limit, still closed by [SEP].
        assert_eq!(wp.encode("the the the the", 4), [2, 4, 4, 3]);
    }
}
