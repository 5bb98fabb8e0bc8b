//! memgate's PostgreSQL schema: how it is recognised, created and migrated.
//!
//! memgate owns one PostgreSQL schema (namespace, `backend_config.schema`,
//! default `memgate`). Its table `memgate_meta` says `application = memgate`
//! and `schema_version = N`, the number of [`MIGRATIONS`] applied. Every
//! replica runs [`migrate`] before its first operation, inside one
//! transaction that first takes a cluster-wide advisory lock, so replicas
//! starting at once apply each step exactly once and the others wait, then
//! see it done. Refused, with nothing written (the transaction rolls back):
//! a schema of that name holding objects but no memgate marker (foreign),
//! a marker of another application, and a version newer than this code.
//!
//! Full-text search is PostgreSQL's own: a weighted `tsvector` per memory and
//! turn (body `A`, context `B`; the `english` configuration stems, after
//! memgate's own folding), indexed by GIN so a lookup only ever visits its
//! own scope's postings: memories by (scope id, lexeme) (`btree_gin`), turns
//! by `scope lexeme` keys (migration 3, [`SCOPED_TERMS`]). Hybrid recall's
//! vectors are an opt-in step of their own ([`migrate_with`]).

use crate::config::PostgresConfig;
use crate::pool::db_error;
use memgate_core::{MemoryError, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::{GenericClient, Transaction};

/// The advisory lock every memgate migration takes (`MGAT` in ASCII).
pub const MIGRATION_LOCK: i64 = 0x4D47_4154;

/// The value of `memgate_meta.application`.
pub const APPLICATION: &str = "memgate";

/// One ordered schema step: SQL run inside the migration transaction.
struct Migration {
    name: &'static str,
    sql: &'static str,
}

/// Ordered schema steps; `schema_version` = how many have been applied.
const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "scopes, explicit memories with history, captured turns, full-text indexes",
        // The extension lives in `public`, not in memgate's schema (the
        // first on the search_path): there, dropping one memgate schema
        // dropped the extension and, by cascade, the GIN indexes of every
        // other schema of the database.
        sql: "CREATE EXTENSION IF NOT EXISTS btree_gin SCHEMA public;
          CREATE TABLE scopes (
              id      bigserial PRIMARY KEY,
              user_id text NOT NULL,
              peer    text NOT NULL,
              UNIQUE (user_id, peer)
          );
          CREATE TABLE memories (
              id         bigserial PRIMARY KEY,
              scope_id   bigint NOT NULL REFERENCES scopes(id),
              kind       text NOT NULL,
              text       text NOT NULL,
              state      text NOT NULL CHECK (state IN ('active', 'retired')),
              version    integer NOT NULL,
              created_at text NOT NULL,
              updated_at text NOT NULL,
              search     tsvector NOT NULL
          );
          -- Texts reach 8 KiB, past a btree entry's limit: the key is their md5,
          -- and remember compares the text itself.
          CREATE UNIQUE INDEX memories_one_active_copy
              ON memories (scope_id, kind, md5(text)) WHERE state = 'active';
          CREATE INDEX memories_by_scope ON memories (scope_id, id);
          CREATE INDEX memories_search ON memories USING gin (scope_id, search)
              WHERE state = 'active';
          CREATE TABLE memory_history (
              id          bigserial PRIMARY KEY,
              memory_id   bigint NOT NULL REFERENCES memories(id),
              version     integer NOT NULL,
              kind        text NOT NULL,
              text        text NOT NULL,
              state       text NOT NULL,
              recorded_at text NOT NULL,
              UNIQUE (memory_id, version)
          );
          CREATE TABLE turns (
              id          bigserial PRIMARY KEY,
              scope_id    bigint NOT NULL REFERENCES scopes(id),
              thread      text NOT NULL,
              seq         bigint NOT NULL,
              signature   text NOT NULL,
              message_id  text,
              role        text NOT NULL CHECK (role IN ('human', 'ai')),
              speaker     text,
              occurred_at text,
              text        text NOT NULL,
              captured_at text NOT NULL,
              search      tsvector NOT NULL,
              UNIQUE (scope_id, thread, signature),
              UNIQUE (scope_id, thread, seq)
          );
          CREATE INDEX turns_by_scope ON turns (scope_id, id);
          CREATE INDEX turns_search ON turns USING gin (scope_id, search);",
    },
    Migration {
        name: "per-scope document frequency of each lexeme, kept by triggers",
        sql: TERM_DOCS,
    },
    Migration {
        name: "turns indexed by (scope, lexeme) keys",
        sql: SCOPED_TERMS,
    },
    Migration {
        name: "facts with provenance, time and confidence",
        sql: FACT_PROVENANCE,
    },
    Migration {
        name: "the distillation queue and the endpoint's token usage",
        sql: DISTILL_QUEUE,
    },
    Migration {
        name: "handoffs held until they expire",
        sql: HANDOFFS,
    },
    Migration {
        name: "distillation jobs held by one worker at a time (a lease)",
        sql: DISTILL_LEASE,
    },
    Migration {
        name: "per-scope document and lexeme totals for BM25, kept by the same triggers",
        sql: SCOPE_DOCS,
    },
    Migration {
        name: "a per-scope write mark, for read-your-writes on a read replica",
        sql: WRITE_MARKS,
    },
    Migration {
        name: "the full-text indexes' pending lists kept short",
        sql: SHORT_PENDING_LISTS,
    },
    Migration {
        name: "each turn's first-turn excerpt, kept with it",
        sql: TURN_EXCERPTS,
    },
];

