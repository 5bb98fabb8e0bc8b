//! Salience: how much a captured turn says that should outlive its
//! conversation, judged from its words alone (no model, no query).
//!
//! A turn is split into sentences and each sentence is scored by rules that
//! can be read off the text:
//! - it must carry at least [`MIN_CONTENT_WORDS`] content words (not function
//!   words, not chit-chat such as "thanks", "wow", "nice"), else it scores 0;
//! - +[`SELF_WEIGHT`] when the speaker talks about themselves ("I", "my", "we");
//! - +[`NAME_WEIGHT`] per proper name (a capitalised word inside the
//!   sentence that is not a speaker's own name; at most [`MAX_NAMES`]);
//! - +[`DATE_WEIGHT`] when it places something in time (a number, a month or
//!   weekday, "yesterday", "next week", "ago");
//! - +[`TOPIC_WEIGHT`] for each kind of durable topic it touches: people in
//!   one's life, work and places, plans and decisions, likes, dislikes and
//!   preferences, and who the speaker is (an introduction: "I'm Dana", "my
//!   name is Dana", "call me Dana");
//! - an introduction needs no further content word: the name is the
//!   content ("Hi, I'm Dana." is all a user may ever say about it);
//! - +[`VOLUME_WEIGHT`] per content word (at most [`MAX_VOLUME_WORDS`]);
//! - a question keeps [`QUESTION_FACTOR`] of its score (it asks rather than
//!   tells), a remark only about the other party ("you", no "I") keeps
//!   [`YOU_FACTOR`].
//!
//! The [`Excerpt`] of a turn keeps its best sentences (in their order) up to
//! [`EXCERPT_CHARS`], marking what it leaves out with `…`; its score is the
//! sum of the kept sentences' scores. It is [about its speaker](Excerpt::about_speaker)
//! when a kept sentence states something of the speaker (first person, an
//! introduction or a preference) rather than asking. Everything here is a pure function of
//! the text and the speakers' names, so a selection can be explained and
//! reproduced.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Fewest content words a sentence needs to say anything.
pub const MIN_CONTENT_WORDS: usize = 2;
pub const SELF_WEIGHT: f64 = 1.0;
pub const NAME_WEIGHT: f64 = 1.0;
pub const MAX_NAMES: usize = 3;
pub const DATE_WEIGHT: f64 = 1.5;
pub const TOPIC_WEIGHT: f64 = 1.0;
pub const VOLUME_WEIGHT: f64 = 0.1;
pub const MAX_VOLUME_WORDS: usize = 15;
pub const QUESTION_FACTOR: f64 = 0.35;
pub const YOU_FACTOR: f64 = 0.6;
/// A sentence scoring less than this is left out of an excerpt.
pub const SENTENCE_FLOOR: f64 = 1.0;
/// Longest excerpt of one turn, in characters (a longer single sentence is
/// cut at a word boundary): about one full sentence, so a first-turn block
/// holds many facts rather than a few whole turns.
pub const EXCERPT_CHARS: usize = 140;

/// Marks text left out of an excerpt.
const OMITTED: char = '…';

/// Words that make a sentence about its speaker.
const SELF_WORDS: &[&str] = &[
    "i", "i'd", "i'll", "i'm", "i've", "im", "ive", "me", "mine", "my", "myself", "our", "ours",
    "us", "we", "we're", "we've",
];

const YOU_WORDS: &[&str] = &[
    "you", "you'd", "you'll", "you're", "you've", "your", "yours",
];

/// Reactions and pleasantries: a sentence made only of these says nothing
/// durable.
const CHIT_CHAT: &[&str] = &[
    "absolutely",
    "agree",
    "agreed",
    "amazing",
    "appreciate",
    "awesome",
    "aww",
    "bye",
    "cheers",
    "congrats",
    "congratulations",
    "cool",
    "definitely",
    "glad",
    "good",
    "great",
    "haha",
    "hehe",
    "hello",
    "hey",
    "hi",
    "hmm",
    "hope",
    "incredible",
    "indeed",
    "lol",
    "lovely",
    "luck",
    "nice",
    "oh",
    "okay",
    "ok",
    "omg",
    "really",
    "sounds",
    "super",
    "sure",
    "sweet",
    "thank",
    "thanks",
    "totally",
    "wonderful",
    "wow",
    "yay",
    "yeah",
    "yep",
    "yes",
    "yup",
];

