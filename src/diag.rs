//! Finding where an item stands in a YAML file, so that errors found after parsing (an undefined
//! index in a formula, a shape mismatch) still point at a line and column.
//!
//! serde reports positions only for syntax and type errors; semantic checks run on the typed
//! values, so they locate the offending key or word again in the source text by its path of keys.

use crate::error::Error;
use serde::de::DeserializeOwned;
use std::path::Path;

/// Largest input file accepted (bytes): far above any model, rule, strategy or calibration file,
/// far below what makes the YAML parser slow.
pub const MAX_INPUT_BYTES: usize = 4 << 20;

/// Deepest nesting accepted: flow collections (`[`, `{`) inside each other, or indentation
/// (block collections, one level per column at most). Real files nest fewer than 10 deep; the
/// YAML parser's time grows quickly with depth.
pub const MAX_NESTING: usize = 64;

/// Widest indentation accepted (columns), which bounds block nesting.
pub const MAX_INDENT: usize = 256;

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

    /// Reads a file, refusing one larger than [`MAX_INPUT_BYTES`] before reading it whole.
    pub fn read(path: &Path) -> Result<Source, Error> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(io)?.len();
        if len > MAX_INPUT_BYTES as u64 {
            return Err(Error::at(path, 1, 1, too_large(len as usize)));
        }
        Ok(Source::new(path, read_text(path)?))
    }

    /// Parses the text as YAML into `T`, after checking its size and nesting (so that a
    /// pathological file is refused in microseconds, not after minutes of parsing).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Error> {
        self.check_bounds()?;
        serde_yaml::from_str(&self.text).map_err(|e| self.yaml_error(e))
    }

    /// Refuses text larger than [`MAX_INPUT_BYTES`], nested deeper than [`MAX_NESTING`] or
    /// indented wider than [`MAX_INDENT`], at the line and column where the limit is passed.
    pub fn check_bounds(&self) -> Result<(), Error> {
        if self.text.len() > MAX_INPUT_BYTES {
            return Err(Error::at(&self.file, 1, 1, too_large(self.text.len())));
        }
        match nesting_violation(&self.text) {
            Some((line, column, message)) => Err(Error::at(&self.file, line, column, message)),
            None => Ok(()),
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
            // A number names an item of a block sequence (`- …` lines): its line, and its
            // lines as the block to search next.
            if let Some((row, dash)) = key
                .parse::<usize>()
                .ok()
                .and_then(|n| find_item(&lines, start, end, indent, n))
            {
                best = (row + 1, dash + 3);
                start = row;
                indent = dash as isize + 1;
                end = (row + 1..end)
                    .find(|&r| !is_blank_or_comment(lines[r]) && indent_of(lines[r]) <= dash)
                    .unwrap_or(end);
                continue;
            }
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

/// Reads a whole text file of any size; a file that is not UTF-8 is an input error at its first
/// byte that is not (exit code 2), as any other malformed input.
pub fn read_text(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| not_text(path, e.as_bytes(), e.utf8_error()))
}

/// The input error for a file that is not UTF-8 text (a binary file given where text belongs),
/// at the line and column of its first byte that is not.
fn not_text(path: &Path, bytes: &[u8], e: std::str::Utf8Error) -> Error {
    let good = &bytes[..e.valid_up_to()];
    let line = 1 + good.iter().filter(|b| **b == b'\n').count();
    let column = 1 + good.iter().rev().take_while(|b| **b != b'\n').count();
    Error::at(
        path,
        line,
        column,
        format!(
            "not UTF-8 text (byte 0x{:02x} at offset {}): a binary file where a text file belongs?",
            bytes[e.valid_up_to()],
            e.valid_up_to()
        ),
    )
}

fn too_large(len: usize) -> String {
    format!("input of {len} bytes is larger than the {MAX_INPUT_BYTES} bytes accepted")
}

/// The first place where `text` nests flow collections deeper than [`MAX_NESTING`] or indents
/// wider than [`MAX_INDENT`]: (line, column, message), 1-based. Quoted strings and comments are
/// skipped; a bracket inside a plain scalar counts, which only errs towards refusing text that
/// is a hundred brackets deep anyway.
fn nesting_violation(text: &str) -> Option<(usize, usize, String)> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (row, line) in text.lines().enumerate() {
        if quote.is_none() && depth == 0 {
            // Block nesting: leading spaces plus compact `- ` items on the line.
            let mut rest = line.trim_start_matches(' ');
            let mut column = line.len() - rest.len();
            while let Some(r) = rest.strip_prefix("- ") {
                rest = r.trim_start_matches(' ');
                column = line.len() - rest.len();
            }
            if column > MAX_INDENT {
                return Some((
                    row + 1,
                    column + 1,
                    format!("nested deeper than the {MAX_INDENT} columns of indentation accepted"),
                ));
            }
        }
        let mut prev = ' ';
        // The last character that is not a space: a quote opens a string only where a scalar
        // starts (`'` inside `it's` is text).
        let mut last: Option<char> = None;
        let mut chars = line.chars().enumerate().peekable();
        while let Some((col, c)) = chars.next() {
            match quote {
                Some('"') if c == '\\' => {
                    chars.next();
                }
                Some(q) if c == q => {
                    // `''` inside a single-quoted string is an escaped quote.
                    if q == '\'' && chars.peek().is_some_and(|&(_, n)| n == '\'') {
                        chars.next();
                    } else {
                        quote = None;
                    }
                }
                Some(_) => {}
                None => match c {
                    '#' if prev.is_whitespace() => break,
                    '"' | '\'' if last.is_none_or(|l| "[{,:-?".contains(l)) => quote = Some(c),
                    '[' | '{' => {
                        depth += 1;
                        if depth > MAX_NESTING {
                            return Some((
                                row + 1,
                                col + 1,
                                format!("nested deeper than the {MAX_NESTING} levels accepted"),
                            ));
                        }
                    }
                    ']' | '}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
            if !c.is_whitespace() {
                last = Some(c);
            }
        }
    }
    None
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

/// The `n`-th item (0-based) of the block sequence in lines `[start, end)` deeper than
/// `indent`: its line and the column of its dash.
fn find_item(
    lines: &[&str],
    start: usize,
    end: usize,
    indent: isize,
    n: usize,
) -> Option<(usize, usize)> {
    let mut dash: Option<usize> = None;
    let mut seen = 0;
    for (row, line) in lines.iter().enumerate().take(end).skip(start + 1) {
        if is_blank_or_comment(line) {
            continue;
        }
        let ind = indent_of(line);
        if ind as isize <= indent {
            break;
        }
        if !line.trim_start().starts_with("- ") {
            continue;
        }
        match dash {
            None => dash = Some(ind),
            Some(d) if d != ind => continue,
            Some(_) => {}
        }
        if seen == n {
            return Some((row, ind));
        }
        seen += 1;
    }
    None
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

/// Checks that `path` can be written as an output: its folder exists, and it is not one of the
/// command's `inputs` (writing there would destroy what is being read).
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<(), Error> {
    if let Ok(out) = path.canonicalize() {
        if let Some(input) = inputs
            .iter()
            .find(|i| i.canonicalize().is_ok_and(|i| i == out))
        {
            return Err(Error::Usage(format!(
                "refusing to write {}: it is the input {} (choose another output file)",
                path.display(),
                input.display()
            )));
        }
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(folder) = folder.filter(|f| !f.is_dir()) {
        return Err(Error::Usage(format!(
            "cannot write {}: the folder {} does not exist (create it first)",
            path.display(),
            folder.display()
        )));
    }
    Ok(())
}

/// Writes an output file after [`check_output`].
pub fn write_output(path: &Path, contents: &[u8], inputs: &[&Path]) -> Result<(), Error> {
    check_output(path, inputs)?;
    std::fs::write(path, contents).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
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

    #[test]
    fn refuses_deep_nesting_where_it_starts() {
        let deep = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let src = Source::new("d.yaml", deep);
        let start = std::time::Instant::now();
        let err = src.parse::<serde_yaml::Value>().unwrap_err().to_string();
        assert!(
            start.elapsed().as_millis() < 100,
            "took {:?}",
            start.elapsed()
        );
        assert!(err.starts_with("d.yaml:1:68: nested deeper"), "{err}");
        let indented = format!("a:\n{}b: 1\n", " ".repeat(300));
        let err = Source::new("i.yaml", indented).check_bounds().unwrap_err();
        assert!(err.to_string().starts_with("i.yaml:2:301: "), "{err}");
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let text = format!(
            "a: \"{o}\"\nb: '{o}'\nc: 1 # {o}\nd: [[1, 2], {{x: [3]}}]\n",
            o = "[".repeat(200)
        );
        Source::new("s.yaml", text).check_bounds().unwrap();
    }
}

thread_local! {
    /// Where [`note`] puts its lines while [`capture_notes`] runs on this thread.
    static NOTES: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// A warning or note for the user (`warning: …`, `note: …`): printed to stderr, or kept while
/// [`capture_notes`] runs on this thread.
pub fn note(line: String) {
    let kept = NOTES.with(|n| match n.borrow_mut().as_mut() {
        Some(v) => {
            v.push(line.clone());
            true
        }
        None => false,
    });
    if !kept {
        eprintln!("{line}");
    }
}

/// Runs `f` with the notes it gives on this thread kept instead of printed, and returns them.
pub fn capture_notes<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let outer = NOTES.with(|n| n.borrow_mut().replace(Vec::new()));
    let out = f();
    let notes = NOTES.with(|n| std::mem::replace(&mut *n.borrow_mut(), outer));
    (out, notes.unwrap_or_default())
}
