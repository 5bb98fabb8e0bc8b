//! SQLite's failures in the contract's terms. Every module that touches the
//! file maps its errors here, so this module depends on nothing in the crate.

use memgate_core::MemoryError;

/// Maps SQLite failures to the contract's errors: a malformed file is
/// corruption (fail closed), anything else a backend failure. Messages carry
/// SQLite's text, which names no user data.
pub fn db_error(err: rusqlite::Error) -> MemoryError {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    match err.sqlite_error_code() {
        Some(DatabaseCorrupt | NotADatabase) => {
            MemoryError::Corruption(format!("local memory database is unreadable: {err}"))
        }
        _ => MemoryError::Backend(format!("local memory database: {err}")),
    }
}
