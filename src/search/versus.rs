//! Two strategies of one model side by side (`symshard compare`, `rank --why`), and where one
//! stops beating the other as a model symbol grows (`symshard crossover`).
//!
//! The comparison reads two exact [`Evaluation`]s component by component: compute FLOPs,
//! each collective kind per mesh axis and link tier, the pipeline bubble, the relative cost and
//! its parts, and memory. Each component is also given as a formula in the model's symbols
//! (with the mesh sizes and the micro-batch count put in) where the evaluation has one
//! ([`Evaluation::formulas`]): the same fold computed the number and the formula, so a formula
//! shown cannot disagree with its number.

use super::error::SearchError;
use crate::parallel::{Analysis, Evaluation};
use crate::rules::law::CollectiveKind;
use crate::strategy::{AxisKind, Knobs, Recompute, Tier};
use crate::sym::{crossovers, Bindings, Monomial, Poly, Rational};
use num_traits::{One, Signed, Zero};
use serde::Serialize;
use std::cmp::Ordering;
use std::fmt;
use std::rc::Rc;

/// One component of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Component {
    /// What it belongs to: compute, communication, pipeline, relative cost, memory.
    pub group: &'static str,
    /// Its name.
    pub name: String,
    /// Strategy A's value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub a: Rational,
    /// Strategy B's value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub b: Rational,
    /// B − A.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub difference: Rational,
    /// A's value as a formula in the model's symbols, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formula_a: Option<Poly>,
    /// B's value as a formula.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formula_b: Option<Poly>,
    /// B − A as a formula (present when both formulas are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formula_difference: Option<Poly>,
}

/// The formulas of one evaluated strategy: (group, name) → formula, each checked against the
/// evaluation.
type Formulas = Vec<(String, Poly)>;

fn r(v: u64) -> Rational {
    Rational::from_integer(v.into())
}

/// The name of a collective row: kind, axis and tier.
pub fn collective_name(kind: CollectiveKind, axis: AxisKind, tier: Tier) -> String {
    format!("{} on {} ({tier}) bytes/step", kind.name(), axis.name())
}

/// The collectives of an evaluation summed per (kind, axis, tier): bytes per device per step,
/// and their formula where every row has one.
fn collectives(e: &Evaluation) -> Vec<(String, Rational, Option<Poly>)> {
    let mut out: Vec<(String, Rational, Option<Poly>)> = Vec::new();
    for c in &e.comm {
        let name = collective_name(c.collective, c.axis, c.tier);
        let count = r(c.count);
        let bytes = &c.bytes * &count;
        let formula = c.formula.as_ref().map(|f| f * Poly::constant(count));
        match out.iter_mut().find(|(n, ..)| *n == name) {
            Some((_, b, f)) => {
                *b += bytes;
                *f = f.take().zip(formula).map(|(x, y)| x + y);
            }
            None => out.push((name, bytes, formula)),
        }
    }
    out
}

/// The formulas of an evaluated strategy, keyed `group/name` as [`compare`]'s rows (see the
/// module documentation): none where the evaluation folded none.
fn formulas(e: &Evaluation) -> Formulas {
    let mut out = Formulas::new();
    let Some(f) = e.formulas.as_deref() else {
        return out;
    };
    let mut push = |group: &str, name: &str, p: &Option<Poly>| {
        if let Some(p) = p {
            out.push((format!("{group}/{name}"), p.clone()));
        }
    };
    push("compute", "compute FLOPs", &f.compute);
    push("compute", "forward FLOPs", &f.forward);
    push("compute", "backward FLOPs", &f.backward);
    push("compute", "recomputed FLOPs", &f.recomputed);
    push("compute", "HBM traffic (FLOP-equivalents)", &f.hbm_cost);
    for (name, _, p) in collectives(e) {
        push("communication", &name, &p);
    }
    push("communication", "point-to-point bytes/step", &f.p2p_bytes);
    push("pipeline", "bubble fraction", &f.bubble_fraction);
    let r = &f.relative;
    push("relative cost", "compute", &r.compute);
    push("relative cost", "kernels", &r.kernels);
    push("relative cost", "intra-node communication", &r.comm_intra);
    push("relative cost", "inter-node communication", &r.comm_inter);
    push("relative cost", "bubble", &r.bubble);
    push("relative cost", HIDDEN, &r.hidden.as_ref().map(|p| -p));
    push("relative cost", "total", &r.total);
    let m = &f.memory;
    push("memory", "weights", &m.params);
    push("memory", "gradients", &m.grads);
    push("memory", "optimizer state", &m.optimizer);
    push("memory", "activations", &m.activations);
    push("memory", "total", &m.total);
    out
}

/// The relative-cost row of what overlapping the data-parallel traffic with compute saves
/// ([`crate::parallel::RelativeCost::hidden`], negative: it is subtracted from the total).
pub const HIDDEN: &str = "hidden data-parallel traffic";