/// Function words (a short list: only whether a word carries content matters).
const FUNCTION_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "don't",
    "for", "from", "had", "has", "have", "he", "her", "here", "him", "his", "how", "if", "in",
    "into", "is", "it", "it's", "its", "just", "let", "let's", "like", "lot", "more", "much", "so",
    "no", "not", "now", "of", "on", "one", "or", "out", "she", "should", "some", "such", "than",
    "that", "that's", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "too", "up", "very", "was", "way", "were", "what", "what's", "when", "where", "which",
    "who", "why", "with", "would", "get", "got", "thing", "things", "know", "think", "feel",
    "make", "made", "see", "well", "even", "still",
];

/// Words that place a statement in time (numbers count too).
const TIME_WORDS: &[&str] = &[
    "ago",
    "anniversary",
    "april",
    "august",
    "autumn",
    "birthday",
    "christmas",
    "december",
    "february",
    "friday",
    "january",
    "july",
    "june",
    "last",
    "monday",
    "month",
    "months",
    "next",
    "november",
    "october",
    "recently",
    "saturday",
    "september",
    "since",
    "soon",
    "spring",
    "summer",
    "sunday",
    "thursday",
    "today",
    "tomorrow",
    "tonight",
    "tuesday",
    "wednesday",
    "week",
    "weekend",
    "weeks",
    "winter",
    "year",
    "years",
    "yesterday",
];

/// Durable topics: people in one's life, work and places, plans and
/// decisions, likes and dislikes. One bonus per group touched.
const TOPICS: &[&[&str]] = &[
    &[
        "aunt",
        "baby",
        "boss",
        "boyfriend",
        "brother",
        "cat",
        "children",
        "colleague",
        "cousin",
        "dad",
        "daughter",
        "dog",
        "family",
        "father",
        "friend",
        "friends",
        "girlfriend",
        "grandma",
        "grandpa",
        "husband",
        "kid",
        "kids",
        "mom",
        "mother",
        "neighbor",
        "neighbour",
        "parents",
        "partner",
        "pet",
        "puppy",
        "sister",
        "son",
        "team",
        "uncle",
        "wife",
    ],
    &[
        "apartment",
        "business",
        "career",
        "city",
        "class",
        "client",
        "college",
        "company",
        "country",
        "course",
        "degree",
        "home",
        "house",
        "interview",
        "job",
        "office",
        "project",
        "promotion",
        "school",
        "shop",
        "startup",
        "studio",
        "town",
        "trip",
        "university",
        "work",
        "working",
    ],
    &[
        "adopt",
        "adopted",
        "applied",
        "bought",
        "booked",
        "decided",
        "decision",
        "finished",
        "going",
        "gonna",
        "graduated",
        "joined",
        "learned",
        "learning",
        "married",
        "moved",
        "moving",
        "plan",
        "planned",
        "planning",
        "quit",
        "signed",
        "started",
        "starting",
        "took",
        "trying",
        "visit",
        "visited",
        "visiting",
        "went",
        "will",
        "won",
    ],
    &[
        "allergic",
        "always",
        "avoid",
        "dislike",
        "dislikes",
        "enjoy",
        "favorite",
        "favourite",
        "hate",
        "love",
        "loved",
        "never",
        "passion",
        "passionate",
        "prefer",
        "preference",
        "preferences",
        "preferred",
        "prefers",
        "rather",
        "usually",
    ],
];

/// The group of [`TOPICS`] that holds likes, dislikes and preferences: a
/// sentence touching it says something of its speaker even without "I"
/// ("bullet points preferred").
const PREFERENCE_GROUP: usize = 3;

const SELF: u16 = 1;
const YOU: u16 = 2;
const CHAT: u16 = 4;
const FUNCTION: u16 = 8;
const TIME: u16 = 16;
/// Bit of topic group `g` is `TOPIC << g`.
const TOPIC: u16 = 32;

/// Every listed word with the bits of the lists it is in (built once).
fn lexicon() -> &'static HashMap<&'static str, u16> {
    static LEXICON: OnceLock<HashMap<&'static str, u16>> = OnceLock::new();
    LEXICON.get_or_init(|| {
        let mut map: HashMap<&'static str, u16> = HashMap::new();
        let mut add = |list: &[&'static str], bit: u16| {
            for w in list {
                *map.entry(w).or_default() |= bit;
            }
        };
        add(SELF_WORDS, SELF);
        add(YOU_WORDS, YOU);
        add(CHIT_CHAT, CHAT);
        add(FUNCTION_WORDS, FUNCTION);
        add(TIME_WORDS, TIME);
        for (g, group) in TOPICS.iter().enumerate() {
            add(group, TOPIC << g);
        }
        map
    })
}

