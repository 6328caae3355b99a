//! `symshard report`: one self-contained HTML file with the ranking, its cost components, memory
//! versus time, and the top strategy's timeline, memory and formulas.
//!
//! Every number in the report comes from the commands' own JSON (`rank`, `cost --symbolic` and
//! `timeline` of the top strategy) and the timeline's Gantt chart; [`crate::report`] only lays
//! them out.

use super::rank::SearchArgs;
use super::{run_json, Cli, Command, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::report::ReportInput;
use crate::sym::Rational;
use clap::{Args, Parser};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Devices to train on.
    #[arg(long)]
    pub devices: u64,
    /// Strategies to rank and show.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// A calibration table (file or shipped name; `TABLE@KERNEL` times fused attention with one
    /// of its `attention_kernels`): ranks by simulated seconds and times the top
    /// strategy on it (default: the reference machine, ranking by relative cost).
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// The search's machine and constraints, as `rank` takes them.
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// The HTML file to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
}

/// The arguments that choose the model, symbols and machine, as the other commands take them
/// (`machine`: devices per node and usable memory, as the ranking used them).
fn model_args(args: &ReportArgs, calib: &str, machine: &[String]) -> Vec<String> {
    let mut a = vec![args.model.clone()];
    for s in &args.symbols.set {
        a.extend(["--set".into(), s.clone()]);
    }
    if let Some(m) = args.symbols.attention {
        let v = clap::ValueEnum::to_possible_value(&m).map(|p| p.get_name().to_string());
        a.extend(["--attention".into(), v.unwrap_or_default()]);
    }
    if let Some(d) = &args.symbols.rules {
        a.extend(["--rules".into(), d.display().to_string()]);
    }
    a.extend(machine.iter().cloned());
    a.extend(["--calib".into(), calib.to_string()]);
    a
}

