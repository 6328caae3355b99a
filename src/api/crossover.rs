//! [`crossover`]: where strategy A stops beating strategy B as one model symbol grows, solved
//! exactly from the strategies' relative costs as Laurent polynomials in that symbol.

use super::{CompareSide, Machine, Model as ModelRequest, OptionName, Spelling, Strategy};
use crate::error::Error;
use crate::model::Model;
use crate::parallel::evaluate_analysed;
use crate::search::versus::{self, Crossover, Winner};
use crate::sym::{Bindings, Rational};
use num_traits::{One, ToPrimitive};
use serde::Serialize;

/// What [`crossover`] is asked.
#[derive(Debug, Clone)]
pub struct CrossoverRequest {
    /// The model, its sizes and settings.
    pub model: ModelRequest,
    /// The strategies and the values examined.
    pub spec: CrossoverSpec,
}

/// Two strategies, the symbol that varies and the values of it examined, and the machine.
#[derive(Debug, Clone)]
pub struct CrossoverSpec {
    /// Strategy A.
    pub a: CompareSide,
    /// Strategy B.
    pub b: CompareSide,
    /// The model symbol that varies (`S`, `B`, `H`, …); the others keep the model's values.
    pub symbol: String,
    /// Smallest value examined (default: the step given; without `step`, the first value of
    /// the chosen lattice at which both strategies run, and a value given is rounded up onto
    /// it).
    pub from: Option<u64>,
    /// Largest value examined (default: 8 × the model's value).
    pub to: Option<u64>,
    /// Examine every N-th value from `from` on. Default: the smallest step whose every
    /// multiple lets both strategies run, found by evaluating them and stated in the result.
    pub step: Option<u64>,
    /// The machine whose balance ratios and memory price the strategies (its spelling names
    /// the options in refusals).
    pub machine: Machine,
}

/// How the caller names the crossover's options in refusals.
struct Names {
    symbol: &'static str,
    from: &'static str,
    to: &'static str,
    step: &'static str,
}

impl Names {
    fn of(spelling: Spelling) -> Names {
        Names {
            symbol: spelling.name(OptionName::In),
            from: spelling.name(OptionName::From),
            to: spelling.name(OptionName::To),
            step: spelling.name(OptionName::Step),
        }
    }
}

/// Where strategy A stops beating strategy B as one model symbol grows, exactly: who is
/// cheaper on each interval of the values examined, each cost's Laurent polynomial per piece
/// with the roots of their difference, and both costs at the intervals' ends.
pub fn crossover(req: &CrossoverRequest) -> Result<CrossoverResult, Error> {
    let loaded = req.model.load()?;
    crossover_loaded(&req.spec, &loaded.model, &loaded.values)
}

/// Both costs at one value of the symbol, exactly.
#[derive(Debug, Clone, Serialize)]
pub struct CrossoverBoundary {
    /// The symbol's value.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub value: Rational,
    /// A's relative cost there.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub a: Rational,
    /// B's relative cost there.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub b: Rational,
}

/// A crossover solved: who is cheaper where, and both costs at the ends of the intervals.
#[derive(Debug, Clone, Serialize)]
pub struct CrossoverResult {
    /// The model.
    pub model: String,
    /// The symbol that varies.
    pub symbol: String,
    /// The first value examined.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub from: Rational,
    /// The last value examined.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub to: Rational,
    /// The step between the values examined.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub step: Rational,
    /// Why this step: the one given, or what the strategies need of the symbol.
    pub step_reason: String,
    /// The other symbols' values.
    pub fixed: std::collections::BTreeMap<String, String>,
    /// The calibration table whose balance ratios price the costs.
    pub calibration: String,
    /// Strategy A as given.
    pub a: String,
    /// Strategy B as given.
    pub b: String,
    /// What is compared: the relative cost of the busiest device per step.
    pub cost: String,
    /// Who is cheaper where, and each cost's formulas.
    #[serde(flatten)]
    pub result: Crossover,
    /// Both costs, exactly evaluated, at the first and last value of every interval.
    pub boundaries: Vec<CrossoverBoundary>,
    /// Whether the costs are more than one polynomial over the range (the pipeline partition,
    /// the busiest stage or a padded vocabulary changed).
    pub piecewise: bool,
}

