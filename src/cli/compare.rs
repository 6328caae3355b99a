//! `symshard compare`: two strategies of one model side by side, component by component, with
//! the differences exact (and as formulas in the model's symbols where they are sums of the
//! model's polynomials).

use super::output::print_json;
use super::strategy_args::StrategyFlags;
use super::units;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::Model;
use crate::parallel::{evaluate_strategy, Evaluation, Layout};
use crate::search::versus::{self, Component};
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use crate::timeline::Stream;
use clap::Args;
use num_traits::{Signed, Zero};
use serde::Serialize;

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
    /// A calibration table (a file or a shipped name; `TABLE@KERNEL` times fused attention with
    /// one of its `attention_kernels`): its balance ratios and memory, and the simulated seconds
    /// per step of each strategy.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// A what-if machine: change named quantities of the `--calib` table
    /// (`nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`; a factor `xF` or a value with its
    /// unit). Names: device.peak.DTYPE, hbm.bandwidth, hbm.capacity, nvlink.bandwidth,
    /// network.bandwidth, nvlink.latency, network.latency, domain, device.tdp.
    #[arg(long = "with", value_name = "NAME=VALUE,…", requires = "calib")]
    pub with: Option<String>,
    /// A software stack's profile (a file or a shipped name, `stacks/`), added to the simulated
    /// seconds; default: none, profile-free.
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
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

/// Simulated seconds of one step.
#[derive(Debug, Clone, Serialize)]
pub struct Seconds {
    /// Seconds per training step.
    pub iteration_seconds: f64,
    /// Busy seconds per stream of the busiest device, by stream.
    pub busy: crate::timeline::Busy,
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct SideJson {
    /// As given on the command line.
    pub given: String,
    /// The strategy as `rank` prints it.
    pub strategy: String,
    /// Devices it uses.
    pub devices: u64,
    /// Whether it fits in memory.
    pub fits: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::parallel::Infeasible>,
    /// With a calibration table: the timeline's seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<Seconds>,
}

/// A part of the relative cost and how much it differs.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// The part.
    pub part: String,
    /// FLOP-equivalents.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub amount: Rational,
}

/// A comparison, as `compare` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Model.
    pub model: String,
    /// Its symbols' values.
    pub symbols: std::collections::BTreeMap<String, String>,
    /// Calibration table of the balance ratios.
    pub calibration: String,
    /// The stack profile added to the seconds (`--stack`); absent: profile-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_profile: Option<String>,
    /// Strategy A.
    pub a: SideJson,
    /// Strategy B.
    pub b: SideJson,
    /// Components: A, B and B − A, exact.
    pub components: Vec<Component>,
    /// `A`, `B` or `equal`, by relative cost.
    pub cheaper: String,
    /// The parts of the relative cost on which the cheaper strategy spends less, largest first.
    pub wins_on: Vec<Part>,
    /// The parts on which it spends more.
    pub loses_on: Vec<Part>,
}

/// One strategy resolved and evaluated.
pub struct Evaluated {
    /// What was given.
    pub given: String,
    /// Its evaluation.
    pub evaluation: Evaluation,
    /// Simulated seconds, when asked.
    pub seconds: Option<Seconds>,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// Device memory, bytes.
    pub memory: Rational,
}

/// Evaluates knobs (as `rank` ranks them: sequence parallelism as the knob says, the
/// tensor-parallel overrides of the row's layout, none for the annotated one) on `calib`.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_knobs(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    calib: &crate::calib::Calibration,
    gpus_per_node: u64,
    memory: &Rational,
    timed: bool,
    tp_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<Evaluated, Error> {
    let layout = Layout {
        sequence_parallel: knobs.sequence_parallel,
        tp_overrides: tp_overrides.clone(),
    };
    let (_, evaluation) =
        evaluate_strategy(model, values, knobs, &layout, calib, gpus_per_node, memory)?;
    let seconds = if timed {
        Some(seconds_of(
            model,
            values,
            knobs,
            &layout,
            calib,
            gpus_per_node,
            memory,
        )?)
    } else {
        None
    };
    Ok(Evaluated {
        given: knobs.describe(model.batch_value(values)),
        evaluation,
        seconds,
        gpus_per_node,
        memory: memory.clone(),
    })
}

fn seconds_of(
    model: &Model,
    values: &Bindings,
    knobs: &Knobs,
    layout: &Layout,
    calib: &crate::calib::Calibration,
    gpus_per_node: u64,
    memory: &Rational,
) -> Result<Seconds, Error> {
    let (plan, _) = crate::timeline::plan_strategy(
        model,
        values,
        knobs,
        layout,
        calib,
        Some(gpus_per_node),
        memory,
    )?;
    let s = crate::timeline::time_summary(&plan, calib)?;
    let busiest = s
        .devices
        .iter()
        .max_by(|x, y| x.busy.total().total_cmp(&y.busy.total()))
        .map(|d| d.busy)
        .ok_or_else(|| Error::Usage("the timeline has no devices".into()))?;
    Ok(Seconds {
        iteration_seconds: s.iteration_seconds,
        busy: busiest,
    })
}

