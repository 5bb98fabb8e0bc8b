//! The synthetic memory the store benchmarks fill and query: Zipf-distributed
//! text over common and synthetic words, captured a thread at a time, with
//! explicit memories and queries drawn from what was captured. The local
//! and postgres benchmarks measure the same data for the same seed.

use memgate_core::{Caller, CaptureKind, CaptureRequest, Message, RememberRequest, Result};
use memgate_testsupport::SplitMix;

const FUNCTION_WORDS: &[&str] = &[
    "the", "a", "and", "to", "of", "i", "you", "it", "is", "that", "in", "we", "for", "on", "with",
    "was", "my", "this", "be", "have",
];

/// Content words people use; the injection query's words are among them so
/// a query-less recall finds something, as it would in real use.
const COMMON_WORDS: &[&str] = &[
    "project",
    "meeting",
    "deadline",
    "profile",
    "preferences",
    "important",
    "events",
    "goals",
    "constraints",
    "decisions",
    "prior",
    "ongoing",
    "entities",
    "user",
    "travel",
    "family",
    "budget",
    "music",
    "coffee",
    "weekend",
    "report",
    "server",
    "database",
    "team",
    "release",
    "garden",
    "book",
    "flight",
    "doctor",
    "birthday",
    "recipe",
    "python",
    "rust",
    "editor",
    "vim",
    "deploy",
    "invoice",
    "school",
    "piano",
    "hiking",
];

/// Zipf-distributed text over common and synthetic words (shared with the
/// postgres backend's benchmark, so both measure the same text).
pub struct TextGen {
    vocab: Vec<String>,
    cumulative: Vec<f64>,
}

impl TextGen {
    pub fn new(rng: &mut SplitMix, synthetic: usize) -> Self {
        const SYLLABLES: &[&str] = &[
            "ka", "lo", "mi", "ren", "tas", "vo", "quin", "bar", "del", "su", "nor", "pe", "gil",
            "tra", "zu", "mon", "fe", "lis", "dor", "wen",
        ];
        let mut vocab: Vec<String> = COMMON_WORDS.iter().map(|w| (*w).to_owned()).collect();
        while vocab.len() < COMMON_WORDS.len() + synthetic {
            let n = 2 + rng.below(3);
            let word: String = (0..n)
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect();
            vocab.push(word);
        }
        // Shuffle so common words are spread over the ranks.
        for i in (1..vocab.len()).rev() {
            vocab.swap(i, rng.below(i + 1));
        }
        let mut total = 0.0;
        let cumulative = (1..=vocab.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Self { vocab, cumulative }
    }

    pub fn word(&self, rng: &mut SplitMix) -> &str {
        let total = *self.cumulative.last().unwrap_or(&1.0);
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|c| *c < x);
        &self.vocab[i.min(self.vocab.len() - 1)]
    }

    pub fn sentence(&self, rng: &mut SplitMix, words: usize) -> String {
        let mut out = String::new();
        for i in 0..words {
            if i > 0 {
                out.push(' ');
            }
            if rng.below(10) < 4 {
                out.push_str(FUNCTION_WORDS[rng.below(FUNCTION_WORDS.len())]);
            } else {
                out.push_str(self.word(rng));
            }
        }
        out
    }
}

/// The synthetic memory of one benchmark size, generated from one
/// [`SplitMix`] in a fixed order (the text's vocabulary, then the captures,
/// then the explicit memories, then the queries), so the local store's
/// bench and the postgres backend's bench measure the same data for the
/// same seed. Captures are made one at a time, so a large size is never
/// held in memory whole.
pub struct Workload {
    pub text: TextGen,
    /// The (user, agent) scope everything is written to and recalled from.
    pub user: Caller,
    /// Captured turns in all.
    pub turns: usize,
    /// Explicit memories, one [`Workload::memory`] each.
    pub memories: usize,
    per_capture: usize,
    made: usize,
    threads: usize,
    /// One captured sentence in 50, the material of [`Workload::query`].
    samples: Vec<String>,
}

impl Workload {
    /// `items` in all: one explicit memory per `memory_every`, the rest
    /// turns in new-thread snapshots of `per_capture`.
    pub fn new(rng: &mut SplitMix, items: usize, memory_every: usize, per_capture: usize) -> Self {
        let memories = items / memory_every.max(1);
        Self {
            text: TextGen::new(rng, 20_000),
            user: Caller::new("bench-user").with_agent("bench-agent"),
            turns: items - memories,
            memories,
            per_capture: per_capture.max(1),
            made: 0,
            threads: 0,
            samples: Vec::new(),
        }
    }

    /// The next capture (a new thread's snapshot, human and AI turns
    /// alternating), or `None` once every turn is made.
    pub fn next_capture(&mut self, rng: &mut SplitMix) -> Option<CaptureRequest> {
        if self.made == self.turns {
            return None;
        }
        let n = self.per_capture.min(self.turns - self.made);
        let thread = self.threads;
        let messages = (0..n)
            .map(|i| {
                let words = if i % 2 == 0 {
                    8 + rng.below(20)
                } else {
                    15 + rng.below(45)
                };
                let s = self.text.sentence(rng, words);
                if rng.below(50) == 0 {
                    self.samples.push(s.clone());
                }
                if i % 2 == 0 {
                    Message::human(s)
                } else {
                    Message::ai(s)
                }
                .with_id(format!("t{thread}-{i}"))
            })
            .collect();
        self.made += n;
        self.threads += 1;
        Some(CaptureRequest {
            caller: self.user.clone().with_thread(format!("thread-{thread}")),
            messages,
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
    }

    /// Explicit memory `i` (a short fact, numbered so none repeats).
    pub fn memory(&self, rng: &mut SplitMix, i: usize) -> Result<RememberRequest> {
        let words = 5 + rng.below(15);
        let fact = format!("{} (note {i})", self.text.sentence(rng, words));
        RememberRequest::new("fact", &fact)
    }

    /// A realistic recall query: a few words of an earlier message plus a
    /// couple of unrelated words, and one time in 20 none at all.
    /// The captured sentences queries are drawn from.
    pub fn samples(&self) -> &[String] {
        &self.samples
    }

    pub fn query(&self, rng: &mut SplitMix) -> Option<String> {
        self.sourced_query(rng).map(|(q, _)| q)
    }

    /// [`Workload::query`] with the captured sentence its words were taken
    /// from (what the ranking-quality figures look for in the top 10).
    pub fn sourced_query(&self, rng: &mut SplitMix) -> Option<(String, &str)> {
        if rng.below(20) == 0 || self.samples.is_empty() {
            return None;
        }
        let sample = &self.samples[rng.below(self.samples.len())];
        let words: Vec<&str> = sample.split(' ').collect();
        let take = (3 + rng.below(6)).min(words.len());
        let start = rng.below(words.len() - take + 1);
        let mut q = words[start..start + take].join(" ");
        for _ in 0..1 + rng.below(2) {
            q.push(' ');
            q.push_str(self.text.word(rng));
        }
        Some((format!("{q}?"), sample.as_str()))
    }
}
