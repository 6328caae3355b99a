//! `symshard crossover`: where strategy A stops beating strategy B as one model symbol grows,
//! solved exactly from the strategies' relative costs as Laurent polynomials in that symbol.

use super::output::print_json;
use super::units;
use super::{Format, SymbolArgs};
use crate::api::{CompareSide, CrossoverResult, CrossoverSpec};
use crate::error::Error;
use crate::search::versus::Winner;
use crate::sym::Rational;
use clap::Args;
use num_traits::{One, Signed, ToPrimitive};

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

/// Runs `crossover`.
pub fn run(args: CrossoverArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let out = crate::api::crossover_loaded(&spec_of(&args)?, &model, &values)?;
    match args.format {
        Format::Json => print_json(&out),
        Format::Table => {
            print_table(&out);
            Ok(())
        }
    }
}

/// The typed request of `args`: strategy A and B read first, then the machine.
pub(crate) fn spec_of(args: &CrossoverArgs) -> Result<CrossoverSpec, Error> {
    let a = CompareSide::parse(&args.a, "strategy A")?;
    let b = CompareSide::parse(&args.b, "strategy B")?;
    let flags = super::strategy_args::MachineArgs {
        calib: args.calib.clone(),
        with: args.with.clone(),
        stack: None,
    };
    let machine = flags.machine_with_memory(args.gpus_per_node, args.memory.as_deref(), None)?;
    Ok(CrossoverSpec {
        a,
        b,
        symbol: args.var.clone(),
        from: args.from,
        to: args.to,
        step: args.step,
        machine,
    })
}

/// The model's value of the symbol that varies, or a usage error naming the symbols it has.
/// Prints the crossover as a table: what is compared over which values, each piece's formulas
/// and roots, who is cheaper on each interval, and both costs at the intervals' ends.
fn print_table(o: &CrossoverResult) {
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
fn print_pieces(o: &CrossoverResult) {
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
fn print_intervals(o: &CrossoverResult) {
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
fn print_boundaries(o: &CrossoverResult) {
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
fn examined(o: &CrossoverResult) -> (String, String) {
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