/// Why a row of [`compare`] has no formula, where the reason is structural rather than a
/// formula that failed its check: the pipeline bubble (and the total it is part of) is the
/// slowest stage's time, a maximum over the pipeline partition's stages; full recomputation holds the largest layer's
/// activations again, a maximum over the kinds of layer.
/// The relative cost's kernel term (`kernels`: whether it is non-zero) is read from the
/// table's curves and tiling: it, and the total it is part of, have none either; nor has the
/// data-parallel traffic hidden under compute (`hidden`: whether it is non-zero), a minimum.
pub fn structural_gap(
    group: &str,
    name: &str,
    knobs: &Knobs,
    layer_kinds: usize,
    kernels: bool,
    hidden: bool,
) -> Option<&'static str> {
    match (group, name) {
        ("relative cost", "bubble" | "total") if knobs.pp > 1 => Some(
            "no formula: the bubble is the slowest stage's time × (pp − 1)/(m·v), and which stage is slowest is a maximum over the pipeline partition's stages, not a polynomial",
        ),
        ("relative cost", "kernels" | "total") if kernels => Some(
            "no formula: the kernel term is each kernel's time read from the calibration table's efficiency curves (interpolated in log size), tiling and launch time, not a polynomial",
        ),
        ("relative cost", HIDDEN | "total") if hidden => Some(
            "no formula: the data-parallel traffic hidden under compute is the smaller of the traffic that can overlap and the compute it runs under (times 1 − the table's contention share), a minimum of two polynomials, not a polynomial",
        ),
        ("memory", "activations" | "total")
            if knobs.recompute == Recompute::Full && layer_kinds > 1 =>
        {
            Some("no formula: full recomputation holds the largest layer's activations again, a maximum over the kinds of layer, not a polynomial")
        }
        _ => None,
    }
}

/// Compares two evaluated strategies at the model's symbol values `values` component by
/// component (B − A), each with its formula where the evaluation folded one
/// ([`crate::parallel::evaluate_strategy`] does).
pub fn compare(values: &Bindings, ea: &Evaluation, eb: &Evaluation) -> Vec<Component> {
    let (fa, fb) = (formulas(ea), formulas(eb));
    compared_amounts(values, (ea, &fa), (eb, &fb))
        .into_iter()
        .map(|row| component(values, &fa, &fb, row))
        .collect()
}

