//! `memgate serve`: start-up check, bind policy, and a shutdown bounded by
//! `memory.shutdown_flush_timeout_seconds` end to end: HTTP requests still
//! running (or clients still sending) when the budget runs out are cut off,
//! then the backend drains within what is left, and the last line says
//! exactly what was not drained.

use super::error::{CliError, Result};
use memgate_assembly::config::Config;
use memgate_assembly::factory::{open_backend, BackendSetup};
use memgate_assembly::AssembledBackend;
use memgate_core::{Caller, MemoryBackend, MemoryError, WarmStatus};
use memgate_server::auth::{check_bind, BearerToken};
use memgate_server::mcp::{McpEndpoint, MemoryMcp};
use memgate_server::{router, ServerState};
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub async fn run(config_path: Option<&Path>, addr: Option<&str>, cli: &Caller) -> Result<ExitCode> {
    let (config, source) = Config::discover(config_path, None)?;
    let addr_text = addr.unwrap_or(&config.server.addr);
    let addr: SocketAddr = addr_text.parse().map_err(|_| {
        MemoryError::invalid(
            "--addr",
            format!("must be HOST:PORT with an IP address (got {addr_text:?})"),
        )
    })?;
    let token = BearerToken::from_setting(std::env::var(&config.server.bearer_token_env).ok());
    check_bind(addr, token.as_ref()).map_err(|rule| MemoryError::invalid("--addr", rule))?;

    let backend = open_backend(
        &config.memory,
        &BackendSetup::from_process()?.running_distiller(),
    )?;
    warm(&backend).await?;

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::io(format!("cannot listen on {addr}"), e))?;
    let stop = CancellationToken::new();
    let mcp = config.mcp.enabled.then(|| McpEndpoint {
        server: MemoryMcp::new(
            Arc::clone(&backend),
            super::commands::mcp_principal(&config, cli),
        )
        .with_forget_tool(config.mcp.forget_tool)
        .with_handoff_tools(config.mcp.handoff_tools),
        any_host: !addr.ip().is_loopback(),
        shutdown: stop.clone(),
    });
    let state = ServerState {
        token,
        max_body_bytes: config.server.max_body_bytes,
        mcp,
        ui: config.server.ui,
        public_https: config.server.public_https(),
        ..ServerState::new(Arc::clone(&backend))
    };
    let requests = Arc::clone(&state.requests);
    let open_requests = Arc::clone(&state.open);
    let cut_requests = state.cut_off.clone();
    tracing::info!(%addr, backend = backend.name(), config = %source, "memgate serving");
    eprintln!(
        "memgate: serving the {} backend on http://{} (config: {source})",
        backend.name(),
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.to_string())
    );
    let releasing = super::heap::release_after_bursts(Arc::clone(&requests), backend.clone());
    let graceful = stop.clone();
    let mut serving = tokio::spawn(
        axum::serve(listener, router(state))
            .with_graceful_shutdown(async move { graceful.cancelled().await })
            .into_future(),
    );
    tokio::select! {
        ended = &mut serving => {
            return match ended {
                Ok(Ok(())) => Ok(ExitCode::SUCCESS),
                Ok(Err(e)) => Err(CliError::io("the HTTP server failed", e)),
                Err(e) => Err(CliError::Internal(format!("server task failed: {e}"))),
            };
        }
        () = shutdown_signal() => {}
    }

    releasing.abort();
    // One budget for everything: HTTP first, then the backend's own work.
    let budget = Duration::from_secs_f64(config.memory.shutdown_flush_timeout_seconds);
    let deadline = Instant::now() + budget;
    stop.cancel();
    let (cut_off, cut_routes) = match tokio::time::timeout(budget, &mut serving).await {
        Ok(_) => (0, String::new()),
        Err(_) => {
            let running = requests.running();
            let routes = open_requests.describe();
            // Requests still running answer 503 where their connection
            // allows an answer; the server gets a moment to write them.
            cut_requests.cancel();
            if tokio::time::timeout(ANSWER_GRACE, &mut serving)
                .await
                .is_err()
            {
                serving.abort();
            }
            (running, routes)
        }
    };
    let report = backend
        .drain(deadline.saturating_duration_since(Instant::now()))
        .await;
    if cut_off == 0 && report.drained() {
        eprintln!("memgate: stopped (all work drained)");
    } else {
        let http = match cut_off {
            0 => String::new(),
            1 => format!("1 HTTP request still open at the deadline was cut off ({cut_routes}); "),
            n => format!(
                "{n} HTTP requests still open at the deadline were cut off ({cut_routes}); "
            ),
        };
        // The backend is blamed only for work of its own still running.
        let backend_part = if report.drained() {
            "the backend had nothing left running and was released".to_owned()
        } else {
            report.describe()
        };
        eprintln!(
            "memgate: stopped within the {:.0} s shutdown budget, NOT fully drained: {http}{backend_part}",
            budget.as_secs_f64(),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How long requests cut off at the shutdown deadline have to send their
/// 503 before the server is stopped.
const ANSWER_GRACE: Duration = Duration::from_millis(200);

/// The start-up check under the backend's start-up policy.
async fn warm(backend: &AssembledBackend) -> Result<()> {
    match backend.warm().await {
        Ok(WarmStatus::Degraded { reason }) => {
            tracing::warn!(backend = backend.name(), %reason, "starting degraded (startup_policy warn)");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(MemoryError::backend(format!(
            "refusing to start: backend {} failed its start-up check (startup_policy fail_fast): {e}",
            backend.name()
        ))
        .into()),
    }
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
