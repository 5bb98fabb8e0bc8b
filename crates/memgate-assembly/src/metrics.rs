//! Prometheus metrics: request counts by operation and outcome, and latency
//! histograms by operation. Labels are fixed strings chosen by the code
//! (operation names, error codes), so no user text or secret can reach them.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket upper bounds, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    /// Cumulative counts per bucket, as Prometheus expects.
    buckets: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Registry {
    requests: BTreeMap<(&'static str, &'static str), u64>,
    latency: BTreeMap<&'static str, Histogram>,
}

/// The server's metrics registry.
#[derive(Default)]
pub struct Metrics {
    registry: Mutex<Registry>,
}

impl Metrics {
    /// Records one finished operation.
    pub fn observe(&self, operation: &'static str, outcome: &'static str, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut reg = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        *reg.requests.entry((operation, outcome)).or_default() += 1;
        let h = reg.latency.entry(operation).or_default();
        for (slot, bound) in h.buckets.iter_mut().zip(BUCKETS) {
            if secs <= bound {
                *slot += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let reg = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        out.push_str("# HELP memgate_requests_total Memory operations served, by outcome.\n");
        out.push_str("# TYPE memgate_requests_total counter\n");
        for ((op, outcome), n) in &reg.requests {
            let _ = writeln!(
                out,
                "memgate_requests_total{{operation=\"{op}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str("# HELP memgate_request_duration_seconds Latency of memory operations.\n");
        out.push_str("# TYPE memgate_request_duration_seconds histogram\n");
        for (op, h) in &reg.latency {
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    out,
                    "memgate_request_duration_seconds_bucket{{operation=\"{op}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "memgate_request_duration_seconds_bucket{{operation=\"{op}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "memgate_request_duration_seconds_sum{{operation=\"{op}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "memgate_request_duration_seconds_count{{operation=\"{op}\"}} {}",
                h.count
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.observe("recall", "ok", Duration::from_micros(300));
        m.observe("recall", "ok", Duration::from_millis(3));
        m.observe("recall", "backend_failure", Duration::from_secs(20));
        let text = m.render();
        assert!(text.contains("memgate_requests_total{operation=\"recall\",outcome=\"ok\"} 2"));
        assert!(text.contains(
            "memgate_requests_total{operation=\"recall\",outcome=\"backend_failure\"} 1"
        ));
        assert!(text.contains(
            "memgate_request_duration_seconds_bucket{operation=\"recall\",le=\"0.0005\"} 1"
        ));
        assert!(text.contains(
            "memgate_request_duration_seconds_bucket{operation=\"recall\",le=\"0.005\"} 2"
        ));
        assert!(text.contains(
            "memgate_request_duration_seconds_bucket{operation=\"recall\",le=\"+Inf\"} 3"
        ));
        assert!(text.contains("memgate_request_duration_seconds_count{operation=\"recall\"} 3"));
    }
}
