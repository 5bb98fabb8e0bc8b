//! `memgate migrate --from local --to postgres` (and back).

use super::output::print_json;
use crate::migrate::{migrate, Store, StoreKind};
use memgate_assembly::config::Config;
use memgate_assembly::factory::BackendSetup;
use memgate_core::{MemoryError, Result};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

pub async fn run(
    config_path: Option<&Path>,
    from: &str,
    to: &str,
    dsn_env: &str,
    json: bool,
) -> Result<ExitCode> {
    let (from_kind, to_kind) = (StoreKind::parse(from)?, StoreKind::parse(to)?);
    if from_kind == to_kind {
        return Err(MemoryError::invalid(
            "--to",
            "must name the other store than --from",
        ));
    }
    let (config, _) = Config::discover(config_path, None)?;
    let setup = BackendSetup::from_process()?;
    let source = Store::open(from_kind, &config.memory, &setup, dsn_env)?;
    let target = Store::open(to_kind, &config.memory, &setup, dsn_env)?;
    let result = migrate(&source, &target).await;
    let timeout = Duration::from_secs_f64(config.memory.shutdown_flush_timeout_seconds);
    source.backend().shutdown(timeout).await;
    target.backend().shutdown(timeout).await;
    let report = result?;
    if json {
        print_json(&report);
    } else {
        println!(
            "migrated {} scope(s) from {from} to {to}: memories {} new, {} already present; \
             turns {} new, {} already present; every entry checked in the target",
            report.scopes,
            report.facts_imported,
            report.facts_already_present,
            report.turns_imported,
            report.turns_already_present
        );
    }
    Ok(ExitCode::SUCCESS)
}
