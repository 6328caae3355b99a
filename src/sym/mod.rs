//! Exact symbolic algebra: Laurent polynomials in named symbols with
//! arbitrary-precision rational coefficients.
//!
//! A [`Poly`] is kept in canonical form (no zero coefficients), so
//! structural equality is mathematical equality. Formulas are parsed with
//! [`Poly::parse`] and printed by `Display` in a canonical text form that
//! parses back to the same value:
//!
//! ```
//! use symshard::sym::{Bindings, Poly, Rational};
//!
//! let cost = Poly::parse("2*m*n*k/p").unwrap();
//! assert_eq!(cost.to_string(), "2*k*m*n/p");
//! let sq = Poly::parse("(a+b)^2").unwrap();
//! assert_eq!(sq.to_string(), "a^2 + 2*a*b + b^2");
//!
//! let mut b = Bindings::new();
//! for (name, v) in [("m", 4), ("n", 3), ("k", 2), ("p", 8)] {
//!     b.insert(name.to_string(), Rational::from_integer(v.into()));
//! }
//! assert_eq!(cost.eval(&b).unwrap(), Rational::from_integer(6.into()));
//! ```

mod error;
mod ops;
pub mod parse;
mod poly;
mod roots;
mod serde_impl;
pub mod size;

pub use error::{ParseError, SymError};
pub use poly::{Bindings, Monomial, Poly, Rational};
pub use roots::{crossovers, CROSSOVER_BISECTIONS};

/// Serialises an exact number as text: a decimal integer (`"123"`), or a fraction (`"7/2"`), so
/// that no precision is lost beyond 2^53.
pub fn ser_rational<S: serde::Serializer>(r: &Rational, s: S) -> Result<S::Ok, S::Error> {
    if r.is_integer() {
        s.serialize_str(&r.to_integer().to_string())
    } else {
        s.serialize_str(&r.to_string())
    }
}

/// Serialises a map of exact numbers, each as [`ser_rational`]'s text.
pub fn ser_rational_map<S: serde::Serializer>(
    m: &std::collections::BTreeMap<String, Rational>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(k, v)| (k, v.to_string())))
}

/// `x` as a float, the largest float where it does not fit.
pub fn float(x: &Rational) -> f64 {
    num_traits::ToPrimitive::to_f64(x).unwrap_or(f64::MAX)
}
