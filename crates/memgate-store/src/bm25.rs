//! `memgate_bm25`: FTS5's own BM25, with the document frequencies given by
//! the caller instead of counted by walking each term's postings.
//!
//! FTS5's `bm25()` counts every query phrase's documents on each call
//! (a second pass over every posting list), so a query with a common term
//! costs that term's whole list even when only a few documents are scored.
//! MaxScore ([`memgate_recall::maxscore`]) scores the documents of the rare
//! terms only, with the common terms' parts looked up at those documents;
//! it needs their frequencies known in advance, and the ranking counts
//! them once per write generation of the scope.
//!
//! `memgate_bm25(recall_index, dfs)`: `dfs` is a blob of little-endian
//! `i64`, one per phrase of the MATCH expression in order; a phrase given
//! 0 adds nothing (the expression may repeat phrases to reach a document).
//! The result is FTS5's formula exactly (`k1` 1.2, `b` 0.75, column weights
//! of [`COLUMN_WEIGHTS`], the table's row count and average length), negated
//! like `bm25()`: lower is better.

use memgate_recall::maxscore::{idf, B, K1};
use rusqlite::{ffi, Connection};
use std::ffi::{c_int, c_void};
use std::ptr;

/// The function's name in SQL.
pub const FUNCTION: &str = "memgate_bm25";
/// Weights of the recall index's columns (body, context), as in
/// [`crate::ranking::RANK_FUNCTION`].
pub const COLUMN_WEIGHTS: [f64; 2] = [1.0, 0.5];

/// The document frequencies of a MATCH expression's phrases, as the blob
/// `memgate_bm25` takes.
pub fn frequencies_blob(dfs: &[i64]) -> Vec<u8> {
    dfs.iter().flat_map(|d| d.to_le_bytes()).collect()
}

/// Registers `memgate_bm25` on `conn` (every connection of the store).
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let api = fts5_api(conn)?;
    // SAFETY: `api` is the connection's live fts5_api (checked non-null by
    // `fts5_api`); the name is a NUL-terminated literal, FTS5 copies it; no
    // user data, so nothing to destroy.
    let rc = unsafe {
        match (*api).xCreateFunction {
            Some(create) => create(
                api,
                c"memgate_bm25".as_ptr(),
                ptr::null_mut(),
                Some(bm25),
                None,
            ),
            None => ffi::SQLITE_ERROR,
        }
    };
    check(rc, "cannot register memgate_bm25")
}

fn check(rc: c_int, what: &str) -> rusqlite::Result<()> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(rc),
            Some(what.to_owned()),
        ))
    }
}

/// The connection's FTS5 API, as FTS5 hands it out: `SELECT fts5(?1)` with
/// a pointer bound under the type name `fts5_api_ptr`.
fn fts5_api(conn: &Connection) -> rusqlite::Result<*mut ffi::fts5_api> {
    let mut api: *mut ffi::fts5_api = ptr::null_mut();
    // SAFETY: the handle is the open connection's, used on this thread
    // only; the statement is finalised before return; the bound pointer
    // (to `api`, alive for the whole block) is written by `fts5()` during
    // the step only.
    let rc = unsafe {
        let db = conn.handle();
        let mut stmt: *mut ffi::sqlite3_stmt = ptr::null_mut();
        let mut rc = ffi::sqlite3_prepare_v2(
            db,
            c"SELECT fts5(?1)".as_ptr(),
            -1,
            &mut stmt,
            ptr::null_mut(),
        );
        if rc == ffi::SQLITE_OK {
            rc = ffi::sqlite3_bind_pointer(
                stmt,
                1,
                (&mut api as *mut *mut ffi::fts5_api).cast::<c_void>(),
                c"fts5_api_ptr".as_ptr(),
                None,
            );
            if rc == ffi::SQLITE_OK {
                rc = ffi::sqlite3_step(stmt);
                if rc == ffi::SQLITE_ROW || rc == ffi::SQLITE_DONE {
                    rc = ffi::SQLITE_OK;
                }
            }
        }
        ffi::sqlite3_finalize(stmt);
        rc
    };
    check(rc, "cannot reach the FTS5 API")?;
    if api.is_null() {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_ERROR),
            Some("this SQLite has no FTS5".to_owned()),
        ));
    }
    Ok(api)
}

