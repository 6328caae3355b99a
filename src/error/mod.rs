//! Errors of the library: every error that bad input can cause names the file, the line and
//! column, and the offending item.

pub mod spelling;
pub mod strategy;

use std::fmt;
use std::path::{Path, PathBuf};

/// A position in a user's file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as the user named it (or `<embedded>/NAME` for files built into the binary).
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// Everything that can go wrong in symshard.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input at a known place in a file.
    #[error("{location}: {message}")]
    Input {
        /// Where.
        location: Location,
        /// What is wrong, naming the offending item.
        message: String,
    },
    /// Bad input that belongs to no file (command-line values, for instance).
    #[error("{0}")]
    Usage(String),
    /// A strategy that cannot run (bad knobs, or knobs the model's sizes do not allow).
    #[error(transparent)]
    Strategy(Box<strategy::StrategyError>),
    /// A check the user asked for found a discrepancy (an audit mismatch): exit code 1.
    #[error("{0}")]
    Check(String),
    /// A failure inside symshard (an invariant that does not hold, output it cannot produce):
    /// a bug to report, not a mistake in the input. Exit code 3.
    #[error(
        "internal error: {0} (a bug in symshard: please report it with the command that shows it)"
    )]
    Internal(String),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl From<strategy::StrategyError> for Error {
    fn from(e: strategy::StrategyError) -> Error {
        Error::Strategy(Box::new(e))
    }
}

impl Error {
    /// An input error at `file:line:column`.
    pub fn at(file: &Path, line: usize, column: usize, message: impl Into<String>) -> Error {
        Error::Input {
            location: Location {
                file: file.to_path_buf(),
                line,
                column,
            },
            message: message.into(),
        }
    }

    /// The process exit code for this error (README, "Exit codes"): 2 for rejected input (usage
    /// or a file's content), a path that does not exist included; 1 for a check that found a
    /// discrepancy and for a file that exists but the system would not let symshard read or
    /// write; 3 for an internal failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input { .. } | Error::Usage(_) | Error::Strategy(_) => 2,
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 2,
            Error::Io { .. } | Error::Check(_) => 1,
            Error::Internal(_) => 3,
        }
    }
}

/// Result with the library's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
