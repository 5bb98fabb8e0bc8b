//! What a capture did, as Python sees it: still the `(stored,
//! already_known, filtered)` triple a host unpacks, plus `cut`, the
//! messages memory kept only the start of, so a host does not believe a
//! long message is recallable whole.

use memgate_core::{CaptureCut, CaptureReport};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A capture's report: unpacks and compares as `(stored, already_known,
/// filtered)`; `cut` lists each message stored only in part as a dict
/// (`index`, `message_id` when it has one, `text_bytes`, `kept_bytes`).
#[pyclass(frozen, sequence, module = "memgate._native")]
pub struct CaptureResult {
    #[pyo3(get)]
    stored: usize,
    #[pyo3(get)]
    already_known: usize,
    #[pyo3(get)]
    filtered: usize,
    cut: Vec<CaptureCut>,
}

impl CaptureResult {
    pub fn new(report: &CaptureReport) -> Self {
        Self {
            stored: report.stored,
            already_known: report.already_known,
            filtered: report.filtered,
            cut: report.cut.clone(),
        }
    }

    fn triple(&self) -> (usize, usize, usize) {
        (self.stored, self.already_known, self.filtered)
    }
}

#[pymethods]
impl CaptureResult {
    /// The messages stored only in part, in the order of the transcript.
    #[getter]
    fn cut<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for cut in &self.cut {
            let entry = PyDict::new(py);
            entry.set_item("index", cut.index)?;
            if let Some(id) = &cut.message_id {
                entry.set_item("message_id", id)?;
            }
            entry.set_item("text_bytes", cut.text_bytes)?;
            entry.set_item("kept_bytes", cut.kept_bytes)?;
            list.append(entry)?;
        }
        Ok(list)
    }

    fn __len__(&self) -> usize {
        3
    }

    fn __getitem__(&self, index: isize) -> PyResult<usize> {
        let (stored, known, filtered) = self.triple();
        match index {
            0 | -3 => Ok(stored),
            1 | -2 => Ok(known),
            2 | -1 => Ok(filtered),
            _ => Err(PyIndexError::new_err(
                "CaptureResult index out of range (it has 3 counts)",
            )),
        }
    }

    /// Equal to the same counts as a tuple or another result (the cut
    /// follows from the messages, so the counts say which capture it was).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(other) = other.cast::<CaptureResult>() {
            return other.get().triple() == self.triple() && other.get().cut == self.cut;
        }
        other
            .extract::<(usize, usize, usize)>()
            .is_ok_and(|t| t == self.triple())
    }

    fn __repr__(&self) -> String {
        format!(
            "CaptureResult(stored={}, already_known={}, filtered={}, cut={})",
            self.stored,
            self.already_known,
            self.filtered,
            self.cut.len()
        )
    }
}
