//! The first-turn block: what a new conversation starts with when the host
//! gives no query (DeerFlow's `get_context` at the start of every thread).
//! Both stores read their rows their own way and build the block here.
//!
//! No query means no words to match, so the block is chosen by rules that
//! need no model and can be explained line by line:
//! 1. Sections laid out in the order they are added ([`FirstTurnBlock`]):
//!    the profile first ([`FirstTurnBlock::profile`]: the user's current
//!    facts, explicit then distilled, whole, within [`PROFILE_SHARE`] of the
//!    budget), then the excerpts of captured turns in what is left.
//! 2. Each turn's [`salience`](crate::salience) excerpt keeps its statements
//!    about the speaker and the people, places, plans, dates and decisions
//!    in it; a turn with none never enters. Turns are picked greedily by
//!    `score / line length^`[`LENGTH_EXPONENT`] (value per character of
//!    budget, short lines not favoured outright), times
//!    - [`AI_FACTOR`] for assistant turns (statements about the user come
//!      from the user),
//!    - [`THREAD_DECAY`]`^k` where `k` turns of the same thread are already
//!      in (diversity across threads),
//!    - `1 - `[`RECENCY_SPAN`]` × age` where age is the thread's rank from
//!      newest (0) to oldest (1) — except for what the user said about
//!      themselves, which does not age as conversations pile up,
//!    - `1 - `[`NOVELTY_SPAN`]` × seen` where seen is the share of the turn's
//!      content words already in the block.
//!
//!    Ties go to the newer turn; a pick must fit what is left of the budget.
//! 3. An assistant line only comes with the user line it answers (the
//!    user's newest turn before it in the thread; its excerpt, else its last
//!    sentence): the pair is picked as one, its value counted per character
//!    of both lines (of its own line once the question is shown), or not at
//!    all.
//! 4. The same text is never shown twice (two identical turns, an answer
//!    given again): a line whose text is already in the block is skipped.
//! 5. Layout: what the user said about themselves first ("What the user
//!    said about themselves", one heading per date, any answer picked to a
//!    line right below it); then the other lines grouped by conversation
//!    (newest first, turns in their order, each conversation headed by its
//!    date). Dates are calendar dates (`2026-12-04`) whether the host sent a
//!    full timestamp or none (then the capture time's date); a free-text
//!    date a host sent is kept as sent.

use crate::citation::turn_citation;
use crate::ranked::TURN_KIND;
use crate::salience::{excerpt, excerpt_line, Excerpt, SpeakerNames};
use memgate_core::budget::{char_len, CharBudget};
use memgate_core::{Citation, Fact, Recall, RecalledItem};
use std::collections::{BinaryHeap, HashMap, HashSet};

/// How strongly a longer line must earn its budget.
pub const LENGTH_EXPONENT: f64 = 0.75;
/// Weight of an assistant turn relative to a user turn.
pub const AI_FACTOR: f64 = 0.8;
/// Each further pick from the same conversation is worth this much less.
pub const THREAD_DECAY: f64 = 0.8;
/// How much less the oldest conversation's turns are worth than the newest's.
pub const RECENCY_SPAN: f64 = 0.25;
/// How much less a turn whose words are all already in the block is worth.
pub const NOVELTY_SPAN: f64 = 0.6;

/// The first line of the block after the recall header.
fn today_line(today: &str) -> String {
    format!("Today is {today}; the notes below are dated when they were said.")
}

/// Room the block must keep for items to carry the date line at all.
const MIN_ROOM_AFTER_FRAMING: usize = 200;

pub const PROFILE_HEADING: &str = "What is true about the user now:";
/// Most of the budget the profile may take: the rest stays for excerpts,
/// which hold what no fact was made of. Half, fixed before any figure was
/// read (docs/design/first-turn-block.md).
pub const PROFILE_SHARE: f64 = 0.5;
pub const ABOUT_USER_HEADING: &str = "What the user said about themselves:";
pub const TURNS_HEADING: &str = "From earlier conversations:";

/// The calendar date of a turn's time as the block shows it: the date part
/// of a timestamp (`2026-12-04T08:25:29+00:00` → `2026-12-04`), a free-text
/// date as sent.
pub fn block_date(when: &str) -> &str {
    let b = when.as_bytes();
    let dated = b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit);
    if dated {
        &when[..10]
    } else {
        when
    }
}

/// Most recent turns with an excerpt a block considers (bounds the rows
/// read and the pick on a large scope: a 12,000-character block holds
/// about 90 excerpts; LoCoMo conversations have at most 680 turns in all).
pub const MAX_CANDIDATES: usize = 500;
/// Most older turns about their speaker a block also considers (a bound on
/// the read, like [`MAX_CANDIDATES`]: more than a block's lines), so what
/// the user said about themselves does not drop out as conversations pile
/// up.
pub const MAX_ABOUT_SPEAKER: usize = 100;

