//! Error types of the symbolic algebra.

/// A formula could not be parsed.
///
/// `column` is the 1-based position, counted in characters, of the
/// offending token in the formula text; `token` is that token's text, or
/// the empty string when the problem is the end of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at column {column}")]
pub struct ParseError {
    /// Human readable description of the problem.
    pub message: String,
    /// 1-based character column of the offending token.
    pub column: usize,
    /// Text of the offending token, `""` at the end of the input.
    pub token: String,
}

impl ParseError {
    /// Builds a parse error.
    pub fn new(message: impl Into<String>, column: usize, token: impl Into<String>) -> Self {
        ParseError {
            message: message.into(),
            column,
            token: token.into(),
        }
    }
}

/// An algebraic operation or evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymError {
    /// Evaluation needed a value for a symbol that has none.
    #[error("symbol `{symbol}` is not bound to a value")]
    Unbound {
        /// The first (alphabetically) symbol without a value.
        symbol: String,
    },
    /// A division by zero, or a zero raised to a negative power.
    #[error("division by zero{}", division_detail(.symbol))]
    DivisionByZero {
        /// The symbol bound to zero that appears in a denominator, if any.
        symbol: Option<String>,
    },
    /// Division by a polynomial that is not a single term.
    #[error("cannot divide by `{divisor}`: the divisor is not a single term")]
    NonMonomialDivisor {
        /// Canonical text of the divisor.
        divisor: String,
    },
    /// A sum of several terms raised to a negative power.
    #[error("cannot raise `{base}` to a negative power: it is not a single term")]
    NegativePowerOfSum {
        /// Canonical text of the base.
        base: String,
    },
}

fn division_detail(symbol: &Option<String>) -> String {
    match symbol {
        Some(s) => format!(": `{s}` is bound to 0 but appears with a negative exponent"),
        None => String::new(),
    }
}
