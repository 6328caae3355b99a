//! The native half of the `symshard` Python package: runs a symshard command line in this
//! process and returns its JSON text. The Python half (`symshard/__init__.py`) turns the exact
//! numbers into Python ints and fractions; no number is computed here or there.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _native,
    NativeError,
    PyException,
    "A symshard error: (message, exit code of the command line)."
);

/// Runs `symshard ARGS...` (with `--format json` where the command takes it) and returns the JSON
/// documents it prints: none for a command that only writes files, such as `report`.
#[pyfunction]
fn run_json(py: Python<'_>, args: Vec<String>) -> PyResult<Vec<String>> {
    py.detach(|| symshard::cli::run_json(&args))
        .map_err(|e| NativeError::new_err((e.to_string(), e.exit_code())))
}

/// The package's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("NativeError", m.py().get_type::<NativeError>())?;
    m.add_function(wrap_pyfunction!(run_json, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
