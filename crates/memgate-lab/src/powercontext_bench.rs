//! Recall benchmark: latency memgate adds on top of the server, and how far
//! a recall overshoots its deadline against a slow-drip server.
//!
//! The added latency is measured in one run against the same server: each
//! round makes one recall through the backend and one bare HTTP round trip
//! of the identical prepare request (a plain reqwest call that reads the
//! whole body), alternating which goes first. Against a real server the
//! server's own jitter dominates both distributions, so the same comparison
//! also runs against an instant-answer server (an in-process fake in the
//! example binary), where what remains is memgate's own cost. The overshoot is measured
//! against a server that sends headers and then drips its body slower than
//! the deadline allows (the caller supplies it; the example binary uses an
//! in-process fake). Figures are printed, never asserted.

use memgate_core::{Caller, MemoryBackend, MemoryError, RecallRequest, Result};
use memgate_powercontext::recall::prepare_body;
use memgate_powercontext::{PowerContextBackend, ServerInfo, Settings};
use serde::Serialize;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure.
pub struct BenchConfig {
    /// A real PowerContext server (1.4.x for the published figures).
    pub real: Option<Arc<Settings>>,
    /// A server that answers prepare at once (isolates memgate's own cost).
    pub instant: Option<Arc<Settings>>,
    /// Measured rounds (each: one memgate recall, one bare round trip).
    pub calls: usize,
    /// Unmeasured rounds first, to fill connection pools.
    pub warmup: usize,
    /// The recall query; it should match stored memory so the path is
    /// exercised in full.
    pub query: String,
    /// Settings pointing at a slow-drip server.
    pub slow_drip: Option<Arc<Settings>>,
    /// Concurrent recalls against the slow-drip server.
    pub slow_drip_calls: usize,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    fn of(samples: &mut [f64]) -> Self {
        samples.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let idx = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[idx]
        };
        Self {
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: *samples.last().unwrap_or(&0.0),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct AddedLatency {
    pub server: ServerInfo,
    /// Where the figures come from ("real server" or "instant fake").
    pub target: String,
    pub calls: usize,
    /// Bytes of prepared content each recall returned (0 would mean the
    /// benchmark measured an empty path).
    pub content_bytes: usize,
    pub memgate: Percentiles,
    pub bare_http: Percentiles,
    /// memgate percentile minus bare percentile.
    pub added_p50_ms: f64,
    pub added_p99_ms: f64,
    /// Percentiles of the per-round difference (memgate minus bare).
    pub paired_difference: Percentiles,
}

#[derive(Clone, Debug, Serialize)]
pub struct Overshoot {
    pub deadline_ms: f64,
    pub calls: usize,
    /// Elapsed time past the deadline.
    pub overshoot: Percentiles,
    /// Every call returned an empty recall (fail open).
    pub all_empty: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub real_server: Option<AddedLatency>,
    pub instant_fake: Option<AddedLatency>,
    pub deadline_overshoot: Option<Overshoot>,
}

/// Runs the configured measurements.
pub async fn run_bench(config: &BenchConfig) -> Result<BenchReport> {
    let real_server = match &config.real {
        Some(settings) => Some(added_latency(settings.clone(), config, "real server").await?),
        None => None,
    };
    let instant_fake = match &config.instant {
        Some(settings) => Some(added_latency(settings.clone(), config, "instant fake").await?),
        None => None,
    };
    let deadline_overshoot = match &config.slow_drip {
        Some(settings) => Some(overshoot(settings.clone(), config.slow_drip_calls.max(1)).await?),
        None => None,
    };
    Ok(BenchReport {
        real_server,
        instant_fake,
        deadline_overshoot,
    })
}

fn owner_request(settings: &Settings, query: &str) -> RecallRequest {
    RecallRequest {
        caller: Caller::new(settings.owner_user_id()),
        query: Some(query.to_owned()),
    }
}

async fn added_latency(
    settings: Arc<Settings>,
    config: &BenchConfig,
    target: &str,
) -> Result<AddedLatency> {
    let backend = PowerContextBackend::from_settings(settings.clone())?;
    backend.warm().await?;
    let server = backend
        .server_info()
        .cloned()
        .ok_or_else(|| MemoryError::backend("server generation unknown after warm"))?;
    let request = owner_request(&settings, &config.query);
    let url = format!(
        "{}/v1/context/prepare",
        settings.base_url().as_str().trim_end_matches('/')
    );
    let body = prepare_body(&settings, server.generation, &config.query);
    let bare = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|_| MemoryError::backend("bare client could not be built"))?;
    let bare_call = || async {
        let response = bare
            .post(&url)
            .bearer_auth(settings.token().expose())
            .json(&body)
            .send()
            .await
            .map_err(|_| MemoryError::backend("bare round trip failed"))?;
        let ok = response.status().is_success();
        let bytes = response
            .bytes()
            .await
            .map_err(|_| MemoryError::backend("bare body read failed"))?;
        if !ok {
            return Err(MemoryError::backend("bare round trip got an error status"));
        }
        Ok(bytes.len())
    };

    let mut content_bytes = 0;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..config.warmup + config.calls {
        let measured = round >= config.warmup;
        let time_ours = async {
            let t = Instant::now();
            let recall = backend.recall(&request).await?;
            Ok::<_, MemoryError>((t.elapsed(), recall.text.len()))
        };
        let (ours_t, theirs_t) = if round % 2 == 0 {
            let (t, n) = time_ours.await?;
            content_bytes = n;
            let s = Instant::now();
            bare_call().await?;
            (t, s.elapsed())
        } else {
            let s = Instant::now();
            bare_call().await?;
            let b = s.elapsed();
            let (t, n) = time_ours.await?;
            content_bytes = n;
            (t, b)
        };
        if measured {
            ours.push(ms(ours_t));
            theirs.push(ms(theirs_t));
        }
    }
    let mut paired: Vec<f64> = ours.iter().zip(&theirs).map(|(a, b)| a - b).collect();
    let memgate = Percentiles::of(&mut ours);
    let bare_http = Percentiles::of(&mut theirs);
    Ok(AddedLatency {
        server,
        target: target.to_owned(),
        paired_difference: Percentiles::of(&mut paired),
        calls: config.calls,
        content_bytes,
        added_p50_ms: memgate.p50_ms - bare_http.p50_ms,
        added_p99_ms: memgate.p99_ms - bare_http.p99_ms,
        memgate,
        bare_http,
    })
}

async fn overshoot(settings: Arc<Settings>, calls: usize) -> Result<Overshoot> {
    let backend = Arc::new(PowerContextBackend::from_settings(settings.clone())?);
    backend.warm().await?;
    let deadline = settings.recall_timeout();
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let backend = backend.clone();
            let request = owner_request(&settings, &format!("slow drip probe {i}"));
            tokio::spawn(async move {
                let t = Instant::now();
                let recall = backend.recall(&request).await;
                (t.elapsed(), recall.map(|r| r.is_empty()).unwrap_or(false))
            })
        })
        .collect();
    let mut over = Vec::new();
    let mut all_empty = true;
    for task in tasks {
        let (elapsed, empty) = task
            .await
            .map_err(|_| MemoryError::backend("slow-drip recall task failed"))?;
        over.push(ms(elapsed.saturating_sub(deadline)));
        all_empty &= empty;
    }
    Ok(Overshoot {
        deadline_ms: ms(deadline),
        calls,
        overshoot: Percentiles::of(&mut over),
        all_empty,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (label, figures) in [
            ("real server", &self.real_server),
            ("instant fake", &self.instant_fake),
        ] {
            match figures {
                Some(a) => write_added(f, a)?,
                None => writeln!(f, "recall latency against the {label}: skipped")?,
            }
        }
        match &self.deadline_overshoot {
            Some(o) => writeln!(
                f,
                "deadline overshoot ({} ms deadline, slow-drip fake, {} concurrent calls): \
                 p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms; all empty: {}",
                o.deadline_ms,
                o.calls,
                o.overshoot.p50_ms,
                o.overshoot.p99_ms,
                o.overshoot.max_ms,
                o.all_empty
            ),
            None => writeln!(f, "deadline overshoot: skipped"),
        }
    }
}

