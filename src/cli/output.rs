//! Shared printing helpers.

use crate::error::Error;
use serde::Serialize;

/// Prints a value as pretty JSON on standard output.
pub fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Usage(format!("cannot write JSON: {e}")))?;
    println!("{text}");
    Ok(())
}
