//! Reading a Hugging Face `config.json`: typed access to its fields, and errors that name the file,
//! the field and, where the field is present, its line and column.

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// A parsed `config.json` with its text, for error positions.
pub struct Config {
    file: PathBuf,
    text: String,
    map: Map<String, Value>,
    /// What needs the fields read, for messages (`model_type `llama``).
    pub context: String,
}

/// Removes serde_json's own " at line L column C" suffix: the location is reported separately.
fn short(err: &serde_json::Error) -> String {
    let mut m = err.to_string();
    if let Some(pos) = m.find(" at line ") {
        m.truncate(pos);
    }
    m
}

impl Config {
    /// Parses `text` as a JSON object; malformed JSON is reported at serde_json's line and column.
    pub fn parse(file: &Path, text: String) -> Result<Config> {
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            Error::at(
                file,
                e.line().max(1),
                e.column().max(1),
                format!("malformed JSON: {}", short(&e)),
            )
        })?;
        match value {
            Value::Object(map) => Ok(Config {
                file: file.to_path_buf(),
                text,
                map,
                context: String::new(),
            }),
            other => Err(Error::at(
                file,
                1,
                1,
                format!(
                    "a config.json must be a JSON object, found {}",
                    kind_of(&other)
                ),
            )),
        }
    }

    /// Line and column (1-based) of the first `"key":` in the text, searching after `after`.
    fn locate(&self, key: &str, after: usize) -> (usize, usize) {
        let needle = format!("\"{key}\"");
        let mut from = after.min(self.text.len());
        while let Some(pos) = self.text.get(from..).and_then(|t| t.find(&needle)) {
            let at = from + pos;
            let rest = self.text[at + needle.len()..].trim_start();
            if rest.starts_with(':') {
                let line = self.text[..at].matches('\n').count() + 1;
                let col = self.text[..at]
                    .rsplit('\n')
                    .next()
                    .map_or(0, |l| l.chars().count())
                    + 1;
                return (line, col);
            }
            from = at + needle.len();
        }
        (1, 1)
    }

    fn offset_of(&self, key: &str) -> usize {
        let (line, _) = self.locate(key, 0);
        self.text
            .split_inclusive('\n')
            .take(line - 1)
            .map(str::len)
            .sum()
    }

    /// An error at field `key` (at `parent.key` when nested).
    pub fn error(&self, key: &str, parent: Option<&str>, msg: impl Into<String>) -> Error {
        let after = parent.map_or(0, |p| self.offset_of(p));
        let (line, column) = self.locate(key, after);
        Error::at(&self.file, line, column, msg)
    }

    /// An error for a field that is not there.
    pub fn missing(&self, key: &str) -> Error {
        Error::at(
            &self.file,
            1,
            1,
            format!("missing field `{key}` (needed for {})", self.context),
        )
    }

    /// The raw value of a top-level field, `None` when absent or `null`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The raw value of a top-level field, `null` included.
    pub fn raw(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// Whether field `key` is present with the value `null`.
    pub fn is_null(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(Value::is_null)
    }

    /// A top-level string field, `None` when absent or `null`.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.error(
                key,
                None,
                format!("field `{key}` must be a string, found {}", kind_of(v)),
            )),
        }
    }

    /// A top-level boolean field, `None` when absent or `null`.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.error(
                key,
                None,
                format!("field `{key}` must be true or false, found {}", kind_of(v)),
            )),
        }
    }

    /// A top-level positive integer field, `None` when absent or `null`.
    pub fn opt_uint(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => positive(v)
                .map(Some)
                .ok_or_else(|| self.not_positive(key, None, v)),
        }
    }

    /// A top-level positive integer field that must be there.
    pub fn uint(&self, key: &str) -> Result<u64> {
        self.opt_uint(key)?.ok_or_else(|| self.missing(key))
    }

    /// A positive integer field of the object in field `parent`, `None` when either is absent.
    pub fn nested_uint(&self, parent: &str, key: &str) -> Result<Option<u64>> {
        let obj = match self.get(parent) {
            None => return Ok(None),
            Some(Value::Object(o)) => o,
            Some(v) => {
                return Err(self.error(
                    parent,
                    None,
                    format!("field `{parent}` must be an object, found {}", kind_of(v)),
                ))
            }
        };
        match obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => positive(v)
                .map(Some)
                .ok_or_else(|| self.not_positive(key, Some(parent), v)),
        }
    }

    /// A number in field `key` of the object in `parent` (or at the top level), as text.
    pub fn number_text(&self, parent: Option<&str>, key: &str) -> Option<String> {
        let v = match parent {
            None => self.get(key)?,
            Some(p) => self.get(p)?.as_object()?.get(key)?,
        };
        v.as_number().map(|n| n.to_string())
    }

    fn not_positive(&self, key: &str, parent: Option<&str>, v: &Value) -> Error {
        let name = parent.map_or(key.to_string(), |p| format!("{p}.{key}"));
        self.error(
            key,
            parent,
            format!("field `{name}` must be a positive integer, found {v}"),
        )
    }
}

/// A JSON value as a positive integer (`4096` or `4096.0`).
fn positive(v: &Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return (u > 0).then_some(u);
    }
    let f = v.as_f64()?;
    (f >= 1.0 && f.fract() == 0.0 && f < 9.0e15).then_some(f as u64)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(Path::new("c.json"), text.to_string()).unwrap()
    }

    #[test]
    fn fields_are_typed_and_located() {
        let c = config("{\n  \"a\": 3,\n  \"b\": \"x\",\n  \"r\": {\"a\": 2.0},\n  \"z\": null\n}");
        assert_eq!(c.uint("a").unwrap(), 3);
        assert_eq!(c.nested_uint("r", "a").unwrap(), Some(2));
        assert_eq!(c.opt_uint("z").unwrap(), None);
        let e = c.uint("b").unwrap_err().to_string();
        assert!(
            e.starts_with("c.json:3:3: field `b` must be a positive integer"),
            "{e}"
        );
        let e = c.uint("q").unwrap_err().to_string();
        assert!(e.contains("missing field `q`"), "{e}");
    }

    #[test]
    fn malformed_json_names_line_and_column() {
        let e = Config::parse(Path::new("c.json"), "{\n  \"a\": 3,\n  \"b\" 4\n}".into())
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("c.json:3:"), "{e}");
        assert!(e.contains("malformed JSON"), "{e}");
        let e = Config::parse(Path::new("c.json"), "[1]".into())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("must be a JSON object"), "{e}");
    }
}
