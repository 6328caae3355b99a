//! `symshard crossover`: where strategy A stops beating strategy B as one model symbol grows,
//! solved exactly from the strategies' relative costs as Laurent polynomials in that symbol.

use super::output::print_json;
use super::strategy_args::StrategyFlags;
use super::units;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::Model;
use crate::parallel::evaluate_analysed;
use crate::search::versus::{self, Crossover, Winner};
use crate::sym::{Bindings, Rational};
use clap::Args;
use num_traits::{One, Signed, ToPrimitive};
use serde::Serialize;

/// Arguments of `crossover`.
#[derive(Debug, Args)]
pub struct CrossoverArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Strategy A: a strategy file (YAML) or a knob string (`tp=8,pp=4,mbs=1,sp`).
    pub a: String,
    /// Strategy B, as A.
    pub b: String,
    /// The model symbol that varies (`S`, `B`, `H`, …); the others keep the model's values (and
    /// `--set`).
    #[arg(long = "in", value_name = "SYM")]
    pub var: String,
    /// Smallest value examined (default: the step given; without `--step`, the first value of
    /// the chosen lattice at which both strategies run, and a value given is rounded up onto
    /// it).
    #[arg(long, value_name = "N")]
    pub from: Option<u64>,
    /// Largest value examined (default: 8 × the model's value).
    #[arg(long, value_name = "N")]
    pub to: Option<u64>,
    /// Examine every N-th value from `--from` on. Default: the smallest step whose every
    /// multiple lets both strategies run (sizes a split must divide, such as the tokens split by
    /// tensor and sequence parallelism), found by evaluating them and stated in the output.
    #[arg(long, value_name = "N")]
    pub step: Option<u64>,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// A calibration table (a file or a shipped name) for the balance ratios and memory.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// A what-if machine: change named quantities of the `--calib` table
    /// (`nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`; a factor `xF` or a value with its
    /// unit). Names: device.peak.DTYPE, hbm.bandwidth, hbm.capacity, nvlink.bandwidth,
    /// network.bandwidth, nvlink.latency, network.latency, domain, device.tdp.
    #[arg(long = "with", value_name = "NAME=VALUE,…", requires = "calib")]
    pub with: Option<String>,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Devices per node (default: the strategy file's, else the calibration's).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Serialize)]
struct Boundary {
    #[serde(serialize_with = "crate::sym::ser_rational")]
    value: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    a: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    b: Rational,
}

/// A crossover solved: who is cheaper where, and both costs at the ends of the intervals.
#[derive(Serialize)]
pub(crate) struct Out {
    model: String,
    symbol: String,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    from: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    to: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    step: Rational,
    /// Why this step: the one given, or what the strategies need of the symbol.
    step_reason: String,
    /// The other symbols' values.
    fixed: std::collections::BTreeMap<String, String>,
    calibration: String,
    a: String,
    b: String,
    /// What is compared: the relative cost of the busiest device per step.
    cost: String,
    #[serde(flatten)]
    pub(crate) result: Crossover,
    /// Both costs, exactly evaluated, at the first and last value of every interval.
    boundaries: Vec<Boundary>,
    /// Whether the costs are more than one polynomial over the range (the pipeline partition,
    /// the busiest stage or a padded vocabulary changed).
    piecewise: bool,
}

struct Side {
    flags: StrategyFlags,
    what: &'static str,
    /// The analysis of its layout (the same at every value of the symbol).
    analysis: Option<crate::parallel::Analysis>,
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
        let (st, _) = self.flags.resolve_quietly(&batch)?;
        let analysis = self
            .analysis
            .as_ref()
            .ok_or_else(|| Error::Internal(format!("{}: not analysed", self.what)))?;
        // At the plateau: the kernel term, read from curves, has no formula to solve.
        let e = evaluate_analysed(
            model,
            analysis,
            values,
            &st.knobs,
            &st.calib.at_plateau(),
            st.gpus_per_node,
            &st.memory,
        )?;
        Ok(e)
    }
}

