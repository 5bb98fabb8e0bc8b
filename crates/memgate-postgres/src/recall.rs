//! Recall and search on PostgreSQL, with `local`'s ranking inputs and
//! `local`'s block ([`memgate_recall::block::assemble`]).
//!
//! 0. Planning ([`crate::plan`], `local`'s step 0): the rarest query terms
//!    are walked while they match at most [`MAXSCORE_BUDGET`] documents; a
//!    query of common terms only takes the newest matches, unscored.
//! 1. Full text: the scope's active memories and turns matching any walked
//!    term (through the GIN indexes: memories by (scope, lexeme), turns by
//!    `scope lexeme` keys), scored by BM25 over every present query term
//!    ([`Bm25`]: the common terms too, read from each walked row's
//!    `tsvector`, never from their postings), body weight 1.0 and context
//!    weight 0.5; the best [`candidate_pool`] are kept.
//! 2. Neighbour smoothing: the turns just before and after the best
//!    [`NEIGHBOURS_OF`] turns join, and each turn earns a share of its
//!    neighbours' scores ([`smooth_neighbours`], shared with `local`).
//! 3. Explicit memories count [`MEMORY_WEIGHT`] times.
//!
//! With an embedder ([`crate::vectors`]), the nearest items of the scope
//! join and both lists are fused by `local`'s own [`fuse`].
//!
//! Scores are BM25's with `local`'s constants; a document's length is its
//! distinct lexemes (what a `tsvector` keeps), not its tokens, so values
//! differ from `local`'s a little. Every statement selects the scope by
//! (user, peer) itself. A search's `kind`
//! filter is part of the SQL, so it applies before the cut.

use crate::backend::{PostgresBackend, Scope, SCOPE_ID};
use crate::plan::{Bm25, Plan, Walk, MAXSCORE_BUDGET};
use crate::terms::{query_terms, TEXT_SEARCH_CONFIG};
use deadpool_postgres::{GenericClient, Object};
use memgate_core::{Caller, MemoryError, Recall, RecallRequest, Result, SearchHit, SearchQuery};
use memgate_recall::block::{assemble, MAX_SEARCH_TOP_K};
use memgate_recall::citation::{memory_citation, turn_citation};
use memgate_recall::fusion::{fuse, DEFAULT_DENSE_POOL, DEFAULT_FUSION};
use memgate_recall::ranked::{
    add_standing, candidate_pool, cite_sources, first_depth, fold_restated, refill_depth,
    smooth_neighbours, Among, Origin, Ranked, MEMORY_WEIGHT, NEIGHBOURS_OF, TURN_KIND,
};
use memgate_recall::rerank::{rerank_fused, Rerank};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use tokio_postgres::Row;

const TURN_COLUMNS: &str = "id, thread, seq, message_id, role, speaker, occurred_at, text";

fn turn_from_row(r: &Row, score: f64) -> Ranked {
    Ranked {
        citation: turn_citation(r.get(0)),
        kind: TURN_KIND.to_owned(),
        text: r.get(7),
        score,
        origin: Origin::Turn {
            thread: r.get(1),
            seq: r.get(2),
            message_id: r.get(3),
            role: r.get(4),
            speaker: r.get(5),
            occurred_at: r.get(6),
        },
    }
}

/// How one candidate statement orders its matches.
#[derive(Clone, Copy)]
enum Order<'a> {
    /// By BM25.
    Scored(&'a Bm25),
    /// Newest first, unscored (a plan of common terms only), the turns
    /// found through the index ([`Walk::Postings`]).
    Newest,
    /// Newest first, unscored, the turns found by walking at most this many
    /// of the scope's newest ([`Walk::Recent`]); too few found there, and
    /// they are found through the index after all.
    NewestWithin(i64),
}

impl From<Walk> for Order<'_> {
    fn from(walk: Walk) -> Self {
        match walk {
            Walk::Postings => Order::Newest,
            Walk::Recent { rows } => Order::NewestWithin(rows),
        }
    }
}

