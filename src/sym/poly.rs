//! Monomials and Laurent polynomials with exact rational coefficients.

use std::cmp::Ordering;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};

use super::error::{ParseError, SymError};

/// Exact rational number used for all coefficients and values.
pub type Rational = num_rational::BigRational;

/// Values of symbols: symbol name -> exact value.
pub type Bindings = BTreeMap<String, Rational>;

/// A product of symbols raised to non-zero integer (possibly negative)
/// exponents, such as `x^2*y/p`.
///
/// The derived ordering compares the `(symbol, exponent)` pairs
/// lexicographically; [`Monomial::graded_cmp`] gives the order used for
/// display.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Monomial {
    exps: BTreeMap<String, i32>,
}

impl Monomial {
    /// The empty product, `1`.
    pub fn one() -> Self {
        Monomial::default()
    }

    /// The monomial consisting of the single symbol `name`.
    pub fn var(name: &str) -> Self {
        let mut exps = BTreeMap::new();
        exps.insert(name.to_string(), 1);
        Monomial { exps }
    }

    /// Builds a monomial from `(symbol, exponent)` pairs; exponents of
    /// repeated symbols are added and zero exponents dropped.
    ///
    /// # Panics
    /// Panics if an exponent overflows `i32`.
    pub fn from_exponents<'a>(pairs: impl IntoIterator<Item = (&'a str, i32)>) -> Self {
        let mut exps: BTreeMap<String, i32> = BTreeMap::new();
        for (name, e) in pairs {
            let slot = exps.entry(name.to_string()).or_insert(0);
            *slot = slot.checked_add(e).expect("exponent overflow");
        }
        exps.retain(|_, e| *e != 0);
        Monomial { exps }
    }

    /// Total degree: the sum of all exponents (negative ones included).
    pub fn degree(&self) -> i64 {
        self.exps.values().map(|&e| i64::from(e)).sum()
    }

    /// Exponent of `name`, zero when the symbol does not occur.
    pub fn exponent(&self, name: &str) -> i32 {
        self.exps.get(name).copied().unwrap_or(0)
    }

    /// The `(symbol, exponent)` pairs in alphabetical order of symbol.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32)> {
        self.exps.iter().map(|(k, &v)| (k.as_str(), v))
    }

    /// Whether this is the empty product `1`.
    pub fn is_one(&self) -> bool {
        self.exps.is_empty()
    }

    /// Largest absolute value of an exponent, zero for `1`.
    pub fn max_abs_exponent(&self) -> u64 {
        self.exps
            .values()
            .map(|e| u64::from(e.unsigned_abs()))
            .max()
            .unwrap_or(0)
    }

    /// Product of two monomials.
    ///
    /// # Panics
    /// Panics if an exponent overflows `i32`.
    pub fn mul(&self, other: &Monomial) -> Monomial {
        let mut exps = self.exps.clone();
        for (name, &e) in &other.exps {
            match exps.get_mut(name) {
                Some(slot) => {
                    *slot = slot.checked_add(e).expect("exponent overflow");
                    if *slot == 0 {
                        exps.remove(name);
                    }
                }
                None => {
                    exps.insert(name.clone(), e);
                }
            }
        }
        Monomial { exps }
    }

    /// This monomial with every exponent multiplied by `k` (`k != 0`).
    ///
    /// # Panics
    /// Panics if `k` is zero or an exponent overflows `i32`.
    pub fn scale_exponents(&self, k: i32) -> Monomial {
        assert!(k != 0, "scale_exponents by zero");
        let exps = self
            .exps
            .iter()
            .map(|(n, &e)| (n.clone(), e.checked_mul(k).expect("exponent overflow")))
            .collect();
        Monomial { exps }
    }

    /// This monomial without the symbol `name`, plus that symbol's exponent.
    pub fn split_off(&self, name: &str) -> (Monomial, i32) {
        let mut rest = self.clone();
        let e = rest.exps.remove(name).unwrap_or(0);
        (rest, e)
    }

    /// Display order: higher total degree first; ties are broken
    /// lexicographically on exponents, taking symbols alphabetically, the
    /// larger exponent first (so `x^2 < x*y < y^2 < x < 1`).
    pub fn graded_cmp(&self, other: &Monomial) -> Ordering {
        other.degree().cmp(&self.degree()).then_with(|| {
            let mut a = self.exps.iter().peekable();
            let mut b = other.exps.iter().peekable();
            loop {
                let order = match (a.peek(), b.peek()) {
                    (None, None) => return Ordering::Equal,
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (Some(x), Some(y)) => x.0.cmp(y.0),
                };
                let ea = match order {
                    Ordering::Greater => 0,
                    _ => a.next().map_or(0, |x| *x.1),
                };
                let eb = match order {
                    Ordering::Less => 0,
                    _ => b.next().map_or(0, |x| *x.1),
                };
                if ea != eb {
                    return eb.cmp(&ea);
                }
            }
        })
    }
}