/// A captured turn with an excerpt, as a store read it.
#[derive(Clone, Debug)]
pub struct TurnCandidate {
    pub id: i64,
    pub thread: String,
    pub seq: i64,
    pub ai: bool,
    pub speaker: Option<String>,
    /// When it was said (the host's timestamp), else when it was captured.
    pub when: String,
    /// The excerpt as cached or computed ([`crate::salience::excerpt`]).
    pub excerpt: String,
    pub score: f64,
    /// The excerpt's content words (space-separated, as stores keep them).
    pub terms: String,
    /// The excerpt is [about its speaker](crate::salience::Excerpt::about_speaker).
    pub about_speaker: bool,
    /// For an assistant turn: the user turn it answers.
    pub answers: Option<AskedTurn>,
}

/// The user turn an assistant turn answers.
#[derive(Clone, Debug)]
pub struct AskedTurn {
    pub id: i64,
    pub seq: i64,
    pub speaker: Option<String>,
    /// Its text as stored (the line shows its excerpt, or the text cut).
    pub text: String,
    /// Its cached excerpt, when it has one.
    pub excerpt: Option<String>,
    pub about_speaker: bool,
}

/// A captured turn as read, before its excerpt (`postgres` while the
/// excerpts of turns stored by an older version are being computed).
#[derive(Clone, Debug)]
pub struct StoredTurn {
    pub id: i64,
    pub thread: String,
    pub seq: i64,
    pub ai: bool,
    pub speaker: Option<String>,
    /// When it was said (the host's timestamp), else when it was captured.
    pub when: String,
    pub text: String,
}

/// The candidates among `turns` (newest first): each turn with an excerpt
/// (the turns' speakers as names, as capture would have met them), each
/// assistant turn with the user turn it answers when that is among `turns`.
pub fn candidates_of(turns: &[StoredTurn]) -> Vec<TurnCandidate> {
    let mut names = SpeakerNames::default();
    for t in turns.iter().rev() {
        names.add(t.speaker.as_deref());
    }
    let excerpts: Vec<Option<Excerpt>> = turns
        .iter()
        .map(|t| excerpt(&t.text, names.as_slice()))
        .collect();
    // User turns per thread, by position: what an assistant turn answers.
    let mut asked: HashMap<&str, Vec<(i64, usize)>> = HashMap::new();
    for (i, t) in turns.iter().enumerate().filter(|(_, t)| !t.ai) {
        asked.entry(t.thread.as_str()).or_default().push((t.seq, i));
    }
    for list in asked.values_mut() {
        list.sort_unstable();
    }
    turns
        .iter()
        .zip(&excerpts)
        .filter_map(|(t, e)| {
            let e = e.as_ref()?;
            let answers = if t.ai {
                let list = asked.get(t.thread.as_str())?;
                let before = list.partition_point(|(seq, _)| *seq < t.seq);
                let q = &turns[list.get(before.checked_sub(1)?)?.1];
                let qe = excerpts[list[before - 1].1].as_ref();
                Some(AskedTurn {
                    id: q.id,
                    seq: q.seq,
                    speaker: q.speaker.clone(),
                    text: q.text.clone(),
                    excerpt: qe.map(|e| e.text.clone()),
                    about_speaker: qe.is_some_and(|e| e.about_speaker),
                })
            } else {
                None
            };
            Some(TurnCandidate {
                id: t.id,
                thread: t.thread.clone(),
                seq: t.seq,
                ai: t.ai,
                speaker: t.speaker.clone(),
                when: t.when.clone(),
                excerpt: e.text.clone(),
                score: e.score,
                terms: e.terms.join(" "),
                about_speaker: e.about_speaker,
                answers,
            })
        })
        .collect()
}

/// One line the block may show.
#[derive(Clone, Debug)]
struct Line {
    id: i64,
    thread: usize,
    seq: i64,
    who: String,
    text: String,
    score: f64,
    /// A user statement about themselves (laid out first).
    about_user: bool,
    /// Identical text shown twice is one line (lower-case, spaces folded).
    key: String,
    /// Characters of [`Line::render`], counted once.
    chars: usize,
}

impl Line {
    /// `- [turn_12] user: …`
    fn render(&self) -> String {
        format!(
            "- [{}] {}: {}",
            turn_citation(self.id),
            self.who,
            self.text.replace('\n', " ")
        )
    }
}