struct Side {
    strategy: Strategy,
    machine: Machine,
    /// The analysis of its layout (the same at every value of the symbol).
    analysis: crate::parallel::Analysis,
}

impl Side {
    /// The relative cost at `values`, or why the strategy cannot run there.
    fn cost(&self, model: &Model, values: &Bindings) -> Result<Rational, Error> {
        Ok(self.evaluation(model, values)?.relative.total)
    }

    /// The exact evaluation at `values`, or why the strategy cannot run there.
    fn evaluation(
        &self,
        model: &Model,
        values: &Bindings,
    ) -> Result<crate::parallel::Evaluation, Error> {
        model
            .check_sizes(values)
            .map_err(|e| Error::Usage(e.to_string()))?;
        let batch = model
            .batch_value(values)
            .cloned()
            .unwrap_or_else(Rational::one);
        let (st, _) = self.strategy.resolve_quietly(&self.machine, &batch)?;
        let analysis = &self.analysis;
        // At the plateau: the kernel term, read from curves, has no formula to solve.
        let plateau = st.calib.at_plateau();
        let e = evaluate_analysed(
            model,
            analysis,
            values,
            &st.knobs,
            st.machine().on(&plateau),
        )?;
        Ok(e)
    }
}

/// Memory per device of strategy A (`a`) or B of `spec` at `values`, exactly.
pub(crate) fn memory_at(
    spec: &CrossoverSpec,
    model: &Model,
    values: &Bindings,
    a: bool,
) -> Result<Rational, Error> {
    let (side, _) = side(spec, a, model, values, spec.symbol.trim())?;
    Ok(side.evaluation(model, values)?.memory.total)
}

/// Values of the symbol from 1 on examined, at most, for the lattice both strategies run on
/// (see [`versus::lattice`]): a step a few thousand long is beyond any split of a few thousand
/// devices of the shipped models' sizes.
const LATTICE_LIMIT: u64 = 4096;

/// The values examined: `from, from + step, …` (`count` of them), and why this step.
struct Grid {
    from: u64,
    step: u64,
    count: u64,
    reason: String,
}

/// Where `spec.a` stops beating `spec.b` as `spec.symbol` grows, for `model` at `values`.
pub(crate) fn crossover_loaded(
    spec: &CrossoverSpec,
    model: &Model,
    values: &Bindings,
) -> Result<CrossoverResult, Error> {
    let var = spec.symbol.trim().to_string();
    let names = Names::of(spec.machine.spelling());
    let current = current_value(model, values, &var, &names)?;
    let to = checked_to(spec, &var, current, &names)?;
    let (sa, sb, range) = sides(spec, model, values, &var)?;
    let at = |x: &Rational| {
        let mut v = values.clone();
        v.insert(var.clone(), x.clone());
        v
    };
    let mut ea = |x: &Rational| sa.cost(model, &at(x));
    let mut eb = |x: &Rational| sb.cost(model, &at(x));
    let grid = match spec.step {
        Some(step) => {
            let from = spec.from.unwrap_or(step);
            Grid {
                from,
                step,
                count: to.saturating_sub(from) / step + 1,
                reason: format!("{} {step}, as given", names.step),
            }
        }
        None => chosen_grid(&var, spec.from, to, (&mut ea, &mut eb), &names)?,
    };
    if grid.from > to {
        return Err(Error::Usage(format!(
            "{} {} is above {} {to}: nothing to examine",
            names.from, grid.from, names.to
        )));
    }
    let result = versus::crossover(
        &var,
        &Rational::from_integer(grid.from.into()),
        &Rational::from_integer(grid.step.into()),
        grid.count,
        range,
        &mut ea,
        &mut eb,
    );
    let result = match result {
        Ok(r) => r,
        Err(e) => return Err(refusal(e, &var, &grid, (&mut ea, &mut eb), &names)),
    };
    let boundaries = boundaries(&result, &mut ea, &mut eb);
    let calib = spec.machine.calibration();
    let piecewise = result.pieces.len() > 1;
    Ok(CrossoverResult {
        model: model.name.clone(),
        symbol: var.clone(),
        from: Rational::from_integer(grid.from.into()),
        to: Rational::from_integer((grid.from + (grid.count - 1) * grid.step).into()),
        step: Rational::from_integer(grid.step.into()),
        step_reason: grid.reason,
        fixed: values
            .iter()
            .filter(|(k, _)| **k != var)
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        calibration: calib.name.clone(),
        a: spec.a.given.clone(),
        b: spec.b.given.clone(),
        cost: "relative cost: FLOP-equivalents of the busiest device per training step, every \
               kernel at the matmul plateau (the kernel term, read from the table's curves, \
               has no formula)"
            .into(),
        result,
        boundaries,
        piecewise,
    })
}