/// The function body (see the module doc).
unsafe extern "C" fn bm25(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n_val: c_int,
    values: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 calls this with its live API, cursor context and result
    // context, and `n_val` argument values.
    let scored = unsafe { score(&*api, fts, n_val, values) };
    match scored {
        // SAFETY: `ctx` is the live result context of this call.
        Ok(score) => unsafe { ffi::sqlite3_result_double(ctx, -score) },
        // SAFETY: as above.
        Err(rc) => unsafe { ffi::sqlite3_result_error_code(ctx, rc) },
    }
}

/// FTS5's BM25 of the current row with the given frequencies.
///
/// # Safety
/// `api`, `fts` and `values` as FTS5 passes them to an auxiliary function.
unsafe fn score(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    n_val: c_int,
    values: *mut *mut ffi::sqlite3_value,
) -> Result<f64, c_int> {
    let call = |rc: c_int| {
        if rc == ffi::SQLITE_OK {
            Ok(())
        } else {
            Err(rc)
        }
    };
    let (Some(phrase_count), Some(row_count), Some(total_size)) =
        (api.xPhraseCount, api.xRowCount, api.xColumnTotalSize)
    else {
        return Err(ffi::SQLITE_MISUSE);
    };
    let (Some(inst_count), Some(inst), Some(column_size)) =
        (api.xInstCount, api.xInst, api.xColumnSize)
    else {
        return Err(ffi::SQLITE_MISUSE);
    };
    if n_val != 1 {
        return Err(ffi::SQLITE_MISUSE);
    }
    // SAFETY: one argument, checked above; the blob stays valid until the
    // value is next converted, and is only read here.
    let dfs: &[u8] = unsafe {
        let value = *values;
        let data = ffi::sqlite3_value_blob(value).cast::<u8>();
        let len = ffi::sqlite3_value_bytes(value).max(0) as usize;
        if data.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(data, len)
        }
    };
    // SAFETY: FTS5's own function on the live context it passed (so are the
    // calls below, with out-pointers to locals).
    let phrases = unsafe { phrase_count(fts) };
    let phrases = phrases.max(0) as usize;
    if dfs.len() != phrases * 8 {
        return Err(ffi::SQLITE_MISMATCH);
    }
    let mut rows: i64 = 0;
    // SAFETY: as above.
    call(unsafe { row_count(fts, &mut rows) })?;
    let rows = rows.max(1);
    let mut tokens: i64 = 0;
    // SAFETY: as above.
    call(unsafe { total_size(fts, -1, &mut tokens) })?;
    let avgdl = tokens as f64 / rows as f64;
    let mut freq = vec![0.0f64; phrases];
    let mut n: c_int = 0;
    // SAFETY: as above.
    call(unsafe { inst_count(fts, &mut n) })?;
    for i in 0..n {
        let (mut phrase, mut column, mut offset) = (0, 0, 0);
        // SAFETY: as above; `i` is below the instance count.
        call(unsafe { inst(fts, i, &mut phrase, &mut column, &mut offset) })?;
        if let (Some(f), Some(w)) = (
            freq.get_mut(phrase as usize),
            COLUMN_WEIGHTS.get(column as usize),
        ) {
            *f += w;
        }
    }
    let mut len: c_int = 0;
    // SAFETY: as above.
    call(unsafe { column_size(fts, -1, &mut len) })?;
    let norm = K1 * (1.0 - B + B * f64::from(len) / avgdl);
    let mut score = 0.0;
    for (f, df) in freq.iter().zip(dfs.chunks_exact(8)) {
        let df = i64::from_le_bytes(df.try_into().expect("8 bytes"));
        if df > 0 && *f > 0.0 {
            score += idf(rows, df) * f * (K1 + 1.0) / (f + norm);
        }
    }
    Ok(score)
}
