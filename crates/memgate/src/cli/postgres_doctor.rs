//! What `memgate doctor` adds for `manager_class: postgres`: the server's
//! version, the memgate schema's version against the one this build
//! writes, and the connection pool's state. Nothing here can print the DSN
//! or its password: the lines are built from [`DoctorInfo`] fields only,
//! and errors come redacted from the backend.

use crate::migrate::{Store, StoreKind};
use memgate_assembly::config::MemoryConfig;
use memgate_assembly::factory::BackendSetup;
use memgate_core::MemoryBackend;
use memgate_postgres::DoctorInfo;
use std::time::Duration;

/// The doctor lines of one [`DoctorInfo`].
pub fn lines(info: &DoctorInfo) -> Vec<String> {
    let schema_state = if info.schema_version == info.schema_version_supported {
        "current".to_owned()
    } else {
        format!("this memgate writes {}", info.schema_version_supported)
    };
    let pool = &info.pool;
    vec![
        format!(
            "postgres ok   server {} (ping {:.2} ms)",
            info.server_version, info.ping_ms
        ),
        format!(
            "postgres ok   schema {} at version {} ({schema_state})",
            info.schema, info.schema_version
        ),
        format!(
            "postgres ok   pool {} of {} open, {} idle, {} waiting",
            pool.size, pool.max_size, pool.available, pool.waiting
        ),
    ]
}

/// Prints the postgres lines; false when the database cannot say.
pub async fn report(memory: &MemoryConfig, setup: &BackendSetup) -> bool {
    let store = match Store::open(StoreKind::Postgres, memory, setup, "MEMGATE_POSTGRES_DSN") {
        Ok(store) => store,
        Err(e) => {
            println!("postgres FAIL {e}");
            return false;
        }
    };
    let Store::Postgres(backend) = &store else {
        unreachable!("a postgres store was opened");
    };
    let healthy = match backend.doctor().await {
        Ok(info) => {
            for line in lines(&info) {
                println!("{line}");
            }
            true
        }
        Err(e) => {
            println!("postgres FAIL {e}");
            false
        }
    };
    backend.shutdown(Duration::from_secs(2)).await;
    healthy
}