/// One amount of both sides: its group, its name, A's and B's.
type Compared = (&'static str, String, Rational, Rational);

/// The amounts [`compare`] lists, A's and B's, each side with its formulas.
fn compared_amounts(
    values: &Bindings,
    (ea, fa): (&Evaluation, &Formulas),
    (eb, fb): (&Evaluation, &Formulas),
) -> Vec<Compared> {
    let mut rows: Vec<Compared> = Vec::new();
    let mut push = |g: &'static str, n: &str, x: &Rational, y: &Rational| {
        rows.push((g, n.to_string(), x.clone(), y.clone()));
    };
    // Compute of the busiest device, split by pass where the formulas say so.
    let part = |f: &Formulas, name: &str, e: &Evaluation| {
        let keyed = format!("compute/{name}");
        f.iter()
            .find(|(n, _)| *n == keyed)
            .and_then(|(_, p)| p.eval(values).ok())
            .or_else(|| (name == "compute FLOPs").then(|| e.flops.clone()))
    };
    for name in [
        "compute FLOPs",
        "forward FLOPs",
        "backward FLOPs",
        "recomputed FLOPs",
    ] {
        if let (Some(x), Some(y)) = (part(fa, name, ea), part(fb, name, eb)) {
            push("compute", name, &x, &y);
        }
    }
    let busiest_hbm = |e: &Evaluation| {
        e.stages
            .iter()
            .find(|s| s.flops == e.flops)
            .map(|s| s.hbm_cost.clone())
            .unwrap_or_default()
    };
    push(
        "compute",
        "HBM traffic (FLOP-equivalents)",
        &busiest_hbm(ea),
        &busiest_hbm(eb),
    );
    let (ca, cb) = (collectives(ea), collectives(eb));
    let mut names: Vec<String> = ca.iter().map(|(n, ..)| n.clone()).collect();
    for (n, ..) in &cb {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let get = |v: &[(String, Rational, Option<Poly>)], n: &str| {
        v.iter()
            .find(|(m, ..)| m == n)
            .map(|(_, x, _)| x.clone())
            .unwrap_or_default()
    };
    for n in &names {
        let (x, y) = (get(&ca, n), get(&cb, n));
        // Collectives on axes of size one move nothing on either side.
        if !(x.is_zero() && y.is_zero()) {
            push("communication", n, &x, &y);
        }
    }
    push(
        "communication",
        "point-to-point bytes/step",
        &ea.p2p_bytes,
        &eb.p2p_bytes,
    );
    push(
        "pipeline",
        "bubble fraction",
        &ea.bubble_fraction,
        &eb.bubble_fraction,
    );
    let (ra, rb) = (&ea.relative, &eb.relative);
    push("relative cost", "compute", &ra.compute, &rb.compute);
    push("relative cost", "kernels", &ra.kernels, &rb.kernels);
    push(
        "relative cost",
        "intra-node communication",
        &ra.comm_intra,
        &rb.comm_intra,
    );
    push(
        "relative cost",
        "inter-node communication",
        &ra.comm_inter,
        &rb.comm_inter,
    );
    push("relative cost", "bubble", &ra.bubble, &rb.bubble);
    // What overlapping saves, as the negative part of the total it is.
    push("relative cost", HIDDEN, &-&ra.hidden, &-&rb.hidden);
    push("relative cost", "total", &ra.total, &rb.total);
    let (ma, mb) = (&ea.memory, &eb.memory);
    push("memory", "weights", &ma.params, &mb.params);
    push("memory", "gradients", &ma.grads, &mb.grads);
    push("memory", "optimizer state", &ma.optimizer, &mb.optimizer);
    push("memory", "activations", &ma.activations, &mb.activations);
    push("memory", "total", &ma.total, &mb.total);
    rows
}

/// One row of [`compare`]: the amounts with their formulas from `fa` and `fb` and the
/// difference, each formula checked against its number in debug builds.
fn component(
    values: &Bindings,
    fa: &Formulas,
    fb: &Formulas,
    (group, name, a, b): Compared,
) -> Component {
    let formula = |f: &Formulas, g: &str, n: &str| {
        let keyed = format!("{g}/{n}");
        f.iter().find(|(m, _)| *m == keyed).map(|(_, p)| p.clone())
    };
    let formula_a = formula(fa, group, &name);
    let formula_b = formula(fb, group, &name);
    // A collective one side does not have is zero there, exactly.
    let zero_if_absent = |x: &Option<Poly>, v: &Rational| match x {
        None if v.is_zero() && group == "communication" => Some(Poly::zero()),
        _ => x.clone(),
    };
    let formula_a = zero_if_absent(&formula_a, &a);
    let formula_b = zero_if_absent(&formula_b, &b);
    for (f, v) in [(&formula_a, &a), (&formula_b, &b)] {
        debug_assert!(
            f.as_ref()
                .is_none_or(|f| f.eval(values).ok().as_ref() == Some(v)),
            "{group}/{name}: the formula disagrees with its number"
        );
    }
    let formula_difference = match (&formula_a, &formula_b) {
        (Some(x), Some(y)) => Some(y - x),
        _ => None,
    };
    Component {
        group,
        difference: &b - &a,
        name,
        a,
        b,
        formula_a,
        formula_b,
        formula_difference,
    }
}

/// Relative-cost parts with an amount each.
pub type Parts = Vec<(String, Rational)>;

/// Which relative-cost parts make the cheaper strategy cheaper: (part, saving) for each part it
/// spends less on, largest saving first, and (part, extra) for each it spends more on. `rows` are
/// [`compare`]'s; the cheaper side is A when A's total is not above B's.
pub fn verdict(rows: &[Component]) -> (bool, Parts, Parts) {
    let parts: Vec<&Component> = rows
        .iter()
        .filter(|c| c.group == "relative cost" && c.name != "total")
        .collect();
    let a_wins = rows
        .iter()
        .find(|c| c.group == "relative cost" && c.name == "total")
        .is_none_or(|c| c.difference >= Rational::zero());
    let mut gains = Vec::new();
    let mut losses = Vec::new();
    for c in parts {
        // Saving of the cheaper side on this part.
        let d = if a_wins {
            c.difference.clone()
        } else {
            -c.difference.clone()
        };
        match d.cmp(&Rational::zero()) {
            Ordering::Greater => gains.push((c.name.clone(), d)),
            Ordering::Less => losses.push((c.name.clone(), -d)),
            Ordering::Equal => {}
        }
    }
    gains.sort_by(|x, y| y.1.cmp(&x.1));
    losses.sort_by(|x, y| y.1.cmp(&x.1));
    (a_wins, gains, losses)
}

/// The exponents of `var` a strategy's per-device cost can have, judged from its analysis: the
/// range of the operators' polynomials plus that of the block repeat counts, widened by one on
/// each side for the micro-batch count (which may be proportional to `B`, and divides the
/// bubble).
pub fn exponent_range(a: &Analysis, var: &str) -> (i32, i32) {
    let (mut lo, mut hi) = (0i32, 0i32);
    let (mut rlo, mut rhi) = (0i32, 0i32);
    let mut see = |p: &Poly| {
        let (l, h) = p.degree_in(var);
        if !p.is_zero() {
            lo = lo.min(l);
            hi = hi.max(h);
        }
    };
    for blk in &a.blocks {
        let (l, h) = blk.repeat.degree_in(var);
        rlo = rlo.min(l);
        rhi = rhi.max(h);
        see(&blk.boundary_bytes);
        for c in &blk.edges {
            see(&c.wire_bytes);
        }
        for op in &blk.ops {
            for p in [
                &op.forward,
                &op.backward,
                &op.recompute,
                &op.io_bytes,
                &op.backward_io_bytes,
                &op.loss_pass_bytes[0],
                &op.loss_pass_bytes[1],
                &op.saved,
                &op.recomputable_saved,
                &op.params,
                &op.out_bytes,
            ] {
                see(p);
            }
            for c in op.comm.iter().chain(&op.grad_comm) {
                see(&c.wire_bytes);
            }
        }
    }
    (lo + rlo - 1, hi + rhi + 1)
}

/// The Laurent polynomial in `var` with exponents from `emin` up to `emin + points.len() − 1`
/// through `points` (distinct non-zero abscissae): Newton's divided differences of
/// `f(x)·x^(−emin)`, exactly, multiplied back by `var^emin`.
pub fn fit_laurent(var: &str, emin: i32, points: &[(Rational, Rational)]) -> Poly {
    let n = points.len();
    if n == 0 {
        return Poly::zero();
    }
    let xs: Vec<Rational> = points.iter().map(|(x, _)| x.clone()).collect();
    let scale = |x: &Rational| -> Rational {
        let mut s = Rational::one();
        for _ in 0..emin.unsigned_abs() {
            s = if emin < 0 { s * x } else { s / x };
        }
        s
    };
    let mut c: Vec<Rational> = points.iter().map(|(x, y)| y * scale(x)).collect();
    for j in 1..n {
        for i in (j..n).rev() {
            c[i] = (&c[i] - &c[i - 1]) / (&xs[i] - &xs[i - j]);
        }
    }
    let x = Poly::symbol(var);
    let mut p = Poly::constant(c[n - 1].clone());
    for i in (0..n - 1).rev() {
        p = p * (&x - Poly::constant(xs[i].clone())) + Poly::constant(c[i].clone());
    }
    p * Poly::monomial(Rational::one(), Monomial::from_exponents([(var, emin)]))
}

/// Runs of constant sign of `d` (a Laurent polynomial in `var` alone) over the grid `x0 + k·step`,
/// `k = 0 … count − 1` (x0 > 0): (first k, last k, sign), in order, neighbouring runs of different
/// sign.
///
/// Method: the real roots of `d` in `[x0, x_last]` are isolated exactly (Sturm sequence of the
/// numerator `d·var^(−min exponent)`, bisected with exact rationals: [`crossovers`]); the grid
/// points next to each root (two on each side, so a root bracketed to 2^−41 of the range cannot
/// sit on the wrong side of one) and the ends are evaluated exactly; between two such points
/// there is no root, so one exact evaluation gives the sign of the whole gap.
pub fn sign_runs(
    d: &Poly,
    var: &str,
    x0: &Rational,
    step: &Rational,
    count: u64,
) -> Result<Vec<(u64, u64, Ordering)>, SearchError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let last = count - 1;
    let at = |k: u64| x0 + step * r(k);
    let sign = |k: u64| -> Result<Ordering, SearchError> {
        let mut b = Bindings::new();
        b.insert(var.to_string(), at(k));
        Ok(d.eval(&b)?.cmp(&Rational::zero()))
    };
    let roots = crossovers(d, &Poly::zero(), var, &Bindings::new(), x0, &at(last))?;
    let mut special = vec![0, last];
    for root in roots {
        let pos = (root - x0) / step;
        let f = pos.floor().to_integer();
        for dk in -2i64..=3 {
            let kk = &f + num_bigint::BigInt::from(dk);
            if !kk.is_negative() && kk <= num_bigint::BigInt::from(last) {
                special.push(kk.try_into().unwrap_or(last));
            }
        }
    }
    special.sort_unstable();
    special.dedup();
    let mut runs: Vec<(u64, u64, Ordering)> = Vec::new();
    let mut add = |from: u64, to: u64, s: Ordering| match runs.last_mut() {
        Some(run) if run.2 == s && run.1 + 1 == from => run.1 = to,
        _ => runs.push((from, to, s)),
    };
    for (i, &k) in special.iter().enumerate() {
        if i > 0 {
            let prev = special[i - 1];
            if k > prev + 1 {
                add(prev + 1, k - 1, sign(prev + 1)?);
            }
        }
        add(k, k, sign(k)?);
    }
    Ok(runs)
}