/// Migration 11: each turn's first-turn excerpt (`local`'s columns), so a
/// block reads the newest excerpts through `turns_with_excerpt` (and the
/// older ones about their speaker through `turns_about_speaker`) instead of
/// excerpting the newest 1,000 turns on every call. `excerpt_rules` is the
/// version of the rules an excerpt was computed under (0: never computed);
/// turns stored before this step are computed in the background
/// ([`crate::excerpts`]), and so are turns a process of an older version
/// stores while a rolling upgrade replaces it (`turns_never_excerpted`
/// holds exactly those, so looking for them is one index probe). Adding
/// columns with constant defaults does not rewrite the table.
const TURN_EXCERPTS: &str = "
ALTER TABLE turns
    ADD COLUMN excerpt text,
    ADD COLUMN excerpt_score double precision,
    ADD COLUMN excerpt_terms text,
    ADD COLUMN excerpt_about boolean NOT NULL DEFAULT false,
    ADD COLUMN excerpt_rules smallint NOT NULL DEFAULT 0;
CREATE INDEX turns_with_excerpt ON turns (scope_id, id) WHERE excerpt IS NOT NULL;
CREATE INDEX turns_about_speaker ON turns (scope_id, id) WHERE excerpt_about;
CREATE INDEX turns_never_excerpted ON turns (id) WHERE excerpt_rules = 0;
";

/// Migration 9: every statement that changes `turns` or `memories` (all
/// that recall and search read) sets each scope it changed to the next
/// value of `write_marks`, in the statement's own transaction
/// ([`crate::replica`]: a read bound for a replica compares the primary's
/// mark with the replica's). A trigger, so no write path can miss it and
/// none pays a round trip for it; it fires after `count_terms`, whose
/// `scope_docs` row already serialises a scope's writes. Scopes written
/// before keep 0, which a replica that replayed this step shows too.
const WRITE_MARKS: &str = r#"
ALTER TABLE scopes ADD COLUMN write_mark bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE write_marks;
CREATE FUNCTION mark_written() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
    s bigint;
BEGIN
    -- Drawn under each row's lock (an update that waited runs again on the
    -- row's new version), so a scope's marks grow in commit order.
    FOR s IN SELECT DISTINCT scope_id FROM changed_rows ORDER BY 1 LOOP
        UPDATE scopes SET write_mark = nextval('write_marks') WHERE id = s;
    END LOOP;
    RETURN NULL;
END
$f$;
CREATE TRIGGER turns_written AFTER INSERT ON turns
    REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION mark_written();
CREATE TRIGGER turns_written_away AFTER DELETE ON turns
    REFERENCING OLD TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION mark_written();
CREATE TRIGGER memories_written AFTER INSERT ON memories
    REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION mark_written();
CREATE TRIGGER memories_written_again AFTER UPDATE ON memories
    REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION mark_written();
CREATE TRIGGER memories_written_away AFTER DELETE ON memories
    REFERENCING OLD TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION mark_written();
"#;

