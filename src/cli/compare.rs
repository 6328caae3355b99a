//! `symshard compare`: two strategies of one model side by side, component by component, with
//! the differences exact (and as formulas in the model's symbols where they are sums of the
//! model's polynomials).

use super::output::print_json;
use super::units;
use super::{Format, SymbolArgs};
use crate::api::{CompareRequest, CompareSide};
use crate::error::Error;
use crate::model::Model;
use crate::search::versus::{self, Component};
use crate::sym::{Bindings, Rational};
use crate::timeline::Stream;
use clap::Args;
use num_traits::{Signed, Zero};

/// Arguments of `compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Strategy A: a strategy file (YAML) or a knob string such as
    /// `tp=8,pp=4,dp=32,mbs=1,sp,recompute=selective,zero=1` (the knobs of `rank --fix`).
    pub a: String,
    /// Strategy B, as A.
    pub b: String,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// The machine: a calibration table, a what-if change of it, a stack profile.
    #[command(flatten)]
    pub machine: super::strategy_args::MachineArgs,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Memory kept free on each device (`10%`, `8GB`); default: 10 % of the calibration's
    /// capacity, none of a `--memory` given (as `rank` judges it).
    #[arg(long, value_name = "PERCENT|SIZE")]
    pub headroom: Option<String>,
    /// Devices per node (default: the strategy file's, else the calibration's).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// Price every kernel at the matmul plateau, as `crossover` does: the relative cost without
    /// its kernel term (GEMMs below the plateau by their sizes, kernel launches), a polynomial
    /// in the model's symbols whose total has a formula. Simulated seconds are unchanged.
    #[arg(long)]
    pub plateau: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

pub(crate) use crate::api::Evaluated;
pub use crate::api::{Comparison, Part};

/// A difference as `f` prints it, with its sign (`+1.23 GB`, `-4.5 PFLOP`, `0`).
fn signed(r: &Rational, f: fn(&Rational) -> String) -> String {
    if r.is_zero() {
        "0".into()
    } else if r.is_positive() {
        format!("+{}", f(r))
    } else {
        f(r)
    }
}

/// Prints a comparison as a table: amounts with units and thousands separators (exact integers
/// and fractions with `--exact`), the B − A formulas as they are.
pub fn print_comparison(c: &Comparison) {
    println!(
        "A  {}  ({} devices{})",
        c.a.strategy,
        units::tally(c.a.devices),
        if c.a.fits { "" } else { ", does not fit" }
    );
    println!(
        "B  {}  ({} devices{})",
        c.b.strategy,
        units::tally(c.b.devices),
        if c.b.fits { "" } else { ", does not fit" }
    );
    println!(
        "per device and training step, busiest device (memory: fullest device); κ of {}",
        c.calibration
    );
    println!();
    super::output::print_table(
        "",
        "<<>>>",
        &["", "component", "A", "B", "B − A"],
        &component_rows(c),
    );
    print_formulas(c);
    println!();
    print_verdict(c);
}

/// The table's rows: each component of A and B with B − A, whether each fits, and with a
/// calibration the timeline's seconds and busy streams.
fn component_rows(c: &Comparison) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut group = "";
    for row in &c.components {
        let g = if row.group != group {
            group = row.group;
            row.group
        } else {
            ""
        };
        let f = units::component_format(row.group);
        rows.push(vec![
            g.to_string(),
            units::component_name(row.group, &row.name).to_string(),
            f(&row.a),
            f(&row.b),
            signed(&row.difference, f),
        ]);
    }
    let yes = |fits: bool| if fits { "yes" } else { "no" }.to_string();
    rows.push(vec![
        String::new(),
        "fits in memory".into(),
        yes(c.a.fits),
        yes(c.b.fits),
    ]);
    if let (Some(sa), Some(sb)) = (&c.a.seconds, &c.b.seconds) {
        let seconds = |name: String, x: f64, y: f64, first: bool| {
            vec![
                if first { "timeline" } else { "" }.to_string(),
                name,
                format!("{x:.4}"),
                format!("{y:.4}"),
                format!("{:+.4}", y - x),
            ]
        };
        rows.push(seconds(
            "seconds per step".into(),
            sa.iteration_seconds,
            sb.iteration_seconds,
            true,
        ));
        for &s in &Stream::ALL {
            rows.push(seconds(
                format!("  {} stream busy (s)", s.name()),
                sa.busy.of(s),
                sb.busy.of(s),
                false,
            ));
        }
    }
    rows
}

/// B − A as formulas, for the components whose difference depends on the model's symbols.
fn print_formulas(c: &Comparison) {
    let formulas: Vec<&Component> = c
        .components
        .iter()
        .filter(|r| {
            r.formula_difference
                .as_ref()
                .is_some_and(|d| !d.is_zero() && !d.is_constant())
        })
        .collect();
    if !formulas.is_empty() {
        println!();
        println!("B − A as formulas in the model's symbols (mesh sizes and micro-batches put in):");
        for r in formulas {
            if let Some(d) = &r.formula_difference {
                println!("  {:<42} {}", units::component_name(r.group, &r.name), d);
            }
        }
    }
}

