//! What a benchmark reads of its own process and of the figures it
//! collects: the thread's CPU clock, page faults and context switches, peak
//! resident memory, file sizes, percentiles and overlaps.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Nanoseconds this thread has spent on a CPU (`CLOCK_THREAD_CPUTIME_ID`;
/// finer than `/proc/thread-self/schedstat`, which moves in scheduler
/// ticks here). Shared with the encoder example.
#[cfg(unix)]
pub fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(not(unix))]
pub fn thread_cpu_ns() -> Option<u64> {
    None
}

/// Minor page faults and involuntary context switches of the process.
#[cfg(unix)]
pub fn rusage_counts() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value; getrusage writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0, 0);
    }
    (usage.ru_minflt as u64, usage.ru_nivcsw as u64)
}

#[cfg(not(unix))]
pub fn rusage_counts() -> (u64, u64) {
    (0, 0)
}

pub fn vm_hwm_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Resets the peak RSS counter (Linux: `echo 5 > /proc/self/clear_refs`).
pub fn reset_vm_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The `p` percentile of `sorted` durations, in milliseconds (0 when empty).
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1000.0
}

/// The size of a SQLite database and its WAL and shared-memory files, in MiB.
pub fn file_mb(path: &Path) -> f64 {
    let mut total = 0u64;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        total += std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len());
    }
    total as f64 / (1024.0 * 1024.0)
}

/// Share of `exact`'s items found among the first `exact.len()` of
/// `found` (overlap@k; 1 when `exact` is empty).
pub fn overlap(found: &[i64], exact: &[i64]) -> f64 {
    if exact.is_empty() {
        return 1.0;
    }
    let top: HashSet<i64> = found.iter().take(exact.len()).copied().collect();
    exact.iter().filter(|i| top.contains(i)).count() as f64 / exact.len() as f64
}

/// The machine's 1, 5 and 15 minute load averages as `/proc/loadavg`
/// prints them (empty where there is none): benchmarks print it beside
/// their figures, since a shared machine's load moves them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Drops a benchmark's PostgreSQL schema and everything in it.
pub async fn drop_schema(dsn: &str, schema: &str) {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect to drop the schema");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop the schema");
}
