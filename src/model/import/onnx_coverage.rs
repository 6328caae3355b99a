//! How much of an ONNX graph the mapped operators cover: their FLOPs and parameters against
//! those the unmapped nodes imply, as formulas in the graph's symbolic sizes (the batch and
//! sequence of an export with dynamic axes), and the share they cover.
//!
//! A share of formulas is measured over every size at once, not at a default the user never
//! chose: at sizes of 1 a graph's attention (quadratic in the sequence) weighs next to nothing,
//! and an unmapped node there would go unseen. Written in `x = 1 + y` for each size `x`, both
//! formulas have coefficients ≥ 0 wherever the sizes only multiply (as they do in every
//! transformer); then for every `y ≥ 0`, mapped(y) ≥ r · total(y) with `r` the least ratio of
//! their coefficients, term by term: `r` is a share the mapped operators cover at every size
//! ≥ 1 (and the term without `y` is the share at sizes 1 itself).

use super::onnx::MIN_COVERAGE_PERCENT;
use crate::sym::{Bindings, Monomial, Poly, Rational};
use num_traits::{ToPrimitive, Zero};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How much of the graph the mapped operators cover. The counts are formulas in the graph's
/// symbolic sizes (numbers when it has none); the hidden size and heads an import writes as
/// symbols are numbers of the file, and are counted as such.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coverage {
    /// Forward FLOPs of the mapped operators.
    pub mapped_flops: String,
    /// Forward FLOPs the unmapped nodes imply; `None` when some of them read tensors of unknown
    /// shape.
    pub unmapped_flops: Option<String>,
    /// Parameters of the mapped operators.
    pub mapped_params: String,
    /// Elements of the weights (floating initializers) that only unmapped nodes read.
    pub unmapped_params: String,
    /// Mapped FLOPs in percent of all (rounded down to 0.01); `None` when not measurable:
    /// unmapped nodes read tensors of unknown shape, or the graph has no FLOPs at all.
    pub flops_percent: Option<f64>,
    /// Mapped parameters in percent of all (rounded down to 0.01); `None` when the graph has
    /// no parameters (nothing to cover, not 100 % of something).
    pub params_percent: Option<f64>,
    /// Where the percentages hold: `exact` (every size is a number), `least at any B, S ≥ 1`
    /// (the least share at any sizes), or `at B = 1, …` (the import's sizes, where the formulas
    /// have negative terms and the least share cannot be bounded term by term).
    pub basis: String,
    /// Whether both are at least [`MIN_COVERAGE_PERCENT`] (a graph without parameters counts
    /// by its FLOPs alone; one without FLOPs is never complete).
    pub complete: bool,
}

impl Coverage {
    /// `99.5 % of the FLOPs`, `an unknown share of the FLOPs` or `no FLOPs to cover`.
    pub fn flops_text(&self) -> String {
        match (self.flops_percent, &self.unmapped_flops) {
            (Some(f), _) => format!("{f} % of the FLOPs"),
            (None, None) => "an unknown share of the FLOPs".into(),
            (None, Some(_)) => "no FLOPs to cover".into(),
        }
    }

    /// `100 % of the parameters`, or `no parameters to cover`.
    pub fn params_text(&self) -> String {
        match self.params_percent {
            Some(p) => format!("{p} % of the parameters"),
            None => "no parameters to cover".into(),
        }
    }
}

/// The counts a coverage compares, as formulas.
pub(super) struct Counts {
    pub mapped_flops: Poly,
    /// `None` when some unmapped node reads a tensor of unknown shape.
    pub unmapped_flops: Option<Poly>,
    pub mapped_params: Poly,
    pub unmapped_params: Poly,
}

/// How a share was measured.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Basis {
    Exact,
    Least,
    AtSizes,
}

/// The coverage of `c`; `sizes` are the import's sizes, the fallback where a least share
/// cannot be bounded.
pub(super) fn coverage(c: &Counts, sizes: &Bindings) -> Coverage {
    let flops = c
        .unmapped_flops
        .as_ref()
        .map(|u| share(&c.mapped_flops, u, sizes));
    let params = share(&c.mapped_params, &c.unmapped_params, sizes);
    let least = Rational::new(MIN_COVERAGE_PERCENT.into(), 100.into());
    let ok = |s: &Option<Rational>| s.as_ref().is_some_and(|s| *s >= least);
    let flops_ok = flops.as_ref().is_some_and(|(s, _)| ok(s));
    // No parameters at all: nothing of them is missing.
    let params_ok = params.0.is_none() || ok(&params.0);
    let basis = flops
        .iter()
        .map(|(_, b)| *b)
        .chain([params.1])
        .max()
        .unwrap_or(Basis::Exact);
    let symbols: BTreeSet<String> = [&c.mapped_flops, &c.mapped_params, &c.unmapped_params]
        .into_iter()
        .chain(c.unmapped_flops.as_ref())
        .flat_map(Poly::symbols)
        .collect();
    Coverage {
        mapped_flops: c.mapped_flops.to_string(),
        unmapped_flops: c.unmapped_flops.as_ref().map(Poly::to_string),
        mapped_params: c.mapped_params.to_string(),
        unmapped_params: c.unmapped_params.to_string(),
        flops_percent: flops.as_ref().and_then(|(s, _)| s.as_ref().map(percent)),
        params_percent: params.0.as_ref().map(percent),
        basis: basis_text(basis, &symbols, sizes),
        complete: flops_ok && params_ok,
    }
}

