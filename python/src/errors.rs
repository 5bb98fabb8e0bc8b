//! memgate errors as one Python exception, `NativeError(code, message)`.
//!
//! The Python layer maps the code to the host's error family
//! (`MemoryManagerError`, `MemoryConflictError`, `MemoryCorruptionError`,
//! `ValueError`, `NotImplementedError`); keeping that mapping in Python lets
//! the classes be DeerFlow's own when DeerFlow is importable.

use memgate_core::MemoryError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    _native,
    NativeError,
    PyException,
    "A memgate error: args are (code, message); memgate.deerflow maps it to the host's errors."
);

/// The Python error for a memgate error. Messages never carry secrets
/// (the backends guarantee it); they name the field or the rule.
pub fn to_py(err: MemoryError) -> PyErr {
    NativeError::new_err((err.code(), err.to_string()))
}
