//! `symshard report`: one self-contained HTML file with the ranking, its cost components, memory
//! versus time, and the top strategy's timeline, memory and formulas.
//!
//! Every number in the report comes from the commands' own JSON (`rank`, `cost --symbolic` and
//! `timeline` of the top strategy) and the timeline's Gantt chart; [`crate::report`] only lays
//! them out.

use super::{run_json, Cli, Command, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::report::ReportInput;
use crate::sym::Rational;
use clap::{Args, Parser};
use serde_json::Value;
use std::path::PathBuf;

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Devices to train on.
    #[arg(long)]
    pub devices: u64,
    /// Devices per node (default: the calibration's).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// Strategies to rank and show.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// A calibration table (file or shipped name): ranks by simulated seconds and times the top
    /// strategy on it (default: the reference machine, ranking by relative cost).
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// Device memory in bytes (default: the calibration's capacity).
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<u64>,
    /// Largest micro-batch count to try.
    #[arg(long, default_value_t = 256)]
    pub max_microbatches: u64,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// The HTML file to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
}

/// The arguments that choose the model, symbols and machine, as the other commands take them.
fn model_args(args: &ReportArgs, calib: &str) -> Vec<String> {
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
    if let Some(g) = args.gpus_per_node {
        a.extend(["--gpus-per-node".into(), g.to_string()]);
    }
    if let Some(m) = args.memory {
        a.extend(["--memory".into(), m.to_string()]);
    }
    a.extend(["--calib".into(), calib.to_string()]);
    a
}

/// The strategy flags of one `rank` row.
fn knob_args(row: &Value) -> Result<Vec<String>, Error> {
    let num = |k: &str| {
        row[k]
            .as_u64()
            .map(|v| v.to_string())
            .ok_or_else(|| Error::Usage(format!("rank row without `{k}`")))
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
    Ok(a)
}

fn one_json(args: Vec<String>) -> Result<Value, Error> {
    let docs = run_json(&args)?;
    let text = docs
        .first()
        .ok_or_else(|| Error::Usage(format!("`{}` printed nothing", args.join(" "))))?;
    serde_json::from_str(text).map_err(|e| Error::Usage(format!("cannot read JSON: {e}")))
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<(), Error> {
    let machine = Calibration::resolve_or_reference(args.calib.as_deref())?;
    let calib_arg = args.calib.clone().unwrap_or_else(|| machine.name.clone());
    let mut rank = vec!["rank".to_string()];
    rank.extend(model_args(&args, &calib_arg));
    if args.calib.is_none() {
        // Rank by relative cost on the reference machine, as `rank` without `--calib` does.
        let at = rank.len() - 2;
        rank.truncate(at);
    }
    rank.extend([
        "--devices".into(),
        args.devices.to_string(),
        "--top".into(),
        args.top.to_string(),
        "--max-microbatches".into(),
        args.max_microbatches.to_string(),
    ]);
    let ranking = one_json(rank)?;
    let top = ranking["strategies"]
        .as_array()
        .and_then(|r| r.first())
        .ok_or_else(|| Error::Usage(format!("no strategy of {} to report", args.model)))?;
    let knobs = knob_args(top)?;

    let mut cost = vec!["cost".to_string(), "--symbolic".into()];
    cost.extend(model_args(&args, &calib_arg));
    cost.extend(knobs.iter().cloned());
    let cost = one_json(cost)?;

    let mut tl = vec!["symshard".to_string(), "timeline".into()];
    tl.extend(model_args(&args, &calib_arg));
    tl.extend(knobs);
    let Command::Timeline(tl) = Cli::try_parse_from(&tl)
        .map_err(|e| Error::Usage(e.to_string()))?
        .command
    else {
        unreachable!("parsed as `timeline`")
    };
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
        .map_err(|e| Error::Usage(format!("cannot write JSON: {e}")))?;

    let capacity = match args.memory {
        Some(m) => Rational::from_integer(m.into()),
        None => machine.memory_bytes(),
    };
    let mut command = vec!["symshard report".to_string(), args.model.clone()];
    command.push(format!("--devices {}", args.devices));
    if let Some(c) = &args.calib {
        command.push(format!("--calib {c}"));
    }
    let html = crate::report::html(&ReportInput {
        command: command.join(" "),
        rank: &ranking,
        cost: &cost,
        timeline: &timeline,
        gantt_svg: &gantt,
        capacity_bytes: &capacity,
    })?;
    std::fs::write(&args.output, &html).map_err(|source| Error::Io {
        path: args.output.clone(),
        source,
    })?;
    eprintln!("wrote {} ({} bytes)", args.output.display(), html.len());
    Ok(())
}