fn current_value(
    model: &Model,
    values: &Bindings,
    var: &str,
    names: &Names,
) -> Result<Rational, Error> {
    let Some(current) = values.get(var).cloned() else {
        let known: Vec<&str> = model.symbols.keys().map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "{} `{var}`: model `{}` has no symbol `{var}` (its symbols: {})",
            names.symbol,
            model.name,
            known.join(", ")
        )));
    };
    Ok(current)
}

/// The largest value examined (`--to`, else 8 × the model's value `current`), once `--step`
/// and `--from` are checked: neither zero, `--from` not above it.
fn checked_to(
    spec: &CrossoverSpec,
    var: &str,
    current: Rational,
    names: &Names,
) -> Result<u64, Error> {
    if spec.step == Some(0) {
        return Err(Error::Usage(format!("{} must be at least 1", names.step)));
    }
    if spec.from == Some(0) {
        return Err(Error::Usage(format!(
            "{} must be at least 1: {var} is a size",
            names.from
        )));
    }
    let to = match spec.to {
        Some(t) => t,
        None => (current * Rational::from_integer(8.into()))
            .floor()
            .to_integer()
            .to_u64()
            .ok_or_else(|| Error::Usage(format!("{} {var}: give {}", names.symbol, names.to)))?,
    };
    if let Some(from) = spec.from.filter(|&f| f > to) {
        return Err(Error::Usage(format!(
            "{} {from} is above {} {to}: nothing to examine",
            names.from, names.to
        )));
    }
    Ok(to)
}

/// Strategies A and B, analysed, and the range of the symbol's exponents in their analyses'
/// polynomials.
fn sides(
    spec: &CrossoverSpec,
    model: &Model,
    values: &Bindings,
    var: &str,
) -> Result<(Side, Side, (i32, i32)), Error> {
    let (sa, (alo, ahi)) = side(spec, true, model, values, var)?;
    let (sb, (blo, bhi)) = side(spec, false, model, values, var)?;
    Ok((sa, sb, (alo.min(blo).min(0), ahi.max(bhi).max(0))))
}

/// Strategy A (`a`) or B of `spec`, analysed, and the range of the symbol's exponents in its
/// analysis's polynomials. Resolving it at the model's own values reports bad knobs and files
/// with the strategy's name.
fn side(
    spec: &CrossoverSpec,
    a: bool,
    model: &Model,
    values: &Bindings,
    var: &str,
) -> Result<(Side, (i32, i32)), Error> {
    let (given, what) = if a {
        (&spec.a, "strategy A")
    } else {
        (&spec.b, "strategy B")
    };
    let st = given
        .strategy
        .resolve_for(&spec.machine, model, values)
        .map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("{what}: {m}")),
            Error::Strategy(e) => Error::Usage(format!("{what}: {e}")),
            other => other,
        })?;
    let analysis = crate::parallel::analyse(model, &st.layout);
    let range = versus::exponent_range(&analysis, var);
    let side = Side {
        strategy: given.strategy.clone(),
        machine: spec.machine.clone(),
        analysis,
    };
    Ok((side, range))
}

