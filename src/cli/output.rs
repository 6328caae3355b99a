//! Shared printing helpers.

use crate::error::Error;
use serde::Serialize;
use std::cell::RefCell;

thread_local! {
    /// Where `print_json` writes instead of standard output while [`capture_json`] runs.
    static CAPTURED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Prints a value as pretty JSON on standard output (or hands it to [`capture_json`]).
pub fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Usage(format!("cannot write JSON: {e}")))?;
    let kept = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(out) => {
            out.push(text.clone());
            true
        }
        None => false,
    });
    if !kept {
        println!("{text}");
    }
    Ok(())
}

/// Runs `f` and returns the JSON documents it printed, in order, instead of printing them.
pub fn capture_json(f: impl FnOnce() -> Result<(), Error>) -> Result<Vec<String>, Error> {
    let outer = CAPTURED.with(|c| c.replace(Some(Vec::new())));
    let result = f();
    let got = CAPTURED.with(|c| c.replace(outer)).unwrap_or_default();
    result.map(|()| got)
}