/// Migration 10: a GIN index's pending list (`fastupdate`) is read whole by
/// every search that uses the index, so at its default 4 MB a recall read
/// ~490 pages before its own postings: 8.7 ms of a 1M-item recall's
/// statement against 0.3 ms with the list flushed (`EXPLAIN ANALYZE`,
/// docs/design/lexical-pruning.md). At 256 kB the list is flushed sixteen
/// times as often, by the writer that fills it, at no measurable cost to the
/// capture rate. The lists written so far are flushed here.
const SHORT_PENDING_LISTS: &str = "
ALTER INDEX turns_terms SET (gin_pending_list_limit = 256);
ALTER INDEX memories_search SET (gin_pending_list_limit = 256);
SELECT gin_clean_pending_list('turns_terms'::regclass);
SELECT gin_clean_pending_list('memories_search'::regclass);
";

/// Migration 5: `distill_jobs` is the durable distillation queue, one row
/// per thread's run of new turns (turn ids `first_turn..=last_turn` of that
/// thread), committed with the capture that stored them; `done` and
/// `parked` rows stay so a replay adds nothing and a parked job keeps its
/// reason. `distill_usage` keeps the endpoint's reported tokens per UTC
/// day (the daily budget). `local`'s schema 7 holds the same tables.
const DISTILL_QUEUE: &str = "
CREATE TABLE distill_jobs (
    id         bigserial PRIMARY KEY,
    scope_id   bigint NOT NULL REFERENCES scopes(id),
    thread     text NOT NULL,
    first_turn bigint NOT NULL,
    last_turn  bigint NOT NULL,
    state      text NOT NULL CHECK (state IN ('queued', 'done', 'parked')),
    attempts   integer NOT NULL DEFAULT 0,
    reason     text,
    created_at text NOT NULL,
    updated_at text NOT NULL
);
CREATE INDEX distill_jobs_by_state ON distill_jobs (state, id);
CREATE INDEX distill_jobs_by_thread ON distill_jobs (scope_id, thread, state);
CREATE TABLE distill_usage (
    day               text PRIMARY KEY,
    calls             bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL
);
";

/// Migration 8: each scope's document count and the sum of its documents'
/// lengths (distinct lexemes, `length(search)`), over turns and active
/// memories: BM25's `N` and average length ([`crate::plan`]). Kept by
/// `count_terms` (replaced here) in the writing statement's transaction,
/// like `term_docs`, so a forget or retire moves them at once; a scope whose
/// count reaches zero keeps no row.
const SCOPE_DOCS: &str = r#"
-- Writers wait until the totals below are counted and the new trigger
-- function is in place: none is counted twice or missed.
LOCK TABLE turns, memories IN SHARE MODE;
CREATE TABLE scope_docs (
    scope_id bigint PRIMARY KEY REFERENCES scopes(id) ON DELETE CASCADE,
    docs     bigint NOT NULL,
    lexemes  bigint NOT NULL
);
CREATE FUNCTION scope_docs_add(scope_ids bigint[], docs bigint[], lexemes bigint[])
RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $f$
    INSERT INTO scope_docs AS t (scope_id, docs, lexemes)
    SELECT s, d, l FROM unnest(scope_ids, docs, lexemes) AS x(s, d, l)
    ORDER BY s
    ON CONFLICT (scope_id) DO UPDATE
        SET docs = t.docs + excluded.docs, lexemes = t.lexemes + excluded.lexemes;
    DELETE FROM scope_docs t WHERE t.scope_id = ANY(scope_ids) AND t.docs <= 0;
$f$;
CREATE OR REPLACE FUNCTION count_terms() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
    s bigint[]; l text[]; d bigint[]; ts bigint[]; td bigint[]; tl bigint[];
