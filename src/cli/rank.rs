//! `symshard rank`: the ranked list of hybrid-parallel strategies for a model on N devices.

use super::output::print_json;
use super::{Format, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::parallel::{analyse, Layout};
use crate::search::{rank_with_progress, RankOptions};
use crate::strategy::{Recompute, Schedule, Tier};
use crate::sym::Rational;
use clap::Args;
use num_traits::ToPrimitive;
use serde::Serialize;

/// What `--emit` prints about the top strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// Megatron-LM command-line arguments.
    Megatron,
    /// Full per-operator placements as JSON.
    Json,
}

/// Arguments of `rank`.
#[derive(Debug, Args)]
pub struct RankArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Devices to train on.
    #[arg(long)]
    pub devices: u64,
    /// Devices per node (default: the calibration's, 8 for the reference machine).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// Rows to show.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// A calibration table (file or shipped name) for the balance ratios and memory.
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
    /// Also print the top strategy as Megatron-LM arguments or per-operator placements.
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Serialize)]
struct Row {
    rank: usize,
    dp: u64,
    tp: u64,
    pp: u64,
    microbatches: u64,
    schedule: String,
    chunks: u64,
    sequence_parallel: bool,
    recompute: String,
    zero: u8,
    ep: u64,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    relative_cost: Rational,
    relative: crate::parallel::RelativeCost,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    memory_per_device: Rational,
    memory: crate::parallel::Memory,
    feasible: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    iteration_seconds: Option<f64>,
}

#[derive(Serialize)]
struct Out {
    model: String,
    devices: u64,
    gpus_per_node: u64,
    calibration: String,
    strategies: Vec<Row>,
    evaluated: usize,
    feasible: usize,
    rejected: std::collections::BTreeMap<String, usize>,
    /// Strategies simulated to rank by seconds (0 when ranking by relative cost).
    simulated: usize,
    balance_range: Option<(String, Option<String>)>,
    /// For each tensor-parallel degree shown without sequence parallelism: what the e-graph
    /// engine proves about the layer's communication.
    engine: Vec<EngineNote>,
    search_seconds: f64,
}

#[derive(Serialize)]
struct EngineNote {
    tp: u64,
    stop: String,
    egraph_nodes: usize,
    moved: Vec<String>,
    saving_compute: String,
    saving_comm: String,
    saving_activation: String,
}

fn sci(r: &Rational) -> String {
    format!("{:.4e}", r.to_f64().unwrap_or(f64::NAN))
}

fn pct(part: &Rational, total: &Rational) -> String {
    let p = (part / total).to_f64().unwrap_or(0.0) * 100.0;
    format!("{p:.0}%")
}

fn gb(r: &Rational) -> String {
    format!("{:.1}", r.to_f64().unwrap_or(f64::NAN) / 1e9)
}

