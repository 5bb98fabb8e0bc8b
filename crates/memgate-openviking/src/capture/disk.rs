//! The cursor file as one capture reads and saves it: read on the
//! capture's own thread, saved on the caller's thread when it waits anyway,
//! else on the blocking pool; a cursor that cannot be trusted is
//! corruption, whatever the write policy.

use crate::cursor::{load_cursor, save_cursor_with, CursorError, SaveMode, TranscriptCursor};
use memgate_core::{intake, MemoryError, Result};
use std::path::{Path, PathBuf};

fn corruption(err: CursorError, session_id: &str) -> MemoryError {
    MemoryError::Corruption(match err {
        CursorError::Io(_) | CursorError::Unreadable(_) => format!(
            "OpenViking capture cursor is unreadable; refusing unsafe replay (session={session_id})"
        ),
        CursorError::Invalid(why) => format!(
            "OpenViking capture cursor is invalid ({why}); refusing unsafe replay (session={session_id})"
        ),
    })
}

/// Reads the cursor on the capture's own thread: a cursor is one small file
/// (tens of KiB, in the page cache after the first capture), cheaper to read
/// than the two thread hand-offs of a blocking task. Saves, which fsync, do
/// go to the blocking pool.
pub(super) fn load(path: &Path, session_id: &str) -> Result<TranscriptCursor> {
    load_cursor(path).map_err(|e| {
        tracing::error!(error = %e, session = session_id, "OpenViking capture cursor cannot be trusted");
        corruption(e, session_id)
    })
}

/// Saves the cursor. A failed save is never softened by the write policy.
pub(super) async fn save(
    path: PathBuf,
    cursor: TranscriptCursor,
    mode: SaveMode,
    session_id: &str,
) -> Result<()> {
    on_disk(session_id, move || save_cursor_with(&path, &cursor, mode)).await
}

/// Runs a cursor write on the caller's own thread when it polls the
/// capture, else on the blocking pool; a failure names the session.
pub(super) async fn on_disk<T: Send + 'static>(
    session_id: &str,
    write: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let written = if intake::polled_by_its_caller() {
        write()
    } else {
        tokio::task::spawn_blocking(write).await.map_err(|e| {
            MemoryError::Backend(format!("OpenViking cursor write task failed: {e}"))
        })?
    };
    written.map_err(|e| {
        MemoryError::Backend(format!(
            "OpenViking capture cursor could not be saved (session={session_id}): {e}"
        ))
    })
}