/// A Laurent polynomial in named symbols with exact rational coefficients.
///
/// The representation is canonical: no stored coefficient is zero, so two
/// polynomials are equal exactly when they are equal as `Poly` values.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Poly {
    terms: BTreeMap<Monomial, Rational>,
}

impl Poly {
    /// The zero polynomial.
    pub fn zero() -> Poly {
        Poly::default()
    }

    /// The constant `1`.
    pub fn one() -> Poly {
        Poly::int(1)
    }

    /// An integer constant.
    pub fn int(v: i64) -> Poly {
        Poly::from_bigint(BigInt::from(v))
    }

    /// An integer constant of any size.
    pub fn from_bigint(v: BigInt) -> Poly {
        Poly::constant(Rational::from_integer(v))
    }

    /// A rational constant.
    pub fn constant(r: Rational) -> Poly {
        Poly::monomial(r, Monomial::one())
    }

    /// The polynomial consisting of one symbol. The name should be an
    /// identifier (`[A-Za-z_][A-Za-z0-9_]*`) for the text form to parse back.
    pub fn symbol(name: &str) -> Poly {
        Poly::monomial(Rational::one(), Monomial::var(name))
    }

    /// A single term `coeff * m` (zero if `coeff` is zero).
    pub fn monomial(coeff: Rational, m: Monomial) -> Poly {
        let mut terms = BTreeMap::new();
        if !coeff.is_zero() {
            terms.insert(m, coeff);
        }
        Poly { terms }
    }

    /// Parses a formula; see the [`parse`](super::parse) module for the grammar.
    pub fn parse(text: &str) -> Result<Poly, ParseError> {
        super::parse::parse(text)
    }

    /// Whether this is the zero polynomial.
    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether this polynomial has no symbols (zero included).
    pub fn is_constant(&self) -> bool {
        self.terms.keys().all(Monomial::is_one)
    }

    /// The value of a constant polynomial (`Some(0)` for zero).
    pub fn as_constant(&self) -> Option<Rational> {
        match self.terms.len() {
            0 => Some(Rational::zero()),
            1 => self
                .terms
                .iter()
                .next()
                .filter(|(m, _)| m.is_one())
                .map(|(_, c)| c.clone()),
            _ => None,
        }
    }

    /// The value of a constant polynomial whose value is an integer.
    pub fn as_integer(&self) -> Option<BigInt> {
        self.as_constant()
            .filter(|r| r.is_integer())
            .map(|r| r.to_integer())
    }

    /// All symbols that occur in some term.
    pub fn symbols(&self) -> BTreeSet<String> {
        self.terms
            .keys()
            .flat_map(|m| m.iter().map(|(n, _)| n.to_string()))
            .collect()
    }

