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
//! `memgate_bm25(recall_index, dfs [, pool [, removals]])`: `dfs` is a blob of
//! little-endian `i64`, one per phrase of the MATCH expression in order; a
//! phrase given 0 adds nothing (the expression may repeat phrases to reach
//! a document). The result is FTS5's formula exactly (`k1` 1.2, `b` 0.75,
//! column weights of [`COLUMN_WEIGHTS`], the table's row count and average
//! length), negated like `bm25()`: lower is better.
//!
//! With `pool` (the query's LIMIT, ordered by this score), the function
//! keeps the best `pool` scores so far; a row whose score at the shortest
//! possible length is below all of them cannot enter the pool, and gets
//! that bound without its length being read (a `%_docsize` lookup per
//! row, the largest part of scoring one). Rows in the pool always carry
//! their exact score.
//!
//! With `removals` (the snapshot's `index_removals.n`, read in the same
//! statement), a turn's length is taken from the lengths its database
//! remembers under that count ([`crate::lengths`]) and added to them when
//! read.

use crate::lengths::{DocLengths, Known};
use memgate_recall::maxscore::{idf, B, K1};
use rusqlite::{ffi, Connection};
use std::cell::Cell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

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

/// Registers `memgate_bm25` on `conn` (every connection of the store),
/// with the lengths its database's connections share.
pub fn register(conn: &Connection, lengths: Arc<DocLengths>) -> rusqlite::Result<()> {
    let api = fts5_api(conn)?;
    let user_data = Arc::into_raw(lengths).cast_mut().cast::<c_void>();
    // SAFETY: `api` is the connection's live fts5_api (checked non-null by
    // `fts5_api`); the name is a NUL-terminated literal, FTS5 copies it; the
    // user data is one strong count of the `Arc`, released by
    // `drop_lengths` when the connection closes.
    let rc = unsafe {
        match (*api).xCreateFunction {
            Some(create) => create(
                api,
                c"memgate_bm25".as_ptr(),
                user_data,
                Some(bm25),
                Some(drop_lengths),
            ),
            None => ffi::SQLITE_ERROR,
        }
    };
    if rc != ffi::SQLITE_OK {
        // FTS5 keeps neither the data nor its destructor when it fails.
        // SAFETY: the count leaked above, not handed over.
        unsafe { drop_lengths(user_data) };
    }
    check(rc, "cannot register memgate_bm25")
}

unsafe extern "C" fn drop_lengths(lengths: *mut c_void) {
    // SAFETY: the pointer `register` made with `Arc::into_raw`, released
    // once (by FTS5 at close, or by `register` when FTS5 refused it).
    drop(unsafe { Arc::from_raw(lengths.cast_const().cast::<DocLengths>()) });
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

thread_local! {
    /// Length lookups skipped on this thread (see [`skipped_lengths`]).
    static SKIPPED: Cell<u64> = const { Cell::new(0) };
    /// Lengths taken from the remembered ones (see [`remembered_lengths`]).
    static REMEMBERED: Cell<u64> = const { Cell::new(0) };
}

/// How many rows this thread's `memgate_bm25` calls have answered with a
/// bound, without reading their length: the rows that could not enter the
/// pool. A running total; the ranking's profile reads differences.
pub fn skipped_lengths() -> u64 {
    SKIPPED.get()
}

/// How many lengths this thread's `memgate_bm25` calls have taken from
/// the ones their database remembers instead of reading them. A running
/// total, like [`skipped_lengths`].
pub fn remembered_lengths() -> u64 {
    REMEMBERED.get()
}

/// A score ordered by `total_cmp`, for the pool's heap.
#[derive(Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What every call of one query shares (FTS5 auxiliary data, freed with
/// the query): what does not change from row to row, and the best scores
/// so far.
struct Query {
    /// Each phrase's idf; `None` for a phrase given 0.
    idfs: Vec<Option<f64>>,
    avgdl: f64,
    /// The pool the query keeps (its LIMIT); 0 when not given.
    pool: usize,
    /// The best `pool` scores so far, lowest on top.
    best: BinaryHeap<Reverse<Score>>,
    /// The last row scored and its score: a row asked twice counts once.
    last: Option<(i64, f64)>,
    /// Turns' lengths remembered under this query's removal count.
    lengths: Option<Arc<Known>>,
}

impl Query {
    /// The lowest score of a full pool: a row scoring below it cannot
    /// enter the query's best `pool`, whatever comes after.
    fn entry_score(&self) -> Option<f64> {
        (self.pool > 0 && self.best.len() >= self.pool)
            .then(|| self.best.peek().map_or(f64::NEG_INFINITY, |s| s.0 .0))
    }

    fn keep(&mut self, score: f64) {
        if self.pool == 0 {
            return;
        }
        self.best.push(Reverse(Score(score)));
        if self.best.len() > self.pool {
            self.best.pop();
        }
    }

    /// BM25 of a row with these weighted frequencies and length norm.
    fn bm25(&self, freq: &[f64], norm: f64) -> f64 {
        let mut score = 0.0;
        for (f, idf) in freq.iter().zip(&self.idfs) {
            if let (Some(idf), true) = (idf, *f > 0.0) {
                score += idf * f * (K1 + 1.0) / (f + norm);
            }
        }
        score
    }
}

unsafe extern "C" fn drop_query(query: *mut c_void) {
    // SAFETY: FTS5 hands back the pointer `query_state` leaked, once.
    drop(unsafe { Box::from_raw(query.cast::<Query>()) });
}

fn call(rc: c_int) -> Result<(), c_int> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// The query's shared state: made on the first row from the arguments
/// (`dfs`, and `pool` and `removals` when given) and the table's totals.
///
/// # Safety
/// `api`, `fts` and `values` as FTS5 passes them to an auxiliary function.
unsafe fn query_state<'q>(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    n_val: c_int,
    values: *mut *mut ffi::sqlite3_value,
) -> Result<&'q mut Query, c_int> {
    let (Some(get_aux), Some(set_aux)) = (api.xGetAuxdata, api.xSetAuxdata) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: FTS5's own function on the live context it passed.
    let known = unsafe { get_aux(fts, 0) };
    if !known.is_null() {
        // SAFETY: the only auxiliary data of this function is a `Query`,
        // alive until the query ends; calls of one query do not overlap.
        return Ok(unsafe { &mut *known.cast::<Query>() });
    }
    let (Some(phrase_count), Some(row_count), Some(total_size), Some(user_data)) = (
        api.xPhraseCount,
        api.xRowCount,
        api.xColumnTotalSize,
        api.xUserData,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // FTS5 passes the arguments after the table's.
    if !(1..=3).contains(&n_val) {
        return Err(ffi::SQLITE_MISUSE);
    }
    // SAFETY: at least one argument, checked above; the blob stays valid
    // until the value is next converted, and is only read here.
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
    let pool = if n_val >= 2 {
        // SAFETY: the second argument exists (n_val is at least 2).
        unsafe { ffi::sqlite3_value_int64(*values.add(1)) }.max(0) as usize
    } else {
        0
    };
    let lengths = if n_val == 3 {
        // SAFETY: the third argument exists; the user data is the
        // `DocLengths` `register` gave, alive while the connection is.
        unsafe {
            let removals = ffi::sqlite3_value_int64(*values.add(2));
            let shared = user_data(fts).cast_const().cast::<DocLengths>();
            shared.as_ref().and_then(|l| l.at(removals))
        }
    } else {
        None
    };
    // SAFETY: FTS5's own functions on the live context it passed, with
    // out-pointers to locals.
    let phrases = unsafe { phrase_count(fts) }.max(0) as usize;
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
    let idfs = dfs
        .chunks_exact(8)
        .map(|df| {
            let df = i64::from_le_bytes(df.try_into().expect("8 bytes"));
            (df > 0).then(|| idf(rows, df))
        })
        .collect();
    let query = Box::into_raw(Box::new(Query {
        idfs,
        avgdl: tokens as f64 / rows as f64,
        pool,
        best: BinaryHeap::with_capacity(pool + 1),
        last: None,
        lengths,
    }));
    // SAFETY: as above; FTS5 owns the box from here and frees it with
    // `drop_query` (also when this call fails).
    call(unsafe { set_aux(fts, query.cast::<c_void>(), Some(drop_query)) })?;
    // SAFETY: just stored, alive until the query ends.
    Ok(unsafe { &mut *query })
}