/// Which strategy is cheaper over an interval of symbol values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Winner {
    /// A costs less.
    #[serde(rename = "A")]
    A,
    /// B costs less.
    #[serde(rename = "B")]
    B,
    /// They cost the same.
    Equal,
    /// One or both strategies cannot run there.
    Invalid {
        /// Why A cannot, when it cannot.
        #[serde(skip_serializing_if = "Option::is_none")]
        a: Option<String>,
        /// Why B cannot, when it cannot.
        #[serde(skip_serializing_if = "Option::is_none")]
        b: Option<String>,
    },
}

/// Symbol values `from ..= to` (grid points) over which one [`Winner`] holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// First value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub from: Rational,
    /// Last value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub to: Rational,
    /// Who wins.
    pub winner: Winner,
}

/// A stretch of the grid over which both costs are one Laurent polynomial each (or, for a short
/// or irregular stretch, evaluated point by point).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Piece {
    /// First value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub from: Rational,
    /// Last value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub to: Rational,
    /// A's cost there, when one polynomial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a: Option<Poly>,
    /// B's cost there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b: Option<Poly>,
    /// B − A.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difference: Option<Poly>,
    /// The real roots of B − A in the piece, bracketed exactly (to 2^−41 of its width).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<String>,
}

/// The answer of [`crossover`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Crossover {
    /// Who wins where, in order.
    pub intervals: Vec<Interval>,
    /// Where each cost is which polynomial.
    pub pieces: Vec<Piece>,
    /// Exact evaluations of the two strategies made.
    pub evaluations: usize,
}

/// A cost evaluator: the exact relative cost at a symbol value, or why the strategy cannot run
/// there.
pub type Evaluator<'a, E> = dyn FnMut(&Rational) -> Result<Rational, E> + 'a;

/// Values at the start of the range on which [`crossover`] checks that both strategies run.
pub const PRESCAN: u64 = 64;

/// Most exact evaluations of each strategy [`crossover`] makes before giving up.
pub const MAX_EVALUATIONS: usize = 4000;

/// Both strategies' costs at one value (or why not).
type Pair<E> = (Result<Rational, Rc<E>>, Result<Rational, Rc<E>>);

struct Sides<'a, 'b, E> {
    a: &'a mut Evaluator<'b, E>,
    b: &'a mut Evaluator<'b, E>,
    cache: std::collections::BTreeMap<u64, Pair<E>>,
    x0: Rational,
    step: Rational,
}

impl<E: fmt::Display> Sides<'_, '_, E> {
    fn x(&self, k: u64) -> Rational {
        &self.x0 + &self.step * r(k)
    }