    /// The terms, ordered by the derived order of [`Monomial`] (not the
    /// display order). Coefficients are never zero.
    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, &Rational)> {
        self.terms.iter()
    }

    /// Number of terms (zero has none).
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether the polynomial has no terms, i.e. is zero.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether the polynomial is exactly one (non-zero) term.
    pub fn is_monomial(&self) -> bool {
        self.terms.len() == 1
    }

    /// Largest number of bits of a coefficient's numerator plus denominator.
    pub fn max_coeff_bits(&self) -> u64 {
        self.terms
            .values()
            .map(|c| c.numer().bits() + c.denom().bits())
            .max()
            .unwrap_or(0)
    }

    /// Largest absolute value of any exponent.
    pub fn max_abs_exponent(&self) -> u64 {
        self.terms
            .keys()
            .map(Monomial::max_abs_exponent)
            .max()
            .unwrap_or(0)
    }

    /// Adds `coeff * m` to this polynomial in place.
    pub fn add_term(&mut self, m: Monomial, coeff: Rational) {
        if coeff.is_zero() {
            return;
        }
        match self.terms.entry(m) {
            Entry::Vacant(v) => {
                v.insert(coeff);
            }
            Entry::Occupied(mut o) => {
                add_rational(o.get_mut(), &coeff);
                if o.get().is_zero() {
                    o.remove();
                }
            }
        }
    }

    /// [`Poly::add_term`] of `sign · coeff · m`, copying `m` only when it is a new term.
    pub(crate) fn add_term_ref(&mut self, m: &Monomial, coeff: &Rational, negate: bool) {
        if coeff.is_zero() {
            return;
        }
        match self.terms.get_mut(m) {
            Some(c) => {
                if negate {
                    *c -= coeff;
                } else {
                    add_rational(c, coeff);
                }
                if c.is_zero() {
                    self.terms.remove(m);
                }
            }
            None => {
                let c = if negate {
                    -coeff.clone()
                } else {
                    coeff.clone()
                };
                self.terms.insert(m.clone(), c);
            }
        }
    }

    /// Adds `scale * other` to this polynomial in place.
    pub(crate) fn add_scaled(&mut self, other: &Poly, coeff: &Rational, m: &Monomial) {
        for (om, oc) in &other.terms {
            self.add_term(om.mul(m), mul_rational(oc, coeff));
        }
    }

    /// Division by a single non-zero term.
    pub fn checked_div(&self, d: &Poly) -> Result<Poly, SymError> {
        if d.is_zero() {
            return Err(SymError::DivisionByZero { symbol: None });
        }
        if !d.is_monomial() {
            return Err(SymError::NonMonomialDivisor {
                divisor: d.to_string(),
            });
        }
        Ok(self * &d.pow(-1)?)
    }

    /// Integer power. Negative exponents are allowed only for single-term
    /// polynomials; `0^0` is `1`.
    ///
    /// # Panics
    /// Panics if an exponent of the result overflows `i32`.
    pub fn pow(&self, e: i32) -> Result<Poly, SymError> {
        if e == 0 {
            return Ok(Poly::one());
        }
        if self.terms.len() == 1 {
            let (m, c) = self.terms.iter().next().expect("one term");
            return Ok(Poly::monomial(c.pow(e), m.scale_exponents(e)));
        }
        if e < 0 {
            return Err(if self.is_zero() {
                SymError::DivisionByZero { symbol: None }
            } else {
                SymError::NegativePowerOfSum {
                    base: self.to_string(),
                }
            });
        }
        let mut result = Poly::one();
        let mut base = self.clone();
        let mut k = e.unsigned_abs();
        while k > 0 {
            if k & 1 == 1 {
                result = &result * &base;
            }
            k >>= 1;
            if k > 0 {
                base = &base * &base;
            }
        }
        Ok(result)
    }

    /// Replaces the symbol `name` by `value`. Negative powers of `name`
    /// require `value` to be a single non-zero term.
    pub fn substitute(&self, name: &str, value: &Poly) -> Result<Poly, SymError> {
        let mut powers: BTreeMap<i32, Poly> = BTreeMap::new();
        let mut out = Poly::zero();
        for (m, c) in &self.terms {
            let (rest, e) = m.split_off(name);
            if e == 0 {
                out.add_term(rest, c.clone());
                continue;
            }
            let power = match powers.entry(e) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => v.insert(value.pow(e).map_err(|err| match err {
                    SymError::DivisionByZero { .. } => SymError::DivisionByZero {
                        symbol: Some(name.to_string()),
                    },
                    other => other,
                })?),
            };
            out.add_scaled(power, c, &rest);
        }
        Ok(out)
    }

    /// Partial evaluation: every bound symbol is replaced by its value,
    /// the others are kept.
    pub fn bind(&self, b: &Bindings) -> Result<Poly, SymError> {
        let mut out = Poly::zero();
        for (m, c) in &self.terms {
            let mut coeff = c.clone();
            let mut kept = Vec::new();
            for (name, e) in m.iter() {
                match b.get(name) {
                    Some(v) => {
                        if v.is_zero() && e < 0 {
                            return Err(SymError::DivisionByZero {
                                symbol: Some(name.to_string()),
                            });
                        }
                        coeff *= v.pow(e);
                    }
                    None => kept.push((name, e)),
                }
            }
            out.add_term(Monomial::from_exponents(kept), coeff);
        }
        Ok(out)
    }

    /// Full evaluation. Fails with [`SymError::Unbound`] naming the first
    /// (alphabetically) symbol without a value.
    pub fn eval(&self, b: &Bindings) -> Result<Rational, SymError> {
        // The fast path answers only when every symbol is bound; otherwise the exact path names
        // the first unbound symbol in name order.
        if let Some(v) = self.eval_i128(b) {
            return Ok(v);
        }
        self.eval_exact(b)
    }

    /// [`Poly::eval`] in arbitrary precision throughout (no 128-bit fast path): the reference
    /// the fast path is tested against.
    pub fn eval_exact(&self, b: &Bindings) -> Result<Rational, SymError> {
        if let Some(s) = self.symbols().into_iter().find(|s| !b.contains_key(s)) {
            return Err(SymError::Unbound { symbol: s });
        }
        // Term by term, without building intermediate polynomials.
        let mut sum = Rational::zero();
        for (m, c) in &self.terms {
            let mut term = c.clone();
            for (name, e) in m.iter() {
                let v = &b[name];
                if v.is_zero() && e < 0 {
                    return Err(SymError::DivisionByZero {
                        symbol: Some(name.to_string()),
                    });
                }
                term *= v.pow(e);
            }
            sum += term;
        }
        Ok(sum)
    }

    /// [`Poly::eval`] in checked 128-bit integer fractions, every symbol bound: `None` on any
    /// overflow or a division by zero, which the exact path then handles (the two agree
    /// wherever this one answers: it is the same arithmetic, reduced at the end).
    fn eval_i128(&self, b: &Bindings) -> Option<Rational> {
        use num_traits::ToPrimitive;
        fn gcd(mut a: i128, mut b: i128) -> i128 {
            a = a.abs();
            b = b.abs();
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        // A fraction n/d with d > 0, reduced.
        fn reduced(n: i128, d: i128) -> Option<(i128, i128)> {
            let g = gcd(n, d).max(1);
            let (n, d) = (n / g, d / g);
            if d < 0 {
                Some((n.checked_neg()?, d.checked_neg()?))
            } else {
                Some((n, d))
            }
        }
        let (mut num, mut den) = (0i128, 1i128);
        for (m, c) in &self.terms {
            let (mut tn, mut td) = (c.numer().to_i128()?, c.denom().to_i128()?);
            for (name, e) in m.iter() {
                let v = b.get(name)?;
                let (vn, vd) = (v.numer().to_i128()?, v.denom().to_i128()?);
                let k = e.unsigned_abs();
                let (pn, pd) = if e >= 0 { (vn, vd) } else { (vd, vn) };
                if pd == 0 {
                    return None;
                }
                tn = tn.checked_mul(pn.checked_pow(k)?)?;
                td = td.checked_mul(pd.checked_pow(k)?)?;
                (tn, td) = reduced(tn, td)?;
            }
            // num/den + tn/td over the least common denominator.
            let g = gcd(den, td).max(1);
            let lcd = (den / g).checked_mul(td)?;
            num = num
                .checked_mul(lcd / den)?
                .checked_add(tn.checked_mul(lcd / td)?)?;
            (num, den) = reduced(num, lcd)?;
        }
        // Already in lowest terms with a positive denominator: no second reduction.
        Some(Rational::new_raw(BigInt::from(num), BigInt::from(den)))
    }

    /// Compares the values of two polynomials under the given bindings.
    pub fn cmp_under(&self, other: &Poly, b: &Bindings) -> Result<Ordering, SymError> {
        Ok(self.eval(b)?.cmp(&other.eval(b)?))
    }

    /// `(min, max)` exponent of `name` over all terms (terms without the
    /// symbol count as exponent 0); `(0, 0)` if the symbol does not occur.
    pub fn degree_in(&self, name: &str) -> (i32, i32) {
        if self.is_zero() {
            return (0, 0);
        }
        self.terms
            .keys()
            .map(|m| m.exponent(name))
            .fold((i32::MAX, i32::MIN), |(lo, hi), e| (lo.min(e), hi.max(e)))
    }

    /// Terms in display order (see [`Monomial::graded_cmp`]).
    pub fn sorted_terms(&self) -> Vec<(&Monomial, &Rational)> {
        let mut v: Vec<_> = self.terms.iter().collect();
        v.sort_by(|a, b| a.0.graded_cmp(b.0));
        v
    }

    pub(crate) fn into_map(self) -> BTreeMap<Monomial, Rational> {
        self.terms
    }

    pub(crate) fn map_mut(&mut self) -> &mut BTreeMap<Monomial, Rational> {
        &mut self.terms
    }
}

