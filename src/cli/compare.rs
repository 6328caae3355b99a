//! `symshard compare`: two strategies of one model side by side, component by component, with
//! the differences exact (and as formulas in the model's symbols where they are sums of the
//! model's polynomials).

use super::output::print_json;
use super::strategy_args::StrategyFlags;
use super::{Format, SymbolArgs};
use crate::error::Error;
use crate::model::Model;
use crate::parallel::{evaluate_strategy, Analysis, Evaluation, Layout};
use crate::search::versus::{self, Component};
use crate::strategy::Knobs;
use crate::sym::{Bindings, Rational};
use clap::Args;
use num_traits::{Signed, ToPrimitive, Zero};
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
    /// A calibration table (a file or a shipped name): its balance ratios and memory, and the
    /// simulated seconds per step of each strategy.
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
    pub reason: Option<String>,
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
    /// Its analysis.
    pub analysis: Analysis,
    /// Its evaluation.
    pub evaluation: Evaluation,
    /// Simulated seconds, when asked.
    pub seconds: Option<Seconds>,
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
    let (analysis, evaluation) =
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
        analysis,
        evaluation,
        seconds,
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
        .max_by(|x, y| {
            let t = |d: &crate::timeline::DeviceSummary| {
                d.busy.compute + d.busy.tp_comm + d.busy.dp_comm + d.busy.p2p + d.busy.ep_comm
            };
            t(x).total_cmp(&t(y))
        })
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
    let (analysis, evaluation) = evaluate_strategy(
        model,
        values,
        &st.knobs,
        &st.layout,
        &st.calib,
        st.gpus_per_node,
        &st.memory,
    )
    .map_err(named)?;
    let seconds = if args.calib.is_some() {
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
        analysis,
        evaluation,
        seconds,
    })
}

/// The comparison of two evaluated strategies.
pub fn comparison(
    model: &Model,
    values: &Bindings,
    calibration: &str,
    a: &Evaluated,
    b: &Evaluated,
) -> Comparison {
    let components = versus::compare(
        model,
        values,
        (&a.analysis, &a.evaluation),
        (&b.analysis, &b.evaluation),
    );
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
        a: side(a),
        b: side(b),
        components,
        cheaper: cheaper.into(),
        wins_on: part(gains),
        loses_on: part(losses),
    }
}

/// An exact number for a table: an integer as itself, a small fraction as `p/q`, any other
/// rounded to four significant digits and marked `≈` (JSON keeps every number exact).
pub fn num(r: &Rational) -> String {
    if r.is_integer() {
        return r.to_integer().to_string();
    }
    let text = r.to_string();
    if text.len() <= 12 {
        return text;
    }
    format!("≈{:.4e}", r.to_f64().unwrap_or(f64::NAN))
}

fn signed(r: &Rational) -> String {
    if r.is_zero() {
        "0".into()
    } else if r.is_positive() {
        format!("+{}", num(r))
    } else {
        num(r)
    }
}

/// Prints a comparison as a table.
pub fn print_comparison(c: &Comparison) {
    println!(
        "A  {}  ({} devices{})",
        c.a.strategy,
        c.a.devices,
        if c.a.fits { "" } else { ", does not fit" }
    );
    println!(
        "B  {}  ({} devices{})",
        c.b.strategy,
        c.b.devices,
        if c.b.fits { "" } else { ", does not fit" }
    );
    println!(
        "per device and training step, busiest device (memory: fullest device); κ of {}",
        c.calibration
    );
    println!();
    println!(
        "{:<14} {:<42} {:>22} {:>22} {:>22}",
        "", "component", "A", "B", "B − A"
    );
    let mut group = "";
    for row in &c.components {
        let g = if row.group != group {
            group = row.group;
            row.group
        } else {
            ""
        };
        println!(
            "{:<14} {:<42} {:>22} {:>22} {:>22}",
            g,
            row.name,
            num(&row.a),
            num(&row.b),
            signed(&row.difference)
        );
    }
    println!(
        "{:<14} {:<42} {:>22} {:>22}",
        "",
        "fits in memory",
        if c.a.fits { "yes" } else { "no" },
        if c.b.fits { "yes" } else { "no" }
    );
    if let (Some(sa), Some(sb)) = (&c.a.seconds, &c.b.seconds) {
        let rows: [(&str, f64, f64); 6] = [
            (
                "seconds per step",
                sa.iteration_seconds,
                sb.iteration_seconds,
            ),
            (
                "  compute stream busy (s)",
                sa.busy.compute,
                sb.busy.compute,
            ),
            (
                "  tensor-parallel stream busy (s)",
                sa.busy.tp_comm,
                sb.busy.tp_comm,
            ),
            (
                "  data-parallel stream busy (s)",
                sa.busy.dp_comm,
                sb.busy.dp_comm,
            ),
            ("  point-to-point stream busy (s)", sa.busy.p2p, sb.busy.p2p),
            (
                "  expert-parallel stream busy (s)",
                sa.busy.ep_comm,
                sb.busy.ep_comm,
            ),
        ];
        for (i, (name, x, y)) in rows.iter().enumerate() {
            println!(
                "{:<14} {:<42} {:>22.4} {:>22.4} {:>+22.4}",
                if i == 0 { "timeline" } else { "" },
                name,
                x,
                y,
                y - x
            );
        }
    }
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
                println!("  {:<42} {}", r.name, d);
            }
        }
    }
    println!();
    let list = |v: &[Part]| {
        v.iter()
            .map(|p| format!("{} ({})", p.part, num(&p.amount)))
            .collect::<Vec<_>>()
            .join(", ")
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
            println!(
                "{w} is cheaper by {} FLOP-equivalents of relative cost{}: it spends less on {}{}",
                num(&total),
                if fits {
                    ""
                } else {
                    " (but does not fit in memory)"
                },
                if c.wins_on.is_empty() {
                    "nothing".to_string()
                } else {
                    list(&c.wins_on)
                },
                if c.loses_on.is_empty() {
                    String::new()
                } else {
                    format!("; more on {}", list(&c.loses_on))
                }
            );
        }
    }
}

/// Runs `compare`.
pub fn run(args: CompareArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let a = side(&model, &values, &args.a, "strategy A", &args)?;
    let b = side(&model, &values, &args.b, "strategy B", &args)?;
    let calib = crate::calib::Calibration::resolve_or_reference(args.calib.as_deref())?;
    let c = comparison(&model, &values, &calib.name, &a, &b);
    match args.format {
        Format::Json => print_json(&c),
        Format::Table => {
            println!("model {}", model.name);
            print_comparison(&c);
            Ok(())
        }
    }
}