fn line_key(text: &str) -> String {
    text.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn who(ai: bool, speaker: Option<&str>) -> String {
    match speaker {
        Some(s) => s.to_owned(),
        None if ai => "assistant".to_owned(),
        None => "user".to_owned(),
    }
}

/// A pickable unit: a user line, or an assistant line with its question.
struct Unit {
    /// Index of the candidate's own line.
    line: usize,
    /// Index of the question's line (assistant turns only).
    asked: Option<usize>,
    thread: usize,
    terms: Vec<u64>,
    /// Value before the diversity factors, with the question still to show.
    base: f64,
    /// The same once the question is shown (its line no longer to pay for).
    base_answered: f64,
    /// Exempt from recency (what the user said about themselves).
    ageless: bool,
}

/// One conversation the candidates come from.
struct Thread {
    date: String,
    /// Characters of its two headings, counted once.
    heading_chars: usize,
    about_heading_chars: usize,
    /// 0 for the newest conversation, 1 for the oldest.
    age: f64,
    /// Newest turn id (orders the conversations in the block).
    newest: i64,
}

impl Thread {
    fn heading(&self) -> String {
        format!("Conversation of {}:", self.date)
    }

    /// The heading of the user's own lines of this date.
    fn about_heading(&self) -> String {
        format!("On {}:", self.date)
    }
}

/// A content word's key for the novelty share (FNV-1a: fast, and a
/// collision only makes one word count as seen).
fn term_key(term: &str) -> u64 {
    term.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A unit's value when last computed: values only fall as picks are made
/// (the decay and the seen share grow), so a stale value is an upper bound
/// and the greedy pick can be lazy.
struct Bound {
    value: f64,
    id: i64,
    unit: usize,
}

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Bound {}
impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bound {
    /// Higher value first; ties go to the newer turn.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value
            .total_cmp(&other.value)
            .then(self.id.cmp(&other.id))
    }
}

/// The candidates as lines, units and conversations. `candidates` come
/// newest first (stores read them by id, descending).
fn prepare(candidates: &[TurnCandidate]) -> (Vec<Line>, Vec<Unit>, Vec<Thread>) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    // Newest id, earliest seq and its time, per conversation.
    let mut threads: Vec<(i64, i64, &str)> = Vec::new();
    let mut lines: Vec<Line> = Vec::new();
    let mut line_of: HashMap<i64, usize> = HashMap::new();
    let mut units = Vec::new();
    let mut add_line = |lines: &mut Vec<Line>, mut line: Line| -> usize {
        *line_of.entry(line.id).or_insert_with(|| {
            line.chars = char_len(&line.render());
            lines.push(line);
            lines.len() - 1
        })
    };
    for c in candidates {
        let t = *index.entry(c.thread.as_str()).or_insert_with(|| {
            threads.push((c.id, c.seq, c.when.as_str()));
            threads.len() - 1
        });
        if c.seq < threads[t].1 {
            threads[t].1 = c.seq;
            threads[t].2 = c.when.as_str();
        }
        let line = add_line(
            &mut lines,
            Line {
                id: c.id,
                thread: t,
                seq: c.seq,
                who: who(c.ai, c.speaker.as_deref()),
                text: c.excerpt.clone(),
                score: c.score,
                about_user: !c.ai && c.about_speaker,
                key: line_key(&c.excerpt),
                chars: 0,
            },
        );
        // Met first as another turn's question: it has a score of its own.
        lines[line].score = c.score;
        let mut chars = lines[line].chars;
        let own_chars = chars;
        let asked = match (&c.answers, c.ai) {
            (_, false) => None,
            // An answer to nothing shown is never shown.
            (None, true) => continue,
            (Some(q), true) => {
                let text = excerpt_line(&q.text, q.excerpt.as_deref());
                let asked = add_line(
                    &mut lines,
                    Line {
                        id: q.id,
                        thread: t,
                        seq: q.seq,
                        who: who(false, q.speaker.as_deref()),
                        key: line_key(&text),
                        text,
                        score: 0.0,
                        about_user: q.about_speaker,
                        chars: 0,
                    },
                );
                chars += lines[asked].chars + 1;
                Some(asked)
            }
        };
        let role_factor = if c.ai { AI_FACTOR } else { 1.0 };
        units.push(Unit {
            line,
            asked,
            thread: t,
            terms: c
                .terms
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(term_key)
                .collect(),
            base: c.score * role_factor / (chars as f64).powf(LENGTH_EXPONENT),
            base_answered: c.score * role_factor / (own_chars as f64).powf(LENGTH_EXPONENT),
            ageless: !c.ai && c.about_speaker,
        });
    }
    let last = threads.len().saturating_sub(1).max(1) as f64;
    let threads = threads
        .iter()
        .enumerate()
        .map(|(i, (newest, _, when))| {
            let mut thread = Thread {
                date: block_date(when).to_owned(),
                heading_chars: 0,
                about_heading_chars: 0,
                age: i as f64 / last,
                newest: *newest,
            };
            thread.heading_chars = char_len(&thread.heading());
            thread.about_heading_chars = char_len(&thread.about_heading());
            thread
        })
        .collect();
    (lines, units, threads)
}

/// Term keys are hashes already: the set uses them as they are.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The content words already in the block.
type Seen = HashSet<u64, std::hash::BuildHasherDefault<KeyHasher>>;

/// What the pick has laid out so far, and what one more line would cost.
struct Layout<'a> {
    lines: &'a [Line],
    threads: &'a [Thread],
    shown: HashSet<usize>,
    keys: HashSet<&'a str>,
    about_open: bool,
    turns_open: bool,
    open_threads: HashSet<usize>,
    open_dates: HashSet<&'a str>,
}