/// `a * b`, skipping the gcd reductions when both are integers.
pub(crate) fn mul_rational(a: &Rational, b: &Rational) -> Rational {
    if a.is_integer() && b.is_integer() {
        Rational::from_integer(a.numer() * b.numer())
    } else {
        a * b
    }
}

/// `*a += b`, skipping the gcd reductions when both are integers.
pub(crate) fn add_rational(a: &mut Rational, b: &Rational) {
    if a.is_integer() && b.is_integer() {
        *a = Rational::from_integer(a.numer() + b.numer());
    } else {
        *a += b;
    }
}

fn write_factors(f: &mut fmt::Formatter<'_>, factors: &[(&str, i32)]) -> fmt::Result {
    for (i, (name, e)) in factors.iter().enumerate() {
        if i > 0 {
            f.write_str("*")?;
        }
        f.write_str(name)?;
        if *e != 1 {
            write!(f, "^{e}")?;
        }
    }
    Ok(())
}

fn write_term(f: &mut fmt::Formatter<'_>, m: &Monomial, abs: &Rational) -> fmt::Result {
    let num: Vec<(&str, i32)> = m.iter().filter(|(_, e)| *e > 0).collect();
    let den: Vec<(&str, i32)> = m
        .iter()
        .filter(|(_, e)| *e < 0)
        .map(|(n, e)| (n, -e))
        .collect();
    let unit = abs.is_one();
    if !unit || num.is_empty() {
        write!(f, "{}", abs.numer())?;
        if !abs.denom().is_one() {
            write!(f, "/{}", abs.denom())?;
        }
        if !num.is_empty() {
            f.write_str("*")?;
        }
    }
    write_factors(f, &num)?;
    match den.len() {
        0 => Ok(()),
        1 => {
            f.write_str("/")?;
            write_factors(f, &den)
        }
        _ => {
            f.write_str("/(")?;
            write_factors(f, &den)?;
            f.write_str(")")
        }
    }
}