fn bits(word: &str) -> u16 {
    lexicon().get(word).copied().unwrap_or(0)
}

/// A word of three or more letters in none of the non-content lists.
fn is_content(word: &str, bits: u16) -> bool {
    word.chars().count() >= 3 && bits & (SELF | YOU | CHAT | FUNCTION) == 0
}

/// A turn's text split into sentences: at line breaks and after `.`, `!`
/// or `?` followed by white space. Pieces keep their punctuation.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            let ends = matches!(c, '.' | '!' | '?')
                && chars.peek().is_some_and(|(_, next)| next.is_whitespace());
            if ends {
                let piece = line[start..=i].trim();
                if !piece.is_empty() {
                    out.push(piece);
                }
                start = i + 1;
            }
        }
        let rest = line[start..].trim();
        if !rest.is_empty() {
            out.push(rest);
        }
    }
    out
}

/// Words of a sentence (letters, digits and inner apostrophes).
fn words(sentence: &str) -> impl Iterator<Item = &str> {
    sentence
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
}

/// Whether `words` introduce their speaker: "I'm Dana", "I am Dana", "my
/// name is Dana", "call me Dana" (the name capitalised).
/// `lower` are `words` lower-cased.
fn introduces(words: &[&str], lower: &[String]) -> bool {
    let capitalised = |w: &&str| w.chars().next().is_some_and(char::is_uppercase) && *w != "I";
    (0..lower.len()).any(|i| {
        let next = |k: usize| words.get(i + k).filter(|w| capitalised(w)).is_some();
        match lower[i].as_str() {
            "i'm" | "im" => next(1),
            "i" => lower.get(i + 1).is_some_and(|w| w == "am") && next(2),
            "name" => {
                i > 0
                    && lower[i - 1] == "my"
                    && lower.get(i + 1).is_some_and(|w| w == "is")
                    && next(2)
            }
            "name's" => i > 0 && lower[i - 1] == "my" && next(1),
            "call" => lower.get(i + 1).is_some_and(|w| w == "me") && next(2),
            _ => false,
        }
    })
}

/// What the rules read off one sentence.
struct Reading {
    score: f64,
    /// A statement (not a question) of the speaker's own: first person, an
    /// introduction or a preference.
    about_speaker: bool,
}

/// The score of one sentence (see the module doc). `names` are the
/// speakers' own names, lower-case: addressing someone is not news.
pub fn sentence_score(sentence: &str, names: &[String]) -> f64 {
    read_sentence(sentence, names).score
}

fn read_sentence(sentence: &str, names: &[String]) -> Reading {
    let mut content = 0;
    let (mut about_self, mut about_you, mut dated) = (false, false, false);
    let mut proper = 0;
    let mut topics = [false; 5];
    let all: Vec<&str> = words(sentence).collect();
    let lowered: Vec<String> = all
        .iter()
        .map(|w| w.to_lowercase().replace('’', "'"))
        .collect();
    let introduction = introduces(&all, &lowered);
    topics[4] = introduction;
    for (i, (word, lower)) in all.iter().copied().zip(&lowered).enumerate() {
        let lower = lower.as_str();
        let b = bits(lower);
        about_self |= b & SELF != 0;
        about_you |= b & YOU != 0;
        dated |= b & TIME != 0 || word.chars().any(|c| c.is_ascii_digit());
        for (g, hit) in topics.iter_mut().take(TOPICS.len()).enumerate() {
            *hit |= b & (TOPIC << g) != 0;
        }
        if is_content(lower, b) {
            content += 1;
            let capitalised = word.chars().next().is_some_and(char::is_uppercase);
            if i > 0 && capitalised && !names.iter().any(|n| n == lower) {
                proper += 1;
            }
        }
    }
    let nothing = Reading {
        score: 0.0,
        about_speaker: false,
    };
    if content < MIN_CONTENT_WORDS && !introduction {
        return nothing;
    }
    let mut score = VOLUME_WEIGHT * content.min(MAX_VOLUME_WORDS) as f64;
    if about_self {
        score += SELF_WEIGHT;
    }
    score += NAME_WEIGHT * proper.min(MAX_NAMES) as f64;
    if dated {
        score += DATE_WEIGHT;
    }
    score += TOPIC_WEIGHT * topics.iter().filter(|t| **t).count() as f64;
    let question = sentence.trim_end().ends_with('?');
    if question {
        score *= QUESTION_FACTOR;
    }
    if about_you && !about_self {
        score *= YOU_FACTOR;
    }
    Reading {
        score,
        about_speaker: !question && (about_self || introduction || topics[PREFERENCE_GROUP]),
    }
}