/// Resolves one side given as a file or knob string; `what` names it in errors.
fn side(
    model: &Model,
    values: &Bindings,
    text: &str,
    what: &str,
    args: &CompareArgs,
) -> Result<Evaluated, Error> {
    let mut flags = StrategyFlags::from_argument(text, what)?;
    flags.calib = args.calib.clone();
    flags.with = args.with.clone();
    flags.stack = args.stack.clone();
    flags.memory = args.memory.clone();
    if args.gpus_per_node.is_some() {
        flags.gpus_per_node = args.gpus_per_node;
    }
    let st = flags.resolve_for(model, values)?;
    let named = |e: Error| match e {
        Error::Usage(m) => Error::Usage(format!("{what} `{text}`: {m}")),
        Error::Strategy(e) => Error::Usage(format!("{what} `{text}`: {e}")),
        other => other,
    };
    let priced = if args.plateau {
        st.calib.at_plateau()
    } else {
        st.calib.clone()
    };
    let (_, evaluation) = st.evaluate(model, values, Some(&priced)).map_err(named)?;
    let seconds = if args.calib.is_some() || args.stack.is_some() {
        Some(
            seconds_of(
                model,
                values,
                &st.knobs,
                &st.layout,
                &st.calib,
                st.gpus_per_node,
                &st.memory,
            )
            .map_err(named)?,
        )
    } else {
        None
    };
    Ok(Evaluated {
        given: text.to_string(),
        evaluation,
        seconds,
        gpus_per_node: st.gpus_per_node,
        memory: st.memory.clone(),
    })
}

/// The comparison of two evaluated strategies.
pub fn comparison(
    model: &Model,
    values: &Bindings,
    calib: &crate::calib::Calibration,
    a: &Evaluated,
    b: &Evaluated,
) -> Comparison {
    let calibration = calib.name.as_str();
    // With the table the strategies were priced on, so that the relative cost's parts get
    // formulas too.
    let components = versus::compare(values, &a.evaluation, &b.evaluation);
    let (_, gains, losses) = versus::verdict(&components);
    let total = |e: &Evaluated| e.evaluation.relative.total.clone();
    let cheaper = match total(a).cmp(&total(b)) {
        std::cmp::Ordering::Less => "A",
        std::cmp::Ordering::Greater => "B",
        std::cmp::Ordering::Equal => "equal",
    };
    let part = |v: Vec<(String, Rational)>| {
        v.into_iter()
            .map(|(part, amount)| Part { part, amount })
            .collect()
    };
    let side = |e: &Evaluated| SideJson {
        given: e.given.clone(),
        strategy: e.evaluation.knobs.describe(model.batch_value(values)),
        devices: e.evaluation.knobs.devices(),
        fits: e.evaluation.feasible,
        reason: e.evaluation.reason.clone(),
        seconds: e.seconds.clone(),
    };
    Comparison {
        model: model.name.clone(),
        symbols: values
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        calibration: calibration.to_string(),
        stack_profile: calib.stack.as_ref().map(|s| s.describe()),
        a: side(a),
        b: side(b),
        components,
        cheaper: cheaper.into(),
        wins_on: part(gains),
        loses_on: part(losses),
    }
}

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
        "{}{} on {} devices ({} per node) of {calib}: {} per device",
        model.name,
        super::cost::batch_and_sequence(model, values),
        both(devices(a), devices(b)),
        both(per_node(a), per_node(b)),
        both(memory(a), memory(b)),
    )
}

/// Runs `compare`.
pub fn run(args: CompareArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let a = side(&model, &values, &args.a, "strategy A", &args)?;
    let b = side(&model, &values, &args.b, "strategy B", &args)?;
    let mut calib =
        crate::calib::Calibration::resolve_with(args.calib.as_deref(), args.with.as_deref())?
            .with_stack(args.stack.as_deref())?;
    if args.plateau {
        calib = calib.at_plateau();
    }
    let c = comparison(&model, &values, &calib, &a, &b);
    match args.format {
        Format::Json => print_json(&c),
        Format::Table => {
            println!("{}", header(&model, &values, &calib.name, &a, &b));
            if let Some(line) = units::settings_line(&crate::timeline::setting_map(&model)) {
                println!("{line}");
            }
            if let Some(stack) = &c.stack_profile {
                println!("stack profile: {stack}");
            }
            print_comparison(&c);
            if !units::exact() {
                println!("{}", units::UNITS_LEGEND);
            }
            Ok(())
        }
    }
}