BEGIN
    IF TG_TABLE_NAME = 'turns' AND TG_OP = 'INSERT' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM new_rows, unnest(tsvector_to_array(search)) AS lexeme GROUP BY 1, 2) c;
        SELECT array_agg(scope_id), array_agg(n), array_agg(len) INTO ts, td, tl
        FROM (SELECT scope_id, count(*) AS n, sum(length(search))::bigint AS len
              FROM new_rows GROUP BY 1) c;
    ELSIF TG_TABLE_NAME = 'turns' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(-n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM old_rows, unnest(tsvector_to_array(search)) AS lexeme GROUP BY 1, 2) c;
        SELECT array_agg(scope_id), array_agg(-n), array_agg(-len) INTO ts, td, tl
        FROM (SELECT scope_id, count(*) AS n, sum(length(search))::bigint AS len
              FROM old_rows GROUP BY 1) c;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM new_rows, unnest(tsvector_to_array(search)) AS lexeme
              WHERE state = 'active' GROUP BY 1, 2) c;
        SELECT array_agg(scope_id), array_agg(n), array_agg(len) INTO ts, td, tl
        FROM (SELECT scope_id, count(*) AS n, sum(length(search))::bigint AS len
              FROM new_rows WHERE state = 'active' GROUP BY 1) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(-n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM old_rows, unnest(tsvector_to_array(search)) AS lexeme
              WHERE state = 'active' GROUP BY 1, 2) c;
        SELECT array_agg(scope_id), array_agg(-n), array_agg(-len) INTO ts, td, tl
        FROM (SELECT scope_id, count(*) AS n, sum(length(search))::bigint AS len
              FROM old_rows WHERE state = 'active' GROUP BY 1) c;
    ELSE
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, sum(n)::bigint AS n
              FROM (SELECT scope_id, search, 1 AS n FROM new_rows WHERE state = 'active'
                    UNION ALL
                    SELECT scope_id, search, -1 FROM old_rows WHERE state = 'active') r,
                   unnest(tsvector_to_array(search)) AS lexeme
              GROUP BY 1, 2 HAVING sum(n) <> 0) c;
        SELECT array_agg(scope_id), array_agg(n), array_agg(len) INTO ts, td, tl
        FROM (SELECT scope_id, sum(n)::bigint AS n, sum(n * length(search))::bigint AS len
              FROM (SELECT scope_id, search, 1 AS n FROM new_rows WHERE state = 'active'
                    UNION ALL
                    SELECT scope_id, search, -1 FROM old_rows WHERE state = 'active') r
              GROUP BY 1 HAVING sum(n) <> 0 OR sum(n * length(search)) <> 0) c;
    END IF;
    IF s IS NOT NULL THEN
        PERFORM term_docs_add(s, l, d);
    END IF;
    IF ts IS NOT NULL THEN
        PERFORM scope_docs_add(ts, td, tl);
    END IF;
    RETURN NULL;
END
$f$;
-- The totals of what is already stored.
INSERT INTO scope_docs (scope_id, docs, lexemes)
SELECT scope_id, count(*), sum(length(search))
FROM (SELECT scope_id, search FROM turns
      UNION ALL
      SELECT scope_id, search FROM memories WHERE state = 'active') r
GROUP BY 1;
"#;

/// Migration 7: a worker that takes a job holds it until `claimed_until`
/// (the database's clock, shared by every replica), so replicas on one
/// queue call the model once per job; a lease that ran out (its worker
/// died) lets another worker take the job ([`crate::distill`]).
const DISTILL_LEASE: &str = "
ALTER TABLE distill_jobs ADD COLUMN claimed_by text, ADD COLUMN claimed_until timestamptz;
";

/// Migration 6: handoffs in flight ([`crate::handoff`]), shared by every
/// replica; a row is one user's draft or prepared handoff, never memory.
const HANDOFFS: &str = "
CREATE TABLE handoffs (
    id         text PRIMARY KEY,
    user_id    text NOT NULL,
    body       text NOT NULL,
    expires_ms bigint NOT NULL
);
CREATE INDEX handoffs_by_user ON handoffs (user_id);
CREATE INDEX handoffs_by_expiry ON handoffs (expires_ms);
";

/// Migration 4: facts carry where they came from (`origin`, the turns they
/// rest on in `memory_sources`, their thread, when they were said), their
/// confidence, and when they stopped being true (`valid_to`,
/// `superseded_by`); each history row says who wrote it. Existing memories
/// are explicit, confidence 1, written by the user: `local`'s schema 7.
const FACT_PROVENANCE: &str = "
ALTER TABLE memories
    ADD COLUMN origin text NOT NULL DEFAULT 'explicit' CHECK (origin IN ('explicit', 'distilled')),
    ADD COLUMN confidence double precision NOT NULL DEFAULT 1.0,
    ADD COLUMN thread text,
    ADD COLUMN said_at text,
    ADD COLUMN valid_to text,
    ADD COLUMN superseded_by bigint;
ALTER TABLE memory_history
    ADD COLUMN confidence double precision NOT NULL DEFAULT 1.0,
    ADD COLUMN changed_by text NOT NULL DEFAULT 'user';