/// Both costs, evaluated exactly again, at the first and last value of every interval where
/// both strategies run.
fn boundaries(
    result: &Crossover,
    ea: &mut versus::Evaluator<'_, Error>,
    eb: &mut versus::Evaluator<'_, Error>,
) -> Vec<CrossoverBoundary> {
    let mut boundaries = Vec::new();
    for i in &result.intervals {
        if matches!(i.winner, Winner::Invalid { .. }) {
            continue;
        }
        for x in [&i.from, &i.to] {
            if boundaries.iter().any(|b: &CrossoverBoundary| &b.value == x) {
                continue;
            }
            let (Ok(a), Ok(b)) = (ea(x), eb(x)) else {
                continue;
            };
            boundaries.push(CrossoverBoundary {
                value: x.clone(),
                a,
                b,
            });
        }
    }
    boundaries
}

/// The grid without `--step`: the lattice both strategies run on, from `--from` rounded up
/// onto it, or else from the first of its values at which both run.
fn chosen_grid(
    var: &str,
    from: Option<u64>,
    to: u64,
    (ea, eb): (
        &mut versus::Evaluator<'_, Error>,
        &mut versus::Evaluator<'_, Error>,
    ),
    names: &Names,
) -> Result<Grid, Error> {
    let found = versus::lattice(ea, eb, LATTICE_LIMIT);
    let Some(both) = found.both else {
        if let Some(never) = never_both(var, &found) {
            return Err(never);
        }
        // Both run somewhere, but on no multiples of one step (an offset lattice): every value,
        // and the crossover reports the values where one cannot run, or the step to give.
        let from = from.unwrap_or(1);
        return Ok(Grid {
            from,
            step: 1,
            count: to.saturating_sub(from) + 1,
            reason: format!(
                "no step whose multiples all let both strategies run was found among {var} = 1 … {}",
                found.scanned
            ),
        });
    };
    let k = both.step;
    let start = match from {
        Some(f) => f.div_ceil(k) * k,
        None => both.first,
    };
    let mut reason = lattice_reason(var, &found, both);
    if let Some(f) = from.filter(|&f| f != start) {
        reason.push_str(&format!("; {} {f} rounded up onto the lattice", names.from));
    }
    if start > to {
        return Err(Error::Usage(format!(
            "crossover in {var}: nothing to examine up to {} {to}: the first value of {var} \
             to examine on the strategies' lattice is {start} ({reason})",
            names.to
        )));
    }
    Ok(Grid {
        from: start,
        step: k,
        count: (to - start) / k + 1,
        reason,
    })
}

/// Why no lattice: a strategy that no value examined lets run, or the two never running at the
/// same value. `None` when both ran together somewhere.
fn never_both(var: &str, found: &versus::Lattices) -> Option<Error> {
    let sides = [("A", &found.a), ("B", &found.b)];
    let mut why: Vec<String> = sides
        .iter()
        .filter(|(_, n)| n.lattice.is_none())
        .filter_map(|(name, n)| {
            let r = n.refusal.as_ref()?;
            Some(if n.never {
                format!(
                    "{name} cannot run at any {var}: {} (the same at every {var} examined)",
                    r.why
                )
            } else {
                format!("{name} cannot run at {var} = {}: {}", r.value, r.why)
            })
        })
        .collect();
    if why.is_empty() {
        if found.a.lattice.is_none() || found.b.lattice.is_none() {
            return None;
        }
        // Each runs somewhere, never both at once.
        why.push(lattice_reason_sides(var, found));
    }
    Some(Error::Usage(format!(
        "crossover in {var}: the strategies do not both run at any {var} = 1 … {} examined ({})",
        found.scanned,
        why.join("; ")
    )))
}

/// What each strategy needs of the symbol, in words: `A needs S divisible by 2, B needs S
/// divisible by 4`, or `both strategies need S divisible by 4`.
fn lattice_reason_sides(var: &str, found: &versus::Lattices) -> String {
    let need = |n: &versus::Need| match n.lattice {
        Some(l) if l.step > 1 => Some(format!("{var} divisible by {}", l.step)),
        Some(l) if l.first > 1 => Some(format!("{var} ≥ {}", l.first)),
        _ => None,
    };
    match (need(&found.a), need(&found.b)) {
        (Some(a), Some(b)) if a == b => format!("both strategies need {a}"),
        (Some(a), Some(b)) => format!("A needs {a}, B needs {b}"),
        (Some(a), None) => format!("A needs {a}, B runs at every {var}"),
        (None, Some(b)) => format!("A runs at every {var}, B needs {b}"),
        (None, None) => format!("both strategies run at every {var}"),
    }
}