fn write_added(f: &mut fmt::Formatter<'_>, a: &AddedLatency) -> fmt::Result {
    writeln!(
        f,
        "recall latency, {} speaking PowerContext {} ({}), {} calls, {} content bytes each",
        a.target,
        a.server.generation.label(),
        a.server
            .package_version
            .as_deref()
            .unwrap_or("version not reported"),
        a.calls,
        a.content_bytes
    )?;
    writeln!(
        f,
        "  memgate recall   p50 {:8.3} ms  p99 {:8.3} ms  max {:8.3} ms",
        a.memgate.p50_ms, a.memgate.p99_ms, a.memgate.max_ms
    )?;
    writeln!(
        f,
        "  bare HTTP        p50 {:8.3} ms  p99 {:8.3} ms  max {:8.3} ms",
        a.bare_http.p50_ms, a.bare_http.p99_ms, a.bare_http.max_ms
    )?;
    writeln!(
        f,
        "  added by memgate p50 {:8.3} ms  p99 {:8.3} ms  (difference of percentiles)",
        a.added_p50_ms, a.added_p99_ms
    )?;
    writeln!(
        f,
        "  per-round diff   p50 {:8.3} ms  p99 {:8.3} ms",
        a.paired_difference.p50_ms, a.paired_difference.p99_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&mut v);
        assert_eq!((p.p50_ms, p.p99_ms, p.max_ms), (50.0, 99.0, 100.0));
        let p = Percentiles::of(&mut [3.0]);
        assert_eq!((p.p50_ms, p.p99_ms), (3.0, 3.0));
    }
}
