//! The cost fold over a number that carries its own formula: an exact value and, where the
//! value is a polynomial in the model's symbols, that polynomial. Folding the same cost
//! functions ([`super::amount`], [`super::evaluate`](mod@super::evaluate)) over [`Traced`] gives every amount of an
//! evaluation together with its formula, in one computation, so a formula cannot disagree with
//! the number beside it. What is not a polynomial (a kernel's time read from a table's curves,
//! the larger of two stages, the smaller of the traffic and the compute it hides under) keeps
//! its value and loses its formula ([`Amount::piecewise`]).

use super::amount::Amount;
use super::analysis::{CP, DP, TP};
use crate::model::Model;
use crate::strategy::{Knobs, StrategyError};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, Zero};
use std::cmp::Ordering;
use std::ops::{Add, Div, Mul, Sub};

/// An exact amount and the formula in the model's symbols it is the value of, where it is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Traced {
    /// The exact value at the model's symbol values.
    pub value: Rational,
    /// The same amount as a polynomial in the model's symbols (mesh sizes and the micro-batch
    /// count put in), or `None` where it is not one.
    pub formula: Option<Poly>,
}

impl Traced {
    /// A constant: its own formula.
    pub fn constant(x: Rational) -> Traced {
        Traced {
            formula: Some(Poly::constant(x.clone())),
            value: x,
        }
    }

    /// A number that is no polynomial in the model's symbols.
    pub fn number(x: Rational) -> Traced {
        Traced {
            value: x,
            formula: None,
        }
    }

    fn zero_formula(&self) -> bool {
        self.formula.as_ref().is_some_and(Poly::is_zero)
    }
}

impl Default for Traced {
    fn default() -> Traced {
        Traced::constant(Rational::zero())
    }
}

impl Zero for Traced {
    fn zero() -> Traced {
        Traced::default()
    }
    fn is_zero(&self) -> bool {
        self.value.is_zero()
    }
}

impl PartialOrd for Traced {
    fn partial_cmp(&self, other: &Traced) -> Option<Ordering> {
        Some(self.value.cmp(&other.value))
    }
}

fn both(a: Option<Poly>, b: Option<Poly>, f: impl FnOnce(Poly, Poly) -> Poly) -> Option<Poly> {
    Some(f(a?, b?))
}

impl Add for Traced {
    type Output = Traced;
    fn add(self, o: Traced) -> Traced {
        Traced {
            value: self.value + o.value,
            formula: both(self.formula, o.formula, |a, b| a + b),
        }
    }
}

impl Sub for Traced {
    type Output = Traced;
    fn sub(self, o: Traced) -> Traced {
        Traced {
            value: self.value - o.value,
            formula: both(self.formula, o.formula, |a, b| a - b),
        }
    }
}

impl Mul for Traced {
    type Output = Traced;
    /// Zero times anything is zero, a formula even where the other factor has none.
    fn mul(self, o: Traced) -> Traced {
        let formula = if self.zero_formula() || o.zero_formula() {
            Some(Poly::zero())
        } else {
            both(self.formula, o.formula, |a, b| a * b)
        };
        Traced {
            value: self.value * o.value,
            formula,
        }
    }
}

impl Div for Traced {
    type Output = Traced;
    /// Division by a single term (a constant, a symbol's power); otherwise no formula.
    fn div(self, o: Traced) -> Traced {
        let formula = match (self.formula, &o.formula) {
            (Some(a), Some(d)) => a.checked_div(d).ok(),
            _ => None,
        };
        Traced {
            value: self.value / o.value,
            formula,
        }
    }
}

impl Amount for Traced {
    fn int(n: u64) -> Traced {
        Traced::constant(Rational::from_integer(n.into()))
    }
    fn exact(r: &Rational) -> Traced {
        Traced::constant(r.clone())
    }
    fn opaque(r: &Rational) -> Traced {
        Traced::number(r.clone())
    }
    fn at_least_everywhere(&self, other: &Traced) -> bool {
        match (&self.formula, &other.formula) {
            (Some(a), Some(b)) => (a.clone() - b.clone())
                .terms()
                .all(|(_, c)| *c >= Rational::zero()),
            _ => false,
        }
    }
    fn piecewise(self) -> Traced {
        Traced::number(self.value)
    }
}

/// How an operator's polynomial becomes its formula for one strategy: the mesh sizes put in,
/// a padded vocabulary put in (a ceiling, not a polynomial), and the batch symbol replaced by
/// the batch over the micro-batch count (the polynomials are per micro-batch). Evaluated at the
/// model's values, the formula gives what the polynomial gives at the micro-batch's bindings
/// ([`super::evaluate::microbatch_bindings`]).
#[derive(Debug, Clone)]
pub struct Fix {
    fixed: Bindings,
    batch: Option<(String, Poly)>,
}

