//! The HTTP API served on a loopback port for one test, and a JSON `POST`
//! against it; shared by the API test files.

use memgate_core::MemoryBackend;
use memgate_server::{router, ServerState};
use std::sync::Arc;

pub async fn spawn(backend: Arc<dyn MemoryBackend>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router(ServerState::new(
                memgate_assembly::AssembledBackend::with_defaults(backend),
            )),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

pub use memgate_testsupport::http::post_json as post;
