//! The shared backend conformance suite (`memgate-conformance`) on
//! `postgres`: each behaviour gets a schema of its own; another handle is a
//! second backend with its own pool on the same schema (another replica).
//! The hybrid behaviours run twice: with the HNSW index built after each
//! indexing step (the default, `Postgres`) and with the exact scan
//! (`vector_index: exact`, module `exact_scan`).

mod common;

use memgate_conformance::{BoxFuture, HybridHandle, Storage, Subject, VectorIndex, VectorProgress};
use memgate_core::MemoryBackend;
use memgate_embed::Embedder;
use memgate_postgres::{PostgresBackend, VectorIndex as Search};
use std::sync::Arc;

/// The testkit clusters: Debian's PostgreSQL, and the pgvector one for the
/// hybrid behaviours (each DSN read when a behaviour needs it).
struct Postgres;

/// The hybrid behaviours with `vector_index: exact`.
struct ExactScan;

impl Subject for ExactScan {
    fn fresh(&self) -> BoxFuture<'_, Storage> {
        Postgres.fresh()
    }

    fn hybrid(&self, embedder: Arc<dyn Embedder>) -> BoxFuture<'_, HybridHandle> {
        Box::pin(async move {
            hybrid_on(
                common::pgvector_dsn(),
                common::unique_schema("hybx"),
                embedder,
                Search::Exact,
            )
        })
    }
}

impl Subject for Postgres {
    fn fresh(&self) -> BoxFuture<'_, Storage> {
        Box::pin(async {
            let schema = common::unique_schema("conf");
            let dsn = common::dsn();
            let backend: Arc<dyn MemoryBackend> = Arc::new(common::backend(&dsn, &schema));
            Storage {
                backend,
                reopen: Arc::new(move || {
                    let b: Arc<dyn MemoryBackend> = Arc::new(common::backend(&dsn, &schema));
                    Box::pin(async move { b }) as BoxFuture<'static, _>
                }),
            }
        })
    }

    fn hybrid(&self, embedder: Arc<dyn Embedder>) -> BoxFuture<'_, HybridHandle> {
        Box::pin(async move {
            hybrid_on(
                common::pgvector_dsn(),
                common::unique_schema("hyb"),
                embedder,
                Search::default(),
            )
        })
    }
}

/// A backend with hybrid recall on `schema` (another replica per call).
fn hybrid_on(
    dsn: String,
    schema: String,
    embedder: Arc<dyn Embedder>,
    index: Search,
) -> HybridHandle {
    let config = common::config(&dsn, &schema).with_vector_index(index);
    let backend = Arc::new(
        PostgresBackend::new(config)
            .unwrap()
            .with_embedder(embedder),
    );
    HybridHandle {
        backend: backend.clone(),
        vectors: Arc::new(PgVectors(backend)),
        reopen: Arc::new(move |embedder| {
            let (dsn, schema) = (dsn.clone(), schema.clone());
            Box::pin(async move { hybrid_on(dsn, schema, embedder, index) })
                as BoxFuture<'static, _>
        }),
    }
}

struct PgVectors(Arc<PostgresBackend>);

impl VectorIndex for PgVectors {
    /// Embeds everything, then builds the HNSW index (a no-op when it is
    /// built or the scan is exact), so the behaviours search through it.
    fn index_all(&self) -> BoxFuture<'_, memgate_core::Result<usize>> {
        Box::pin(async {
            let written = self.0.index_all_vectors(32).await?;
            self.0.build_vector_index().await?;
            Ok(written)
        })
    }

    fn reembed(&self) -> BoxFuture<'_, memgate_core::Result<usize>> {
        Box::pin(self.0.reembed())
    }

    fn progress(&self) -> BoxFuture<'_, memgate_core::Result<VectorProgress>> {
        Box::pin(async {
            let p = self.0.vector_progress().await?;
            Ok(VectorProgress {
                embedded: p.embedded,
                total: p.total,
                model_mismatch: p.model_mismatch,
            })
        })
    }
}

memgate_conformance::conformance_tests!(
    Postgres,
    #[ignore = "real server: PostgreSQL (testkit/postgres-up; hybrid: testkit/postgres-up --pgvector)"]
);

/// Replicas share one database, so a handoff prepared on one is continued
/// and committed on another (`local` holds handoffs per process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
async fn a_handoff_is_continued_through_another_handle() {
    memgate_conformance::handoff::a_handoff_is_continued_through_another_handle(&Postgres).await;
}

mod exact_scan {
    use super::ExactScan;

    memgate_conformance::hybrid_conformance_tests!(
        ExactScan,
        #[ignore = "real server: PostgreSQL with pgvector (testkit/postgres-up --pgvector)"]
    );
}

/// The same suite with reads served by the test cluster's hot standby
/// (`testkit/postgres-up --replica`): every behaviour that writes and then
/// reads checks read-your-writes through a real replica. Hybrid behaviours
/// stay on the pgvector cluster, which has no standby.
mod replica_reads {
    use super::*;
    use memgate_core::BackendContext;
    use memgate_postgres::PostgresConfig;

    struct PostgresWithReplica;

    /// A backend reading from the standby, known to be caught up before
    /// the behaviour starts (`diagnose` probes it).
    async fn with_replica(schema: &str) -> Arc<dyn MemoryBackend> {
        let [replica] = memgate_testsupport::real::env_vars(["MEMGATE_TEST_POSTGRES_REPLICA_DSN"]);
        let config = serde_json::json!({"dsn": common::dsn(), "replica_dsn": replica});
        let settings = PostgresConfig::from_backend_config(
            config.as_object().expect("an object"),
            &BackendContext::new("/x"),
        )
        .and_then(|c| c.with_schema(schema))
        .expect("valid settings");
        let backend = PostgresBackend::new(settings).expect("a backend");
        backend.warm().await.expect("the primary answers");
        backend.diagnose().await;
        Arc::new(backend)
    }

    impl Subject for PostgresWithReplica {
        fn fresh(&self) -> BoxFuture<'_, Storage> {
            Box::pin(async {
                let schema = common::unique_schema("confr");
                Storage {
                    backend: with_replica(&schema).await,
                    reopen: Arc::new(move || {
                        let schema = schema.clone();
                        Box::pin(async move { with_replica(&schema).await })
                            as BoxFuture<'static, _>
                    }),
                }
            })
        }

        fn hybrid(&self, embedder: Arc<dyn Embedder>) -> BoxFuture<'_, HybridHandle> {
            Postgres.hybrid(embedder)
        }
    }

    memgate_conformance::conformance_tests!(
        PostgresWithReplica,
        #[ignore = "real servers: PostgreSQL and its hot standby (testkit/postgres-up, testkit/postgres-up --replica; hybrid: testkit/postgres-up --pgvector)"]
    );
}