/// The `turns_terms` keys (`scope lexeme`, schema migration 3) of the terms
/// in the `to_tsquery` input `$3`, in the scope of (`$1`, `$2`): evaluated
/// once per statement (a sub-select). The plan's queries are all-OR
/// (scored: `&&`, any key) or all-AND (newest: `@>`, every key), so the keys
/// match exactly the turns the query matches.
///
/// Both statements order by `id + 0`, which no index provides: otherwise the
/// generic plan may walk `turns_by_scope` newest first and compute the keys
/// of every turn it passes (12 s at a million turns, measured) instead of
/// reading the few postings and sorting them.
fn scoped_keys() -> String {
    format!(
        "(SELECT coalesce(array_agg(s.id::text || ' ' || l), '{{}}')
          FROM scopes s,
               unnest(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', $3))) AS l
          WHERE s.user_id = $1 AND s.peer = $2)"
    )
}

/// A newest-first plan's turns through the index: the postings of every
/// term of `$3`, ANDed, newest `$4` kept. The query stays inline: as a
/// `FROM` item the generic plan walked turns_by_scope instead (121 ms mean at
/// 100k, measured).
fn newest_turns() -> String {
    format!(
        "SELECT {TURN_COLUMNS}, 0::float8 FROM turns
         WHERE scope_id = {SCOPE_ID} AND scoped_terms(scope_id, search) @> {}
         ORDER BY id + 0 DESC LIMIT $4",
        scoped_keys()
    )
}

/// A newest-first plan's memories, through every posting of `q`: explicit
/// memories are few next to captured turns. Ordered by `id + 0`, so the plan
/// reads the postings through the GIN index (the query parsed once, as an
/// index condition) rather than walking the scope's memories newest first
/// and testing each (with the query parsed per row: 38 ms mean at 1M items;
/// parsed once as a `FROM` item: 8 ms, both measured).
fn newest_memories(q: &str, kind_filter: &str) -> String {
    format!(
        "SELECT id, kind, text, 0::float8 FROM memories
         WHERE scope_id = {SCOPE_ID} AND state = 'active' AND search @@ {q} {kind_filter}
         ORDER BY id + 0 DESC LIMIT $4"
    )
}

/// A read's connection, and whether [`PostgresBackend::read_client`]
/// placed it on the replica (a second connection must go to the same server).
#[derive(Clone, Copy)]
struct Reader<'a> {
    client: &'a Object,
    on_replica: bool,
}

impl<'a> Reader<'a> {
    fn new(client: &'a Object, on_replica: bool) -> Self {
        Self { client, on_replica }
    }

    fn primary(client: &'a Object) -> Self {
        Self::new(client, false)
    }
}

impl PostgresBackend {
    /// Ranks `query` in the caller's scope, best first, at most `top_k`:
    /// hybrid ([`DEFAULT_FUSION`] and [`Rerank::DEFAULT`], `local`'s own
    /// fusion and re-ordering) when `vector` is given and the schema's
    /// vectors are of this backend's model, else full text only; without
    /// the lines that repeat a line above them ([`fold_restated`]), their
    /// places filled from deeper in the ranking; a distilled fact's line
    /// names its sources ([`cite_sources`], from the same read).
    async fn rank(
        &self,
        read: Reader<'_>,
        scope: &Scope,
        query: &str,
        vector: Option<&[f32]>,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let depth = first_depth(top_k, self.distill.is_some());
        let mut ranked = self
            .rank_once(read, scope, query, vector, depth, category)
            .await?;
        let found = ranked.len();
        let mut sources = self.fact_sources(read.client, &ranked).await?;
        fold_restated(&mut ranked, &sources);
        if let Some(deeper) = refill_depth(top_k, depth, found, ranked.len()) {
            ranked = self
                .rank_once(read, scope, query, vector, deeper, category)
                .await?;
            sources = self.fact_sources(read.client, &ranked).await?;
            fold_restated(&mut ranked, &sources);
        }
        ranked.truncate(top_k);
        cite_sources(&mut ranked, &sources);
        Ok(ranked)
    }