/// The version of [`excerpt`]'s rules. A store that keeps each turn's
/// excerpt records the version it was computed under, so a change to what
/// [`excerpt`] returns for a text must raise it: `postgres` then computes
/// every stored excerpt again in the background (`memgate-postgres::excerpts`),
/// and `local` needs a migration that does the same (as its "first-turn
/// excerpts again" migration did).
pub const EXCERPT_RULES: i16 = 1;

/// What of a turn goes into a first-turn block.
#[derive(Clone, Debug, PartialEq)]
pub struct Excerpt {
    /// The kept sentences, in order, `…` where text was left out.
    pub text: String,
    /// Sum of the kept sentences' scores (0: nothing worth keeping).
    pub score: f64,
    /// The content words of the kept text, lower-case (for novelty).
    pub terms: Vec<String>,
    /// A kept sentence states something of the speaker's own (first person,
    /// an introduction or a preference) rather than asking: what a user says
    /// of themselves leads the first-turn block.
    pub about_speaker: bool,
}

/// The excerpt of `text` (see the module doc), `None` when no sentence
/// reaches [`SENTENCE_FLOOR`].
pub fn excerpt(text: &str, names: &[String]) -> Option<Excerpt> {
    let pieces = sentences(text);
    let readings: Vec<Reading> = pieces.iter().map(|s| read_sentence(s, names)).collect();
    let mut scored: Vec<(usize, f64)> = readings
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.score))
        .filter(|(_, s)| *s >= SENTENCE_FLOOR)
        .collect();
    if scored.is_empty() {
        return None;
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept: Vec<(usize, f64)> = Vec::new();
    let mut used = 0;
    for (i, score) in scored {
        let len = pieces[i].chars().count() + 3;
        if kept.is_empty() || used + len <= EXCERPT_CHARS {
            used += len;
            kept.push((i, score));
        }
    }
    kept.sort_by_key(|(i, _)| *i);
    let mut out = String::new();
    let mut next = 0;
    for (i, _) in &kept {
        if *i > next {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push(OMITTED);
            out.push(' ');
        } else if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(pieces[*i]);
        next = i + 1;
    }
    if next < pieces.len() {
        out.push(' ');
        out.push(OMITTED);
    }
    let out = cut_at_word(&out, EXCERPT_CHARS);
    let terms = words(&out)
        .map(str::to_lowercase)
        .filter(|w| is_content(w, bits(w)))
        .collect();
    Some(Excerpt {
        text: out,
        score: kept.iter().map(|(_, s)| s).sum(),
        terms,
        about_speaker: kept.iter().any(|(i, _)| readings[*i].about_speaker),
    })
}

/// The speakers' own names met so far, as lower-case words (what
/// [`excerpt`] takes as `names`): addressing someone is not news.
#[derive(Clone, Debug, Default)]
pub struct SpeakerNames(Vec<String>);