/// Runs `rank`.
pub fn run(args: RankArgs) -> Result<(), Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let calib = Calibration::resolve_or_reference(args.calib.as_deref())?;
    let gpus_per_node = args.gpus_per_node.unwrap_or_else(|| calib.gpus_per_node());
    if gpus_per_node == 0 || gpus_per_node > 1024 {
        return Err(Error::Usage(format!(
            "--gpus-per-node must be 1 to 1024, not {gpus_per_node}"
        )));
    }
    if args.devices > gpus_per_node && !args.devices.is_multiple_of(gpus_per_node) {
        return Err(Error::Usage(format!(
            "--gpus-per-node {gpus_per_node} does not divide the {} devices: nodes would be partly used",
            args.devices
        )));
    }
    if args.top == 0 {
        return Err(Error::Usage("--top must be at least 1".into()));
    }
    if args.max_microbatches == 0 {
        return Err(Error::Usage("--max-microbatches must be at least 1".into()));
    }
    let memory = match args.memory {
        Some(0) => return Err(Error::Usage("--memory must be positive".into())),
        Some(m) => Rational::from_integer(m.into()),
        None => calib.memory_bytes(),
    };
    let opts = RankOptions {
        devices: args.devices,
        gpus_per_node,
        top: args.top,
        memory,
        max_microbatches: args.max_microbatches.max(1),
        seconds: args.calib.is_some(),
    };
    let pb = super::progress::bar(0, "ranking mesh shapes");
    let result = rank_with_progress(&model, &values, &calib, &opts, &mut |done, all| {
        pb.set_length(all as u64);
        pb.set_position(done as u64);
    });
    pb.finish_and_clear();
    let result = result.map_err(Error::Usage)?;
    let rows: Vec<Row> = result
        .rows
        .iter()
        .map(|r| {
            let e = &r.evaluation;
            let k = &e.knobs;
            Row {
                rank: r.rank,
                dp: k.dp,
                tp: k.tp,
                pp: k.pp,
                microbatches: k.microbatches,
                schedule: if k.pp == 1 {
                    "none".into()
                } else {
                    k.schedule.to_string()
                },
                chunks: k.chunks,
                sequence_parallel: k.sequence_parallel,
                recompute: k.recompute.to_string(),
                zero: k.zero,
                ep: k.ep,
                relative_cost: e.relative.total.clone(),
                relative: e.relative.clone(),
                memory_per_device: e.memory.total.clone(),
                memory: e.memory.clone(),
                feasible: e.feasible,
                reason: e.reason.clone(),
                iteration_seconds: r.seconds,
            }
        })
        .collect();
    let range = result
        .balance_range
        .as_ref()
        .map(|(lo, hi)| (lo.to_string(), hi.as_ref().map(|h| h.to_string())));
    // Run the shown tensor-parallel layouts through the e-graph engine: the cheapest program the
    // laws prove equal to each (sequence parallelism, when it is cheaper, is one such program).
    let mut engine = Vec::new();
    let mut seen = Vec::new();
    for r in &result.rows {
        let k = &r.evaluation.knobs;
        if k.tp > 1 && !k.sequence_parallel && !seen.contains(&k.tp) {
            seen.push(k.tp);
            if let Ok(rep) = crate::rewrite::optimize_layer(&model, k.tp, &values) {
                engine.push(EngineNote {
                    tp: k.tp,
                    stop: rep.run.stop_reason.clone(),
                    egraph_nodes: rep.run.egraph_nodes,
                    moved: rep
                        .moved
                        .iter()
                        .map(|m| format!("{}: {} → {}", m.op, m.before, m.after))
                        .collect(),
                    saving_compute: rep.saving.compute.clone(),
                    saving_comm: rep.saving.comm.clone(),
                    saving_activation: rep.saving.activation.clone(),
                });
            }
        }
    }
    let out = Out {
        model: model.name.clone(),
        devices: args.devices,
        gpus_per_node,
        calibration: calib.name.clone(),
        strategies: rows,
        evaluated: result.evaluated,
        simulated: result.simulated,
        feasible: result.feasible,
        rejected: result.rejected.clone(),
        balance_range: range,
        engine,
        search_seconds: result.search_seconds,
    };
    match args.format {
        Format::Json if args.emit.is_none() => print_json(&out)?,
        Format::Json => {}
        Format::Table => print_table(&out, &calib, &result),
    }
    if let (Some(emit), Some(top)) = (args.emit, result.rows.first()) {
        let k = &top.evaluation.knobs;
        match emit {
            Emit::Megatron => {
                let b = values
                    .get("B")
                    .cloned()
                    .unwrap_or_else(|| Rational::from_integer(1.into()));
                let micro = &b / Rational::from_integer((k.dp * k.microbatches).into());
                let mut a = vec![
                    format!("--tensor-model-parallel-size {}", k.tp),
                    format!("--pipeline-model-parallel-size {}", k.pp),
                    format!("--micro-batch-size {}", micro.to_integer()),
                    format!("--global-batch-size {}", b.to_integer()),
                ];
                if k.schedule == Schedule::Interleaved && k.pp > 1 {
                    let layers = top
                        .evaluation
                        .stages
                        .iter()
                        .flat_map(|s| s.items.iter())
                        .filter(|(n, _)| n == "layer")
                        .map(|(_, c)| c)
                        .sum::<u64>();
                    a.push(format!(
                        "--num-layers-per-virtual-pipeline-stage {}",
                        layers / (k.pp * k.chunks).max(1)
                    ));
                }
                if k.sequence_parallel {
                    a.push("--sequence-parallel".into());
                }
                match k.recompute {
                    Recompute::Selective => a.push("--recompute-activations".into()),
                    Recompute::Full => a.push("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1".into()),
                    Recompute::None => {}
                }
                if k.zero >= 1 {
                    a.push("--use-distributed-optimizer".into());
                }
                println!("{}", a.join(" \\\n  "));
            }
            Emit::Json => {
                let layout = Layout {
                    sequence_parallel: k.sequence_parallel,
                    ..Layout::default()
                };
                let analysis = analyse(&model, &layout);
                #[derive(Serialize)]
                struct Emitted<'a> {
                    knobs: &'a crate::strategy::Knobs,
                    analysis: &'a crate::parallel::Analysis,
                }
                print_json(&Emitted {
                    knobs: k,
                    analysis: &analysis,
                })?;
            }
        }
    }
    Ok(())
}