    async fn rank_once(
        &self,
        read: Reader<'_>,
        scope: &Scope,
        query: &str,
        vector: Option<&[f32]>,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let c = read.client;
        let Some(q) = vector else {
            return self.lexical_rank(c, scope, query, top_k, category).await;
        };
        if !self.vectors_usable(c).await? {
            return self.lexical_rank(c, scope, query, top_k, category).await;
        }
        let pool = candidate_pool(top_k);
        let dense_pool = pool * DEFAULT_DENSE_POOL;
        // The nearest-items search and the full text are each a few
        // milliseconds of server time at a million items; on one connection
        // they run one after the other, so the search runs on a second
        // connection to the same server when the pool has one to spare.
        let spare = self.spare_reader(read.on_replica).await;
        let lexical = self.lexical_rank(c, scope, query, pool, category);
        let (lexical, dense) = match &spare {
            Some(s) => tokio::try_join!(
                lexical,
                self.nearest_items(s, scope, q, dense_pool, category)
            )?,
            None => tokio::try_join!(
                lexical,
                self.nearest_items(c, scope, q, dense_pool, category)
            )?,
        };
        drop(spare);
        let mut similarity: HashMap<i64, f32> = dense.iter().copied().collect();
        let unscored: Vec<i64> = lexical
            .iter()
            .filter_map(Ranked::item)
            .filter(|i| !similarity.contains_key(i))
            .collect();
        similarity.extend(self.similarity(c, scope, q, &unscored).await?);
        if let Some(v) = &self.vectors {
            v.stats.hybrid.fetch_add(1, Ordering::Relaxed);
        }
        let mut fused = fuse(lexical, &dense, &similarity, DEFAULT_FUSION);
        let missing = std::mem::take(&mut fused.missing);
        for (score, entry) in self.load_items(c, scope, &missing, category).await? {
            fused.add(score, entry);
        }
        Ok(rerank_fused(
            fused.ranked(usize::MAX),
            query,
            &Rerank::DEFAULT,
            top_k,
        ))
    }