/// Which is faster by simulated seconds, which is cheaper and on what.
fn print_verdict(c: &Comparison) {
    let list = |v: &[Part]| {
        v.iter()
            .filter(|p| p.part != versus::HIDDEN)
            .map(|p| format!("{} ({})", p.part, units::flops(&p.amount)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // What overlap hides is a negative part: spending less on it is hiding more.
    let hides = |v: &[Part], how: &str| {
        v.iter()
            .find(|p| p.part == versus::HIDDEN)
            .map(|p| {
                format!(
                    "; it hides {how} data-parallel traffic under compute ({})",
                    units::flops(&p.amount)
                )
            })
            .unwrap_or_default()
    };
    if let (Some(sa), Some(sb)) = (&c.a.seconds, &c.b.seconds) {
        let (x, y) = (sa.iteration_seconds, sb.iteration_seconds);
        if x != y {
            println!(
                "by simulated seconds {} is faster, by {:.4} s per step",
                if x < y { "A" } else { "B" },
                (x - y).abs()
            );
        }
    }
    match c.cheaper.as_str() {
        "equal" => println!("A and B have the same relative cost"),
        w => {
            let total = c
                .components
                .iter()
                .find(|r| r.group == "relative cost" && r.name == "total")
                .map(|r| r.difference.abs())
                .unwrap_or_default();
            let fits = if w == "A" { c.a.fits } else { c.b.fits };
            let (wins, loses) = (list(&c.wins_on), list(&c.loses_on));
            println!(
                "{w} is cheaper by {} of relative cost (FLOP-equivalents){}: it spends less on {}{}{}{}",
                units::flops(&total),
                if fits {
                    ""
                } else {
                    ", but does not fit in memory"
                },
                if wins.is_empty() {
                    "nothing".to_string()
                } else {
                    wins
                },
                if loses.is_empty() {
                    String::new()
                } else {
                    format!("; more on {loses}")
                },
                hides(&c.wins_on, "more"),
                hides(&c.loses_on, "less"),
            );
        }
    }
}

/// `x` when both sides have it, else `x (A) and y (B)`.
fn both(a: String, b: String) -> String {
    if a == b {
        a
    } else {
        format!("{a} (A) and {b} (B)")
    }
}

/// The header of `compare`: the model with its B and S, the devices, the machine and the
/// device memory, as `rank` states them.
fn header(model: &Model, values: &Bindings, calib: &str, a: &Evaluated, b: &Evaluated) -> String {
    let devices = |e: &Evaluated| units::tally(e.evaluation.knobs.devices());
    let per_node = |e: &Evaluated| e.gpus_per_node.to_string();
    let memory = |e: &Evaluated| units::bytes_rounded(&e.memory);
    format!(
        "{}{} on {} devices ({} per node) of {calib}: {} usable per device",
        model.name,
        crate::units::batch_and_sequence(model, values),
        both(devices(a), devices(b)),
        both(per_node(a), per_node(b)),
        both(memory(a), memory(b)),
    )
}

/// `compare`'s request of the command line's arguments, checked in its order: strategy A,
/// the machine, strategy B.
fn request(args: &CompareArgs) -> Result<CompareRequest, Error> {
    let a = CompareSide::parse(&args.a, "strategy A")?;
    let machine = args.machine.machine_with_memory(
        args.gpus_per_node,
        args.memory.as_deref(),
        args.headroom.as_deref(),
    )?;
    let b = CompareSide::parse(&args.b, "strategy B")?;
    Ok(CompareRequest {
        model: args.symbols.model(&args.model),
        a,
        b,
        machine: Some(machine),
        seconds: args.machine.seconds(),
        plateau: args.plateau,
    })
}

/// Runs `compare`.
pub fn run(args: CompareArgs) -> Result<(), Error> {
    let loaded = args.symbols.model(&args.model).load()?;
    let (c, d) = crate::api::compare_loaded(loaded, &request(&args)?)?;
    let (model, values, a, b) = (&d.model, &d.values, &d.a, &d.b);
    let calib = &c.calibration;
    match args.format {
        Format::Json => print_json(&c),
        Format::Table => {
            println!("{}", header(model, values, calib, a, b));
            if let Some(line) = units::settings_line(&crate::timeline::setting_map(model)) {
                println!("{line}");
            }
            if c.stack_profile.is_some() || c.a.seconds.is_some() {
                println!("{}", units::stack_line(c.stack_profile.as_deref()));
            }
            print_comparison(&c);
            if !units::exact() {
                println!("{}", units::UNITS_LEGEND);
            }
            Ok(())
        }
    }
}
