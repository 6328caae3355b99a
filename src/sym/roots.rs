//! Exact real-root isolation for crossover points between two costs.

use num_traits::{One, Signed, Zero};

use super::error::SymError;
use super::poly::{Bindings, Poly, Rational};

/// Number of bisection steps: roots are bracketed to `(hi - lo) / 2^40`.
pub const CROSSOVER_BISECTIONS: u32 = 40;

/// Values of `var` in `[lo, hi]` where `a` and `b` are equal.
///
/// After binding `fixed`, `a - b` must be a Laurent polynomial in `var`
/// alone (otherwise [`SymError::Unbound`] names the first other symbol).
/// It is multiplied by a power of `var` to give an ordinary polynomial
/// whose distinct real roots are isolated with a Sturm sequence and then
/// bisected with exact rationals.
///
/// Precision: one value is returned per distinct root, sorted ascending.
/// Each is within `(hi - lo) / 2^41` of the true root; roots that land on
/// `lo`, `hi`, `0` or a bisection point are returned exactly. A pole of a
/// negative power at `var = 0` is not a root. If `a - b` is identically
/// zero there is no isolated crossover and the result is empty, as it is
/// when `lo > hi`.
pub fn crossovers(
    a: &Poly,
    b: &Poly,
    var: &str,
    fixed: &Bindings,
    lo: &Rational,
    hi: &Rational,
) -> Result<Vec<Rational>, SymError> {
    let d = (a - b).bind(fixed)?;
    if let Some(s) = d.symbols().into_iter().find(|s| s != var) {
        return Err(SymError::Unbound { symbol: s });
    }
    if lo > hi || d.is_zero() {
        return Ok(Vec::new());
    }
    let (min, max) = d.degree_in(var);
    let len = usize::try_from(i64::from(max) - i64::from(min)).expect("max >= min") + 1;
    let mut coeffs = vec![Rational::zero(); len];
    for (m, c) in d.terms() {
        let i = usize::try_from(i64::from(m.exponent(var)) - i64::from(min)).expect("in range");
        coeffs[i] += c;
    }
    let mut roots = Vec::new();
    if min > 0 && *lo <= Rational::zero() && Rational::zero() <= *hi {
        roots.push(Rational::zero());
    }
    let p = square_free(coeffs);
    if p.len() > 1 {
        let sturm = Sturm::new(p);
        sturm.roots_in(lo, hi, &mut roots);
    }
    roots.sort();
    roots.dedup();
    Ok(roots)
}

type Dense = Vec<Rational>;

fn trim(mut p: Dense) -> Dense {
    while p.last().is_some_and(Zero::is_zero) {
        p.pop();
    }
    p
}

fn eval(p: &[Rational], x: &Rational) -> Rational {
    p.iter().rev().fold(Rational::zero(), |acc, c| acc * x + c)
}

fn derivative(p: &[Rational]) -> Dense {
    p.iter()
        .enumerate()
        .skip(1)
        .map(|(i, c)| c * Rational::from_integer(i.into()))
        .collect()
}

/// Scales `p` so that its leading coefficient is `1` (or `-1` when
/// `keep_sign`), which leaves the sign of `p` at any point unchanged.
fn normalize(p: Dense, keep_sign: bool) -> Dense {
    let lead = match p.last() {
        Some(l) if keep_sign => l.abs(),
        Some(l) => l.clone(),
        None => return p,
    };
    p.into_iter().map(|c| c / &lead).collect()
}

/// Quotient and remainder of `a / b`, `b` non-zero and trimmed.
fn div_rem(a: &[Rational], b: &[Rational]) -> (Dense, Dense) {
    let mut r: Dense = a.to_vec();
    let lead = b.last().expect("non-zero divisor");
    if a.len() < b.len() {
        return (Vec::new(), trim(r));
    }
    let mut q = vec![Rational::zero(); a.len() - b.len() + 1];
    for i in (0..q.len()).rev() {
        let c = &r[i + b.len() - 1] / lead;
        if !c.is_zero() {
            for (j, bj) in b.iter().enumerate() {
                r[i + j] -= &c * bj;
            }
        }
        q[i] = c;
    }
    r.truncate(b.len() - 1);
    (trim(q), trim(r))
}