/// Why the lattice `both`: what each strategy needs, what together they need when that is more,
/// and the refusal at the largest value below each strategy's lattice (the rule that rules the
/// other values out).
fn lattice_reason(var: &str, found: &versus::Lattices, both: versus::Lattice) -> String {
    let mut reason = lattice_reason_sides(var, found);
    let steps = [&found.a, &found.b].map(|n| n.lattice.map_or(1, |l| l.step));
    if both.step != num_integer::Integer::lcm(&steps[0], &steps[1]) {
        reason.push_str(&format!(
            "; together they run at the multiples of {} from {var} = {}",
            both.step, both.first
        ));
    }
    let evidence: Vec<String> = [("A", &found.a), ("B", &found.b)]
        .iter()
        .filter_map(|(name, n)| {
            let r = n.refusal.as_ref()?;
            Some(format!(
                "at {var} = {}, {name} cannot run: {}",
                r.value, r.why
            ))
        })
        .collect();
    if !evidence.is_empty() {
        reason.push_str(&format!(" — {}", evidence.join("; ")));
    }
    reason
}

/// The error of a crossover whose values one strategy cannot run at: with a step given, it
/// names the lattice the strategies need and the `--from`/`--step` that would fit it.
fn refusal(
    e: crate::search::SearchError,
    var: &str,
    grid: &Grid,
    (ea, eb): (
        &mut versus::Evaluator<'_, Error>,
        &mut versus::Evaluator<'_, Error>,
    ),
    names: &Names,
) -> Error {
    use crate::search::SearchError as S;
    let plain = |e: S| Error::Usage(format!("crossover in {var}: {e}"));
    if !matches!(e, S::Periodic(_) | S::NeverBothRun { .. }) {
        return plain(e);
    }
    let found = versus::lattice(ea, eb, LATTICE_LIMIT);
    let Some(both) = found.both else {
        return match never_both(var, &found) {
            Some(never) => never,
            None => plain(e),
        };
    };
    let k = both.step;
    if grid.step.is_multiple_of(k) && grid.from.is_multiple_of(k) {
        return plain(e);
    }
    let from = (grid.from.div_ceil(k) * k).max(both.first);
    let (step, start) = (names.step, names.from);
    Error::Usage(format!(
        "crossover in {var}: {step} {} ({var} = {}, {}, {}, …) reaches values where a strategy \
         cannot run; give {start} {from} {step} {k} (or a multiple of {k}): {}",
        grid.step,
        grid.from,
        grid.from + grid.step,
        grid.from + 2 * grid.step,
        lattice_reason(var, &found, both)
    ))
}

/// Who is cheaper where, in one line: `A for S = 2048 … 3071, B for S = 3072 … 4096`, with `a`
/// and `b` naming the strategies.
pub(crate) fn winners_line(o: &CrossoverResult, a: &str, b: &str) -> String {
    let v = &o.symbol;
    if let [only] = &o.result.intervals[..] {
        let who = match only.winner {
            Winner::A => a,
            Winner::B => b,
            _ => "",
        };
        if !who.is_empty() {
            return format!(
                "{who} stays cheaper from {v} = {} to {}",
                only.from, only.to
            );
        }
    }
    o.result
        .intervals
        .iter()
        .map(|i| {
            let span = if i.from == i.to {
                format!("{v} = {}", i.from)
            } else {
                format!("{v} = {} … {}", i.from, i.to)
            };
            match &i.winner {
                Winner::A => format!("{a} for {span}"),
                Winner::B => format!("{b} for {span}"),
                Winner::Equal => format!("equal for {span}"),
                Winner::Invalid { .. } => format!("one cannot run for {span}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