/// Memory per device of strategy A (`a`) or B of `args` at `values`, exactly.
pub(crate) fn memory_at(
    args: &CrossoverArgs,
    model: &Model,
    values: &Bindings,
    a: bool,
) -> Result<Rational, Error> {
    let (sa, sb, _) = sides(args, model, values, args.var.trim())?;
    let side = if a { sa } else { sb };
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

/// Runs `crossover`.
pub fn run(args: CrossoverArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let out = solve(&args, &model, &values)?;
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            print_table(&out);
            Ok(())
        }
    }
}

/// Where `args.a` stops beating `args.b` as `args.var` grows, for `model` at `values`.
pub(crate) fn solve(args: &CrossoverArgs, model: &Model, values: &Bindings) -> Result<Out, Error> {
    let var = args.var.trim().to_string();
    let current = current_value(model, values, &var)?;
    let to = checked_to(args, &var, current)?;
    let (sa, sb, range) = sides(args, model, values, &var)?;
    let at = |x: &Rational| {
        let mut v = values.clone();
        v.insert(var.clone(), x.clone());
        v
    };
    let mut ea = |x: &Rational| sa.cost(model, &at(x));
    let mut eb = |x: &Rational| sb.cost(model, &at(x));
    let grid = match args.step {
        Some(step) => {
            let from = args.from.unwrap_or(step);
            Grid {
                from,
                step,
                count: to.saturating_sub(from) / step + 1,
                reason: format!("--step {step}, as given"),
            }
        }
        None => chosen_grid(&var, args.from, to, &mut ea, &mut eb)?,
    };
    if grid.from > to {
        return Err(Error::Usage(format!(
            "--from {} is above --to {to}: nothing to examine",
            grid.from
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
        Err(e) => return Err(refusal(e, &var, &grid, &mut ea, &mut eb)),
    };
    let boundaries = boundaries(&result, &mut ea, &mut eb);
    let calib =
        crate::calib::Calibration::resolve_with(args.calib.as_deref(), args.with.as_deref())?;
    let piecewise = result.pieces.len() > 1;
    Ok(Out {
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
        a: args.a.clone(),
        b: args.b.clone(),
        cost: "relative cost: FLOP-equivalents of the busiest device per training step, every \
               kernel at the matmul plateau (the kernel term, read from the table's curves, \
               has no formula)"
            .into(),
        result,
        boundaries,
        piecewise,
    })
}

/// Who is cheaper where, in one line: `A for S = 2048 … 3071, B for S = 3072 … 4096`, with `a`
/// and `b` naming the strategies.
pub(crate) fn winners_line(o: &Out, a: &str, b: &str) -> String {
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

/// The model's value of the symbol that varies, or a usage error naming the symbols it has.
fn current_value(model: &Model, values: &Bindings, var: &str) -> Result<Rational, Error> {
    let Some(current) = values.get(var).cloned() else {
        let known: Vec<&str> = model.symbols.keys().map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "--in `{var}`: model `{}` has no symbol `{var}` (its symbols: {})",
            model.name,
            known.join(", ")
        )));
    };
    Ok(current)
}

/// The largest value examined (`--to`, else 8 × the model's value `current`), once `--step`
/// and `--from` are checked: neither zero, `--from` not above it.
fn checked_to(args: &CrossoverArgs, var: &str, current: Rational) -> Result<u64, Error> {
    if args.step == Some(0) {
        return Err(Error::Usage("--step must be at least 1".into()));
    }
    if args.from == Some(0) {
        return Err(Error::Usage(format!(
            "--from must be at least 1: {var} is a size"
        )));
    }
    let to = match args.to {
        Some(t) => t,
        None => (current * Rational::from_integer(8.into()))
            .floor()
            .to_integer()
            .to_u64()
            .ok_or_else(|| Error::Usage(format!("--in {var}: give --to")))?,
    };
    if let Some(from) = args.from.filter(|&f| f > to) {
        return Err(Error::Usage(format!(
            "--from {from} is above --to {to}: nothing to examine"
        )));
    }
    Ok(to)
}

/// Strategies A and B, analysed, and the range of the symbol's exponents in their analyses'
/// polynomials.
fn sides(
    args: &CrossoverArgs,
    model: &Model,
    values: &Bindings,
    var: &str,
) -> Result<(Side, Side, (i32, i32)), Error> {
    let make = |text: &str, what: &'static str| -> Result<Side, Error> {
        let mut flags = StrategyFlags::from_argument(text, what)?;
        flags.machine.calib = args.calib.clone();
        flags.machine.with = args.with.clone();
        flags.memory = args.memory.clone();
        if args.gpus_per_node.is_some() {
            flags.gpus_per_node = args.gpus_per_node;
        }
        Ok(Side {
            flags,
            what,
            analysis: None,
        })
    };
    let mut sa = make(&args.a, "strategy A")?;
    let mut sb = make(&args.b, "strategy B")?;
    // Resolving at the model's own values reports bad knobs and files once, with their names,
    // and gives the analyses whose polynomials bound the exponents of the symbol.
    let mut range = (0i32, 0i32);
    for s in [&mut sa, &mut sb] {
        let st = s.flags.resolve_for(model, values).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("{}: {m}", s.what)),
            Error::Strategy(e) => Error::Usage(format!("{}: {e}", s.what)),
            other => other,
        })?;
        let analysis = crate::parallel::analyse(model, &st.layout);
        let (lo, hi) = versus::exponent_range(&analysis, var);
        range = (range.0.min(lo), range.1.max(hi));
        s.analysis = Some(analysis);
    }
    Ok((sa, sb, range))
}

