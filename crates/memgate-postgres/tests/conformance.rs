//! The shared backend conformance suite (`memgate-conformance`) on
//! `postgres`: each behaviour gets a schema of its own; another handle is a
//! second backend with its own pool on the same schema (another replica).

mod common;

use memgate_conformance::{BoxFuture, HybridHandle, Storage, Subject, VectorIndex, VectorProgress};
use memgate_core::MemoryBackend;
use memgate_embed::Embedder;
use memgate_postgres::PostgresBackend;
use std::sync::Arc;

/// The testkit clusters: Debian's PostgreSQL, and the pgvector one for the
/// hybrid behaviours (each DSN read when a behaviour needs it).
struct Postgres;

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
            )
        })
    }
}

/// A backend with hybrid recall on `schema` (another replica per call).
fn hybrid_on(dsn: String, schema: String, embedder: Arc<dyn Embedder>) -> HybridHandle {
    let backend = Arc::new(common::backend(&dsn, &schema).with_embedder(embedder));
    HybridHandle {
        backend: backend.clone(),
        vectors: Arc::new(PgVectors(backend)),
        reopen: Arc::new(move |embedder| {
            let (dsn, schema) = (dsn.clone(), schema.clone());
            Box::pin(async move { hybrid_on(dsn, schema, embedder) }) as BoxFuture<'static, _>
        }),
    }
}

struct PgVectors(Arc<PostgresBackend>);

impl VectorIndex for PgVectors {
    fn index_all(&self) -> BoxFuture<'_, memgate_core::Result<usize>> {
        Box::pin(self.0.index_all_vectors(32))
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