impl<'a> Layout<'a> {
    /// Characters `line` adds where it goes (`under` another line: right
    /// below it, in its place), headings it opens included. `opening` are
    /// the headings the same pick opens already.
    fn cost(&self, line: usize, under: Option<usize>, opening: &mut Opening) -> usize {
        let l = &self.lines[line];
        let place = under.unwrap_or(line);
        let mut cost = 1;
        if self.lines[place].about_user {
            if !self.about_open && !opening.about {
                opening.about = true;
                cost += char_len(ABOUT_USER_HEADING) + 1;
            }
            let thread = &self.threads[l.thread];
            if !self.open_dates.contains(thread.date.as_str()) && opening.date != Some(l.thread) {
                opening.date = Some(l.thread);
                cost += thread.about_heading_chars + 1;
            }
        } else {
            if !self.turns_open && !opening.turns {
                opening.turns = true;
                cost += char_len(TURNS_HEADING) + 1;
            }
            if !self.open_threads.contains(&l.thread) && opening.thread != Some(l.thread) {
                opening.thread = Some(l.thread);
                cost += self.threads[l.thread].heading_chars + 1;
            }
        }
        cost + l.chars
    }

    fn show(&mut self, line: usize, under: Option<usize>) {
        let place = under.unwrap_or(line);
        if self.lines[place].about_user {
            self.about_open = true;
            let thread = self.lines[line].thread;
            self.open_dates.insert(self.threads[thread].date.as_str());
        } else {
            self.turns_open = true;
            self.open_threads.insert(self.lines[line].thread);
        }
        self.shown.insert(line);
        self.keys.insert(self.lines[line].key.as_str());
    }
}

/// Headings one pick would open.
#[derive(Default)]
struct Opening {
    about: bool,
    turns: bool,
    thread: Option<usize>,
    /// The thread whose date heading the pick opens in the about section.
    date: Option<usize>,
}

/// Picks units greedily (see the module doc) within `budget`. Returns the
/// lines shown, each with the line it is placed under (an answer under its
/// question when the question is laid out about the user).
fn pick(
    lines: &[Line],
    units: &[Unit],
    threads: &[Thread],
    budget: &mut CharBudget,
) -> Vec<(usize, Option<usize>)> {
    let mut per_thread = vec![0i32; threads.len()];
    let mut seen: Seen = HashSet::default();
    let value = |u: &Unit, per_thread: &[i32], seen: &Seen, shown: &HashSet<usize>| {
        let repeated = u.terms.iter().filter(|t| seen.contains(t)).count();
        let seen_share = if u.terms.is_empty() {
            0.0
        } else {
            repeated as f64 / u.terms.len() as f64
        };
        let age = if u.ageless {
            0.0
        } else {
            threads[u.thread].age
        };
        let base = if u.asked.is_some_and(|q| shown.contains(&q)) {
            u.base_answered
        } else {
            u.base
        };
        base * THREAD_DECAY.powi(per_thread[u.thread])
            * (1.0 - RECENCY_SPAN * age)
            * (1.0 - NOVELTY_SPAN * seen_share)
    };
    let none = HashSet::new();
    let mut heap: BinaryHeap<Bound> = units
        .iter()
        .enumerate()
        .map(|(unit, u)| Bound {
            value: value(u, &per_thread, &seen, &none),
            id: lines[u.line].id,
            unit,
        })
        .collect();
    // The units answering each line: a shown question changes their value.
    let mut askers: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        if let Some(q) = u.asked {
            askers.entry(q).or_default().push(i);
        }
    }
    let mut layout = Layout {
        lines,
        threads,
        shown: HashSet::new(),
        keys: HashSet::new(),
        about_open: false,
        turns_open: false,
        open_threads: HashSet::new(),
        open_dates: HashSet::new(),
    };
    let mut picked = Vec::new();
    while let Some(top) = heap.pop() {
        let u = &units[top.unit];
        if layout.shown.contains(&u.line) || layout.keys.contains(lines[u.line].key.as_str()) {
            continue; // already in, or the same text is
        }
        let asked = u.asked.filter(|q| !layout.shown.contains(q));
        if asked.is_some_and(|q| layout.keys.contains(lines[q].key.as_str())) {
            continue; // its question would be a repeated line
        }
        let mut opening = Opening::default();
        let question_cost = asked.map_or(0, |q| layout.cost(q, None, &mut opening));
        let under = u.asked.filter(|q| lines[*q].about_user);
        let cost = question_cost + layout.cost(u.line, under, &mut opening);
        if cost > budget.remaining() {
            continue; // the budget only shrinks
        }
        let now = value(u, &per_thread, &seen, &layout.shown);
        if heap.peek().is_some_and(|next| now < next.value) {
            heap.push(Bound { value: now, ..top });
            continue;
        }
        budget.try_take(cost);
        let mut newly = vec![u.line];
        if let Some(q) = asked {
            layout.show(q, None);
            picked.push((q, None));
            newly.push(q);
        }
        layout.show(u.line, under);
        picked.push((u.line, under));
        per_thread[u.thread] += 1;
        seen.extend(u.terms.iter().copied());
        // An answer whose question is now shown may be worth more than its
        // bound: it goes back with its new value.
        for line in newly {
            for &unit in askers.get(&line).into_iter().flatten() {
                let a = &units[unit];
                if !layout.shown.contains(&a.line) {
                    heap.push(Bound {
                        value: value(a, &per_thread, &seen, &layout.shown),
                        id: lines[a.line].id,
                        unit,
                    });
                }
            }
        }
    }
    picked
}

