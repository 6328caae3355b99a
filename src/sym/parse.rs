//! Tokenizer and recursive-descent parser for formulas.
//!
//! Grammar, loosest binding first:
//!
//! ```text
//! expr     := term (('+' | '-') term)*
//! term     := unary (('*' | '/') unary)*          left-associative
//! unary    := '-'* power
//! power    := primary ('^' exponent)?
//! exponent := '-'* (INTEGER | '(' exponent ')') ('^' exponent)?   right-associative
//! primary  := NUMBER | IDENT | '(' expr ')'
//! NUMBER   := [0-9]+ ('.' [0-9]+)?                exact: 0.125 = 125/1000
//! IDENT    := [A-Za-z_][A-Za-z0-9_]*
//! ```
//!
//! Whitespace may appear between tokens. A divisor must evaluate to a
//! single non-zero term. Exponents are integers of magnitude at most 1000
//! and number literals have at most 20000 digits. Parentheses nest at most
//! 256 deep, and products whose size would explode (too many term pairs,
//! huge coefficients or exponents) are rejected, so parsing any input
//! terminates without panicking.

use num_bigint::BigInt;

use super::error::ParseError;
use super::poly::{Poly, Rational};

/// Deepest allowed nesting of parentheses.
pub const MAX_DEPTH: usize = 256;
/// Largest allowed magnitude of an exponent.
pub const MAX_EXPONENT: i64 = 1000;
/// Longest allowed number literal, in characters.
pub const MAX_NUMBER_DIGITS: usize = 20_000;
const MAX_TERM_PRODUCTS: usize = 1 << 18;
const MAX_COEFF_BITS: u64 = 1 << 16;
const MAX_RESULT_EXPONENT: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Num,
    Ident,
    Plus,
    Minus,
    Star,
    Slash,
    Caret,
    LParen,
    RParen,
    End,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
    column: usize,
}

impl Token {
    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError::new(message, self.column, self.text.clone())
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        let single = match c {
            '+' => Some(Kind::Plus),
            '-' => Some(Kind::Minus),
            '*' => Some(Kind::Star),
            '/' => Some(Kind::Slash),
            '^' => Some(Kind::Caret),
            '(' => Some(Kind::LParen),
            ')' => Some(Kind::RParen),
            _ => None,
        };
        let start = i;
        let kind = if c.is_whitespace() {
            i += 1;
            continue;
        } else if let Some(kind) = single {
            i += 1;
            kind
        } else if c.is_ascii_digit() {
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i < chars.len() && chars[i] == '.' {
                i += 1;
                if i >= chars.len() || !chars[i].is_ascii_digit() {
                    let token: String = chars[start..i].iter().collect();
                    return Err(ParseError::new(
                        "malformed number: expected digits after '.'",
                        column,
                        token,
                    ));
                }
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i - start > MAX_NUMBER_DIGITS {
                return Err(ParseError::new(
                    format!("number literal longer than {MAX_NUMBER_DIGITS} digits"),
                    column,
                    chars[start..i].iter().collect::<String>(),
                ));
            }
            Kind::Num
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Kind::Ident
        } else {
            return Err(ParseError::new(
                format!("unexpected character {c:?}"),
                column,
                c.to_string(),
            ));
        };
        out.push(Token {
            kind,
            text: chars[start..i].iter().collect(),
            column,
        });
    }
    out.push(Token {
        kind: Kind::End,
        text: String::new(),
        column: chars.len() + 1,
    });
    Ok(out)
}

fn number_value(text: &str) -> Rational {
    if !text.contains('.') {
        let n = text
            .parse::<BigInt>()
            .expect("tokenizer yields only digit strings");
        return Rational::from_integer(n);
    }
    let digits: String = text.chars().filter(|&c| c != '.').collect();
    let numer = digits
        .parse::<BigInt>()
        .expect("tokenizer yields only digit strings");
    let frac = text.find('.').map_or(0, |dot| text.len() - dot - 1);
    let denom = num_traits::pow(BigInt::from(10), frac);
    Rational::new(numer, denom)
}

