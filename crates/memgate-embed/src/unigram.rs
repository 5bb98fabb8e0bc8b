//! A SentencePiece unigram tokenizer (XLM-RoBERTa's, which
//! multilingual-e5-small reads with): every character is first replaced by
//! the model's normalisation map (its NFKC-style folding, one code point to
//! zero or more), runs of spaces become one, a space is put in front unless
//! the text starts with one, and every space becomes the metaspace `▁`. The
//! text is then cut into the vocabulary pieces whose summed log-probability
//! ("score") is highest (Viterbi over character positions); a character no
//! piece covers is `<unk>` at a score below every piece's. The sequence is
//! `<s> … </s>`, cut to `max_tokens`.

use crate::{EmbedError, Result};
use std::collections::HashMap;

/// SentencePiece's word-boundary marker.
const METASPACE: char = '\u{2581}';

/// How far below the least likely piece an unknown character scores
/// (SentencePiece's unknown penalty).
const UNKNOWN_PENALTY: f32 = 10.0;

/// A vocabulary with scores, the normalisation map and the special ids.
pub struct Unigram {
    pieces: HashMap<Box<str>, (u32, f32)>,
    /// The longest piece, in bytes: no candidate is longer.
    longest: usize,
    unknown_score: f32,
    normalise: HashMap<char, Box<str>>,
    bos: u32,
    eos: u32,
    unk: u32,
    /// How many pieces there are (ids run below it).
    count: usize,
}

/// What [`Unigram::new`] is built from.
pub struct UnigramVocab {
    /// Pieces in id order, each with its score.
    pub pieces: Vec<(String, f32)>,
    /// Characters the normaliser replaces, with their replacement.
    pub normalise: Vec<(char, String)>,
    pub bos: u32,
    pub eos: u32,
    pub unk: u32,
}

impl Unigram {
    pub fn new(vocab: UnigramVocab) -> Result<Self> {
        let count = vocab.pieces.len();
        for (name, id) in [("bos", vocab.bos), ("eos", vocab.eos), ("unk", vocab.unk)] {
            if id as usize >= count {
                return Err(EmbedError::Config(format!(
                    "tokenizer {name} id {id} is outside its {count} pieces"
                )));
            }
        }
        let least = vocab
            .pieces
            .iter()
            .map(|(_, s)| *s)
            .fold(f32::INFINITY, f32::min);
        let longest = vocab.pieces.iter().map(|(p, _)| p.len()).max().unwrap_or(1);
        let pieces = vocab
            .pieces
            .into_iter()
            .enumerate()
            .filter(|(_, (p, _))| !p.is_empty())
            .map(|(id, (p, s))| (p.into_boxed_str(), (id as u32, s)))
            .collect();
        Ok(Self {
            pieces,
            longest,
            unknown_score: least - UNKNOWN_PENALTY,
            normalise: vocab
                .normalise
                .into_iter()
                .map(|(c, r)| (c, r.into_boxed_str()))
                .collect(),
            bos: vocab.bos,
            eos: vocab.eos,
            unk: vocab.unk,
            count,
        })
    }

    /// The largest id [`Self::encode`] can give.
    pub fn largest_id(&self) -> u32 {
        self.count.saturating_sub(1) as u32
    }

    /// The text as the model sees it before it is cut: normalised, single
    /// spaces, a leading boundary, spaces as `▁`.
    fn prepared(&self, text: &str) -> String {
        let mut folded = String::with_capacity(text.len() + 4);
        for c in text.chars() {
            match self.normalise.get(&c) {
                Some(r) => folded.push_str(r),
                None => folded.push(c),
            }
        }
        let mut out = String::with_capacity(folded.len() + 4);
        if !folded.starts_with(' ') {
            out.push(METASPACE);
        }
        let mut last_space = false;
        for c in folded.chars() {
            if c == ' ' {
                if !last_space {
                    out.push(METASPACE);
                }
                last_space = true;
            } else {
                out.push(c);
                last_space = false;
            }
        }
        out
    }