/// The current facts of `facts` in the profile's order: explicit ones in
/// the given order, then distilled ones round-robin over their
/// conversations (each conversation's newest first, conversations by their
/// newest fact first), so a long history is not shown as its last few
/// conversations only.
pub fn profile_order(facts: &[Fact]) -> Vec<&Fact> {
    let current = facts
        .iter()
        .filter(|f| f.is_current() && f.valid_to.is_none());
    let (explicit, distilled): (Vec<&Fact>, Vec<&Fact>) =
        current.partition(|f| f.origin != memgate_core::FactOrigin::Distilled);
    let newest =
        |f: &&Fact| std::cmp::Reverse(crate::citation::parse_memory_citation(&f.id).unwrap_or(0));
    let mut by_thread: Vec<(Option<&str>, Vec<&Fact>)> = Vec::new();
    let mut sorted = distilled;
    sorted.sort_by_key(newest);
    for f in sorted {
        let thread = f.thread.as_deref();
        match by_thread.iter_mut().find(|(t, _)| *t == thread) {
            Some((_, list)) => list.push(f),
            None => by_thread.push((thread, vec![f])),
        }
    }
    let mut out = explicit;
    let longest = by_thread.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    for round in 0..longest {
        out.extend(by_thread.iter().filter_map(|(_, l)| l.get(round)));
    }
    out
}

/// One entry of a [`FirstTurnBlock::section`].
#[derive(Clone, Copy, Debug)]
pub struct Entry<'e> {
    pub citation: &'e str,
    pub kind: &'e str,
    pub text: &'e str,
    pub score: Option<f64>,
}

/// A first-turn block being laid out: sections in the order they are added,
/// within one character budget.
pub struct FirstTurnBlock {
    budget: CharBudget,
    text: String,
    items: Vec<RecalledItem>,
    /// Turns a shown fact rests on: their excerpts would say it again.
    told: HashSet<i64>,
}

impl FirstTurnBlock {
    /// The recall header and today's date (when the budget leaves room for
    /// content after it); `None` when not even the header fits.
    pub fn new(max_chars: usize, today: &str) -> Option<Self> {
        let mut budget = CharBudget::new(max_chars);
        if !budget.try_take(char_len(crate::block::RECALL_HEADER)) {
            return None;
        }
        let mut text = crate::block::RECALL_HEADER.to_owned();
        let framing = today_line(today);
        if budget.remaining() >= char_len(&framing) + 1 + MIN_ROOM_AFTER_FRAMING {
            budget.try_take(char_len(&framing) + 1);
            text.push('\n');
            text.push_str(&framing);
        }
        Some(Self {
            budget,
            text,
            items: Vec::new(),
            told: HashSet::new(),
        })
    }