CREATE TABLE memory_sources (
    memory_id bigint NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    turn_id   bigint NOT NULL,
    PRIMARY KEY (memory_id, turn_id)
);
CREATE INDEX memory_sources_by_turn ON memory_sources (turn_id);
";

/// Migration 3: the turns' GIN index keyed by `scope lexeme` strings
/// instead of (scope_id, lexeme) pairs. In the pair index the scope is a key
/// of its own whose posting list holds every turn of the scope, and every
/// lookup walked it: at a million turns in one scope, ~680 index pages and
/// ~42 ms per statement whatever the terms (EXPLAIN ANALYZE, PostgreSQL
/// 15). A `scope lexeme` key's postings are exactly that term's turns of
/// that scope (what `term_docs` counts), so a lookup reads only those. An
/// expression index: the table is not rewritten and rows do not grow.
const SCOPED_TERMS: &str = r#"
CREATE FUNCTION scoped_terms(scope_id bigint, search tsvector) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
    SELECT ARRAY(SELECT scope_id::text || ' ' || l FROM unnest(tsvector_to_array(search)) AS l)
$f$;
CREATE INDEX turns_terms ON turns USING gin (scoped_terms(scope_id, search));
DROP INDEX turns_search;
"#;

/// Migration 2: `term_docs` holds, per scope, how many turns and active
/// memories contain each lexeme, so recall planning reads a term's count in
/// one index lookup instead of walking its postings. Statement triggers on
/// both tables keep it exact in the writing transaction, whatever writes
/// (capture, remember, revise, retire, import, forget); an existing schema is
/// counted in place.
const TERM_DOCS: &str = r#"
CREATE TABLE term_docs (
    scope_id bigint NOT NULL REFERENCES scopes(id) ON DELETE CASCADE,
    lexeme   text NOT NULL,
    docs     bigint NOT NULL,
    PRIMARY KEY (scope_id, lexeme)
);
-- Adds `deltas[i]` (negative: removes) to the count of (`scope_ids[i]`, `terms[i]`),
-- in key order so concurrent writers lock shared rows in one order; a count
-- reaching zero is deleted, so no word of erased text stays behind.
CREATE FUNCTION term_docs_add(scope_ids bigint[], terms text[], deltas bigint[])
RETURNS void LANGUAGE sql SET search_path FROM CURRENT AS $f$
    INSERT INTO term_docs AS t (scope_id, lexeme, docs)
    SELECT s, l, d FROM unnest(scope_ids, terms, deltas) AS x(s, l, d)
    ORDER BY s, l
    ON CONFLICT (scope_id, lexeme) DO UPDATE SET docs = t.docs + excluded.docs;
    DELETE FROM term_docs t USING unnest(scope_ids, terms, deltas) AS x(s, l, d)
    WHERE d < 0 AND t.scope_id = s AND t.lexeme = l AND t.docs <= 0;
$f$;
-- The statement-level trigger of turns and memories: counts each distinct
-- lexeme of the rows a statement added (+1) or removed (-1); for memories,
-- only active rows count, so a retire or revise moves the counts too.
CREATE FUNCTION count_terms() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
    s bigint[]; l text[]; d bigint[];
BEGIN
    IF TG_TABLE_NAME = 'turns' AND TG_OP = 'INSERT' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM new_rows, unnest(tsvector_to_array(search)) AS lexeme GROUP BY 1, 2) c;
    ELSIF TG_TABLE_NAME = 'turns' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(-n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM old_rows, unnest(tsvector_to_array(search)) AS lexeme GROUP BY 1, 2) c;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM new_rows, unnest(tsvector_to_array(search)) AS lexeme
              WHERE state = 'active' GROUP BY 1, 2) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(-n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, count(*) AS n
              FROM old_rows, unnest(tsvector_to_array(search)) AS lexeme
              WHERE state = 'active' GROUP BY 1, 2) c;
    ELSE
        SELECT array_agg(scope_id), array_agg(lexeme), array_agg(n) INTO s, l, d
        FROM (SELECT scope_id, lexeme, sum(n)::bigint AS n
              FROM (SELECT scope_id, search, 1 AS n FROM new_rows WHERE state = 'active'
                    UNION ALL
                    SELECT scope_id, search, -1 FROM old_rows WHERE state = 'active') r,
                   unnest(tsvector_to_array(search)) AS lexeme
              GROUP BY 1, 2 HAVING sum(n) <> 0) c;
    END IF;
    IF s IS NOT NULL THEN
        PERFORM term_docs_add(s, l, d);
    END IF;
    RETURN NULL;
