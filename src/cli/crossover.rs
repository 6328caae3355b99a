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
    /// Smallest value examined (default: the step).
    #[arg(long, value_name = "N")]
    pub from: Option<u64>,
    /// Largest value examined (default: 8 × the model's value).
    #[arg(long, value_name = "N")]
    pub to: Option<u64>,
    /// Examine only multiples of this step from `--from` on (sizes a strategy needs divisible,
    /// such as a sequence split by tensor parallelism); default 1.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub step: u64,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// A calibration table (a file or a shipped name) for the balance ratios and memory.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
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

#[derive(Serialize)]
struct Out {
    model: String,
    symbol: String,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    from: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    to: Rational,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    step: Rational,
    /// The other symbols' values.
    fixed: std::collections::BTreeMap<String, String>,
    calibration: String,
    a: String,
    b: String,
    /// What is compared: the relative cost of the busiest device per step.
    cost: String,
    #[serde(flatten)]
    result: Crossover,
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
        Ok(e.relative.total)
    }
}

/// Runs `crossover`.
pub fn run(args: CrossoverArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let var = args.var.trim().to_string();
    let Some(current) = values.get(&var).cloned() else {
        let known: Vec<&str> = model.symbols.keys().map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "--in `{var}`: model `{}` has no symbol `{var}` (its symbols: {})",
            model.name,
            known.join(", ")
        )));
    };
    if args.step == 0 {
        return Err(Error::Usage("--step must be at least 1".into()));
    }
    let from = args.from.unwrap_or(args.step);
    let to = match args.to {
        Some(t) => t,
        None => (current * Rational::from_integer(8.into()))
            .floor()
            .to_integer()
            .to_u64()
            .ok_or_else(|| Error::Usage(format!("--in {var}: give --to")))?,
    };
    if from == 0 {
        return Err(Error::Usage(format!(
            "--from must be at least 1: {var} is a size"
        )));
    }
    if from > to {
        return Err(Error::Usage(format!(
            "--from {from} is above --to {to}: nothing to examine"
        )));
    }
    let count = (to - from) / args.step + 1;
    let make = |text: &str, what: &'static str| -> Result<Side, Error> {
        let mut flags = StrategyFlags::from_argument(text, what)?;
        flags.calib = args.calib.clone();
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
        let st = s.flags.resolve_for(&model, &values).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("{}: {m}", s.what)),
            Error::Strategy(e) => Error::Usage(format!("{}: {e}", s.what)),
            other => other,
        })?;
        let analysis = crate::parallel::analyse(&model, &st.layout);
        let (lo, hi) = versus::exponent_range(&analysis, &var);
        range = (range.0.min(lo), range.1.max(hi));
        s.analysis = Some(analysis);
    }
    let at = |x: &Rational| {
        let mut v = values.clone();
        v.insert(var.clone(), x.clone());
        v
    };
    let mut ea = |x: &Rational| sa.cost(&model, &at(x));
    let mut eb = |x: &Rational| sb.cost(&model, &at(x));
    let result = versus::crossover(
        &var,
        &Rational::from_integer(from.into()),
        &Rational::from_integer(args.step.into()),
        count,
        range,
        &mut ea,
        &mut eb,
    )
    .map_err(|m| Error::Usage(format!("crossover in {var}: {m}")))?;
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
    let calib = crate::calib::Calibration::resolve_or_reference(args.calib.as_deref())?;
    let piecewise = result.pieces.len() > 1;
    let out = Out {
        model: model.name.clone(),
        symbol: var.clone(),
        from: Rational::from_integer(from.into()),
        to: Rational::from_integer((from + (count - 1) * args.step).into()),
        step: Rational::from_integer(args.step.into()),
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
    };
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            print_table(&out);
            Ok(())
        }
    }
}

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
    println!("A  {}", o.a);
    println!("B  {}", o.b);
    println!("{} (κ of {})", o.cost, o.calibration);
    println!();
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
    println!();
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
    if !o.boundaries.is_empty() {
        println!();
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
}
