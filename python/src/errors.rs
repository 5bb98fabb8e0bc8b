//! memgate errors as one Python exception, `NativeError(code, message, rule)`.
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

/// The Python error for a memgate error: `(code, message, rule)`. Messages
/// never carry secrets (the backends guarantee it); they name the field and
/// the rule. `rule` is the rule alone for bad input (the message without
/// memgate's `invalid <field>:` prefix), else the message: the OpenViking
/// manager raises it, since the built-in backend's errors are those words.
pub fn to_py(err: MemoryError) -> PyErr {
    let rule = match &err {
        MemoryError::InvalidInput { rule, .. } => rule.clone(),
        other => other.to_string(),
    };
    NativeError::new_err((err.code(), err.to_string(), rule))
}