END
$f$;
CREATE TRIGGER turns_added AFTER INSERT ON turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_terms();
CREATE TRIGGER turns_removed AFTER DELETE ON turns
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_terms();
CREATE TRIGGER memories_added AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_terms();
CREATE TRIGGER memories_removed AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_terms();
CREATE TRIGGER memories_changed AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_terms();
-- The counts of what is already stored (the triggers above hold off writers
-- until this transaction commits, so none is missed).
INSERT INTO term_docs (scope_id, lexeme, docs)
SELECT scope_id, lexeme, count(*)
FROM (SELECT scope_id, search FROM turns
      UNION ALL
      SELECT scope_id, search FROM memories WHERE state = 'active') r,
     unnest(tsvector_to_array(search)) AS lexeme
GROUP BY 1, 2;
"#;

/// The optional steps of hybrid recall, applied only when an embedder is
/// configured (`memgate_meta.vectors_version` counts them), under the same
/// lock and in the same transaction as [`MIGRATIONS`].
const VECTOR_MIGRATIONS: &[Migration] = &[
    Migration {
        name: "pgvector: one vector per turn and active memory, and the indexer's queue",
        sql: VECTORS,
    },
    Migration {
        name: "the memories' vectors by scope, for a search among memories alone",
        sql: VECTORS_OF_MEMORIES,
    },
];

/// The vectors version this code writes and understands.
pub const VECTORS_VERSION: u32 = VECTOR_MIGRATIONS.len() as u32;

/// Vector migration 1. `vectors` holds one vector per turn or active memory
/// (of the one model `vector_model` names), with the item's scope; its rows
/// go with their turn, memory or scope by `ON DELETE CASCADE`, so every
/// erasure (forget, import's replacements, anything that deletes) erases the
/// vector in the same transaction, whichever replica writes. `vector_queue`
/// lists the items still to embed: filled by triggers on every write, so
/// concurrent captures of several replicas are all seen, and emptied by the
/// indexer. A revised memory's vector is dropped and the memory queued
/// again; a retired one's is dropped.
const VECTORS: &str = r#"
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
CREATE TABLE vector_model (
    id    integer PRIMARY KEY CHECK (id = 1),
    model text NOT NULL,
    dims  integer NOT NULL
);
CREATE TABLE vectors (
    scope_id  bigint NOT NULL REFERENCES scopes(id) ON DELETE CASCADE,
    turn_id   bigint UNIQUE REFERENCES turns(id) ON DELETE CASCADE,
    memory_id bigint UNIQUE REFERENCES memories(id) ON DELETE CASCADE,
    model     text NOT NULL,
    embedding public.vector NOT NULL,
    CHECK ((turn_id IS NULL) <> (memory_id IS NULL))
);
CREATE INDEX vectors_by_scope ON vectors (scope_id, model);
CREATE TABLE vector_queue (
    id        bigserial PRIMARY KEY,
    turn_id   bigint UNIQUE REFERENCES turns(id) ON DELETE CASCADE,
    memory_id bigint UNIQUE REFERENCES memories(id) ON DELETE CASCADE,
    CHECK ((turn_id IS NULL) <> (memory_id IS NULL))
);
CREATE FUNCTION queue_vectors() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
BEGIN
    IF TG_TABLE_NAME = 'turns' THEN
        INSERT INTO vector_queue (turn_id) SELECT id FROM new_rows ORDER BY id
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO vector_queue (memory_id)
        SELECT id FROM new_rows WHERE state = 'active' ORDER BY id ON CONFLICT DO NOTHING;
    ELSE
        -- Retired, or its text changed: the old vector is stale.
        DELETE FROM vectors v USING new_rows n JOIN old_rows o ON o.id = n.id
        WHERE v.memory_id = n.id AND (n.state <> 'active' OR n.text <> o.text);
        DELETE FROM vector_queue q USING new_rows n
        WHERE q.memory_id = n.id AND n.state <> 'active';
        INSERT INTO vector_queue (memory_id)
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.state = 'active' AND (o.state <> 'active' OR n.text <> o.text)
        ORDER BY n.id ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$f$;