impl fmt::Display for Poly {
    /// Canonical text: terms by descending total degree, coefficient `1`
    /// omitted, negative exponents written as divisions, e.g.
    /// `x^2 + 3/2*x*y - 1` or `b*n/p^2`. The text parses back to the same
    /// polynomial.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        for (i, (m, c)) in self.sorted_terms().into_iter().enumerate() {
            let neg = c.is_negative();
            match (i, neg) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            write_term(f, m, &c.abs())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Poly {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Poly, ParseError> {
        Poly::parse(s)
    }
}

impl From<i64> for Poly {
    fn from(v: i64) -> Poly {
        Poly::int(v)
    }
}

impl From<BigInt> for Poly {
    fn from(v: BigInt) -> Poly {
        Poly::from_bigint(v)
    }
}

impl From<Rational> for Poly {
    fn from(v: Rational) -> Poly {
        Poly::constant(v)
    }
}

impl Poly {
    /// Replaces every symbol named in `map` by its value at once (symbols not in `map` stay).
    /// Negative powers need single-term values.
    pub fn substitute_all(
        &self,
        map: &std::collections::BTreeMap<String, Poly>,
    ) -> Result<Poly, SymError> {
        let mut out = Poly::zero();
        for (m, c) in self.terms() {
            let mut term = Poly::constant(c.clone());
            let mut rest: Vec<(&str, i32)> = Vec::new();
            for (name, e) in m.iter() {
                match map.get(name) {
                    Some(v) => term = &term * &v.pow(e)?,
                    None => rest.push((name, e)),
                }
            }
            if !rest.is_empty() {
                term = &term
                    * &Poly::monomial(
                        Rational::from_integer(1.into()),
                        Monomial::from_exponents(rest),
                    );
            }
            out += term;
        }
        Ok(out)
    }
}