fn print_table(out: &Out, calib: &Calibration, result: &crate::search::RankResult) {
    println!(
        "{} on {} devices ({} per node), balance from {}: κ hbm {} FLOP/B, κ intra {} FLOP/B, κ inter {} FLOP/B",
        out.model,
        out.devices,
        out.gpus_per_node,
        out.calibration,
        sci(&calib.hbm_balance()),
        sci(&calib.balance(Tier::Intra)),
        sci(&calib.balance(Tier::Inter))
    );
    println!(
        "{:>4} {:>5} {:>4} {:>4} {:>4} {:>5} {:<16} {:<3} {:<9} {:>4}  {:>11} {:>8} {:>6} {:>6} {:>6} {:>8} {:>9}  fits",
        "rank", "dp", "tp", "pp", "ep", "mb", "schedule", "sp", "recompute", "zero", "rel. cost", "compute", "intra", "inter", "bubble", "mem GB", "s/step"
    );
    for r in &out.strategies {
        let t = &r.relative.total;
        let sched = if r.schedule == "interleaved-1f1b" {
            format!("interleaved(v={})", r.chunks)
        } else {
            r.schedule.clone()
        };
        println!(
            "{:>4} {:>5} {:>4} {:>4} {:>4} {:>5} {:<16} {:<3} {:<9} {:>4}  {:>11} {:>8} {:>6} {:>6} {:>6} {:>8} {:>9}  {}",
            r.rank,
            r.dp,
            r.tp,
            r.pp,
            r.ep,
            r.microbatches,
            sched,
            if r.sequence_parallel { "on" } else { "off" },
            r.recompute,
            r.zero,
            sci(t),
            pct(&r.relative.compute, t),
            pct(&r.relative.comm_intra, t),
            pct(&r.relative.comm_inter, t),
            pct(&r.relative.bubble, t),
            gb(&r.memory_per_device),
            r.iteration_seconds.map_or("-".to_string(), |x| format!("{x:.3}")),
            if r.feasible { "yes".to_string() } else { format!("no: {}", r.reason.clone().unwrap_or_default()) }
        );
    }
    println!();
    println!(
        "{} strategies priced, {} fit in memory; {:.3} s",
        out.evaluated, out.feasible, out.search_seconds
    );
    if out.simulated > 0 {
        println!(
            "ranked by simulated seconds: {} strategies simulated in the order of their lower bounds, until the next bound exceeded the last row shown — no other strategy can be faster than the rows shown",
            out.simulated
        );
    }
    for (why, n) in &out.rejected {
        println!("  {n} rejected: {why}");
    }
    for e in &out.engine {
        if e.moved.is_empty() {
            println!("e-graph (tp = {}): no cheaper equivalent of the layer's communication ({}, {} e-nodes)", e.tp, e.stop, e.egraph_nodes);
        } else {
            println!(
                "e-graph (tp = {}): the laws prove a cheaper equivalent layer — {} operators move to sequence shards, saving {} FLOPs and {} activation bytes per layer and tensor-parallel rank at the full batch ({}, {} e-nodes); the sp=on rows price it",
                e.tp,
                e.moved.len(),
                e.saving_compute,
                e.saving_activation,
                e.stop,
                e.egraph_nodes
            );
        }
    }
    if let Some((lo, hi)) = &result.balance_range {
        let (li, le) = crate::search::rank::scaled_balance(calib, lo);
        let lo_f = lo.to_f64().unwrap_or(0.0);
        match hi.as_ref().map(|h| (h, h.to_f64().unwrap_or(f64::MAX))) {
            Some((_, h)) if h < lo_f => println!(
                "by relative cost the top row is first for no scaling of κ: it leads by simulated seconds only"
            ),
            Some((h, hf)) if hf < 1e6 => {
                let (hi_i, hi_e) = crate::search::rank::scaled_balance(calib, h);
                println!(
                    "the top strategy stays first while every κ is scaled by {:.3}…{:.3} (κ intra {}…{}, κ inter {}…{})",
                    lo_f, hf, sci(&li), sci(&hi_i), sci(&le), sci(&hi_e)
                );
            }
            _ => println!(
                "the top strategy stays first for every κ scaled by {:.3} or more, without upper limit (κ intra ≥ {}, κ inter ≥ {})",
                lo_f, sci(&li), sci(&le)
            ),
        }
    }
}
