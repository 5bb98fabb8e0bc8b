-- The nearest-items search of one heavy scope among many light ones, as
-- `vectors::hnsw_nearest_sql` runs it (the scope's size picks the branch)
-- against the statement that left the choice to a generic plan.
--
--   psql "$MEMGATE_TEST_PGVECTOR_DSN" -q -f crates/memgate-lab/sql/hnsw_tenants.sql
--
-- A scratch schema of its own (dropped at the end): 100,000 random
-- 128-dimension vectors in scope 1 and 100 in each of 1,000 more, an HNSW
-- index on them as memgate builds it, and a `scope_docs` count per scope.
-- Prints each search's time in ms, ten random queries per statement and
-- scope, the two statements alternated twice. Random vectors: this
-- measures which path runs and what it costs, not the index's quality.
-- Then 10,000 memories' 384-dimension vectors join scope 1, and the
-- search among memories alone (`vectors::exact_nearest_sql(true)`,
-- through `vectors_of_memories`) is timed the same way.
\set ON_ERROR_STOP on
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
DROP SCHEMA IF EXISTS hnsw_tenants CASCADE;
CREATE SCHEMA hnsw_tenants;
SET search_path = hnsw_tenants, public;
CREATE TABLE scopes (id bigserial PRIMARY KEY, user_id text, peer text, UNIQUE (user_id, peer));
INSERT INTO scopes (user_id, peer) SELECT 'u' || g, '' FROM generate_series(1, 1001) g;
CREATE TABLE vectors (scope_id bigint, turn_id bigint, memory_id bigint, model text, embedding vector);
INSERT INTO vectors
SELECT CASE WHEN g <= 100000 THEN 1 ELSE 2 + g % 1000 END, g, NULL, 'm',
       (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 128) WHERE g > 0)
FROM generate_series(1, 200000) g;
CREATE INDEX vectors_by_scope ON vectors (scope_id, model);
CREATE TABLE scope_docs AS SELECT scope_id, count(*) AS docs FROM vectors GROUP BY scope_id;
ALTER TABLE scope_docs ADD PRIMARY KEY (scope_id);
SET maintenance_work_mem = '1GB';
CREATE INDEX vectors_hnsw ON vectors USING hnsw ((embedding::vector(128)) vector_ip_ops) WHERE model = 'm';
ANALYZE;
CREATE TABLE queries AS
SELECT g AS n, (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 128) WHERE g > 0) AS q
FROM generate_series(1, 10) g;

SET plan_cache_mode = force_generic_plan;
SET jit = off;
SET max_parallel_workers_per_gather = 0;
SET hnsw.ef_search = 50;
SET hnsw.iterative_scan = relaxed_order;

-- The planner's choice: ordered by the indexed expression, the scope's
-- btree usable too.
PREPARE planner_chooses(text, text, vector, text, bigint) AS
SELECT id, score FROM (
    SELECT coalesce(turn_id, -memory_id) AS id, (-(embedding <#> $3::vector))::float4 AS score
    FROM vectors
    WHERE scope_id = (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2)
      AND model = 'm' AND model = $4
    ORDER BY (embedding::vector(128)) <#> ($3::vector(128)) LIMIT $5) c
ORDER BY score DESC, id DESC LIMIT $5;

-- The scope's size chooses (minimum 20,000 items, the index valid).
PREPARE size_chooses(text, text, vector, text, bigint) AS
SELECT id, score FROM (
    (SELECT coalesce(turn_id, -memory_id) AS id, (-(embedding <#> $3::vector))::float4 AS score
     FROM vectors
     WHERE scope_id + 0 = (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2)
       AND model = 'm' AND model = $4
       AND (coalesce((SELECT docs FROM scope_docs WHERE scope_id =
                         (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2)) >= 20000, false)
            AND coalesce((SELECT indisvalid FROM pg_catalog.pg_index
                          WHERE indexrelid = pg_catalog.to_regclass('vectors_hnsw')), false))
     ORDER BY (embedding::vector(128)) <#> ($3::vector(128)) LIMIT $5)
    UNION ALL
    (SELECT coalesce(turn_id, -memory_id), (-(embedding <#> $3::vector))::float4
     FROM vectors
     WHERE scope_id = (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2) AND model = $4
       AND NOT (coalesce((SELECT docs FROM scope_docs WHERE scope_id =
                             (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2)) >= 20000, false)
                AND coalesce((SELECT indisvalid FROM pg_catalog.pg_index
                              WHERE indexrelid = pg_catalog.to_regclass('vectors_hnsw')), false))
     ORDER BY embedding <#> $3::vector, coalesce(turn_id, -memory_id) DESC LIMIT $5)) c
ORDER BY score DESC, id DESC LIMIT $5;

DO $$
DECLARE
    stmt text;
    scope text;
    query vector;
    started timestamptz;
    took text;
BEGIN
    FOR round IN 1..2 LOOP
        FOREACH stmt IN ARRAY ARRAY['planner_chooses', 'size_chooses'] LOOP
            FOREACH scope IN ARRAY ARRAY['u1', 'u500'] LOOP
                took := '';
                FOR query IN SELECT q FROM queries ORDER BY n LOOP
                    started := clock_timestamp();
                    EXECUTE format('EXECUTE %I(%L, %L, %L::vector, %L, 50)', stmt, scope, '', query, 'm');
                    took := took || ' ' || round(extract(epoch FROM clock_timestamp() - started)::numeric * 1000, 2);
                END LOOP;
                RAISE NOTICE 'round % % scope % (% items) ms:%', round, stmt, scope,
                    (SELECT docs FROM scope_docs WHERE scope_id = (SELECT id FROM scopes WHERE user_id = scope)), took;
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
-- Among memories alone: 10,000 memories' vectors of 384 dimensions in the
-- heavy scope, beside its 100,000 turns' (the HNSW index, which holds
-- 128-dimension vectors of model 'm', is dropped first).
DROP INDEX vectors_hnsw;
INSERT INTO vectors
SELECT 1, NULL, g, 'm',
       (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 384) WHERE g > 0)
FROM generate_series(1, 10000) g;
CREATE INDEX vectors_of_memories ON vectors (scope_id, model) WHERE memory_id IS NOT NULL;
ANALYZE vectors;
CREATE TABLE memory_queries AS
SELECT g AS n, (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 384) WHERE g > 0) AS q
FROM generate_series(1, 10) g;
PREPARE among_memories(text, text, vector, text, bigint) AS
SELECT coalesce(turn_id, -memory_id), (-(embedding <#> $3::vector))::float4
FROM vectors
WHERE scope_id = (SELECT id FROM scopes WHERE user_id = $1 AND peer = $2) AND model = $4
  AND memory_id IS NOT NULL
ORDER BY embedding <#> $3::vector, coalesce(turn_id, -memory_id) DESC
LIMIT $5;

DO $$
DECLARE
    query vector;
    started timestamptz;
    took text := '';
BEGIN
    FOR query IN SELECT q FROM memory_queries ORDER BY n LOOP
        started := clock_timestamp();
        EXECUTE format('EXECUTE among_memories(%L, %L, %L::vector, %L, 100)', 'u1', '', query, 'm');
        took := took || ' ' || round(extract(epoch FROM clock_timestamp() - started)::numeric * 1000, 2);
    END LOOP;
    RAISE NOTICE 'among 10000 memories of scope u1 (beside 100000 turns) ms:%', took;
END
$$;
DROP SCHEMA hnsw_tenants CASCADE;