    /// `<s>`, the pieces of `text`, `</s>`; at most `max_tokens` ids (the
    /// text's head is kept).
    pub fn encode(&self, text: &str, max_tokens: usize) -> Vec<u32> {
        let text = self.prepared(text);
        // Byte offset of every character boundary, the end included.
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .chain([text.len()])
            .collect();
        let chars = bounds.len() - 1;
        // best[e]: the best score of a cut of the first `e` characters, and
        // the piece ending there (None: an unknown character) with its start.
        let mut best: Vec<(f32, Option<u32>, usize)> =
            vec![(f32::NEG_INFINITY, None, 0); chars + 1];
        best[0].0 = 0.0;
        for start in 0..chars {
            let base = best[start].0;
            if base == f32::NEG_INFINITY {
                continue;
            }
            for end in start + 1..=chars {
                let piece = &text[bounds[start]..bounds[end]];
                if piece.len() > self.longest {
                    break;
                }
                if let Some(&(id, score)) = self.pieces.get(piece) {
                    if id != self.unk && base + score > best[end].0 {
                        best[end] = (base + score, Some(id), start);
                    }
                }
            }
            let unknown = base + self.unknown_score;
            if unknown > best[start + 1].0 {
                best[start + 1] = (unknown, None, start);
            }
        }
        let mut pieces = Vec::new();
        let mut end = chars;
        while end > 0 {
            let (_, id, start) = best[end];
            pieces.push(id.unwrap_or(self.unk));
            end = start;
        }
        let room = max_tokens.saturating_sub(2);
        let mut ids = Vec::with_capacity(pieces.len().min(room) + 2);
        ids.push(self.bos);
        ids.extend(pieces.iter().rev().take(room));
        ids.push(self.eos);
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Unigram {
        let pieces = [
            ("<s>", 0.0),
            ("<pad>", 0.0),
            ("</s>", 0.0),
            ("<unk>", 0.0),
            ("▁", -2.0),
            ("▁he", -3.0),
            ("llo", -3.0),
            ("▁hello", -4.0),
            ("h", -5.0),
            ("e", -5.0),
            ("l", -5.0),
            ("o", -5.0),
            ("▁w", -4.0),
            ("orld", -4.0),
            ("ss", -4.0),
        ];
        Unigram::new(UnigramVocab {
            pieces: pieces.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            normalise: vec![('ß', "ss".into()), ('\u{00A0}', " ".into())],
            bos: 0,
            eos: 2,
            unk: 3,
        })
        .unwrap()
    }

    #[test]
    fn the_cut_with_the_highest_summed_score_wins() {
        let t = tokenizer();
        // "▁hello" alone (-4) beats "▁he" + "llo" (-6) and every finer cut.
        assert_eq!(t.encode("hello", 16), [0, 7, 2]);
        assert_eq!(t.encode("hello world", 16), [0, 7, 12, 13, 2]);
    }

    #[test]
    fn spaces_fold_to_one_boundary_and_the_map_applies_first() {
        let t = tokenizer();
        // A no-break space is mapped to a space, then runs of spaces fold.
        assert_eq!(
            t.encode("hello \u{00A0}  world", 16),
            t.encode("hello world", 16)
        );
        // A leading space is the boundary itself, not a second one.
        assert_eq!(t.encode(" hello", 16), t.encode("hello", 16));
        // ß is replaced before the cut: "▁he" "ss" is found.
        assert_eq!(t.encode("heß", 16), [0, 5, 14, 2]);
    }

    #[test]
    fn a_character_no_piece_covers_is_unknown() {
        let t = tokenizer();
        assert_eq!(t.encode("hez", 16), [0, 5, 3, 2]);
        // Unknown characters never hide the pieces around them.
        assert_eq!(t.encode("zhello", 16), [0, 4, 3, 8, 9, 6, 2]);
    }

    #[test]
    fn long_texts_keep_their_head_within_max_tokens() {
        let t = tokenizer();
        assert_eq!(t.encode("hello world hello", 4), [0, 7, 12, 2]);
        assert_eq!(t.encode("hello", 2), [0, 2]);
    }

    #[test]
    fn special_ids_must_name_pieces() {
        let err = Unigram::new(UnigramVocab {
            pieces: vec![("a".into(), 0.0)],
            normalise: vec![],
            bos: 0,
            eos: 5,
            unk: 0,
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("eos id 5"), "{err}");
    }
}
