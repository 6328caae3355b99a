//! `symshard report`: one self-contained HTML file with the ranking, its cost components, memory
//! versus time, and the top strategy's timeline, memory and formulas.
//!
//! Every number in the report comes from the commands' own documents (`rank`, `cost
//! --symbolic` and `timeline` of the top strategy, computed by the same functions in this
//! process, the rows passed as typed strategies) and the timeline's Gantt chart;
//! [`crate::report`] only lays them out.

use super::rank::SearchArgs;
use super::strategy_args::Resolved;
use super::SymbolArgs;
use crate::calib::Calibration;
use crate::error::Error;
use crate::report::ReportInput;
use crate::search::RankedRow;
use clap::Args;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A model file or a shipped model's name.
    #[arg(required_unless_present = "sweep")]
    pub model: Option<String>,
    /// Devices to train on.
    #[arg(long, required_unless_present = "sweep")]
    pub devices: Option<u64>,
    /// Draw a sweep instead: the Parquet file `symshard sweep` wrote (seconds against devices
    /// per machine, the Pareto front of time against cost, the winning layout family over two
    /// swept axes).
    #[arg(long, value_name = "FILE.parquet", conflicts_with_all = ["model", "devices", "calib", "stack"])]
    pub sweep: Option<PathBuf>,
    /// Strategies to rank and show.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// The machine: a calibration table, a what-if change of it, a stack profile. With
    /// `--calib`, the report ranks by simulated seconds and times the top strategy on it.
    #[command(flatten)]
    pub machine: super::strategy_args::MachineArgs,
    /// The search's machine and constraints, as `rank` takes them.
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// The HTML file to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
}

/// A ranked row as a strategy on the ranking's machine: its knobs and layout, on the devices
/// per node and the usable memory (after headroom, in whole bytes) the ranking used.
fn strategy_of(row: &RankedRow, ranked: &crate::api::RankDetail) -> Resolved {
    let knobs = row.evaluation.knobs.clone();
    Resolved {
        layout: row.parallel_layout(),
        knobs,
        calib: ranked.calib.clone(),
        gpus_per_node: ranked.search.gpus_per_node,
        memory: ranked.search.memory.floor(),
    }
}

/// The search the report ranks: `rank`'s, by relative cost on the reference machine unless
/// `--calib` is given, with the Pareto frontier the chart draws.
fn options(args: &ReportArgs, devices: u64) -> Result<crate::api::RankOptions, Error> {
    let machine = args.machine.machine(args.search.gpus_per_node)?;
    args.search
        .options(devices, machine, None)
        .by_seconds(args.machine.seconds())
        .top(args.top)
        .pareto(true)
        .build()
}

/// The ranking the report shows (with a progress bar).
fn ranking(
    loaded: &crate::api::Loaded,
    opts: &crate::api::RankOptions,
) -> Result<(crate::api::RankResult, crate::api::RankDetail), Error> {
    let pb = super::progress::bar(0, "ranking mesh shapes");
    let out = crate::api::rank_loaded(loaded, opts, &mut |done, all| {
        pb.set_length(all as u64);
        pb.set_position(done as u64);
    });
    pb.finish_and_clear();
    out
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<(), Error> {
    if let Some(sweep) = &args.sweep {
        return crate::sweep::report(sweep, &args.output);
    }
    let (Some(name), Some(devices)) = (args.model.clone(), args.devices) else {
        return Err(Error::Usage(
            "report: give a model and --devices, or --sweep RESULTS.parquet".into(),
        ));
    };
    let loaded = args.symbols.model(&name).load()?;
    let opts = options(&args, devices)?;
    let command = command_line(&args, &name, devices);
    let written = write_loaded(&loaded, &name, &opts, &command, &args.output)?;
    eprintln!("wrote {} ({written} bytes)", args.output.display());
    Ok(())
}

/// Writes the report of `model` ranked as `opts` ask (with the Pareto frontier the chart draws)
/// to `output`, its header naming `command`; `name` names the model in errors and is not
/// overwritten. Returns the bytes written.
pub fn write_report(
    model: &crate::api::Model,
    name: &str,
    opts: &crate::api::RankOptions,
    command: &str,
    output: &Path,
) -> Result<usize, Error> {
    write_loaded(&model.load()?, name, opts, command, output)
}

fn write_loaded(
    loaded: &crate::api::Loaded,
    name: &str,
    opts: &crate::api::RankOptions,
    command: &str,
    output: &Path,
) -> Result<usize, Error> {
    let (result, ranked) = ranking(loaded, opts)?;
    let ranking = serde_json::to_value(&result)
        .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))?;
    let (model, values) = (&ranked.model, &ranked.values);
    let rows = &ranked.result.rows;
    let top = rows
        .first()
        .ok_or_else(|| Error::Usage(format!("no strategy of {name} to report")))?;
    let st = strategy_of(top, &ranked);
    let ask = super::cost::Asked {
        bound: &loaded.bound,
        symbolic: true,
        per_op: false,
    };
    let cost = super::cost::json(model, values, &ask, &st, &ranked.rules)?;
    let (timeline, gantt) = top_timeline(model, values, &st)?;
    // Each row's communication by collective kind and tier, for the stacked bars.
    let comm_parts: Vec<Value> = rows
        .iter()
        .map(|r| comm_parts(&r.evaluation, &ranked.calib))
        .collect();
    // The top row again, with the formulas of its amounts.
    let (_, e) = st.evaluate(model, values, None)?;
    let top_formulas = top_formulas(model, values, &e);
    let html = crate::report::html(&ReportInput {
        command: command.to_string(),
        rank: &ranking,
        cost: &cost,
        timeline: &timeline,
        gantt_svg: &gantt,
        capacity_bytes: &ranked.search.memory,
        comm_parts: &Value::Array(comm_parts),
        top_formulas: &Value::Array(top_formulas),
        partial_domains: result
            .partial_domains
            .as_ref()
            .map(|p| p.sentence(result.devices)),
    })?;
    super::output::write_output(output, html.as_bytes(), &[Path::new(name)])?;
    Ok(html.len())
}

/// The top strategy's timeline summary (as JSON) and its Gantt chart.
fn top_timeline(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    st: &Resolved,
) -> Result<(Value, String), Error> {
    let (plan, _) = crate::timeline::plan_strategy(
        model,
        values,
        &st.knobs,
        &st.layout,
        &st.calib,
        Some(st.gpus_per_node),
        &st.memory,
    )?;
    let timed = crate::timeline::time_plan(&plan, &st.calib)?;
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

/// A row's communication by collective kind and tier, for the stacked bars.
fn comm_parts(e: &crate::parallel::Evaluation, calib: &Calibration) -> Value {
    let parts: Vec<Value> = crate::parallel::breakdown::comm_by_kind(e, calib)
        .iter()
        .map(|p| {
            serde_json::json!({
                "kind": p.kind.name(),
                "tier": p.tier,
                "cost": super::units::exact_text(&p.cost),
            })
        })
        .collect();
    Value::Array(parts)
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
fn command_line(args: &ReportArgs, model: &str, devices: u64) -> String {
    let mut command = vec!["symshard report".to_string(), model.to_string()];
    command.push(format!("--devices {devices}"));
    command.extend(args.machine.to_args());
    let search = args.search.to_args();
    if !search.is_empty() {
        command.push(search.join(" "));
    }
    command.join(" ")
}