CREATE TRIGGER turns_to_embed AFTER INSERT ON turns
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_vectors();
CREATE TRIGGER memories_to_embed AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_vectors();
CREATE TRIGGER memories_to_embed_again AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION queue_vectors();
-- What is already stored waits for the indexer.
INSERT INTO vector_queue (turn_id) SELECT id FROM turns ORDER BY id;
INSERT INTO vector_queue (memory_id) SELECT id FROM memories WHERE state = 'active' ORDER BY id;
"#;

/// Vector migration 2. A search among memories alone (the facts a new
/// turn may change, a search of one memory kind) reads the scope's
/// memories' vectors through this index instead of every turn's.
const VECTORS_OF_MEMORIES: &str = r#"
CREATE INDEX vectors_of_memories ON vectors (scope_id, model) WHERE memory_id IS NOT NULL;
"#;

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// What the named schema holds, judged inside the lock.
enum Found {
    /// No such schema (or an empty one): ours to create.
    Nothing,
    /// A memgate schema at this version.
    Memgate(u32),
}

async fn inspect(tx: &Transaction<'_>, config: &PostgresConfig) -> Result<Found> {
    let schema = config.schema.as_str();
    let err = |e: tokio_postgres::Error| db_error(config, &e);
    let row = tx
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1),
                    to_regclass(quote_ident($1) || '.memgate_meta') IS NOT NULL",
            &[&schema],
        )
        .await
        .map_err(err)?;
    let (objects, has_meta): (i64, bool) = (row.get(0), row.get(1));
    if !has_meta {
        if objects == 0 {
            return Ok(Found::Nothing);
        }
        return Err(MemoryError::Corruption(format!(
            "postgres schema {schema} holds {objects} objects but no memgate marker \
             (memgate_meta): it belongs to another application and was left untouched; \
             choose another backend_config.schema"
        )));
    }
    let rows = tx
        .query(
            &format!("SELECT key, value FROM {schema}.memgate_meta"),
            &[],
        )
        .await
        .map_err(err)?;
    let value = |key: &str| {
        rows.iter()
            .find(|r| r.get::<_, &str>(0) == key)
            .map(|r| r.get::<_, String>(1))
    };
    if value("application").as_deref() != Some(APPLICATION) {
        return Err(MemoryError::Corruption(format!(
            "postgres schema {schema} is marked as another application's; it was left untouched"
        )));
    }
    let version = value("schema_version")
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| {
            MemoryError::Corruption(format!(
                "postgres schema {schema} has an unreadable schema_version; it was left untouched"
            ))
        })?;
    if version > SCHEMA_VERSION {
        return Err(MemoryError::Corruption(format!(
            "postgres schema {schema} has schema version {version}, newer than this memgate \
             understands ({SCHEMA_VERSION}); upgrade memgate (nothing was changed, never downgraded)"
        )));
    }
    Ok(Found::Memgate(version))
}

/// Brings the schema to `target` (tests use a lower target to build an old
/// version) under the migration lock; returns the version found before.
pub async fn migrate(
    client: &mut tokio_postgres::Client,
    config: &PostgresConfig,
    target: u32,
) -> Result<u32> {
    migrate_with(client, config, target, false).await
}

/// [`migrate`], and with `vectors` (an embedder is configured) the
/// [`VECTOR_MIGRATIONS`] too; a database without pgvector is then a
/// [`MemoryError::Config`] naming `backend_config.embedder`, and nothing is
/// changed.
pub async fn migrate_with(
    client: &mut tokio_postgres::Client,
    config: &PostgresConfig,
    target: u32,
    vectors: bool,
) -> Result<u32> {
    let schema = config.schema.as_str();
    let err = |e: tokio_postgres::Error| db_error(config, &e);
    let tx = client.transaction().await.map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err)?;
    let before = match inspect(&tx, config).await? {
        Found::Memgate(v) => v,
        Found::Nothing => {
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {schema};
                 CREATE TABLE {schema}.memgate_meta (key text PRIMARY KEY, value text NOT NULL);
                 INSERT INTO {schema}.memgate_meta VALUES
                     ('application', '{APPLICATION}'), ('schema_version', '0');"
            ))
            .await
            .map_err(err)?;
            0
        }
    };
    // The search_path names the schema, so the steps' unqualified names land
    // in it. No statement timeout for the steps: building an index over an
    // existing million-row schema takes minutes, and the lock holds the other
    // replicas off meanwhile (their wait for it is bounded as usual).
    tx.batch_execute(&format!(
        "SET LOCAL search_path = {schema}; SET LOCAL statement_timeout = 0"
    ))
    .await
    .map_err(err)?;
    for (i, step) in MIGRATIONS
        .iter()
        .enumerate()
        .take(target as usize)
        .skip(before as usize)
    {
        tx.batch_execute(step.sql).await.map_err(|e| {
            MemoryError::Backend(format!(
                "postgres schema migration {} ({}) failed: {}",
                i + 1,
                step.name,
                db_error(config, &e)
            ))
        })?;
        tracing::info!(
            step = i + 1,
            name = step.name,
            schema,
            "applied postgres migration"
        );
    }
    if target > before {
        tx.execute(
            &format!("UPDATE {schema}.memgate_meta SET value = $1 WHERE key = 'schema_version'"),
            &[&target.to_string()],
        )
        .await
        .map_err(err)?;
    }
    if vectors {
        migrate_vectors(&tx, config).await?;
    }
    tx.commit().await.map_err(err)?;
    Ok(before)
}