    fn at(&mut self, k: u64) -> Result<Pair<E>, SearchError> {
        if let Some(v) = self.cache.get(&k) {
            return Ok(v.clone());
        }
        if self.cache.len() >= MAX_EVALUATIONS {
            let bad = self.cache.iter().find_map(|(k, (a, b))| {
                a.as_ref()
                    .err()
                    .map(|e| format!("{} (A: {e})", self.x(*k)))
                    .or_else(|| b.as_ref().err().map(|e| format!("{} (B: {e})", self.x(*k))))
            });
            return Err(SearchError::TooManyEvaluations {
                limit: MAX_EVALUATIONS,
                invalid: bad,
            });
        }
        let x = self.x(k);
        let v = ((self.a)(&x).map_err(Rc::new), (self.b)(&x).map_err(Rc::new));
        self.cache.insert(k, v.clone());
        Ok(v)
    }
}

/// Where strategy A stops beating strategy B as one symbol runs over `x0, x0 + step, …` (`count`
/// values, all positive): the intervals where A is cheaper, B is cheaper, they are equal, or one
/// cannot run.
///
/// Method. A strategy's cost is a Laurent polynomial in the symbol only piecewise: the pipeline
/// partition, the busiest stage, a padded vocabulary and whether the data-parallel traffic or the
/// compute it hides under is the smaller change with it. So the grid is cut into
/// pieces: on each, both costs are fitted exactly (Newton interpolation over rationals, exponents
/// `emin ..= emax`, see [`exponent_range`]) through evenly spread exact evaluations, and the fit
/// is accepted only if it reproduces three further evaluations inside the piece; otherwise the
/// piece is halved, down to pieces short enough to evaluate point by point (where a strategy is
/// invalid, for instance). On an accepted piece the sign of B − A is found exactly with
/// [`sign_runs`] (Sturm root isolation), and every run end is checked against the full evaluation
/// of both strategies; a disagreement halves the piece too. Every reported boundary value is thus
/// an exact evaluation of both strategies, and so is the value next to it.
pub fn crossover<E: fmt::Display>(
    var: &str,
    x0: &Rational,
    step: &Rational,
    count: u64,
    (emin, emax): (i32, i32),
    a: &mut Evaluator<'_, E>,
    b: &mut Evaluator<'_, E>,
) -> Result<Crossover, SearchError> {
    if count == 0 {
        return Err(SearchError::NoValues);
    }
    let mut sides = Sides {
        a,
        b,
        cache: Default::default(),
        x0: x0.clone(),
        step: step.clone(),
    };
    prescan(&mut sides, var, step, count)?;
    let n = (emax - emin + 1).max(2) as u64;
    // (first k, last k, winner) per grid run, gathered over the pieces in order.
    let mut runs: Vec<(u64, u64, Winner)> = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut todo = vec![(0u64, count - 1)];
    while let Some((i, j)) = todo.pop() {
        let len = j - i + 1;
        if len <= n + 3 {
            for k in i..=j {
                let (va, vb) = sides.at(k)?;
                runs.push((k, k, winner_of(&va, &vb)));
            }
            pieces.push(Piece {
                from: sides.x(i),
                to: sides.x(j),
                a: None,
                b: None,
                difference: None,
                roots: Vec::new(),
            });
            continue;
        }
        match fit_piece(&mut sides, var, step, emin, n, (i, j))? {
            Some((piece, piece_runs)) => {
                runs.extend(piece_runs);
                pieces.push(piece);
            }
            None => {
                let mid = i + (len - 1) / 2;
                // Pushed in reverse: the lower half is examined first.
                todo.push((mid + 1, j));
                todo.push((i, mid));
            }
        }
    }
    let (intervals, pieces) = merged(&sides, runs, pieces);
    Ok(Crossover {
        intervals,
        pieces,
        evaluations: sides.cache.len(),
    })
}

/// Refuses a range where the two strategies never both run, or both run only at every p-th
/// value (sizes a split must divide): say so, rather than examine the range value by value.
fn prescan<E: fmt::Display>(
    sides: &mut Sides<'_, '_, E>,
    var: &str,
    step: &Rational,
    count: u64,
) -> Result<(), SearchError> {
    let scan = count.min(PRESCAN);
    let mut valid = Vec::new();
    let mut first_invalid = None;
    for k in 0..scan {
        match sides.at(k)? {
            (Ok(_), Ok(_)) => valid.push(k),
            (a, b) => {
                if first_invalid.is_none() {
                    first_invalid = Some((k, a.err(), b.err()));
                }
            }
        }
    }
    if let Some((k, ea, eb)) = first_invalid {
        let why = format!(
            "at {var} = {}{}{}",
            sides.x(k),
            ea.map(|e| format!(", A cannot run: {e}"))
                .unwrap_or_default(),
            eb.map(|e| format!(", B cannot run: {e}"))
                .unwrap_or_default()
        );
        if valid.is_empty() {
            return Err(SearchError::NeverBothRun { scan, why });
        }
        let gaps: Vec<u64> = valid.windows(2).map(|w| w[1] - w[0]).collect();
        if valid.len() >= 2 && gaps.iter().all(|g| *g == gaps[0]) && gaps[0] > 1 && count > scan {
            let p = gaps[0];
            return Err(SearchError::Periodic(Box::new(super::error::Periodic {
                period: p,
                var: var.into(),
                first: sides.x(valid[0]).to_string(),
                second: sides.x(valid[1]).to_string(),
                why,
                step: (step * r(p)).to_string(),
            })));
        }
    }
    Ok(())
}