fn basis_text(basis: Basis, symbols: &BTreeSet<String>, sizes: &Bindings) -> String {
    let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
    match basis {
        Basis::Exact => "exact".into(),
        Basis::Least => format!("least at any {} ≥ 1", names.join(", ")),
        Basis::AtSizes => {
            let at: Vec<String> = names
                .iter()
                .map(|s| match sizes.get(*s) {
                    Some(v) => format!("{s} = {v}"),
                    None => format!("{s} unbound"),
                })
                .collect();
            format!("at {}", at.join(", "))
        }
    }
}

/// A share in percent, rounded down to 0.01.
fn percent(share: &Rational) -> f64 {
    let hundredths = (share * Rational::from_integer(10_000.into())).floor();
    hundredths.to_integer().to_f64().unwrap_or(0.0) / 100.0
}

/// The share `part` is of `part + rest`: exact for numbers, else the least over every size ≥ 1
/// (bounded term by term), else at `sizes`. `None` for a share of nothing (both 0), or where
/// the formulas at `sizes` are not a share (a negative part, a total that is not positive).
fn share(part: &Poly, rest: &Poly, sizes: &Bindings) -> (Option<Rational>, Basis) {
    let total = part + rest;
    if total.is_zero() {
        return (None, Basis::Exact);
    }
    if let (Some(p), Some(t)) = (part.as_constant(), total.as_constant()) {
        return (Some(p / t), Basis::Exact);
    }
    if let Some(s) = least_share(part, rest) {
        return (Some(s), Basis::Least);
    }
    let zero = Rational::zero();
    match (part.eval(sizes), total.eval(sizes)) {
        (Ok(p), Ok(t)) if t > zero && p >= zero => (Some(p / t), Basis::AtSizes),
        _ => (None, Basis::AtSizes),
    }
}

/// The least ratio, term by term, of `part` to `part + rest` written in `1 + y` for each
/// symbol: a share `part` is of the total at every value ≥ 1 of them. `None` where a symbol
/// has a negative power (then `1 + y` is no monomial) or a coefficient is negative (then a
/// term can subtract, and term by term bounds nothing).
fn least_share(part: &Poly, rest: &Poly) -> Option<Rational> {
    let shift: BTreeMap<String, Poly> = part
        .symbols()
        .into_iter()
        .chain(rest.symbols())
        .map(|s| {
            let shifted = Poly::symbol(&s) + Poly::one();
            (s, shifted)
        })
        .collect();
    let p = part.substitute_all(&shift).ok()?;
    let r = rest.substitute_all(&shift).ok()?;
    let zero = Rational::zero();
    if p.terms().chain(r.terms()).any(|(_, c)| *c < zero) {
        return None;
    }
    let of_part: BTreeMap<&Monomial, &Rational> = p.terms().collect();
    let total = &p + &r;
    total
        .terms()
        .map(|(m, t)| of_part.get(m).map_or_else(Rational::zero, |c| (*c).clone()) / t)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Poly {
        Poly::parse(s).unwrap()
    }

    /// Nothing mapped of nothing is no share, not 100 %.
    #[test]
    fn nothing_of_nothing_is_no_share() {
        let c = Counts {
            mapped_flops: Poly::zero(),
            unmapped_flops: Some(Poly::zero()),
            mapped_params: Poly::zero(),
            unmapped_params: Poly::zero(),
        };
        let c = coverage(&c, &Bindings::new());
        assert_eq!((c.flops_percent, c.params_percent), (None, None));
        assert!(!c.complete);
        assert_eq!(c.flops_text(), "no FLOPs to cover");
    }

    /// An unmapped node quadratic in S, next to mapped work linear in S: at S = 1 it is 1 of
    /// 101, but it takes over as S grows; the least share is its limit, 0.
    #[test]
    fn a_term_that_grows_faster_unmapped_is_seen_at_large_sizes() {
        let c = Counts {
            mapped_flops: p("100*B*S"),
            unmapped_flops: Some(p("B*S^2")),
            mapped_params: Poly::int(10),
            unmapped_params: Poly::zero(),
        };
        let c = coverage(&c, &Bindings::new());
        assert_eq!(c.flops_percent, Some(0.0));
        assert_eq!(c.params_percent, Some(100.0));
        assert_eq!(c.basis, "least at any B, S ≥ 1");
        assert!(!c.complete);
    }

    /// Proportional formulas: the share of every size is the share of their coefficients
    /// (200·B of 212·B: 94.33 %).
    #[test]
    fn proportional_formulas_share_their_coefficients() {
        let c = Counts {
            mapped_flops: p("200*B"),
            unmapped_flops: Some(p("12*B")),
            mapped_params: Poly::int(96),
            unmapped_params: Poly::zero(),
        };
        let c = coverage(&c, &Bindings::new());
        assert_eq!(c.flops_percent, Some(94.33));
        assert!(!c.complete);
    }

    /// A formula with a negative term (a valid convolution's `W - 2`) has no term-by-term
    /// bound: the share is taken at the import's sizes, and says so.
    #[test]
    fn negative_terms_fall_back_to_the_imports_sizes() {
        let c = Counts {
            mapped_flops: p("9*W - 18"),
            unmapped_flops: Some(Poly::zero()),
            mapped_params: Poly::int(9),
            unmapped_params: Poly::zero(),
        };
        let at = Bindings::from([("W".to_string(), Rational::from_integer(8.into()))]);
        let c = coverage(&c, &at);
        assert_eq!(c.flops_percent, Some(100.0));
        assert_eq!(c.basis, "at W = 8");
        assert!(c.complete);
    }
}
