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
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
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

/// Prints a table: a header row and rows of cells, each column as wide as its widest cell,
/// left-aligned where `align` has `<` at the column's position and right-aligned otherwise,
/// every line starting with `indent`.
pub fn print_table(indent: &str, align: &str, head: &[&str], rows: &[Vec<String>]) {
    let width = |s: &str| s.chars().count();
    let mut w: Vec<usize> = head.iter().map(|h| width(h)).collect();
    for r in rows {
        for (k, c) in r.iter().enumerate() {
            if k < w.len() {
                w[k] = w[k].max(width(c));
            }
        }
    }
    let left: Vec<bool> = align.chars().map(|c| c == '<').collect();
    let line = |cells: Vec<&str>| {
        let mut out = indent.to_string();
        for (k, c) in cells.iter().enumerate() {
            if k > 0 {
                out.push_str("  ");
            }
            let pad = " ".repeat(w[k].saturating_sub(width(c)));
            if left.get(k).copied().unwrap_or(false) {
                out.push_str(c);
                if k + 1 < cells.len() {
                    out.push_str(&pad);
                }
            } else {
                out.push_str(&pad);
                out.push_str(c);
            }
        }
        println!("{out}");
    };
    line(head.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

pub use crate::diag::{check_output, write_output};