/// Grid runs of one piece of the range, values `i..=j`: `n` values of each side fit as Laurent
/// polynomials in `var` (exponents from `emin`), checked between the fitted values and at
/// every sign run's ends; `None` where a value does not run or a check fails (the piece is
/// then halved).
#[allow(clippy::type_complexity)]
fn fit_piece<E: fmt::Display>(
    sides: &mut Sides<'_, '_, E>,
    var: &str,
    step: &Rational,
    emin: i32,
    n: u64,
    (i, j): (u64, u64),
) -> Result<Option<(Piece, Vec<(u64, u64, Winner)>)>, SearchError> {
    let len = j - i + 1;
    let fit_at: Vec<u64> = (0..n)
        .map(|t| i + (t * (len - 1) + (n - 1) / 2) / (n - 1).max(1))
        .collect();
    let mut check_at: Vec<u64> = Vec::new();
    for w in [0, (n as usize - 1) / 2, n as usize - 2] {
        let (p, q) = (fit_at[w], fit_at[(w + 1).min(n as usize - 1)]);
        if q > p + 1 {
            check_at.push((p + q) / 2);
        }
    }
    let mut pa = Vec::new();
    let mut pb = Vec::new();
    let mut valid = true;
    for &k in &fit_at {
        match sides.at(k)? {
            (Ok(x), Ok(y)) => {
                pa.push((sides.x(k), x));
                pb.push((sides.x(k), y));
            }
            _ => valid = false,
        }
    }
    if !valid {
        return Ok(None);
    }
    let fa = fit_laurent(var, emin, &pa);
    let fb = fit_laurent(var, emin, &pb);
    let value = |p: &Poly, x: &Rational| {
        let mut bb = Bindings::new();
        bb.insert(var.to_string(), x.clone());
        p.eval(&bb).ok()
    };
    let mut agrees = true;
    for &k in &check_at {
        let x = sides.x(k);
        match sides.at(k)? {
            (Ok(va), Ok(vb)) => {
                agrees &= value(&fa, &x) == Some(va) && value(&fb, &x) == Some(vb);
            }
            _ => agrees = false,
        }
    }
    if !agrees {
        return Ok(None);
    }
    let d = &fb - &fa;
    let signs = sign_runs(&d, var, &sides.x(i), step, len)?;
    // Check each run's ends against the full evaluation.
    let mut piece_runs = Vec::new();
    for (from, to, s) in &signs {
        let w = match s {
            Ordering::Greater => Winner::A,
            Ordering::Less => Winner::B,
            Ordering::Equal => Winner::Equal,
        };
        for k in [i + from, i + to] {
            let x = sides.x(k);
            match sides.at(k)? {
                (Ok(va), Ok(vb)) => {
                    agrees &= value(&fa, &x) == Some(va.clone())
                        && value(&fb, &x) == Some(vb.clone())
                        && winner_of::<E>(&Ok(va), &Ok(vb)) == w;
                }
                _ => agrees = false,
            }
        }
        piece_runs.push((i + from, i + to, w));
    }
    if !agrees {
        return Ok(None);
    }
    let roots = crossovers(&fb, &fa, var, &Bindings::new(), &sides.x(i), &sides.x(j))?
        .into_iter()
        .map(|x| {
            if x.is_integer() {
                x.to_string()
            } else {
                format!("≈{}", decimal(&x))
            }
        })
        .collect();
    let piece = Piece {
        from: sides.x(i),
        to: sides.x(j),
        difference: Some(d),
        a: Some(fa),
        b: Some(fb),
        roots,
    };
    Ok(Some((piece, piece_runs)))
}

/// The grid runs merged into intervals of one winner, and neighbouring pieces with the same
/// formulas (or none) merged.
fn merged<E: fmt::Display>(
    sides: &Sides<'_, '_, E>,
    mut runs: Vec<(u64, u64, Winner)>,
    mut pieces: Vec<Piece>,
) -> (Vec<Interval>, Vec<Piece>) {
    runs.sort_by_key(|x| x.0);
    pieces.sort_by(|x, y| x.from.cmp(&y.from));
    // Merge neighbouring pieces with the same formulas (or none).
    let mut merged: Vec<Piece> = Vec::new();
    for p in pieces {
        match merged.last_mut() {
            Some(q) if q.a == p.a && q.b == p.b => {
                q.to = p.to;
                q.roots.extend(p.roots);
                q.roots.dedup();
            }
            _ => merged.push(p),
        }
    }
    let mut intervals: Vec<Interval> = Vec::new();
    for (from, to, w) in runs {
        match intervals.last_mut() {
            Some(last) if last.winner == w => last.to = sides.x(to),
            _ => intervals.push(Interval {
                from: sides.x(from),
                to: sides.x(to),
                winner: w,
            }),
        }
    }
    (intervals, merged)
}

/// A step and the first of its multiples at which a strategy (or both) runs, as [`lattice`]
/// finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lattice {
    /// The smallest step whose multiples, from `first` on, all let it run (as far as checked).
    pub step: u64,
    /// The first multiple of `step` at which it runs.
    pub first: u64,
}

/// A value at which a strategy cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The value.
    pub value: u64,
    /// The strategy's error there.
    pub why: String,
}

/// What one strategy needs of the symbol, as [`lattice`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Its own lattice; `None` when none was found among the values examined.
    pub lattice: Option<Lattice>,
    /// The largest value examined below its lattice's first value (the first value examined
    /// when it has none) at which it cannot run, and why: what rules the other values out.
    pub refusal: Option<Refusal>,
    /// Whether it ran at no value examined and gave the same error at every one: a rule the
    /// symbol does not enter refuses it, so no value would let it run.
    pub never: bool,
}

