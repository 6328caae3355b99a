//! D-Rec (Wang et al., Euro-Par 2021; SMSG): recursive bisection of the device count. With
//! `N = 2^k` devices as `k` binary mesh axes ([`Axis::bisection`](super::problem::Axis)), round
//! `r` decides axis `r` for every operator, in topological order: the operator takes the cut
//! (or none) that is cheapest given its already-decided neighbours — its own exact derived
//! cost under every axis decided so far (compute and the collectives the law table requires,
//! on the axis's real tier), plus the conversions on axis `r` its inputs now need from their
//! producers beyond those the producer's earlier-placed consumers already paid for. Consumers
//! still undecided are not guessed. One pass per round, linear in the number of operators;
//! the final layout is priced exactly with [`Problem::cost`].

use super::error::SearchError;
use super::problem::{facilities, Choice, Facility, Priced, Problem};
use super::sp::Solution;
use crate::sym::Rational;
use num_traits::Zero;

/// A topological order of the problem's operators (by position where free).
pub fn topological(p: &Problem) -> Result<Vec<usize>, SearchError> {
    let n = p.ops.len();
    let mut indeg: Vec<usize> = p
        .ops
        .iter()
        .map(|o| o.inputs.iter().filter(|i| i.from.is_some()).count())
        .collect();
    let consumers = p.consumers();
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(v) = ready.pop_first() {
        out.push(v);
        for &(c, _) in &consumers[v] {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                ready.insert(c);
            }
        }
    }
    if out.len() != n {
        return Err(SearchError::Cycle);
    }
    Ok(out)
}

/// D-Rec's layout of `p`, one round per axis, and its exact cost.
///
/// A source whose placement is free costs nothing by itself, so it is decided together with
/// its first consumer: each of that consumer's candidates places the source as it reads it.
pub fn drec(p: &Problem) -> Result<Solution, SearchError> {
    let n = p.ops.len();
    let k = p.axes.len();
    let order = topological(p)?;
    let consumers = p.consumers();
    let deferred: Vec<bool> = (0..n)
        .map(|v| p.ops[v].is_source() && p.choices_fixed(v).is_none() && !consumers[v].is_empty())
        .collect();
    let mut assign: Vec<Choice> = vec![vec![None; k]; n];
    let mut priced: Vec<Option<Priced>> = vec![None; n];
    for r in 0..k {
        // Facilities on axis r already opened at each producer this round.
        let mut open: Vec<Vec<Facility>> = vec![Vec::new(); n];
        let mut decided = vec![false; n];
        for &v in &order {
            if deferred[v] {
                continue;
            }
            let o = &p.ops[v];
            let options: Vec<Option<usize>> = match p.choices_fixed(v) {
                Some(only) => vec![only[r]],
                None => std::iter::once(None)
                    .chain((0..o.cuts.len()).map(Some))
                    .collect(),
            };
            let round = Round {
                p,
                r,
                deferred: &deferred,
                decided: &decided,
                assign: &assign,
                priced: &priced,
                open: &open,
            };
            let mut best: Option<Pick> = None;
            for opt in options {
                let Some(pick) = round.candidate(v, opt)? else {
                    continue;
                };
                if best.as_ref().is_none_or(|(b, _, _, _)| pick.0 < *b) {
                    best = Some(pick);
                }
            }
            let (_, opt, pr, placed) = best.ok_or_else(|| SearchError::NoCut {
                op: o.name.clone(),
                axis: r,
            })?;
            for (q, sc, spr) in placed {
                assign[q] = sc;
                priced[q] = Some(spr);
                decided[q] = true;
            }
            assign[v][r] = opt;
            for (i, input) in o.inputs.iter().enumerate() {
                if let (Some(q), Some(needs)) = (input.from, &pr.needs[i]) {
                    for f in facilities(needs).filter(|f| f.axis == r) {
                        if !open[q].contains(&f) {
                            open[q].push(f);
                        }
                    }
                }
            }
            priced[v] = Some(pr);
            decided[v] = true;
        }
    }
    let cost = if n == 0 {
        Rational::zero()
    } else {
        p.cost(&assign)?
    };
    Ok(Solution {
        cost,
        assignment: assign,
    })
}

/// A candidate's (cost with the conversions it needs, its axis choice, its pricing, the
/// deferred sources it places).
type Pick = (
    Rational,
    Option<usize>,
    Priced,
    Vec<(usize, Choice, Priced)>,
);

/// One round of D-Rec (axis `r`): what is assigned and decided so far.
struct Round<'a> {
    p: &'a Problem,
    r: usize,
    deferred: &'a [bool],
    decided: &'a [bool],
    assign: &'a [Choice],
    priced: &'a [Option<Priced>],
    open: &'a [Vec<Facility>],
}