    /// Dense hits the full text missed, with their fused score: loaded with
    /// the same scope, state and category checks as full-text matches (one
    /// statement per table, pipelined); an item that fails them is left out.
    async fn load_items(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        missing: &[(i64, f64)],
        category: Among<'_>,
    ) -> Result<Vec<(f64, Ranked)>> {
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let score: HashMap<i64, f64> = missing.iter().copied().collect();
        let turn_ids: Vec<i64> = match category.admits_turns() {
            false => Vec::new(),
            true => missing.iter().map(|m| m.0).filter(|i| *i > 0).collect(),
        };
        let memory_ids: Vec<i64> = match category.admits_memories() {
            false => Vec::new(),
            true => missing
                .iter()
                .map(|m| m.0)
                .filter(|i| *i < 0)
                .map(|i| -i)
                .collect(),
        };
        let kind = category.memory_kind();
        let turns_sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE scope_id = {SCOPE_ID} AND id = ANY($3)"
        );
        let memories_sql = format!(
            "SELECT id, kind, text FROM memories WHERE scope_id = {SCOPE_ID}
             AND state = 'active' AND id = ANY($3) AND ($4::text IS NULL OR kind = $4)"
        );
        let turn_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&scope.user, &scope.peer, &turn_ids];
        let memory_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&scope.user, &scope.peer, &memory_ids, &kind];
        let (turns, memories) = tokio::try_join!(
            async {
                if turn_ids.is_empty() {
                    Ok(Vec::new())
                } else {
                    self.rows(c, &turns_sql, &turn_params).await
                }
            },
            async {
                if memory_ids.is_empty() {
                    Ok(Vec::new())
                } else {
                    self.rows(c, &memories_sql, &memory_params).await
                }
            },
        )?;
        let mut out: Vec<(f64, Ranked)> = turns
            .iter()
            .map(|r| (score[&r.get::<_, i64>(0)], turn_from_row(r, 0.0)))
            .collect();
        out.extend(memories.iter().map(|r| {
            let id: i64 = r.get(0);
            (
                score[&-id],
                Ranked {
                    citation: memory_citation(id),
                    kind: r.get(1),
                    text: r.get(2),
                    score: 0.0,
                    origin: Origin::Memory,
                },
            )
        }));
        Ok(out)
    }

    /// Full-text ranking of `query` in the caller's scope, best first, at
    /// most `top_k`.
    async fn lexical_rank(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        query: &str,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let terms = query_terms(query);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        // Among memories alone every term is walked: the memories'
        // statement reads at most the newest MAXSCORE_BUDGET matches anyway.
        let budget = category.walk_budget();
        let Some((plan, bm25)) = self.plan(c, scope, &terms, budget).await? else {
            return Ok(Vec::new());
        };
        let pool = candidate_pool(top_k);
        let mut candidates = match plan {
            Plan::Scored(tsquery) => {
                let mut c2 = self
                    .candidates(c, scope, &tsquery, Order::Scored(&bm25), category, pool)
                    .await?;
                // One pool over both tables by text score, then the memory boost.
                c2.sort_by(|a, b| b.score.total_cmp(&a.score));
                c2.truncate(pool);
                for r in &mut c2 {
                    if r.origin == Origin::Memory {
                        r.score *= MEMORY_WEIGHT;
                    }
                }
                if category.admits_turns() {
                    self.add_neighbours(c, scope, &mut c2).await?;
                    smooth_neighbours(&mut c2);
                }
                c2
            }
            Plan::Newest {
                ref first,
                ref fallback,
                ..
            } => {
                let (first_walk, rarest_walk) =
                    plan.newest_walks(pool).expect("a newest-first plan");
                let mut found = self
                    .candidates(c, scope, first, Order::from(first_walk), category, pool)
                    .await?;
                if let (true, Some(rarest)) = (found.is_empty(), fallback) {
                    found = self
                        .candidates(c, scope, rarest, Order::from(rarest_walk), category, pool)
                        .await?;
                }
                // Memories first (the user asked for them), then turns, each
                // newest first; the order becomes a small descending score.
                found.truncate(pool);
                let n = found.len() as f64;
                for (i, r) in found.iter_mut().enumerate() {
                    r.score = (n - i as f64) / n.max(1.0);
                    if r.origin == Origin::Memory {
                        r.score *= MEMORY_WEIGHT;
                    }
                }
                found
            }
        };
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
        candidates.truncate(top_k);
        Ok(candidates)
    }

    /// The matches of `tsquery` in the tables `category` lets compete,
    /// memories before turns: by BM25 (of the newest [`MAXSCORE_BUDGET`]
    /// per table, a bound the plan already keeps), or newest first. Both
    /// tables' statements are pipelined.
    async fn candidates(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        tsquery: &str,
        order: Order<'_>,
        category: Among<'_>,
        pool: usize,
    ) -> Result<Vec<Ranked>> {
        let pool = pool as i64;
        let q = format!("to_tsquery('{TEXT_SEARCH_CONFIG}', $3)");
        // The kind is the parameter after the score's ($5-$7) when scored.
        let kind_filter = match (category, order) {
            (Among::Memories(Some(_)), Order::Scored(_)) => "AND kind = $8",
            (Among::Memories(Some(_)), _) => "AND kind = $5",
            _ => "",
        };
        let score = match order {
            Order::Scored(bm25) => bm25.score_sql(),
            _ => String::new(),
        };
        let (turns_sql, memories_sql) = match order {
            // The match keeps the inline query: with a `FROM` item inside,
            // the generic plan walked turns_by_scope instead of the GIN
            // index (1.15 s mean at 1M items, measured).
            Order::Scored(_) => (
                format!(
                    "SELECT {TURN_COLUMNS}, {score} AS score
                     FROM (SELECT * FROM turns WHERE scope_id = {SCOPE_ID}
                             AND scoped_terms(scope_id, search) && {}
                           ORDER BY id + 0 DESC LIMIT {MAXSCORE_BUDGET}) m
                     ORDER BY score DESC, id DESC LIMIT $4",
                    scoped_keys()
                ),
                format!(
                    "SELECT id, kind, text, {score} AS score
                     FROM (SELECT * FROM memories WHERE scope_id = {SCOPE_ID} AND state = 'active'
                           AND search @@ {q} {kind_filter} ORDER BY id DESC LIMIT {MAXSCORE_BUDGET}) m
                     ORDER BY score DESC, id DESC LIMIT $4"
                ),
            ),
            Order::Newest => (newest_turns(), newest_memories(&q, kind_filter)),
            // The scope's newest turns, walked backwards, each tested
            // against the query parsed once (an InitPlan), stopping at `$4`
            // matches. A `FROM` item query instead joins every walked row
            // to it: 11.6 ms against 8.1 ms for 14 719 rows at 1M, measured.
            Order::NewestWithin(_) => (
                format!(
                    "SELECT {TURN_COLUMNS}, 0::float8
                     FROM (SELECT * FROM turns WHERE scope_id = {SCOPE_ID}
                           ORDER BY id DESC LIMIT $5) m
                     WHERE search @@ (SELECT {q}) ORDER BY id DESC LIMIT $4"
                ),
                newest_memories(&q, kind_filter),
            ),
        };
        let tsquery = tsquery.to_owned();
        let no_rows = || async { Ok::<Vec<Row>, MemoryError>(Vec::new()) };
        let turns = async {
            if !category.admits_turns() {
                no_rows().await
            } else {
                let p: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&scope.user, &scope.peer, &tsquery, &pool];
                match order {
                    Order::Scored(bm25) => {
                        let w: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                            [&bm25.lexemes, &bm25.idf, &bm25.avg_len];
                        self.rows(c, &turns_sql, &[p[0], p[1], p[2], p[3], w[0], w[1], w[2]])
                            .await
                    }
                    Order::Newest => self.rows(c, &turns_sql, &p).await,
                    Order::NewestWithin(rows) => {
                        let walked = self
                            .rows(c, &turns_sql, &[p[0], p[1], p[2], p[3], &rows])
                            .await?;
                        if walked.len() as i64 == pool {
                            Ok(walked)
                        } else {
                            // The window held fewer than the pool: older
                            // matches may exist, so the postings decide.
                            self.rows(c, &newest_turns(), &p).await
                        }
                    }
                }
            }
        };
        let memories = async {
            let mut p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&scope.user, &scope.peer, &tsquery, &pool];
            if let Order::Scored(bm25) = order {
                p.extend([
                    &bm25.lexemes as &(dyn tokio_postgres::types::ToSql + Sync),
                    &bm25.idf,
                    &bm25.avg_len,
                ]);
            }
            match category {
                Among::Turns => no_rows().await,
                Among::All | Among::Memories(None) => self.rows(c, &memories_sql, &p).await,
                Among::Memories(Some(kind)) => {
                    p.push(&kind);
                    self.rows(c, &memories_sql, &p).await
                }
            }
        };
        let (turn_rows, memory_rows) = tokio::try_join!(turns, memories)?;
        let mut found: Vec<Ranked> = memory_rows
            .iter()
            .map(|r| Ranked {
                citation: memory_citation(r.get(0)),
                kind: r.get(1),
                text: r.get(2),
                score: r.get(3),
                origin: Origin::Memory,
            })
            .collect();
        found.extend(turn_rows.iter().map(|r| turn_from_row(r, r.get(8))));
        Ok(found)
    }

    /// Turns adjacent to the best [`NEIGHBOURS_OF`] candidates join the
    /// candidates unscored (one statement for all of them).
    async fn add_neighbours(
        &self,
        c: &impl GenericClient,
        scope: &Scope,
        ranked: &mut Vec<Ranked>,
    ) -> Result<()> {
        let mut best: Vec<(f64, &str, i64)> = ranked
            .iter()
            .filter_map(|r| match &r.origin {
                Origin::Turn { thread, seq, .. } => Some((r.score, thread.as_str(), *seq)),
                Origin::Memory => None,
            })
            .collect();
        best.sort_by(|a, b| b.0.total_cmp(&a.0));
        best.truncate(NEIGHBOURS_OF);
        let present: HashSet<(&str, i64)> = ranked
            .iter()
            .filter_map(|r| match &r.origin {
                Origin::Turn { thread, seq, .. } => Some((thread.as_str(), *seq)),
                Origin::Memory => None,
            })
            .collect();
        let mut wanted: Vec<(String, i64)> = Vec::new();
        for (_, thread, seq) in &best {
            for near in [seq - 1, seq + 1] {
                let key = (thread.to_string(), near);
                if !present.contains(&(*thread, near)) && !wanted.contains(&key) {
                    wanted.push(key);
                }
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let (threads, seqs): (Vec<String>, Vec<i64>) = wanted.into_iter().unzip();
        let rows = self
            .rows(
                c,
                &format!(
                    "SELECT t.id, t.thread, t.seq, t.message_id, t.role, t.speaker,
                            t.occurred_at, t.text
                     FROM turns t
                     JOIN unnest($3::text[], $4::bigint[]) AS n(thread, seq)
                       ON t.thread = n.thread AND t.seq = n.seq
                     WHERE t.scope_id = {SCOPE_ID}"
                ),
                &[&scope.user, &scope.peer, &threads, &seqs],
            )
            .await?;
        ranked.extend(rows.iter().map(|r| turn_from_row(r, 0.0)));
        Ok(())
    }

    /// The bounded, cited block, exactly as `local` lays it out: ranked items,
    /// then the newest explicit memories not among them (`standing_memories`);
    /// with no query and no `injection_query`, the
    /// [first-turn block](crate::first_turn).
    pub(crate) async fn recall_block(&self, request: &RecallRequest) -> Result<Recall> {
        let settings = &self.config.recall;
        let query = match request.query.as_deref().map(str::trim) {
            Some(q) if !q.is_empty() => q,
            _ => match settings.injection_query.as_deref() {
                Some(q) => q,
                None => return self.first_turn_block(&request.caller).await,
            },
        };
        let scope = Scope::of(&request.caller);
        // Embedded before a connection is taken (an embedder may be slow).
        let vector = self.query_vector(query).await;
        let (client, on_replica) = self.read_client(&scope).await?;
        let read = self
            .ranked_block(
                Reader::new(&client, on_replica),
                &scope,
                query,
                vector.as_deref(),
            )
            .await;
        drop(client);
        match self.replica_outcome(on_replica, read) {
            Some(block) => block,
            None => {
                let client = self.client().await?;
                self.ranked_block(Reader::primary(&client), &scope, query, vector.as_deref())
                    .await
            }
        }
    }

    /// [`Self::recall_block`]'s ranked block, read through `read`.
    async fn ranked_block(
        &self,
        read: Reader<'_>,
        scope: &Scope,
        query: &str,
        vector: Option<&[f32]>,
    ) -> Result<Recall> {
        let settings = &self.config.recall;
        let standing_sql = format!(
            "SELECT {} FROM memories WHERE scope_id = {SCOPE_ID} AND state = 'active'
             ORDER BY id DESC LIMIT $3",
            crate::facts::FACT_COLUMNS
        );
        let standing_limit = settings.standing_memories as i64;
        let standing_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&scope.user, &scope.peer, &standing_limit];
        let (mut ranked, standing) = tokio::try_join!(
            self.rank(
                read,
                scope,
                query,
                vector,
                settings.recall_top_k,
                Among::All
            ),
            self.rows(read.client, &standing_sql, &standing_params),
        )?;
        let ranked_len = ranked.len();
        add_standing(
            &mut ranked,
            standing.iter().map(crate::facts::fact_from_row),
        );
        // The ranking's own facts already name their sources.
        let standing = &mut ranked[ranked_len..];
        let sources = self.fact_sources(read.client, standing).await?;
        cite_sources(standing, &sources);
        Ok(assemble(&ranked, settings.max_injection_chars))
    }

    /// The caller's ranking of `query`, at most `top_k`, every match kept (a
    /// distilled fact under the turn it rests on too, which recall and
    /// search leave out), read from the primary: what the search for a
    /// job's related facts reads (among memories), right after the
    /// worker's own writes.
    pub(crate) async fn every_match(
        &self,
        caller: &Caller,
        query: &str,
        top_k: usize,
        category: Among<'_>,
    ) -> Result<Vec<Ranked>> {
        let scope = Scope::of(caller);
        let vector = self.query_vector(query).await;
        let client = self.client().await?;
        self.rank_once(
            Reader::primary(&client),
            &scope,
            query,
            vector.as_deref(),
            top_k,
            category,
        )
        .await
    }

    /// Full-text search; `kind` (a memory kind, or `turn`) filters before the
    /// `top_k` cut. The same validation as `local`.
    pub(crate) async fn search_hits(
        &self,
        caller: &Caller,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>> {
        if query.query.trim().is_empty() {
            return Err(MemoryError::invalid("query", "must not be blank"));
        }
        if query.top_k == 0 || query.top_k > MAX_SEARCH_TOP_K {
            return Err(MemoryError::invalid(
                "top_k",
                format!("must be between 1 and {MAX_SEARCH_TOP_K}"),
            ));
        }
        let category = match query.kind.as_deref().map(str::trim) {
            Some("") => return Err(MemoryError::invalid("kind", "must not be blank")),
            kind => Among::of_kind(kind),
        };
        let scope = Scope::of(caller);
        let vector = self.query_vector(&query.query).await;
        let (q, vector, top_k) = (&query.query, vector.as_deref(), query.top_k);
        let (client, on_replica) = self.read_client(&scope).await?;
        let read = self
            .rank(
                Reader::new(&client, on_replica),
                &scope,
                q,
                vector,
                top_k,
                category,
            )
            .await;
        drop(client);
        let ranked = match self.replica_outcome(on_replica, read) {
            Some(ranked) => ranked?,
            None => {
                let client = self.client().await?;
                self.rank(Reader::primary(&client), &scope, q, vector, top_k, category)
                    .await?
            }
        };
        Ok(ranked.into_iter().map(SearchHit::from).collect())
    }
}
