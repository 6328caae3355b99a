//! Finding where an item stands in a YAML file, so that errors found after parsing (an undefined
//! index in a formula, a shape mismatch) still point at a line and column.
//!
//! serde reports positions only for syntax and type errors; semantic checks run on the typed
//! values, so they locate the offending key or word again in the source text by its path of keys.

use crate::error::Error;
use std::path::Path;

/// The source text of one YAML file with the name it is reported under.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file name used in messages.
    pub file: std::path::PathBuf,
    /// The whole text.
    pub text: String,
}

impl Source {
    /// A source from a name and its text.
    pub fn new(file: impl AsRef<Path>, text: impl Into<String>) -> Source {
        Source {
            file: file.as_ref().to_path_buf(),
            text: text.into(),
        }
    }

    /// An error at the place named by `path` (a chain of keys, innermost last; a key that is not
    /// found as a mapping key is looked for as a word, as in a flow sequence `[b, k]`).
    pub fn error_at(&self, path: &[&str], message: impl Into<String>) -> Error {
        let (line, column) = self.locate(path);
        Error::at(&self.file, line, column, message)
    }

    /// An error for serde's own failure (syntax, types, unknown fields).
    pub fn yaml_error(&self, err: serde_yaml::Error) -> Error {
        let (line, column) = err
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((1, 1));
        // serde_yaml appends " at line L column C" itself; keep the message short.
        let mut message = err.to_string();
        if let Some(pos) = message.find(" at line ") {
            message.truncate(pos);
        }
        Error::at(&self.file, line, column, message)
    }

    /// Line and column (1-based) of the item at `path`; the nearest enclosing item found when
    /// the innermost is not.
    pub fn locate(&self, path: &[&str]) -> (usize, usize) {
        let lines: Vec<&str> = self.text.lines().collect();
        let mut best = (1, 1);
        // The block being searched: lines [start, end) deeper than `indent`.
        let mut start = 0usize;
        let mut end = lines.len();
        let mut indent: isize = -1;
        for key in path {
            match find_key(&lines, start, end, indent, key) {
                Some((row, col, key_indent)) => {
                    best = (row + 1, col + 1);
                    start = row;
                    indent = key_indent as isize;
                    end = block_end(&lines, row, key_indent);
                    // The key's own line belongs to its block (flow values live there).
                }
                None => {
                    if let Some((row, col)) = find_word(&lines, start, end, key) {
                        best = (row + 1, col + 1);
                        start = row;
                        end = (row + 1).max(block_end(&lines, row, indent_of(lines[row])));
                    } else {
                        break;
                    }
                }
            }
        }
        best
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// The first line after `row` whose indentation is not deeper than `indent`.
fn block_end(lines: &[&str], row: usize, indent: usize) -> usize {
    let mut r = row + 1;
    while r < lines.len() {
        if !is_blank_or_comment(lines[r]) && indent_of(lines[r]) <= indent {
            let t = lines[r].trim_start();
            // A sequence item at the same indent still belongs to a key's block.
            if !(t.starts_with("- ") && indent_of(lines[r]) == indent) {
                break;
            }
        }
        r += 1;
    }
    r
}

fn find_key(
    lines: &[&str],
    start: usize,
    end: usize,
    indent: isize,
    key: &str,
) -> Option<(usize, usize, usize)> {
    for (row, line) in lines.iter().enumerate().take(end).skip(start) {
        if is_blank_or_comment(line) {
            continue;
        }
        let ind = indent_of(line);
        if (ind as isize) <= indent && row != start {
            continue;
        }
        let mut t = line.trim_start();
        let mut col = ind;
        while let Some(rest) = t.strip_prefix("- ") {
            col += 2;
            t = rest;
        }
        for quote in ["", "\"", "'"] {
            let candidate = format!("{quote}{key}{quote}:");
            if t.starts_with(&candidate) && (row != start || indent < 0) {
                return Some((row, col, col));
            }
            // A flow mapping on the key line: `x: {dims: [a, b]}`.
            if row == start {
                if let Some(pos) = find_word_in(line, &format!("{key}:")) {
                    return Some((row, pos, pos));
                }
            }
        }
    }
    None
}

fn find_word(lines: &[&str], start: usize, end: usize, word: &str) -> Option<(usize, usize)> {
    for (row, line) in lines
        .iter()
        .enumerate()
        .take(end.max(start + 1))
        .skip(start)
    {
        let code = line.split(" #").next().unwrap_or(line);
        if let Some(col) = find_word_in(code, word) {
            return Some((row, col));
        }
    }
    None
}

/// Byte-free search: the char column of `word` in `line` where it is not part of a longer
/// identifier.
fn find_word_in(line: &str, word: &str) -> Option<usize> {
    if word.is_empty() {
        return None;
    }
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(pos) = line[from..].find(word) {
        let at = from + pos;
        let before_ok = line[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = &line[at + word.len()..];
        let after_ok = after.chars().next().is_none_or(|c| !is_ident(c))
            || !word.chars().next_back().is_some_and(is_ident);
        if before_ok && after_ok {
            return Some(line[..at].chars().count());
        }
        from = at + word.len().max(1);
        while !line.is_char_boundary(from) {
            from += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_nested_keys_and_flow_words() {
        let src = Source::new(
            "r.yaml",
            "name: linear\nindices:\n  b: map\n  k: reduce-sum\ninputs:\n  x: [b, k]\n  w: {dims: [k, zz], param: true}\noutput: [b, n]\n",
        );
        assert_eq!(src.locate(&["indices", "k"]), (4, 3));
        assert_eq!(src.locate(&["inputs", "w", "zz"]), (7, 17));
        assert_eq!(src.locate(&["output", "n"]), (8, 13));
        assert_eq!(src.locate(&["name"]), (1, 1));
    }
}