/// The schema version recorded in the database (doctor, tests).
pub async fn schema_version(
    client: &tokio_postgres::Client,
    config: &PostgresConfig,
) -> Result<u32> {
    let row = client
        .query_one(
            &format!(
                "SELECT value FROM {}.memgate_meta WHERE key = 'schema_version'",
                config.schema
            ),
            &[],
        )
        .await
        .map_err(|e| db_error(config, &e))?;
    row.get::<_, String>(0)
        .parse()
        .map_err(|_| MemoryError::Corruption("unreadable postgres schema_version".to_owned()))
}

/// The vectors version recorded in the schema (0: hybrid recall was never
/// configured on it).
pub async fn vectors_version(client: &impl GenericClient, config: &PostgresConfig) -> Result<u32> {
    let schema = config.schema.as_str();
    let row = client
        .query_opt(
            &format!("SELECT value FROM {schema}.memgate_meta WHERE key = 'vectors_version'"),
            &[],
        )
        .await
        .map_err(|e| db_error(config, &e))?;
    match row {
        None => Ok(0),
        Some(r) => r.get::<_, String>(0).parse().map_err(|_| {
            MemoryError::Corruption(format!(
                "postgres schema {schema} has an unreadable vectors_version; it was left untouched"
            ))
        }),
    }
}

/// Applies the pending [`VECTOR_MIGRATIONS`] inside the migration transaction.
async fn migrate_vectors(tx: &Transaction<'_>, config: &PostgresConfig) -> Result<()> {
    let schema = config.schema.as_str();
    let before = vectors_version(tx, config).await?;
    if before > VECTORS_VERSION {
        return Err(MemoryError::Corruption(format!(
            "postgres schema {schema} has vectors version {before}, newer than this memgate \
             understands ({VECTORS_VERSION}); upgrade memgate (nothing was changed)"
        )));
    }
    if before == VECTORS_VERSION {
        return Ok(());
    }
    let available = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
            &[],
        )
        .await
        .map_err(|e| db_error(config, &e))?;
    if !available.get::<_, bool>(0) {
        return Err(MemoryError::Config(
            "backend_config.embedder is set, so hybrid recall needs the pgvector extension, \
             which this PostgreSQL server does not have (`CREATE EXTENSION vector` is not \
             available): install pgvector on the server, or remove backend_config.embedder \
             for full-text recall; nothing was changed"
                .to_owned(),
        ));
    }
    for (i, step) in VECTOR_MIGRATIONS.iter().enumerate().skip(before as usize) {
        tx.batch_execute(step.sql).await.map_err(|e| {
            let reason = db_error(config, &e);
            if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                MemoryError::Config(format!(
                    "backend_config.embedder needs the pgvector extension in this database, and \
                     this role may not create it ({reason}); a superuser can run \
                     `CREATE EXTENSION vector SCHEMA public` once; nothing was changed"
                ))
            } else {
                MemoryError::Backend(format!(
                    "postgres vector migration {} ({}) failed: {reason}",
                    i + 1,
                    step.name
                ))
            }
        })?;
        tracing::info!(
            step = i + 1,
            name = step.name,
            schema,
            "applied postgres vector migration"
        );
    }
    tx.execute(
        &format!(
            "INSERT INTO {schema}.memgate_meta VALUES ('vectors_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        &[&VECTORS_VERSION.to_string()],
    )
    .await
    .map_err(|e| db_error(config, &e))?;
    Ok(())
}