/// A folder for the strategy files of the rows whose layout flags cannot state (the auto
/// layout's per-operator placements), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, Error> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir =
            std::env::temp_dir().join(format!("symshard-report-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The strategy flags of one `rank` row (the `at`-th): its knobs, the overlaps it runs with, and
/// its tensor-parallel layout. The auto layout's placements go to a strategy file in `scratch`
/// (its `splits`), which the flags name; the flags set every knob, so the file adds only them.
fn knob_args(row: &Value, at: usize, scratch: &Scratch) -> Result<Vec<String>, Error> {
    let num = |k: &str| {
        row[k]
            .as_u64()
            .map(|v| v.to_string())
            .ok_or_else(|| Error::Internal(format!("rank row without `{k}`")))
    };
    let mut a = vec![];
    for k in [
        "dp",
        "tp",
        "pp",
        "microbatches",
        "chunks",
        "zero",
        "ep",
        "cp",
    ] {
        a.extend([format!("--{k}"), num(k)?]);
    }
    if let Some(s) = row["schedule"].as_str().filter(|s| *s != "none") {
        a.extend(["--schedule".into(), s.to_string()]);
    }
    if let Some(r) = row["recompute"].as_str() {
        a.extend(["--recompute".into(), r.to_string()]);
    }
    if row["sequence_parallel"].as_bool() == Some(true) {
        a.push("--sequence-parallel".into());
    }
    let overlap = &row["overlap"];
    if overlap["tp-comm"].as_bool() == Some(true) {
        a.push("--tp-comm-overlap".into());
    }
    if overlap["param-gather"].as_bool() == Some(true) {
        a.push("--overlap-param-gather".into());
    }
    if overlap["grad-reduce"].as_bool() == Some(false) {
        a.push("--no-overlap-grad-reduce".into());
    }
    match row["layout"].as_str() {
        None | Some("annotated") => {}
        Some("auto") => {
            let placements = row["placements"].as_object().ok_or_else(|| {
                Error::Internal(format!(
                    "rank row {} has the auto layout but no `placements`",
                    at + 1
                ))
            })?;
            let mut yaml = String::from("splits:\n");
            for (op, index) in placements {
                let index = index.as_str().ok_or_else(|| {
                    Error::Internal(format!(
                        "rank row {}: placement of `{op}` is not a name",
                        at + 1
                    ))
                })?;
                // JSON strings are YAML strings.
                yaml.push_str(&format!(
                    "  {}: {}\n",
                    Value::from(op.as_str()),
                    Value::from(index)
                ));
            }
            let path = scratch.0.join(format!("row{}.yaml", at + 1));
            std::fs::write(&path, yaml).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            a.extend(["--strategy".into(), path.display().to_string()]);
        }
        Some(other) => {
            return Err(Error::Internal(format!(
                "rank row {}: unknown layout `{other}`",
                at + 1
            )))
        }
    }
    Ok(a)
}

fn one_json(args: Vec<String>) -> Result<Value, Error> {
    let docs = run_json(&args)?;
    let text = docs
        .first()
        .ok_or_else(|| Error::Internal(format!("`{}` printed nothing", args.join(" "))))?;
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("cannot read JSON: {e}")))
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<(), Error> {
    let machine = Calibration::resolve_or_reference(args.calib.as_deref())?;
    let calib_arg = args.calib.clone().unwrap_or_else(|| machine.name.clone());
    let ranking = ranking(&args, &calib_arg)?;
    let rows = ranking["strategies"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let top = rows
        .first()
        .ok_or_else(|| Error::Usage(format!("no strategy of {} to report", args.model)))?;
    // The devices per node and usable memory (after headroom) the ranking used, for the top
    // strategy's cost and timeline.
    let limit = ranking["memory_limit"]
        .as_str()
        .and_then(|m| m.parse::<Rational>().ok())
        .ok_or_else(|| Error::Internal("rank JSON without `memory_limit`".into()))?;
    let gpus_per_node = ranking["gpus_per_node"]
        .as_u64()
        .ok_or_else(|| Error::Internal("rank JSON without `gpus_per_node`".into()))?;
    let shape = vec![
        "--gpus-per-node".to_string(),
        gpus_per_node.to_string(),
        "--memory".into(),
        limit.floor().to_integer().to_string(),
    ];
    let scratch = Scratch::new()?;
    let knobs = knob_args(top, 0, &scratch)?;
    let mut cost = vec!["cost".to_string(), "--symbolic".into()];
    cost.extend(model_args(&args, &calib_arg, &shape));
    cost.extend(knobs.iter().cloned());
    let cost = one_json(cost)?;
    let parse = |knobs: Vec<String>| timeline_args(&args, &calib_arg, &shape, knobs);
    let tl = parse(knobs)?;
    let (timeline, gantt) = top_timeline(&tl)?;
    let loader = tl.symbols.loader()?;
    let model = loader.resolve(&tl.input)?;
    let values = tl.symbols.apply(&model)?;
    let mut comm_parts = Vec::new();
    let mut top_eval = None;
    for (at, row) in rows.iter().enumerate() {
        let flags = parse(knob_args(row, at, &scratch)?)?.strategy;
        let (parts, priced) = row_comm_parts(&model, &values, &flags)?;
        comm_parts.push(parts);
        top_eval.get_or_insert(priced);
    }
    let e =
        top_eval.ok_or_else(|| Error::Usage(format!("no strategy of {} to report", args.model)))?;
    let top_formulas = top_formulas(&model, &values, &e);
    let html = crate::report::html(&ReportInput {
        command: command_line(&args),
        rank: &ranking,
        cost: &cost,
        timeline: &timeline,
        gantt_svg: &gantt,
        capacity_bytes: &limit,
        comm_parts: &Value::Array(comm_parts),
        top_formulas: &Value::Array(top_formulas),
    })?;
    super::output::write_output(&args.output, html.as_bytes(), &[Path::new(&args.model)])?;
    eprintln!("wrote {} ({} bytes)", args.output.display(), html.len());
    Ok(())
}

/// `rank`'s JSON for the report: by relative cost on the reference machine unless `--calib`
/// is given, as `rank` does, with the Pareto frontier the chart draws.
fn ranking(args: &ReportArgs, calib_arg: &str) -> Result<Value, Error> {
    let mut rank = vec!["rank".to_string()];
    rank.extend(model_args(args, calib_arg, &[]));
    if args.calib.is_none() {
        let at = rank.len() - 2;
        rank.truncate(at);
    }
    rank.extend([
        "--devices".into(),
        args.devices.to_string(),
        "--top".into(),
        args.top.to_string(),
        "--pareto".into(),
    ]);
    rank.extend(args.search.to_args());
    one_json(rank)
}

/// `timeline`'s arguments for a row's knobs on the ranking's machine.
fn timeline_args(
    args: &ReportArgs,
    calib_arg: &str,
    shape: &[String],
    knobs: Vec<String>,
) -> Result<super::timeline::TimelineArgs, Error> {
    let mut tl = vec!["symshard".to_string(), "timeline".into()];
    tl.extend(model_args(args, calib_arg, shape));
    tl.extend(knobs);
    match Cli::try_parse_from(&tl)
        .map_err(|e| Error::Usage(e.to_string()))?
        .command
    {
        Command::Timeline(tl) => Ok(*tl),
        _ => Err(Error::Internal("not a timeline command".into())),
    }
}

/// The top strategy's timeline summary (as JSON) and its Gantt chart.
fn top_timeline(tl: &super::timeline::TimelineArgs) -> Result<(Value, String), Error> {
    let plan = super::timeline::plan_of(&tl.input, &tl.symbols, &tl.strategy)?;
    let timed = crate::timeline::time_plan(&plan, &tl.strategy.calibration()?)?;
    let title = format!(
        "{} · {} · {} · {:.3} s per step",
        timed.summary.model,
        timed.summary.strategy,
        timed.summary.calibration,
        timed.summary.iteration_seconds
    );
    let gantt = crate::timeline::gantt_svg(&timed.plan, &timed.sim, &title);
    let timeline = serde_json::to_value(&timed.summary)
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    Ok((timeline, gantt))
}

/// A row's communication by collective kind and tier, for the stacked bars, and the row
/// priced.
fn row_comm_parts(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    flags: &super::strategy_args::StrategyFlags,
) -> Result<(Value, crate::parallel::Evaluation), Error> {
    let batch = model
        .batch_value(values)
        .cloned()
        .unwrap_or_else(|| Rational::from_integer(1.into()));
    let st = flags.resolve(&batch)?;
    let (_, e) = st.evaluate(model, values, None)?;
    let parts: Vec<Value> = crate::parallel::breakdown::comm_by_kind(&e, &st.calib)
        .iter()
        .map(|p| {
            serde_json::json!({
                "kind": p.kind.name(),
                "tier": p.tier,
                "cost": super::units::exact_text(&p.cost),
            })
        })
        .collect();
    Ok((Value::Array(parts), e))
}

/// The top strategy's per-device amounts, with the formulas `compare` derives for them (the
/// relative cost's parts with the calibration's balances), and why an amount has none where
/// it cannot be a polynomial.
fn top_formulas(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    e: &crate::parallel::Evaluation,
) -> Vec<Value> {
    let layer_kinds = model
        .blocks
        .iter()
        .filter(|b| b.repeat != crate::sym::Poly::one())
        .count();
    crate::search::versus::compare(values, e, e)
        .iter()
        .map(|c| {
            let why = c.formula_a.is_none().then(|| {
                crate::search::versus::structural_gap(
                    c.group,
                    &c.name,
                    &e.knobs,
                    layer_kinds,
                    !num_traits::Zero::is_zero(&e.relative.kernels),
                    !num_traits::Zero::is_zero(&e.relative.hidden),
                )
            });
            serde_json::json!({
                "group": c.group,
                "name": c.name,
                "value": super::units::exact_text(&c.a),
                "formula": c.formula_a.as_ref().map(ToString::to_string),
                "why": why.flatten(),
            })
        })
        .collect()
}

/// The command line the report says it shows.
fn command_line(args: &ReportArgs) -> String {
    let mut command = vec!["symshard report".to_string(), args.model.clone()];
    command.push(format!("--devices {}", args.devices));
    if let Some(c) = &args.calib {
        command.push(format!("--calib {c}"));
    }
    let search = args.search.to_args();
    if !search.is_empty() {
        command.push(search.join(" "));
    }
    command.join(" ")
}