fn gcd(a: Dense, b: Dense) -> Dense {
    let (mut a, mut b) = (normalize(trim(a), false), normalize(trim(b), false));
    while !b.is_empty() {
        let (_, r) = div_rem(&a, &b);
        a = b;
        b = normalize(r, false);
    }
    a
}

/// `p / gcd(p, p')`: same distinct roots, all simple.
fn square_free(p: Dense) -> Dense {
    let p = trim(p);
    if p.len() <= 2 {
        return p;
    }
    let g = gcd(p.clone(), derivative(&p));
    div_rem(&p, &g).0
}

struct Sturm {
    chain: Vec<Dense>,
}

impl Sturm {
    fn new(p: Dense) -> Sturm {
        let d = derivative(&p);
        let mut chain = vec![normalize(p, true), normalize(d, true)];
        loop {
            let n = chain.len();
            let (_, r) = div_rem(&chain[n - 2], &chain[n - 1]);
            if r.is_empty() {
                break;
            }
            chain.push(normalize(r.into_iter().map(|c| -c).collect(), true));
        }
        Sturm { chain }
    }

    fn is_root(&self, x: &Rational) -> bool {
        eval(&self.chain[0], x).is_zero()
    }

    fn variations(&self, x: &Rational) -> usize {
        let mut count = 0;
        let mut last = 0i8;
        for p in &self.chain {
            let v = eval(p, x);
            let s = if v.is_positive() {
                1
            } else if v.is_negative() {
                -1
            } else {
                continue;
            };
            if last != 0 && s != last {
                count += 1;
            }
            last = s;
        }
        count
    }

    /// Number of distinct roots in the half-open interval `(a, b]`.
    fn count(&self, a: &Rational, b: &Rational) -> usize {
        self.variations(a).saturating_sub(self.variations(b))
    }

    fn roots_in(&self, lo: &Rational, hi: &Rational, out: &mut Vec<Rational>) {
        if self.is_root(lo) {
            out.push(lo.clone());
        }
        if lo == hi {
            return;
        }
        let two = Rational::from_integer(2.into());
        let tol =
            (hi - lo) / Rational::from_integer(num_bigint::BigInt::one() << CROSSOVER_BISECTIONS);
        let mut stack = vec![(lo.clone(), hi.clone())];
        while let Some((a, b)) = stack.pop() {
            match self.count(&a, &b) {
                0 => {}
                1 => out.push(self.refine(a, b, &tol)),
                _ => {
                    let m = (&a + &b) / &two;
                    stack.push((a, m.clone()));
                    stack.push((m, b));
                }
            }
        }
    }

    /// Narrows `(a, b]`, which holds exactly one root, to width `tol`.
    fn refine(&self, mut a: Rational, mut b: Rational, tol: &Rational) -> Rational {
        let two = Rational::from_integer(2.into());
        loop {
            if self.is_root(&b) {
                return b;
            }
            let m = (&a + &b) / &two;
            if &b - &a <= *tol {
                return m;
            }
            if self.count(&a, &m) == 1 {
                b = m;
            } else {
                a = m;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(n: i64, d: i64) -> Rational {
        Rational::new(n.into(), d.into())
    }

    #[test]
    fn square_free_drops_repeated_factors() {
        // (x - 1)^2 (x + 2) = x^3 - 3x + 2
        let p = vec![r(2, 1), r(-3, 1), r(0, 1), r(1, 1)];
        let q = normalize(square_free(p), false);
        assert_eq!(q, vec![r(-2, 1), r(1, 1), r(1, 1)]);
    }

    #[test]
    fn sturm_counts_roots() {
        // x^2 - 2
        let s = Sturm::new(vec![r(-2, 1), r(0, 1), r(1, 1)]);
        assert_eq!(s.count(&r(-4, 1), &r(4, 1)), 2);
        assert_eq!(s.count(&r(0, 1), &r(4, 1)), 1);
        assert_eq!(s.count(&r(3, 2), &r(4, 1)), 0);
    }
}