impl Round<'_> {
    /// Operator `v` cut by `opt` on this round's axis, scored by its cost and the conversions
    /// of its inputs not yet opened; `None` where that choice is not valid.
    fn candidate(&self, v: usize, opt: Option<usize>) -> Result<Option<Pick>, SearchError> {
        let o = &self.p.ops[v];
        let mut c = self.assign[v].clone();
        c[self.r] = opt;
        if !self.p.valid(v, &c) {
            return Ok(None);
        }
        let pr = self.p.price(v, &c)?;
        if let Some((s, e)) = self.p.cycle {
            if v == e
                && self.priced[s]
                    .as_ref()
                    .is_some_and(|x| x.out[self.r] != pr.out[self.r])
            {
                return Ok(None);
            }
        }
        let mut score = pr.cost.clone();
        let mut placed: Vec<(usize, Choice, Priced)> = Vec::new();
        for (i, input) in o.inputs.iter().enumerate() {
            let (Some(q), Some(needs)) = (input.from, &pr.needs[i]) else {
                continue;
            };
            if self.deferred[q] && !self.decided[q] && !placed.iter().any(|(s, _, _)| *s == q) {
                // Place the source as this candidate reads it, where it can be.
                let mut sc = self.assign[q].clone();
                sc[self.r] = self.p.ops[q]
                    .cuts
                    .iter()
                    .position(|cut| cut.place() == needs[self.r].want);
                if !self.p.valid(q, &sc) {
                    sc[self.r] = None;
                }
                let spr = self.p.price(q, &sc)?;
                placed.push((q, sc, spr));
            }
            let x = match placed.iter().find(|(s, _, _)| *s == q) {
                Some((_, _, spr)) => &spr.out,
                None => match self.priced[q].as_ref() {
                    Some(x) => &x.out,
                    None => continue,
                },
            };
            for f in facilities(needs).filter(|f| f.axis == self.r) {
                if !self.open[q].contains(&f) {
                    score += self.p.facility_cost(q, x, f);
                }
            }
        }
        Ok(Some((score, opt, pr, placed)))
    }
}

/// One row of the D-Rec benchmark suite.
#[derive(Debug, Clone)]
pub struct GapRow {
    /// The problem.
    pub name: String,
    /// Devices (`2^k`).
    pub devices: u64,
    /// Operators.
    pub ops: usize,
    /// D-Rec's cost.
    pub drec: Rational,
    /// The exact optimum over the same `k` binary axes (None: beyond the exact search).
    pub exact: Option<Rational>,
    /// The exact optimum with one axis of all the devices (one cut per operator).
    pub single_axis: Option<Rational>,
}

impl GapRow {
    /// D-Rec's excess over the exact optimum, in percent.
    pub fn gap_percent(&self) -> Option<f64> {
        let e = self.exact.as_ref()?;
        let g = (&self.drec - e) / e;
        num_traits::ToPrimitive::to_f64(&g).map(|x| 100.0 * x)
    }
}

/// The layer blocks of the shipped GPT, Llama, BERT and ViT models at their default values on
/// 2, 4 and 8 devices (a standalone layer: input placement free), and 20 seeded synthetic
/// series-parallel graphs on 4 and 8 devices. Exact optima that need more than
/// [`MAX_STATES`](super::sp::MAX_STATES) states are left out.
pub fn gap_suite(calib: &crate::calib::Calibration) -> Result<Vec<GapRow>, SearchError> {
    use super::problem::{synthetic, Axis, Shape};
    use super::sp::solve_within;
    let shipped = |e: crate::Error| SearchError::Shipped(e.to_string());
    let loader = crate::model::ModelLoader::embedded().map_err(shipped)?;
    let rules = crate::rules::RuleSet::embedded().map_err(shipped)?;
    let mut rows = Vec::new();
    let mut row =
        |name: String, make: &dyn Fn(Vec<Axis>) -> Result<Problem, SearchError>, k: u32| {
            let p = make(Axis::bisection(k, 8, calib))?;
            let d = drec(&p)?;
            let single = make(Problem::tp_axis(1 << k, 8, calib))?;
            let one = super::sp::solve(&single).ok();
            let single_axis = one.as_ref().map(|s| s.cost.clone());
            // A bound for the exact search: the better of D-Rec's layout and the single-axis
            // optimum cut the same way on every binary axis, improved one operator at a time.
            let mut start = d.assignment.clone();
            if let Some(one) = &one {
                let lifted: Vec<Choice> = one
                    .assignment
                    .iter()
                    .map(|c| vec![c.first().copied().flatten(); k as usize])
                    .collect();
                if let Ok(c) = p.cost(&lifted) {
                    if c < d.cost {
                        start = lifted;
                    }
                }
            }
            let bound = super::sp::polish(&p, &start)?;
            let exact = solve_within(&p, Some(&bound.cost))
                .ok()
                .flatten()
                .map(|s| s.cost);
            rows.push(GapRow {
                name,
                devices: 1 << k,
                ops: p.ops.len(),
                drec: d.cost,
                exact,
                single_axis,
            });
            Ok::<(), SearchError>(())
        };
    for model in ["gpt3-125m", "llama3-8b", "bert-base", "vit-b16"] {
        let m = loader.resolve(model).map_err(shipped)?;
        let bi = m
            .first_repeated_block()
            .ok_or_else(|| SearchError::NoLayerBlock(model.to_string()))?;
        for k in 1..=3 {
            let make = |axes: Vec<Axis>| {
                let mut p = Problem::from_block(&m, bi, &m.values, axes, &Default::default())?;
                p.open_cycle();
                Ok(p)
            };
            row(format!("{model} layer"), &make, k)?;
        }
    }
    for seed in 0..20u64 {
        for k in 2..=3 {
            let make =
                |axes: Vec<Axis>| synthetic(&rules, 1000 + seed, 8, Shape::SeriesParallel, axes);
            row(format!("synthetic-{}", 1000 + seed), &make, k)?;
        }
    }
    Ok(rows)
}