/// Both costs, evaluated exactly again, at the first and last value of every interval where
/// both strategies run.
fn boundaries(
    result: &Crossover,
    ea: &mut versus::Evaluator<'_, Error>,
    eb: &mut versus::Evaluator<'_, Error>,
) -> Vec<Boundary> {
    let mut boundaries = Vec::new();
    for i in &result.intervals {
        if matches!(i.winner, Winner::Invalid { .. }) {
            continue;
        }
        for x in [&i.from, &i.to] {
            if boundaries.iter().any(|b: &Boundary| &b.value == x) {
                continue;
            }
            let (Ok(a), Ok(b)) = (ea(x), eb(x)) else {
                continue;
            };
            boundaries.push(Boundary {
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
    ea: &mut versus::Evaluator<'_, Error>,
    eb: &mut versus::Evaluator<'_, Error>,
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
        reason.push_str(&format!("; --from {f} rounded up onto the lattice"));
    }
    if start > to {
        return Err(Error::Usage(format!(
            "crossover in {var}: nothing to examine up to --to {to}: the first value of {var} \
             to examine on the strategies' lattice is {start} ({reason})"
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
    ea: &mut versus::Evaluator<'_, Error>,
    eb: &mut versus::Evaluator<'_, Error>,
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
    Error::Usage(format!(
        "crossover in {var}: --step {} ({var} = {}, {}, {}, …) reaches values where a strategy \
         cannot run; give --from {from} --step {k} (or a multiple of {k}): {}",
        grid.step,
        grid.from,
        grid.from + grid.step,
        grid.from + 2 * grid.step,
        lattice_reason(var, &found, both)
    ))
}

/// Prints the crossover as a table: what is compared over which values, each piece's formulas
/// and roots, who is cheaper on each interval, and both costs at the intervals' ends.
fn print_table(o: &Out) {
    let v = &o.symbol;
    let fixed: Vec<String> = o.fixed.iter().map(|(k, x)| format!("{k}={x}")).collect();
    println!(
        "crossover of {} in {v} = {} … {} (step {}); {}",
        o.model,
        o.from,
        o.to,
        o.step,
        fixed.join(" ")
    );
    let (list, lattice) = examined(o);
    println!("examined {v} = {list} ({lattice}: {})", o.step_reason);
    println!("A  {}", o.a);
    println!("B  {}", o.b);
    println!("{} (κ of {})", o.cost, o.calibration);
    println!();
    print_pieces(o);
    println!();
    print_intervals(o);
    if !o.boundaries.is_empty() {
        println!();
        print_boundaries(o);
    }
}

/// Prints each piece of the range: both costs, their difference and its roots where each cost
/// is one formula there; and where the formulas change, if they do.
fn print_pieces(o: &Out) {
    let v = &o.symbol;
    for p in &o.result.pieces {
        match (&p.a, &p.b, &p.difference) {
            (Some(a), Some(b), Some(d)) => {
                println!(
                    "{v} = {} … {}: each cost is one Laurent polynomial in {v}",
                    p.from, p.to
                );
                println!("  A({v})     = {a}");
                println!("  B({v})     = {b}");
                println!("  B − A     = {d}");
                if p.roots.is_empty() {
                    println!("  B − A has no real root here");
                } else {
                    println!("  B − A = 0 at {v} = {}", p.roots.join(", "));
                }
            }
            _ => println!(
                "{v} = {} … {}: evaluated value by value (no single formula)",
                p.from, p.to
            ),
        }
    }
    if o.piecewise {
        let starts: Vec<String> = o
            .result
            .pieces
            .iter()
            .skip(1)
            .map(|p| p.from.to_string())
            .collect();
        println!(
            "piecewise: the costs change formula at {v} = {} (pipeline partition, busiest stage, what overlap hides, padding or validity)",
            starts.join(", ")
        );
    }
}

/// Prints who is cheaper on each interval, or why a strategy cannot run there.
fn print_intervals(o: &Out) {
    let v = &o.symbol;
    println!("who is cheaper (every end below is an exact evaluation of both strategies):");
    for i in &o.result.intervals {
        let span = if i.from == i.to {
            format!("{v} = {}", i.from)
        } else {
            format!("{v} = {} … {}", i.from, i.to)
        };
        let what = match &i.winner {
            Winner::A => "A is cheaper".to_string(),
            Winner::B => "B is cheaper".to_string(),
            Winner::Equal => "A and B cost the same".to_string(),
            Winner::Invalid { a, b } => {
                let mut why = Vec::new();
                if let Some(a) = a {
                    why.push(format!("A cannot run: {a}"));
                }
                if let Some(b) = b {
                    why.push(format!("B cannot run: {b}"));
                }
                why.join("; ")
            }
        };
        println!("  {span:<28} {what}");
    }
}

/// Prints both relative costs and their difference at the first and last value of every
/// interval.
fn print_boundaries(o: &Out) {
    let v = &o.symbol;
    println!("relative costs at the ends of the intervals (each an exact evaluation):");
    let rows: Vec<Vec<String>> = o
        .boundaries
        .iter()
        .map(|b| {
            let d = &b.b - &b.a;
            vec![
                b.value.to_string(),
                units::flops(&b.a),
                units::flops(&b.b),
                if d.is_positive() {
                    format!("+{}", units::flops(&d))
                } else {
                    units::flops(&d)
                },
            ]
        })
        .collect();
    super::output::print_table("", "<>>>", &[v.as_str(), "A", "B", "B − A"], &rows);
    if !units::exact() {
        println!("{}", units::UNITS_LEGEND);
    }
}

/// The values examined, `4, 8, 12, … 64`, and the lattice they are on: `every value`,
/// `multiples of 4` or `step 4` (from a value that is not a multiple).
fn examined(o: &Out) -> (String, String) {
    let (from, step, to) = (&o.from, &o.step, &o.to);
    let count = ((to - from) / step).to_integer() + num_bigint::BigInt::one();
    let value = |i: u32| (from + step * Rational::from_integer(i.into())).to_string();
    let list = if count <= 4.into() {
        let n = count.to_u32().unwrap_or(4);
        (0..n).map(value).collect::<Vec<_>>().join(", ")
    } else {
        format!("{}, {}, {}, … {to}", value(0), value(1), value(2))
    };
    let lattice = if step.is_one() {
        "every value".to_string()
    } else if (from / step).is_integer() {
        format!("multiples of {step}")
    } else {
        format!("step {step}")
    };
    (list, lattice)
}
