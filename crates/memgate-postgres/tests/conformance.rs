//! The shared backend conformance suite (`memgate-conformance`) on
//! `postgres`: each behaviour gets a schema of its own; another handle is a
//! second backend with its own pool on the same schema (another replica).

mod common;

use memgate_conformance::{BoxFuture, Storage, Subject};
use memgate_core::MemoryBackend;
use std::sync::Arc;

struct Postgres {
    dsn: String,
}

impl Subject for Postgres {
    fn fresh(&self) -> BoxFuture<'_, Storage> {
        Box::pin(async {
            let schema = common::unique_schema("conf");
            let dsn = self.dsn.clone();
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
}

memgate_conformance::conformance_tests!(
    Postgres { dsn: common::dsn() },
    #[ignore = "real server: PostgreSQL (testkit/postgres-up)"]
);