/// The lattice of symbol values two strategies run on: see [`lattice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lattices {
    /// Both strategies together; `None` when no step was found whose multiples let both run.
    pub both: Option<Lattice>,
    /// Strategy A alone.
    pub a: Need,
    /// Strategy B alone.
    pub b: Need,
    /// Values examined from 1 on (each multiple checked beyond them aside).
    pub scanned: u64,
}

/// Values from 1 on that [`lattice`] examines at least.
pub const LATTICE_WINDOW: u64 = PRESCAN;

/// Multiples of a candidate step that [`lattice`] checks after the first at which the
/// strategies run: as many as [`crossover`] checks before it starts, so a lattice found is one
/// `crossover` accepts.
pub const LATTICE_CHECKS: u64 = PRESCAN - 1;

/// Both strategies' errors at one value (`None`: it runs).
type Errors = [Option<String>; 2];

/// Which strategies a value must let run: A (0), B (1), or both (`None`).
type Who = Option<usize>;

struct Probe<'a, 'b, E> {
    sides: [&'a mut Evaluator<'b, E>; 2],
    seen: std::collections::BTreeMap<u64, Errors>,
}

impl<E: fmt::Display> Probe<'_, '_, E> {
    fn at(&mut self, x: u64) -> &Errors {
        if !self.seen.contains_key(&x) {
            let v = r(x);
            let errors = [0, 1].map(|s| (self.sides[s])(&v).err().map(|e| e.to_string()));
            self.seen.insert(x, errors);
        }
        &self.seen[&x]
    }

    fn runs(&mut self, x: u64, who: Who) -> bool {
        let e = self.at(x);
        match who {
            Some(s) => e[s].is_none(),
            None => e.iter().all(Option::is_none),
        }
    }

    /// The smallest step whose multiples let `who` run: a candidate divides every value the
    /// scan found it running at beyond its first (two of its consecutive multiples among them),
    /// so only multiples of their gcd are tried, each from its first multiple found running and
    /// checked at [`LATTICE_CHECKS`] further multiples.
    fn lattice_of(&mut self, who: Who, scanned: u64) -> Option<Lattice> {
        let found: Vec<u64> = (1..=scanned).filter(|&x| self.runs(x, who)).collect();
        let g = found
            .iter()
            .fold(0, |g, &x| num_integer::Integer::gcd(&g, &x));
        if g == 0 {
            return None;
        }
        let mut step = g;
        while step <= scanned {
            if let Some(&first) = found.iter().find(|&&x| x.is_multiple_of(step)) {
                if (1..=LATTICE_CHECKS).all(|t| self.runs(first + t * step, who)) {
                    return Some(Lattice { step, first });
                }
            }
            step += g;
        }
        None
    }

    /// What strategy `s` needs: its lattice, the refusal that explains it, whether it never runs.
    fn need(&mut self, s: usize, scanned: u64) -> Need {
        let lattice = self.lattice_of(Some(s), scanned);
        let refused = |(&value, e): (&u64, &Errors)| e[s].clone().map(|why| Refusal { value, why });
        let refusal = match lattice {
            Some(l) => self.seen.range(1..l.first).rev().find_map(refused),
            None => self.seen.iter().find_map(refused),
        };
        Need {
            lattice,
            refusal,
            never: self.never(s),
        }
    }

    /// Whether strategy `s` ran at no value seen and gave one error at all of them.
    fn never(&self, s: usize) -> bool {
        let mut errors = self.seen.values().map(|e| e[s].as_ref());
        match errors.next() {
            Some(Some(first)) => errors.all(|e| e == Some(first)),
            _ => false,
        }
    }
}

/// The lattice two strategies run on as a symbol varies: the smallest step `k` such that every
/// multiple of `k` (from the first at which both run) lets both run, and what each strategy
/// needs alone. A split that must divide a size (tensor or sequence parallelism over the
/// tokens, context parallelism's 2·cp chunks of the sequence, micro-batches of the batch) lets
/// a strategy run only where that size is divisible; each such rule holds on the multiples of
/// some step, and where all hold is where both run.
///
/// Method. Both strategies are evaluated at 1, 2, 3, … (`a`, `b`: the evaluators of
/// [`crossover`]) over at least [`LATTICE_WINDOW`] values and on until three values let both
/// run or `limit` is reached; a strategy that runs at none of them and is refused with the same
/// error at every one (a rule the symbol does not enter) stops the scan early. The step is then
/// found by evaluation, not read off the rules: every candidate is a multiple of the gcd of the
/// values found running, and the smallest whose [`LATTICE_CHECKS`] further multiples all run is
/// taken. So the answer rests on exact evaluations of both strategies, whatever rule refuses
/// the other values.
pub fn lattice<E: fmt::Display>(
    a: &mut Evaluator<'_, E>,
    b: &mut Evaluator<'_, E>,
    limit: u64,
) -> Lattices {
    let mut probe = Probe {
        sides: [a, b],
        seen: Default::default(),
    };
    let limit = limit.max(1);
    let mut both = 0;
    let mut x = 0;
    while x < limit {
        x += 1;
        if probe.runs(x, None) {
            both += 1;
        }
        if x >= LATTICE_WINDOW && (both >= 3 || probe.never(0) || probe.never(1)) {
            break;
        }
    }
    let scanned = x;
    let (na, nb) = (probe.need(0, scanned), probe.need(1, scanned));
    Lattices {
        both: probe.lattice_of(None, scanned),
        a: na,
        b: nb,
        scanned,
    }
}