impl Fix {
    /// The fix for `k` of `model` at `values`; `micro` are the micro-batch's bindings.
    pub fn new(model: &Model, values: &Bindings, micro: &Bindings, k: &Knobs) -> Fix {
        let mut fixed = Bindings::new();
        // The operators' formulas divide the tokens by the context-parallel degree too.
        for name in [DP, TP, CP] {
            if let Some(v) = micro.get(name) {
                fixed.insert(name.to_string(), v.clone());
            }
        }
        if let Some(vocab) = &model.roles.vocab {
            if let (Some(padded), Some(v)) = (micro.get(vocab), values.get(vocab)) {
                if padded != v {
                    fixed.insert(vocab.clone(), padded.clone());
                }
            }
        }
        let m = Rational::from_integer(k.microbatches.max(1).into());
        let batch = model
            .batch
            .as_deref()
            .filter(|b| values.contains_key(*b))
            .map(|b| {
                let per_micro = Poly::symbol(b) * Poly::constant(Rational::one() / m);
                (b.to_string(), per_micro)
            });
        Fix { fixed, batch }
    }

    /// `p` as a formula in the model's symbols, where binding and substituting succeed.
    pub fn formula(&self, p: &Poly) -> Option<Poly> {
        let p = p.bind(&self.fixed).ok()?;
        match &self.batch {
            Some((b, per_micro)) => p.substitute(b, per_micro).ok(),
            None => Some(p),
        }
    }
}

/// Where a block's polynomials are evaluated: the micro-batch's bindings, and with a [`Fix`]
/// their formulas too.
pub struct At<'a> {
    /// The micro-batch's bindings.
    pub bindings: &'a Bindings,
    /// How a polynomial becomes its formula, when formulas are wanted.
    pub fix: Option<&'a Fix>,
}

/// A number the exact evaluation folds over: [`Rational`] (the numbers alone) or [`Traced`]
/// (each with its formula).
pub trait Priced: Amount + std::fmt::Debug {
    /// Whether the numbers carry formulas.
    const FORMULAS: bool;
    /// `p` at `at`.
    fn eval(p: &Poly, at: &At<'_>) -> Result<Self, StrategyError>;
    /// A constant (a mesh size, a share, a machine balance): its own formula.
    fn constant(x: Rational) -> Self;
    /// A number that is no polynomial in the model's symbols.
    fn number(x: Rational) -> Self;
    /// The exact value.
    fn value(&self) -> &Rational;
    /// The formula, where there is one.
    fn formula(&self) -> Option<&Poly>;
}

impl Priced for Rational {
    const FORMULAS: bool = false;
    fn eval(p: &Poly, at: &At<'_>) -> Result<Rational, StrategyError> {
        Ok(p.eval(at.bindings)?)
    }
    fn constant(x: Rational) -> Rational {
        x
    }
    fn number(x: Rational) -> Rational {
        x
    }
    fn value(&self) -> &Rational {
        self
    }
    fn formula(&self) -> Option<&Poly> {
        None
    }
}

impl Priced for Traced {
    const FORMULAS: bool = true;
    fn eval(p: &Poly, at: &At<'_>) -> Result<Traced, StrategyError> {
        Ok(Traced {
            value: p.eval(at.bindings)?,
            formula: at.fix.and_then(|f| f.formula(p)),
        })
    }
    fn constant(x: Rational) -> Traced {
        Traced::constant(x)
    }
    fn number(x: Rational) -> Traced {
        Traced::number(x)
    }
    fn value(&self) -> &Rational {
        &self.value
    }
    fn formula(&self) -> Option<&Poly> {
        self.formula.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: i64) -> Rational {
        Rational::from_integer(n.into())
    }

    fn t(value: i64, formula: &str) -> Traced {
        Traced {
            value: q(value),
            formula: Some(Poly::parse(formula).unwrap()),
        }
    }

    /// Arithmetic on traced numbers is arithmetic on the values and on the formulas; a formula
    /// is lost where an operand has none or the divisor is not a single term, except that zero
    /// times anything is zero.
    #[test]
    fn arithmetic_carries_the_formulas() {
        let x = t(6, "2*a");
        let y = t(3, "a");
        assert_eq!(x.clone() + y.clone(), t(9, "3*a"));
        assert_eq!(x.clone() - y.clone(), t(3, "a"));
        assert_eq!(x.clone() * y.clone(), t(18, "2*a^2"));
        assert_eq!(x.clone() / y.clone(), t(2, "2"));
        let sum = t(4, "a + 1");
        assert_eq!((x.clone() / sum).formula, None);
        let curve = Traced::number(q(5));
        assert_eq!((x.clone() + curve.clone()).formula, None);
        assert_eq!((curve.clone() * Traced::zero()).formula, Some(Poly::zero()));
        assert_eq!(x.clone().piecewise(), Traced::number(q(6)));
        assert!(x > y);
    }
}