/// FTS5's BM25 of the current row with the given frequencies; a row that
/// cannot enter the pool even at the shortest length gets that bound
/// instead, without its length being read.
///
/// # Safety
/// `api`, `fts` and `values` as FTS5 passes them to an auxiliary function.
unsafe fn score(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    n_val: c_int,
    values: *mut *mut ffi::sqlite3_value,
) -> Result<f64, c_int> {
    let (Some(rowid), Some(phrase_first), Some(phrase_next), Some(column_size)) = (
        api.xRowid,
        api.xPhraseFirst,
        api.xPhraseNext,
        api.xColumnSize,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: as this function's contract.
    let query = unsafe { query_state(api, fts, n_val, values) }?;
    // SAFETY: FTS5's own functions on the live context it passed, with
    // out-pointers to locals.
    let row = unsafe { rowid(fts) };
    if let Some((last, score)) = query.last {
        if last == row {
            return Ok(score);
        }
    }
    // Each scored phrase's instances, read phrase by phrase: a phrase given
    // 0 (a walked term repeated to reach the document) is not read at all,
    // and FTS5 does not merge every phrase's instances into one list.
    let mut freq = vec![0.0f64; query.idfs.len()];
    for (phrase, f) in freq.iter_mut().enumerate() {
        if query.idfs[phrase].is_none() {
            continue;
        }
        let mut iter = ffi::Fts5PhraseIter {
            a: ptr::null(),
            b: ptr::null(),
        };
        let (mut column, mut offset): (c_int, c_int) = (0, 0);
        // SAFETY: as above; `phrase` is below the phrase count (`idfs` has
        // one entry per phrase), and `iter` is read only by FTS5 while
        // this row is current.
        call(unsafe { phrase_first(fts, phrase as c_int, &mut iter, &mut column, &mut offset) })?;
        while column >= 0 {
            *f += COLUMN_WEIGHTS.get(column as usize).copied().unwrap_or(0.0);
            // SAFETY: as above.
            unsafe { phrase_next(fts, &mut iter, &mut column, &mut offset) };
        }
    }
    // Length 0 gives each part its largest value (the norm only grows
    // with the length).
    if let Some(entry) = query.entry_score() {
        let bound = query.bm25(&freq, K1 * (1.0 - B));
        if bound < entry {
            SKIPPED.set(SKIPPED.get() + 1);
            query.last = Some((row, bound));
            return Ok(bound);
        }
    }
    let len = match query.lengths.as_ref().and_then(|known| known.get(row)) {
        Some(len) => {
            REMEMBERED.set(REMEMBERED.get() + 1);
            len
        }
        None => {
            let mut len: c_int = 0;
            // SAFETY: as above.
            call(unsafe { column_size(fts, -1, &mut len) })?;
            if let Some(known) = &query.lengths {
                known.put(row, len);
            }
            len
        }
    };
    let norm = K1 * (1.0 - B + B * f64::from(len) / query.avgdl);
    let score = query.bm25(&freq, norm);
    query.keep(score);
    query.last = Some((row, score));
    Ok(score)
}