fn winner_of<E: fmt::Display>(a: &Result<Rational, Rc<E>>, b: &Result<Rational, Rc<E>>) -> Winner {
    match (a, b) {
        (Ok(x), Ok(y)) => match x.cmp(y) {
            Ordering::Less => Winner::A,
            Ordering::Greater => Winner::B,
            Ordering::Equal => Winner::Equal,
        },
        _ => Winner::Invalid {
            a: a.as_ref().err().map(|e| e.to_string()),
            b: b.as_ref().err().map(|e| e.to_string()),
        },
    }
}

/// A rational to six decimals (for showing a bracketed root).
fn decimal(x: &Rational) -> String {
    let scaled = (x * r(1_000_000)).round().to_integer();
    let sign = if scaled.is_negative() { "-" } else { "" };
    let s = scaled.abs();
    let int = &s / num_bigint::BigInt::from(1_000_000);
    let frac = &s % num_bigint::BigInt::from(1_000_000);
    format!("{sign}{int}.{frac:06}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(v: i64) -> Rational {
        Rational::from_integer(v.into())
    }

    #[test]
    fn fit_recovers_a_laurent_polynomial() {
        let p = Poly::parse("3*S^2 - 5*S + 7 + 11/S").unwrap();
        let pts: Vec<(Rational, Rational)> = (1..=5)
            .map(|x| {
                let mut b = Bindings::new();
                b.insert("S".into(), q(x));
                (q(x), p.eval(&b).unwrap())
            })
            .collect();
        // Exponents −1 … 3: the S^3 coefficient comes out zero.
        assert_eq!(fit_laurent("S", -1, &pts), p);
    }

    #[test]
    fn sign_runs_of_known_roots() {
        // (S − 10)(S − 20) on S = 1 … 30: positive, zero at 10, negative, zero at 20, positive.
        let d = Poly::parse("(S-10)*(S-20)").unwrap();
        let runs = sign_runs(&d, "S", &q(1), &q(1), 30).unwrap();
        assert_eq!(
            runs,
            vec![
                (0, 8, Ordering::Greater),
                (9, 9, Ordering::Equal),
                (10, 18, Ordering::Less),
                (19, 19, Ordering::Equal),
                (20, 29, Ordering::Greater)
            ]
        );
        // A root between grid points: 2S − 15 changes sign between S = 7 and S = 8.
        let d = Poly::parse("2*S - 15").unwrap();
        let runs = sign_runs(&d, "S", &q(1), &q(1), 20).unwrap();
        assert_eq!(
            runs,
            vec![(0, 6, Ordering::Less), (7, 19, Ordering::Greater)]
        );
    }

    #[test]
    fn crossover_of_two_formulas() {
        // A = 1000/S + S (cheap at mid S), B = 100 (flat): A costs less for S in 12 … 88 (roots
        // of S² − 100 S + 1000 at 50 ± √1500 ≈ 11.27 and 88.73).
        let fa = Poly::parse("1000/S + S").unwrap();
        let fb = Poly::int(100);
        let ev = |p: Poly| {
            move |x: &Rational| -> Result<Rational, crate::sym::SymError> {
                let mut b = Bindings::new();
                b.insert("S".into(), x.clone());
                p.eval(&b)
            }
        };
        let (mut a, mut b) = (ev(fa), ev(fb));
        let c = crossover("S", &q(1), &q(1), 200, (-2, 2), &mut a, &mut b).unwrap();
        let spans: Vec<(Rational, Rational, Winner)> = c
            .intervals
            .iter()
            .map(|i| (i.from.clone(), i.to.clone(), i.winner.clone()))
            .collect();
        assert_eq!(
            spans,
            vec![
                (q(1), q(11), Winner::B),
                (q(12), q(88), Winner::A),
                (q(89), q(200), Winner::B)
            ]
        );
        assert_eq!(c.pieces.len(), 1);
    }

    #[test]
    fn crossover_reports_invalid_values_and_pieces() {
        // A is invalid at odd values from 51 to 59 and changes formula at 100 (S, then S + 50);
        // B is 150: A wins up to 99, they tie at 100, B wins after.
        let mut a = |x: &Rational| -> Result<Rational, String> {
            let v = x.to_integer();
            if v > 50.into() && v < 60.into() && (&v % 2) == 1.into() {
                return Err(format!("{v} is odd"));
            }
            Ok(if v >= 100.into() {
                x + q(50)
            } else {
                x.clone()
            })
        };
        let mut b = |_: &Rational| -> Result<Rational, String> { Ok(q(150)) };
        let c = crossover("S", &q(1), &q(1), 200, (-1, 2), &mut a, &mut b).unwrap();
        let winner_at = |v: i64| {
            c.intervals
                .iter()
                .find(|i| i.from <= q(v) && q(v) <= i.to)
                .unwrap()
                .winner
                .clone()
        };
        assert_eq!(winner_at(10), Winner::A);
        assert!(matches!(winner_at(51), Winner::Invalid { .. }));
        assert_eq!(winner_at(52), Winner::A);
        assert_eq!(winner_at(60), Winner::A);
        assert_eq!(winner_at(99), Winner::A);
        assert_eq!(winner_at(100), Winner::Equal);
        assert_eq!(winner_at(101), Winner::B);
        assert_eq!(winner_at(200), Winner::B);
        assert!(c.pieces.len() > 1);
    }
}