/// Parses a formula into a canonical [`Poly`].
pub fn parse(text: &str) -> Result<Poly, ParseError> {
    let tokens = tokenize(text)?;
    if tokens.len() == 1 {
        return Err(ParseError::new("empty expression", 1, ""));
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let value = parser.expr()?;
    let t = parser.peek();
    match t.kind {
        Kind::End => Ok(value),
        Kind::RParen => Err(t.error("unbalanced parentheses: unmatched ')'")),
        _ => Err(t.error(format!(
            "unexpected token '{}' after a complete expression",
            t.text
        ))),
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn kind(&self) -> Kind {
        self.tokens[self.pos].kind
    }

    fn advance(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if t.kind != Kind::End {
            self.pos += 1;
        }
        t
    }

    fn enter(&mut self, open: &Token) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(open.error(format!("parentheses nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn close(&mut self, open: &Token, what: &str) -> Result<(), ParseError> {
        let t = self.advance();
        match t.kind {
            Kind::RParen => {
                self.depth -= 1;
                Ok(())
            }
            Kind::End => Err(t.error(format!(
                "unbalanced parentheses: '(' at column {} is never closed",
                open.column
            ))),
            _ => Err(t.error(format!("expected ')' {what}, found '{}'", t.text))),
        }
    }

    fn expr(&mut self) -> Result<Poly, ParseError> {
        let mut acc = self.term()?;
        loop {
            match self.kind() {
                Kind::Plus => {
                    self.advance();
                    acc += self.term()?;
                }
                Kind::Minus => {
                    self.advance();
                    acc -= self.term()?;
                }
                _ => return Ok(acc),
            }
        }
    }

    fn term(&mut self) -> Result<Poly, ParseError> {
        let mut acc = self.unary()?;
        loop {
            match self.kind() {
                Kind::Star => {
                    let op = self.advance();
                    let rhs = self.unary()?;
                    acc = guarded_mul(&acc, &rhs, &op)?;
                }
                Kind::Slash => {
                    let op = self.advance();
                    let start = self.peek().clone();
                    let rhs = self.unary()?;
                    if rhs.is_zero() {
                        return Err(start.error("division by zero"));
                    }
                    if !rhs.is_monomial() {
                        return Err(start
                            .error(format!("divisor `{rhs}` is not a monomial (a single term)")));
                    }
                    let inverse = rhs.pow(-1).map_err(|e| start.error(e.to_string()))?;
                    acc = guarded_mul(&acc, &inverse, &op)?;
                }
                _ => return Ok(acc),
            }
        }
    }

    fn unary(&mut self) -> Result<Poly, ParseError> {
        let mut negative = false;
        while self.kind() == Kind::Minus {
            self.advance();
            negative = !negative;
        }
        let value = self.power()?;
        Ok(if negative { -value } else { value })
    }

    fn power(&mut self) -> Result<Poly, ParseError> {
        let base = self.primary()?;
        if self.kind() != Kind::Caret {
            return Ok(base);
        }
        let op = self.advance();
        let e = self.exponent()?;
        guarded_pow(base, e, &op)
    }

    fn exponent(&mut self) -> Result<i64, ParseError> {
        let mut negative = false;
        while self.kind() == Kind::Minus {
            self.advance();
            negative = !negative;
        }
        let t = self.advance();
        let atom = match t.kind {
            Kind::Num => {
                if t.text.contains('.') {
                    return Err(t.error("exponent must be an integer"));
                }
                match t.text.parse::<i64>() {
                    Ok(v) if v <= MAX_EXPONENT => v,
                    _ => return Err(exponent_too_large(&t)),
                }
            }
            Kind::LParen => {
                self.enter(&t)?;
                let v = self.exponent()?;
                self.close(&t, "in exponent")?;
                v
            }
            Kind::End => return Err(t.error("missing exponent: expected an integer")),
            _ => {
                return Err(t.error(format!(
                    "exponent must be an integer literal, found '{}'",
                    t.text
                )))
            }
        };
        let value = if self.kind() == Kind::Caret {
            self.advance();
            let next = self.peek().clone();
            let e = self.exponent()?;
            integer_power(atom, e, &next)?
        } else {
            atom
        };
        Ok(if negative { -value } else { value })
    }

    fn primary(&mut self) -> Result<Poly, ParseError> {
        let t = self.advance();
        match t.kind {
            Kind::Num => Ok(Poly::constant(number_value(&t.text))),
            Kind::Ident => Ok(Poly::symbol(&t.text)),
            Kind::LParen => {
                self.enter(&t)?;
                let v = self.expr()?;
                self.close(&t, "or an operator")?;
                Ok(v)
            }
            Kind::End => Err(t.error("unexpected end of input: expected a number, symbol or '('")),
            _ => Err(t.error(format!(
                "expected a number, symbol or '(', found '{}'",
                t.text
            ))),
        }
    }
}

fn exponent_too_large(t: &Token) -> ParseError {
    t.error(format!("exponent magnitude exceeds {MAX_EXPONENT}"))
}

/// `atom ^ e` for integer exponents, where both are at most
/// [`MAX_EXPONENT`] in magnitude and so is the result.
fn integer_power(atom: i64, e: i64, at: &Token) -> Result<i64, ParseError> {
    if e < 0 && atom.abs() != 1 {
        return Err(at.error("exponent must be an integer, but this power is a fraction"));
    }
    let magnitude = u32::try_from(e.unsigned_abs()).map_err(|_| exponent_too_large(at))?;
    let value = match atom {
        0 => i64::from(magnitude == 0),
        1 => 1,
        -1 if magnitude % 2 == 0 => 1,
        -1 => -1,
        _ => atom.checked_pow(magnitude).unwrap_or(i64::MAX),
    };
    if value.abs() > MAX_EXPONENT {
        return Err(exponent_too_large(at));
    }
    Ok(value)
}

fn guarded_mul(a: &Poly, b: &Poly, op: &Token) -> Result<Poly, ParseError> {
    let too_large = a.len().saturating_mul(b.len()) > MAX_TERM_PRODUCTS
        || a.max_coeff_bits() + b.max_coeff_bits() > MAX_COEFF_BITS
        || a.max_abs_exponent() + b.max_abs_exponent() > MAX_RESULT_EXPONENT;
    if too_large {
        return Err(op.error("expression too large to expand"));
    }
    Ok(a * b)
}

fn guarded_pow(base: Poly, e: i64, op: &Token) -> Result<Poly, ParseError> {
    let mut base = base;
    if e < 0 {
        if base.is_zero() {
            return Err(op.error("division by zero: zero raised to a negative power"));
        }
        if !base.is_monomial() {
            return Err(op.error(format!(
                "cannot raise `{base}` to a negative power: it is not a single term"
            )));
        }
        base = base.pow(-1).map_err(|err| op.error(err.to_string()))?;
    }
    let mut k = e.unsigned_abs();
    let mut result = Poly::one();
    while k > 0 {
        if k & 1 == 1 {
            result = guarded_mul(&result, &base, op)?;
        }
        k >>= 1;
        if k > 0 {
            base = guarded_mul(&base, &base, op)?;
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_traits::{One, Zero};

    #[test]
    fn integer_power_of_units() {
        let t = Token {
            kind: Kind::Num,
            text: "2".into(),
            column: 1,
        };
        assert_eq!(integer_power(-1, 3, &t), Ok(-1));
        assert_eq!(integer_power(-1, -4, &t), Ok(1));
        assert_eq!(integer_power(0, 0, &t), Ok(1));
        assert_eq!(integer_power(0, 5, &t), Ok(0));
        assert_eq!(integer_power(2, 3, &t), Ok(8));
        assert!(integer_power(2, 10, &t).is_err());
        assert!(integer_power(2, -1, &t).is_err());
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(
            number_value("0.125"),
            Rational::new(BigInt::one(), BigInt::from(8))
        );
        assert!(number_value("000").is_zero());
    }
}