    /// A section of whole entries under `heading` (cited `[citation]`,
    /// labelled `(kind)`), each while the budget lasts (none: no heading).
    /// The saved memories are one; a profile of current facts would be
    /// another, added first to lead.
    pub fn section<'e>(&mut self, heading: &str, entries: impl IntoIterator<Item = Entry<'e>>) {
        self.section_within(heading, entries, usize::MAX);
    }

    /// A [section](Self::section) that takes at most `cap` characters.
    fn section_within<'e>(
        &mut self,
        heading: &str,
        entries: impl IntoIterator<Item = Entry<'e>>,
        cap: usize,
    ) {
        let mut lines = Vec::new();
        let mut heading_cost = char_len(heading) + 1;
        let mut taken = 0usize;
        for entry in entries {
            let line = format!(
                "- [{}] ({}) {}",
                entry.citation,
                entry.kind,
                entry.text.replace('\n', "\n  ")
            );
            let cost = char_len(&line) + 1 + heading_cost;
            if taken + cost <= cap && self.budget.try_take(cost) {
                taken += cost;
                heading_cost = 0;
                lines.push(line);
                self.items.push(RecalledItem {
                    citation: Some(Citation::new(entry.citation)),
                    kind: entry.kind.to_owned(),
                    text: entry.text.to_owned(),
                    score: entry.score,
                });
            }
        }
        if !lines.is_empty() {
            self.push_line(heading);
            for line in lines {
                self.push_line(&line);
            }
        }
    }

    /// The profile: `facts` as the store hands them over, explicit first
    /// in the store's order, then distilled ones one per conversation in
    /// turn (newest conversation first; [`profile_order`]), each whole,
    /// within [`PROFILE_SHARE`] of the budget. A fact that is not current
    /// (retired, superseded, no longer valid) never enters, whatever the
    /// store read. The turns a shown fact rests on are not excerpted again.
    pub fn profile(&mut self, facts: &[Fact]) {
        let max_chars = self.budget.used() + self.budget.remaining();
        let cap = (max_chars as f64 * PROFILE_SHARE) as usize;
        let ordered = profile_order(facts);
        let shown_from = self.items.len();
        self.section_within(
            PROFILE_HEADING,
            ordered.iter().map(|f| Entry {
                citation: &f.id,
                kind: &f.kind,
                text: &f.text,
                score: None,
            }),
            cap,
        );
        let shown: HashSet<&str> = self.items[shown_from..]
            .iter()
            .filter_map(|i| i.citation.as_ref().map(|c| c.0.as_str()))
            .collect();
        for f in ordered.iter().filter(|f| shown.contains(f.id.as_str())) {
            self.told.extend(
                f.sources
                    .iter()
                    .filter_map(|s| s.strip_prefix("turn_")?.parse::<i64>().ok()),
            );
        }
    }

    /// The turns section: the candidates picked into what is left of the
    /// budget and laid out (see the module doc).
    pub fn turns(&mut self, candidates: &[TurnCandidate]) {
        let untold: Vec<TurnCandidate>;
        let candidates = if self.told.is_empty() {
            candidates
        } else {
            untold = candidates
                .iter()
                .filter(|c| !self.told.contains(&c.id))
                .cloned()
                .collect();
            &untold
        };
        let (lines, units, threads) = prepare(candidates);
        let picked = pick(&lines, &units, &threads, &mut self.budget);
        if picked.is_empty() {
            return;
        }
        let below: HashMap<usize, Vec<usize>> =
            picked.iter().fold(HashMap::new(), |mut m, (line, under)| {
                if let Some(q) = under {
                    m.entry(*q).or_insert_with(Vec::new).push(*line);
                }
                m
            });
        let order = |i: &usize| (-threads[lines[*i].thread].newest, lines[*i].seq);
        let mut about: Vec<usize> = picked
            .iter()
            .filter(|(l, under)| under.is_none() && lines[*l].about_user)
            .map(|(l, _)| *l)
            .collect();
        about.sort_by_key(order);
        let mut rest: Vec<usize> = picked
            .iter()
            .filter(|(l, under)| under.is_none() && !lines[*l].about_user)
            .map(|(l, _)| *l)
            .collect();
        rest.sort_by_key(order);
        let shown = |block: &mut Self, i: usize| {
            let l = &lines[i];
            block.push_line(&l.render());
            block.items.push(RecalledItem {
                citation: Some(Citation::new(turn_citation(l.id))),
                kind: TURN_KIND.to_owned(),
                text: l.text.clone(),
                score: Some(l.score),
            });
        };
        if !about.is_empty() {
            self.push_line(ABOUT_USER_HEADING);
            // One heading per date, dates in the order their newest line
            // comes (each heading once, as the pick counted it).
            let mut dates: Vec<(&str, Vec<usize>)> = Vec::new();
            for i in about {
                let date = threads[lines[i].thread].date.as_str();
                match dates.iter_mut().find(|(d, _)| *d == date) {
                    Some((_, group)) => group.push(i),
                    None => dates.push((date, vec![i])),
                }
            }
            for (_, group) in dates {
                self.push_line(&threads[lines[group[0]].thread].about_heading());
                for i in group {
                    shown(self, i);
                    let mut answers = below.get(&i).cloned().unwrap_or_default();
                    answers.sort_by_key(|a| lines[*a].seq);
                    for a in answers {
                        shown(self, a);
                    }
                }
            }
        }
        if !rest.is_empty() {
            self.push_line(TURNS_HEADING);
            let mut open = None;
            for i in rest {
                let t = lines[i].thread;
                if open != Some(t) {
                    open = Some(t);
                    self.push_line(&threads[t].heading());
                }
                shown(self, i);
            }
        }
    }

    fn push_line(&mut self, line: &str) {
        self.text.push('\n');
        self.text.push_str(line);
    }

    /// The block, or an empty recall when no section holds anything.
    pub fn finish(self) -> Recall {
        if self.items.is_empty() {
            return Recall::empty();
        }
        Recall {
            text: self.text,
            items: self.items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a scope's turns as a store would hand them over.
    #[derive(Default)]
    struct Scope {
        turns: Vec<(i64, String, i64, bool, String, String)>,
    }

    impl Scope {
        /// Adds a turn to `thread`, said at `when`.
        fn say(&mut self, thread: &str, ai: bool, when: &str, text: &str) -> i64 {
            let id = self.turns.len() as i64 + 1;
            let seq = self.turns.iter().filter(|t| t.1 == thread).count() as i64 + 1;
            self.turns
                .push((id, thread.into(), seq, ai, when.into(), text.into()));
            id
        }

        /// The candidates, as a store reading them newest first has them.
        fn candidates(&self) -> Vec<TurnCandidate> {
            let turns: Vec<StoredTurn> = self
                .turns
                .iter()
                .rev()
                .map(|(id, thread, seq, ai, when, text)| StoredTurn {
                    id: *id,
                    thread: thread.clone(),
                    seq: *seq,
                    ai: *ai,
                    speaker: None,
                    when: when.clone(),
                    text: text.clone(),
                })
                .collect();
            candidates_of(&turns)
        }

        fn block(&self, max_chars: usize) -> Recall {
            let mut b = FirstTurnBlock::new(max_chars, "2026-12-05").unwrap();
            b.turns(&self.candidates());
            b.finish()
        }
    }

    const DAY: &str = "2026-12-04";

    fn lines(r: &Recall) -> Vec<&str> {
        r.text.lines().collect()
    }

    #[test]
    fn an_answer_comes_right_after_its_question_or_not_at_all() {
        let mut s = Scope::default();
        let q = s.say("t1", false, DAY, "What's the weather in Berlin?");
        let a = s.say("t1", true, DAY, "It is sunny (22C) in Berlin today.");
        let r = s.block(12_000);
        let l = lines(&r);
        let at = l
            .iter()
            .position(|x| x.starts_with(&format!("- [turn_{a}]")))
            .expect("the answer is shown");
        assert!(
            l[at - 1].starts_with(&format!("- [turn_{q}] user: What's the weather")),
            "{}",
            r.text
        );
        // An answer to nothing is not shown; nor is a pair the budget
        // cannot hold whole.
        let mut s = Scope::default();
        s.say("t1", true, DAY, "It is sunny (22C) in Berlin today.");
        assert!(s.block(12_000).is_empty());
        let mut s = Scope::default();
        s.say(
            "t1",
            false,
            DAY,
            &format!("What about {}?", "this ".repeat(30)),
        );
        s.say("t1", true, DAY, "It is sunny (22C) in Berlin today.");
        let fits_answer_alone = char_len(crate::block::RECALL_HEADER)
            + char_len("\nFrom earlier conversations:\nConversation of 2026-12-04:\n")
            + char_len("- [turn_2] assistant: It is sunny (22C) in Berlin today.")
            + 20;
        assert!(s.block(fits_answer_alone).is_empty());
    }

    #[test]
    fn the_same_line_is_never_shown_twice() {
        let mut s = Scope::default();
        for thread in ["t1", "t2", "t3"] {
            s.say(thread, false, DAY, "What's the weather in Berlin?");
            s.say(thread, true, DAY, "It is sunny (22C).");
        }
        let r = s.block(12_000);
        assert_eq!(
            r.text.matches("It is sunny (22C).").count(),
            1,
            "{}",
            r.text
        );
        assert_eq!(
            r.text.matches("What's the weather").count(),
            1,
            "{}",
            r.text
        );
        let mut texts: Vec<&str> = r.items.iter().map(|i| i.text.as_str()).collect();
        texts.dedup();
        assert_eq!(texts.len(), r.items.len());
    }

    #[test]
    fn headings_carry_one_date_format() {
        let mut s = Scope::default();
        s.say(
            "t1",
            false,
            "2026-12-03",
            "I moved to Porto with my sister Ana last year.",
        );
        s.say(
            "t2",
            false,
            "2026-12-04T08:25:29.127040+00:00",
            "We adopted a puppy called Rex in November.",
        );
        s.say(
            "t3",
            false,
            "1:56 pm on 8 May, 2023",
            "I started a new job at Siemens in Munich.",
        );
        let r = s.block(12_000);
        assert!(!r.text.contains("T08:25"), "{}", r.text);
        assert!(r.text.contains("2026-12-04"), "{}", r.text);
        assert!(r.text.contains("2026-12-03"), "{}", r.text);
        assert_eq!(block_date("2026-12-04T08:25:29Z"), "2026-12-04");
        assert_eq!(block_date("2026-12-04"), "2026-12-04");
        assert_eq!(
            block_date("1:56 pm on 8 May, 2023"),
            "1:56 pm on 8 May, 2023"
        );
    }

    #[test]
    fn what_the_user_said_about_themselves_leads_as_threads_pile_up() {
        let mut s = Scope::default();
        let intro = s.say("t0", false, "2026-01-01", "Hi, I'm Dana.");
        let pref = s.say(
            "t0",
            false,
            "2026-01-01",
            "Keep answers short, bullet points preferred.",
        );
        for i in 1..120 {
            let t = format!("t{i}");
            s.say(
                &t,
                false,
                "2026-02-01",
                &format!("Draft an email to the landlord about heater number {i}."),
            );
            s.say(
                &t,
                true,
                "2026-02-01",
                &format!("Here is a draft: the heater {i} in the flat stopped working last week."),
            );
        }
        let r = s.block(3_000);
        let l = lines(&r);
        assert_eq!(
            l[2..4],
            [ABOUT_USER_HEADING, "On 2026-01-01:"],
            "{}",
            r.text
        );
        assert_eq!(
            l[4..6],
            [
                format!("- [turn_{intro}] user: Hi, I'm Dana."),
                format!("- [turn_{pref}] user: Keep answers short, bullet points preferred.")
            ],
            "{}",
            r.text
        );
        assert!(char_len(&r.text) <= 3_000);
    }

    #[test]
    fn sections_keep_the_order_they_are_added_in() {
        let mut s = Scope::default();
        s.say("t1", false, DAY, "Hi, I'm Dana.");
        s.say(
            "t1",
            false,
            DAY,
            "Summarize the Atlas report for 2025 in Berlin.",
        );
        let fact = Fact {
            id: "mem_1".into(),
            kind: "preference".into(),
            text: "Prefers metric units".into(),
            state: memgate_core::FactState::Active,
            version: 1,
            created_at: "2026-12-01T00:00:00Z".into(),
            updated_at: "2026-12-01T00:00:00Z".into(),
            origin: Default::default(),
            confidence: 1.0,
            sources: Vec::new(),
            thread: None,
            said_at: None,
            valid_to: None,
            superseded_by: None,
            changed_by: Default::default(),
        };
        let mut b = FirstTurnBlock::new(12_000, "2026-12-05").unwrap();
        b.section(
            "Current facts:",
            [Entry {
                citation: "fact_1",
                kind: "profile",
                text: "Lives in Porto",
                score: Some(0.9),
            }],
        );
        b.profile(&[fact]);
        b.turns(&s.candidates());
        let r = b.finish();
        assert!(r
            .text
            .contains("Current facts:\n- [fact_1] (profile) Lives in Porto\n"));
        assert_eq!(r.items[0].citation.as_ref().unwrap().0, "fact_1");
        let headings: Vec<&str> = r.text.lines().filter(|l| l.ends_with(':')).collect();
        assert_eq!(
            headings[1..],
            [
                "Current facts:",
                PROFILE_HEADING,
                ABOUT_USER_HEADING,
                "On 2026-12-04:",
                TURNS_HEADING,
                "Conversation of 2026-12-04:"
            ],
            "{}",
            r.text
        );
    }

    fn fact(n: usize, text: &str) -> Fact {
        Fact {
            id: format!("mem_{n}"),
            kind: "fact".into(),
            text: text.into(),
            state: memgate_core::FactState::Active,
            version: 1,
            created_at: "2026-12-01T00:00:00Z".into(),
            updated_at: "2026-12-01T00:00:00Z".into(),
            origin: memgate_core::FactOrigin::Distilled,
            confidence: 0.9,
            sources: Vec::new(),
            thread: None,
            said_at: None,
            valid_to: None,
            superseded_by: None,
            changed_by: Default::default(),
        }
    }

    #[test]
    fn the_profile_shows_current_facts_only_within_its_share_and_excerpts_follow() {
        let mut s = Scope::default();
        s.say("t1", false, DAY, "Hi, I'm Dana and I live in Porto.");
        let mut superseded = fact(1, "Dana lives in Lisbon");
        superseded.superseded_by = Some("mem_2".into());
        let mut retired = fact(3, "Dana works for Initech");
        retired.state = memgate_core::FactState::Retired;
        let mut ended = fact(4, "Dana is on holiday");
        ended.valid_to = Some("2026-12-02T00:00:00Z".into());
        let mut porto = fact(2, "Dana lives in Porto");
        porto.origin = memgate_core::FactOrigin::Explicit;
        let mut facts = vec![superseded, porto, retired, ended];
        facts.extend(
            (10..400).map(|n| fact(n, &format!("Dana noted item number {n:04} of a long list"))),
        );
        let mut b = FirstTurnBlock::new(12_000, "2026-12-05").unwrap();
        b.profile(&facts);
        b.turns(&s.candidates());
        let r = b.finish();
        let profile: Vec<&str> = r
            .text
            .lines()
            .skip_while(|l| *l != PROFILE_HEADING)
            .take_while(|l| *l != ABOUT_USER_HEADING)
            .collect();
        assert_eq!(profile[1], "- [mem_2] (fact) Dana lives in Porto");
        let chars: usize = profile.iter().map(|l| char_len(l) + 1).sum();
        assert!(chars <= (12_000.0 * PROFILE_SHARE) as usize, "{chars}");
        assert!(chars > 5_000, "the share is used: {chars}");
        for gone in ["Lisbon", "Initech", "holiday"] {
            assert!(!r.text.contains(gone), "{gone}: {}", r.text);
        }
        assert!(
            r.text.contains("I'm Dana and I live in Porto."),
            "{}",
            r.text
        );
        assert!(char_len(&r.text) <= 12_000);
    }

    #[test]
    fn distilled_facts_go_round_robin_over_conversations_and_their_turns_are_not_excerpted_again() {
        let mut s = Scope::default();
        let told = s.say("t1", false, DAY, "Hi, I'm Dana and I live in Porto.");
        s.say(
            "t2",
            false,
            DAY,
            "My daughter Mia starts school in September.",
        );
        let in_thread = |n: usize, thread: &str, text: &str, source: i64| {
            let mut f = fact(n, text);
            f.thread = Some(thread.into());
            f.sources = vec![turn_citation(source)];
            f
        };
        let mut explicit = fact(1, "Prefers metric units");
        explicit.origin = memgate_core::FactOrigin::Explicit;
        let facts = [
            in_thread(4, "t2", "Dana plans a trip", 99),
            in_thread(3, "t2", "Dana has a daughter", 98),
            in_thread(2, "t1", "Dana lives in Porto", told),
            explicit,
        ];
        let order: Vec<&str> = profile_order(&facts)
            .iter()
            .map(|f| f.text.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "Prefers metric units",
                "Dana plans a trip",
                "Dana lives in Porto",
                "Dana has a daughter"
            ]
        );
        let mut b = FirstTurnBlock::new(12_000, "2026-12-05").unwrap();
        b.profile(&facts);
        b.turns(&s.candidates());
        let r = b.finish();
        // The turn the Porto fact rests on is told by the fact; the other
        // turn is excerpted.
        assert!(
            !r.text.contains("I'm Dana and I live in Porto."),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("My daughter Mia starts school"),
            "{}",
            r.text
        );
    }
}
