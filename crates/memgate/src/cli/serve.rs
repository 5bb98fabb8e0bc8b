//! `memgate serve`: start-up check, bind policy, graceful shutdown.

use memgate::config::Config;
use memgate::factory::{open_backend, BackendSetup};
use memgate_core::{Caller, MemoryError, Result, WarmStatus};
use memgate_server::auth::{check_bind, BearerToken};
use memgate_server::mcp::{McpEndpoint, MemoryMcp};
use memgate_server::{router, ServerState, Switches};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
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
    let token = BearerToken::new(std::env::var(&config.server.bearer_token_env).ok());
    check_bind(addr, token.as_ref()).map_err(|rule| MemoryError::invalid("--addr", rule))?;

    let backend = open_backend(&config.memory, &BackendSetup::from_process()?)?;
    match backend.warm().await {
        Ok(WarmStatus::Degraded { reason }) => {
            tracing::warn!(backend = backend.name(), %reason, "starting degraded (startup_policy warn)")
        }
        Ok(_) => {}
        Err(e) => {
            return Err(MemoryError::backend(format!(
                "refusing to start: backend {} failed its start-up check (startup_policy fail_fast): {e}",
                backend.name()
            )))
        }
    }

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| MemoryError::backend(format!("cannot listen on {addr}: {e}")))?;
    let shutdown = CancellationToken::new();
    let mcp = config.mcp.enabled.then(|| McpEndpoint {
        server: MemoryMcp::new(
            Arc::clone(&backend),
            super::commands::mcp_principal(&config, cli),
        ),
        any_host: !addr.ip().is_loopback(),
        shutdown: shutdown.clone(),
    });
    let state = ServerState {
        backend: Arc::clone(&backend),
        switches: Switches {
            enabled: config.memory.enabled,
            injection_enabled: config.memory.injection_enabled,
        },
        metrics: Default::default(),
        token,
        max_body_bytes: config.server.max_body_bytes,
        mcp,
    };
    tracing::info!(%addr, backend = backend.name(), config = %source, "memgate serving");
    eprintln!(
        "memgate: serving the {} backend on http://{} (config: {source})",
        backend.name(),
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.to_string())
    );
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            shutdown.cancel();
        })
        .await
        .map_err(|e| MemoryError::backend(format!("server error: {e}")))?;
    let budget = Duration::from_secs_f64(config.memory.shutdown_flush_timeout_seconds);
    let drained = backend.shutdown(budget).await;
    eprintln!(
        "memgate: stopped ({})",
        if drained {
            "all work drained"
        } else {
            "shutdown budget ran out"
        }
    );
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
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