impl SpeakerNames {
    /// Adds the words of `speaker`'s name, once each.
    pub fn add(&mut self, speaker: Option<&str>) {
        for word in speaker.unwrap_or_default().split_whitespace() {
            let word = word.to_lowercase();
            if !self.0.contains(&word) {
                self.0.push(word);
            }
        }
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// How a user turn reads as the line above an answer: its excerpt when it
/// has one, else its last sentence (what a reply answers), on one line and
/// cut at a word within [`EXCERPT_CHARS`], `…` marking what came before.
pub fn excerpt_line(text: &str, excerpt: Option<&str>) -> String {
    if let Some(e) = excerpt {
        return e.to_owned();
    }
    let pieces = sentences(text);
    let last = pieces.last().copied().unwrap_or_default();
    let line = if pieces.len() > 1 {
        format!("{OMITTED} {last}")
    } else {
        last.to_owned()
    };
    cut_at_word(&line, EXCERPT_CHARS)
}

/// `text` within `max` characters, cut after a whole word and marked.
fn cut_at_word(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let prefix: String = text.chars().take(max.saturating_sub(2)).collect();
    let cut = prefix
        .rfind(char::is_whitespace)
        .filter(|i| *i > 0)
        .unwrap_or(prefix.len());
    format!("{} {OMITTED}", prefix[..cut].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["melanie".into(), "caroline".into()]
    }

    #[test]
    fn sentences_split_at_ends_and_lines() {
        assert_eq!(
            sentences("Thanks, Mel! I moved to Porto. Why?\n[shared image: a cat]"),
            [
                "Thanks, Mel!",
                "I moved to Porto.",
                "Why?",
                "[shared image: a cat]"
            ]
        );
        assert_eq!(sentences("v1.2 is out"), ["v1.2 is out"]);
    }

    #[test]
    fn chit_chat_scores_nothing() {
        for s in [
            "Nice!",
            "Thanks, Melanie!",
            "Wow, that's so cool!",
            "Haha yes totally.",
        ] {
            assert_eq!(sentence_score(s, &names()), 0.0, "{s}");
        }
        assert_eq!(excerpt("Nice! Thanks so much, Melanie!", &names()), None);
    }

    #[test]
    fn durable_statements_outscore_remarks_and_questions() {
        let n = names();
        let fact = sentence_score(
            "My sister Ana lives in Porto and I visit her every August.",
            &n,
        );
        let remark = sentence_score("Your painting looks really calm and bright.", &n);
        let question = sentence_score("Did your sister Ana move to Porto in August?", &n);
        assert!(fact > 5.0, "{fact}");
        assert!(fact > 2.0 * remark, "{fact} vs {remark}");
        assert!(fact > 2.0 * question, "{fact} vs {question}");
        // Addressing a speaker by name is not a proper-name fact.
        let addressed = sentence_score("Melanie, painting calms nerves.", &n);
        let named = sentence_score("Painting with Oscar calms nerves.", &n);
        assert!(named > addressed);
    }

    #[test]
    fn an_excerpt_drops_pleasantries_and_marks_the_gap() {
        let e = excerpt(
            "Thanks, Melanie! This necklace is a gift from my grandma in Sweden. Cool!",
            &names(),
        )
        .unwrap();
        assert_eq!(
            e.text,
            "… This necklace is a gift from my grandma in Sweden. …"
        );
        assert!(e.terms.contains(&"sweden".to_owned()));
        assert!(!e.terms.contains(&"thanks".to_owned()));
    }

    #[test]
    fn a_self_introduction_survives_and_is_about_its_speaker() {
        for intro in [
            "Hi, I'm Dana.",
            "Hello! I am Dana.",
            "My name is Dana Novak.",
            "Please call me Dana.",
        ] {
            let e = excerpt(intro, &[]).unwrap_or_else(|| panic!("{intro}: dropped"));
            assert!(e.text.contains("Dana"), "{intro}: {}", e.text);
            assert!(e.about_speaker, "{intro}");
        }
        // Not an introduction: a state, or a name at the start of a sentence.
        assert_eq!(excerpt("I'm tired.", &[]), None);
        assert_eq!(excerpt("Dana, hi!", &[]), None);
    }

    #[test]
    fn a_stated_preference_survives_and_is_about_its_speaker() {
        let e = excerpt("Keep answers short, bullet points preferred.", &[])
            .expect("a preference is durable");
        assert_eq!(e.text, "Keep answers short, bullet points preferred.");
        assert!(e.about_speaker);
        let e = excerpt("I always take the train, never the car.", &[]).unwrap();
        assert!(e.about_speaker);
    }

    #[test]
    fn questions_and_remarks_about_others_are_not_about_the_speaker() {
        let n = names();
        let e = excerpt("Did your sister Ana move to Porto in August 2023?", &n);
        assert!(e.is_none_or(|e| !e.about_speaker));
        let e = excerpt("Your sister Ana moved to Porto in August 2023.", &n).unwrap();
        assert!(!e.about_speaker);
        let e = excerpt("My sister Ana moved to Porto in August 2023.", &n).unwrap();
        assert!(e.about_speaker);
    }

    #[test]
    fn the_line_above_an_answer_is_the_question_it_answers() {
        assert_eq!(
            excerpt_line("Thanks! Anyway. What's the weather in Berlin?", None),
            "… What's the weather in Berlin?"
        );
        assert_eq!(excerpt_line("Hi there", None), "Hi there");
        assert_eq!(excerpt_line("whatever", Some("… kept.")), "… kept.");
    }

    #[test]
    fn excerpts_stay_within_their_length() {
        let long = format!("I moved to Porto with my sister {}.", "and Ana ".repeat(80));
        let e = excerpt(&long, &names()).unwrap();
        assert!(e.text.chars().count() <= EXCERPT_CHARS, "{}", e.text);
        assert!(e.text.ends_with(OMITTED));
    }
}
