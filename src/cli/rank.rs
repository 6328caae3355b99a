//! `symshard rank`: the ranked list of hybrid-parallel strategies for a model on N devices.

use super::output::print_json;
use super::strategy_args::machine_error;
use super::units;
use super::{Format, SymbolArgs};
use crate::calib::Calibration;
use crate::error::Error;
use crate::search::steer::{apply_headroom, parse_memory, DEFAULT_HEADROOM};
use crate::search::{rank_with_progress, LayoutKind, Layouts, RankOptions, Steer};
use crate::strategy::{Knobs, Schedule, Tier};
use crate::sym::Rational;
use clap::Args;
use num_traits::{ToPrimitive, Zero};
use serde::Serialize;
use std::collections::BTreeMap;

/// What `--emit` prints about the top strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// Megatron-LM command-line arguments.
    Megatron,
    /// A torchtitan TOML job config.
    Torchtitan,
    /// Full per-operator placements as JSON.
    Json,
}

/// The largest micro-batch count tried unless `--max-microbatches` says otherwise.
const DEFAULT_MAX_MICROBATCHES: u64 = 256;

/// The machine's shape and memory and the constraints of a strategy search: shared by `rank`
/// and `report`.
#[derive(Debug, Clone, Args)]
pub struct SearchArgs {
    /// Devices per node (default: the calibration's, 8 for the reference machine).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's
    /// capacity.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Memory kept free on each device for the CUDA context, NCCL and cuBLAS workspaces and
    /// allocator fragmentation: a share (`10%`) or an amount (`8GB`); `0%` for none. Default 10%
    /// of the calibration's capacity (none off a `--memory` given): vLLM's default
    /// `gpu_memory_utilization` of 0.9 (vLLM documentation, Engine Arguments), the one published
    /// framework default for this reserve.
    #[arg(long, value_name = "SHARE|SIZE")]
    pub headroom: Option<String>,
    /// Largest micro-batch count to try.
    #[arg(long, default_value_t = DEFAULT_MAX_MICROBATCHES)]
    pub max_microbatches: u64,
    /// Most model chunks per device tried with the interleaved schedule (every count from 2 up
    /// to this that divides the layers per stage).
    #[arg(long, default_value_t = crate::search::DEFAULT_MAX_CHUNKS)]
    pub max_chunks: u64,
    /// Fix knobs: `--fix tp=8,pp=4,zero=1`, any knob of the parser's list (shown by --help).
    #[arg(long, value_name = "KNOB=VALUE,…", help = fix_help())]
    pub fix: Vec<String>,
    /// Cap knobs: `--max tp=8,pp=16`.
    #[arg(long, value_name = "KNOB=VALUE,…")]
    pub max: Vec<String>,
    /// Only this pipeline schedule (gpipe, 1f1b, interleaved-1f1b) where pp > 1; zb-h1 and
    /// dualpipe are opt-in: searched only when named here or by `--fix schedule=`.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Only this micro-batch size (samples per micro-batch and data-parallel rank).
    #[arg(long, value_name = "N")]
    pub micro_batch_size: Option<u64>,
    /// No sequence parallelism.
    #[arg(long)]
    pub no_sp: bool,
    /// Tensor-parallel layouts to price for each degree tp > 1: the family's annotated
    /// (`tp:`) layout, the layout the per-operator search finds (auto-sharding), or both,
    /// ranked together [default: annotated for a model whose family annotates its layout (and
    /// with `--emit megatron|torchtitan`, whose flags express no other), both for one that
    /// annotates none]
    #[arg(long, value_enum)]
    pub layouts: Option<Layouts>,
}

/// `--fix`'s help: every knob the `--fix` parser takes, from its own list.
pub fn fix_help() -> String {
    let knobs: Vec<&str> = crate::search::steer::KNOBS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    format!("Fix knobs: `--fix tp=8,pp=4,zero=1` ({})", knobs.join(", "))
}

impl SearchArgs {
    /// The flags as `rank` takes them, to run it with the same search.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        let mut opt = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                a.extend([format!("--{flag}"), v]);
            }
        };
        opt("gpus-per-node", self.gpus_per_node.map(|g| g.to_string()));
        opt("memory", self.memory.clone());
        opt("headroom", self.headroom.clone());
        opt(
            "max-microbatches",
            (self.max_microbatches != DEFAULT_MAX_MICROBATCHES)
                .then(|| self.max_microbatches.to_string()),
        );
        opt(
            "max-chunks",
            (self.max_chunks != crate::search::DEFAULT_MAX_CHUNKS)
                .then(|| self.max_chunks.to_string()),
        );
        opt("schedule", self.schedule.clone());
        opt(
            "micro-batch-size",
            self.micro_batch_size.map(|m| m.to_string()),
        );
        for f in &self.fix {
            a.extend(["--fix".into(), f.clone()]);
        }
        for m in &self.max {
            a.extend(["--max".into(), m.clone()]);
        }
        if self.no_sp {
            a.push("--no-sp".into());
        }
        if let Some(l) = &self.layouts {
            a.extend([
                "--layouts".into(),
                clap::ValueEnum::to_possible_value(l)
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default(),
            ]);
        }
        a
    }
}

/// Arguments of `rank`.
#[derive(Debug, Args)]
pub struct RankArgs {
    /// A model file or a shipped model's name.
    pub model: String,
    /// Devices to train on.
    #[arg(long)]
    pub devices: u64,
    /// Rows to show.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// A calibration table (file or shipped name) for the balance ratios and memory;
    /// `TABLE@KERNEL` times fused attention with one of its `attention_kernels`.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// A what-if machine: change named quantities of the `--calib` table
    /// (`nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`; a factor `xF` or a value with its
    /// unit). Names: device.peak.DTYPE, hbm.bandwidth, hbm.capacity, nvlink.bandwidth,
    /// network.bandwidth, nvlink.latency, network.latency, domain, device.tdp. The machine is
    /// named `TABLE+what-if(CHANGES)`, a name `--calib` takes again.
    #[arg(long = "with", value_name = "NAME=VALUE,…", requires = "calib")]
    pub with: Option<String>,
    /// A software stack's profile (a file or a shipped name, `stacks/`), added to the simulated
    /// seconds (which it turns on, as --calib does); default: none, profile-free.
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
    /// The search's machine and constraints.
    #[command(flatten)]
    pub search: SearchArgs,
    /// Also show the Pareto frontier of memory against relative cost (seconds with --calib).
    #[arg(long)]
    pub pareto: bool,
    /// Model symbols and attention.
    #[command(flatten)]
    pub symbols: SymbolArgs,
    /// Also print the top strategy as Megatron-LM arguments, a torchtitan TOML job config, or
    /// per-operator placements.
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,
    /// Also compare the top strategy with the second, component by component (as `compare`
    /// does), and say which parts of the cost make the first win.
    #[arg(long)]
    pub why: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

impl RankArgs {
    /// Whether rows are ranked by simulated seconds: a machine or a stack profile was named.
    pub fn seconds(&self) -> bool {
        self.calib.is_some() || self.stack.is_some()
    }
}

#[derive(Serialize)]
struct Row {
    rank: usize,
    dp: u64,
    tp: u64,
    pp: u64,
    /// Samples per micro-batch and data-parallel rank (Megatron-LM's `--micro-batch-size`).
    micro_batch_size: Option<u64>,
    /// Micro-batches per step: global batch ÷ (dp × micro-batch size).
    microbatches: u64,
    schedule: String,
    chunks: u64,
    sequence_parallel: bool,
    recompute: String,
    zero: u8,
    ep: u64,
    /// Context-parallel degree.
    cp: u64,
    /// The communication overlaps it runs with (`--fix overlap=…`; Megatron-LM's defaults
    /// otherwise: only the gradient reduction overlapped).
    overlap: crate::strategy::Overlap,
    /// How weights and gradients are kept in mixed precision (`--fix precision=…`; bf16
    /// otherwise: rank searches no precision, so FP8 is priced only where it is fixed).
    precision: crate::strategy::Precision,
    /// What the interleaved split counts besides the layers (`--fix account=…`; absent when
    /// nothing).
    #[serde(skip_serializing_if = "crate::strategy::PipelineSplit::is_plain")]
    pipeline_split: crate::strategy::PipelineSplit,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    relative_cost: Rational,
    relative: crate::parallel::RelativeCost,
    #[serde(serialize_with = "crate::sym::ser_rational")]
    memory_per_device: Rational,
    memory: crate::parallel::Memory,
    feasible: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<crate::parallel::Infeasible>,
    #[serde(skip_serializing_if = "Option::is_none")]
    iteration_seconds: Option<f64>,
    /// Knobs whose values do not change this row's cost or memory: each with the values that
    /// give the same row.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    knobs_that_do_not_matter: BTreeMap<String, Vec<String>>,
    /// The strategy as one string.
    strategy: String,
    /// The software stack the row assumes (`megatron`, `pytorch-ddp`, `pytorch-fsdp`), whose
    /// validation error decides a tie.
    stack: crate::search::stack::Stack,
    /// Ranked by seconds: why this row's place behind #1 is within the model's own error.
    #[serde(skip_serializing_if = "Option::is_none")]
    tie: Option<String>,
    /// The tensor-parallel layout: `annotated` (the family's `tp:` marks) or `auto` (the
    /// per-operator search's).
    layout: LayoutKind,
    /// For the auto layout: per operator, the rule index the tensor-parallel axis splits
    /// (`none`: replicated).
    #[serde(skip_serializing_if = "Option::is_none")]
    placements: Option<BTreeMap<String, String>>,
    /// For the auto layout: how it was found (`exact`, or bounded with its proven gap).
    #[serde(skip_serializing_if = "Option::is_none")]
    layout_search: Option<String>,
}

#[derive(Serialize)]
struct Out {
    model: String,
    /// Sizes at the model file's placeholders (defaults marked `assumed`) that `--set` did not
    /// give, with their values: the ranking is for a size nobody chose.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    assumed_sizes: BTreeMap<String, String>,
    /// Global batch B and sequence length S the strategies were ranked at.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    global_batch: Rational,
    /// `" (B = 512, S = 2048)"` under the model's names for its batch and sequence.
    #[serde(skip)]
    batch_and_sequence: String,
    /// The model's settings that change how its operators run (attention, loss, training
    /// metrics, dropout).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    settings: std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_length: Option<String>,
    devices: u64,
    gpus_per_node: u64,
    calibration: String,
    /// The changes that derived a what-if machine from its table (`--with`); absent for a
    /// table as shipped or given.
    #[serde(skip_serializing_if = "Option::is_none")]
    what_if: Option<crate::calib::whatif::WhatIf>,
    /// The stack profile added to the seconds (`--stack`); absent: profile-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_profile: Option<String>,
    /// Usable memory per device (after headroom), bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    memory_limit: Rational,
    #[serde(skip_serializing_if = "String::is_empty")]
    steering: String,
    strategies: Vec<Row>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pareto: Vec<Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    smallest_footprint: Option<Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nothing_fits: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    emitted: Option<serde_json::Value>,
    evaluated: usize,
    feasible: usize,
    rejected: crate::search::error::Rejections,
    /// Strategies that passed the screen but could not be priced or simulated.
    #[serde(skip_serializing_if = "crate::search::error::Failed::is_empty")]
    failed: crate::search::error::Failed,
    /// Strategies simulated to rank by seconds (0 when ranking by relative cost).
    simulated: usize,
    balance_range: Option<(String, Option<String>)>,
    /// For each tensor-parallel degree shown without sequence parallelism: what the e-graph
    /// engine proves about the layer's communication.
    engine: Vec<EngineNote>,
    search_seconds: f64,
    /// The auto layouts: for each tensor-parallel degree searched, how its layout was found
    /// (`exact`, `bounded, gap ≤ …`), or that it is the annotated one, or why none was found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    auto_layouts: Vec<AutoNote>,
    /// Seconds of `search_seconds` spent finding the auto layouts (absent when none was
    /// searched).
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_layout_seconds: Option<f64>,
    /// The e-graph's variants of the auto layouts (`auto+e-graph` rows): the operators moved
    /// and the layer's forward wire bytes the laws price as saved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    egraph_layouts: Vec<crate::search::egraph::EGraphLayout>,
    /// Degrees whose e-graph pass over the auto layout failed, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    egraph_failed: BTreeMap<u64, String>,
    /// With `--why`: the top strategy (A) against the second (B).
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<super::compare::Comparison>,
}

#[derive(Serialize)]
struct AutoNote {
    tp: u64,
    /// `exact`, `bounded, gap ≤ …%`, `annotated` (the search found the annotated layout) or
    /// `none`.
    search: String,
    /// The search's own cost of the layout (FLOP-equivalents per device for the whole batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    search_cost: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize, Default)]
struct EngineNote {
    tp: u64,
    stop: String,
    egraph_nodes: usize,
    moved: Vec<String>,
    saving_compute: String,
    saving_comm: String,
    saving_activation: String,
    /// Why the engine could not build the layer, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A row's bubble as a share of its relative cost ([`units::BUBBLE_MEANS`]); `-` without a
/// pipeline, which has none.
fn bubble(r: &Row) -> String {
    if r.pp == 1 {
        "-".into()
    } else {
        units::percent(&r.relative.bubble, &r.relative.total)
    }
}

/// The knobs in which `alike` differ from `k`, each with every value seen (the row's first).
fn free_knobs(k: &Knobs, alike: &[Knobs], batch: &Rational) -> BTreeMap<String, Vec<String>> {
    let fields = |k: &Knobs| -> Vec<(&'static str, String)> {
        vec![
            ("dp", k.dp.to_string()),
            ("tp", k.tp.to_string()),
            ("pp", k.pp.to_string()),
            ("ep", k.ep.to_string()),
            ("cp", k.cp.to_string()),
            (
                "mbs",
                k.micro_batch_size(batch)
                    .map_or_else(|| "-".into(), |m| m.to_string()),
            ),
            ("schedule", sched_name(k)),
            ("sp", if k.sequence_parallel { "on" } else { "off" }.into()),
            ("recompute", k.recompute.to_string()),
            ("zero", k.zero.to_string()),
        ]
    };
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let base = fields(k);
    for other in alike {
        for ((name, a), (_, b)) in base.iter().zip(fields(other)) {
            if *a != b {
                let e = out
                    .entry(name.to_string())
                    .or_insert_with(|| vec![a.clone()]);
                if !e.contains(&b) {
                    e.push(b);
                }
            }
        }
    }
    out
}

fn sched_name(k: &Knobs) -> String {
    match k.schedule {
        _ if k.pp == 1 => "none".into(),
        Schedule::Interleaved => format!("interleaved(v={})", k.chunks),
        s => s.to_string(),
    }
}

fn row_of(r: &crate::search::RankedRow, batch: &Rational) -> Row {
    let e = &r.evaluation;
    let k = &e.knobs;
    Row {
        rank: r.rank,
        dp: k.dp,
        tp: k.tp,
        pp: k.pp,
        micro_batch_size: k.micro_batch_size(batch),
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
        cp: k.cp,
        overlap: k.overlap,
        precision: k.precision,
        pipeline_split: k.pipeline_split,
        relative_cost: e.relative.total.clone(),
        relative: e.relative.clone(),
        memory_per_device: e.memory.total.clone(),
        memory: e.memory.clone(),
        feasible: e.feasible,
        reason: e.reason.clone(),
        iteration_seconds: r.seconds,
        knobs_that_do_not_matter: free_knobs(k, &r.alike, batch),
        strategy: k.describe(Some(batch)),
        stack: crate::search::stack::Stack::of(k),
        tie: None,
        layout: r.layout.kind,
        placements: r.layout.auto.as_ref().map(|a| a.placements.clone()),
        layout_search: r.layout.auto.as_ref().map(|a| a.method()),
    }
}

/// The search constraints the flags state.
fn steering(args: &RankArgs) -> Result<Steer, Error> {
    let mut steer = Steer::default();
    for f in &args.search.fix {
        steer.fix(f, "--fix")?;
    }
    if let Some(s) = &args.search.schedule {
        steer.fix(&format!("schedule={s}"), "--schedule")?;
    }
    if let Some(m) = args.search.micro_batch_size {
        steer.fix(&format!("mbs={m}"), "--micro-batch-size")?;
    }
    if args.search.no_sp {
        steer.fix("sp=off", "--no-sp")?;
    }
    for m in &args.search.max {
        steer.max(m, "--max")?;
    }
    steer.check_devices(args.devices)?;
    Ok(steer)
}

/// Runs `rank`.
/// A ranking as `rank` computes it, before it is printed.
pub struct Ranked {
    /// What `--format json` prints.
    out: Out,
    /// The search's result: each row's evaluation and layout.
    pub result: crate::search::RankResult,
    /// The machine.
    pub calib: Calibration,
    /// The device's capacity before headroom.
    capacity: Rational,
    /// The search's options: devices per node, usable memory.
    pub opts: RankOptions,
    emitted: Option<super::emit::Emitted>,
}

impl Ranked {
    /// The ranking as `rank --format json` prints it.
    pub fn json(&self) -> Result<serde_json::Value, Error> {
        serde_json::to_value(&self.out)
            .map_err(|e| Error::Internal(format!("cannot write JSON: {e}")))
    }
}

/// Runs `rank`.
pub fn run(args: RankArgs) -> Result<(), Error> {
    let r = ranked(&args)?;
    match args.format {
        Format::Json => print_json(&r.out),
        Format::Table => {
            print_table(&r.out, &r.calib, &r.capacity, &args, &r.result);
            print_after_table(&r.out, r.emitted.as_ref(), args.why);
            Ok(())
        }
    }
}

/// Ranks as the flags ask: the search, its rows, `--emit` and `--why`.
pub fn ranked(args: &RankArgs) -> Result<Ranked, Error> {
    let loader = args.symbols.loader()?;
    let model = loader.resolve(&args.model)?;
    let values = args.symbols.apply(&model)?;
    let calib = Calibration::resolve_with(args.calib.as_deref(), args.with.as_deref())?
        .with_stack(args.stack.as_deref())?;
    let Request {
        opts,
        steer,
        capacity,
        batch,
    } = request(args, &model, &values, &calib)?;
    let pb = super::progress::bar(0, "ranking mesh shapes");
    let result = rank_with_progress(&model, &values, &calib, &opts, &mut |done, all| {
        pb.set_length(all as u64);
        pb.set_position(done as u64);
    });
    pb.finish_and_clear();
    let result = result?;
    let mut rows: Vec<Row> = result.rows.iter().map(|r| row_of(r, &batch)).collect();
    mark_ties(&mut rows);
    let pareto: Vec<Row> = result.pareto.iter().map(|r| row_of(r, &batch)).collect();
    let smallest = result.smallest.as_ref().map(|(e, layout)| {
        row_of(
            &crate::search::RankedRow {
                rank: 0,
                evaluation: e.clone(),
                seconds: None,
                alike: Vec::new(),
                layout: layout.clone(),
            },
            &batch,
        )
    });
    let range = result
        .balance_range
        .as_ref()
        .map(|(lo, hi)| (lo.to_string(), hi.as_ref().map(|h| h.to_string())));
    let top = Top {
        args,
        model: &model,
        values: &values,
        calib: &calib,
        opts: &opts,
        result: &result,
    };
    let emitted = top.emitted()?;
    let why = top.why()?;
    let auto_layouts = auto_notes(&result);
    let out = Out {
        model: model.name.clone(),
        assumed_sizes: super::cost::assumed_sizes(&model, &args.symbols.set, &values),
        global_batch: batch.clone(),
        batch_and_sequence: super::cost::batch_and_sequence(&model, &values),
        settings: crate::timeline::setting_map(&model),
        sequence_length: model
            .roles
            .sequence
            .as_ref()
            .and_then(|s| values.get(s))
            .map(|s| s.to_string()),
        devices: args.devices,
        gpus_per_node: opts.gpus_per_node,
        calibration: calib.name.clone(),
        what_if: calib.what_if.clone(),
        stack_profile: calib.stack.as_ref().map(|s| s.describe()),
        memory_limit: opts.memory.clone(),
        steering: steer.describe(),
        strategies: rows,
        pareto,
        smallest_footprint: smallest,
        nothing_fits: nothing_fits_line(&result, &opts.memory, &batch),
        emitted: emitted.as_ref().map(|e| e.json.clone()),
        evaluated: result.evaluated,
        simulated: result.simulated,
        feasible: result.feasible,
        rejected: result.rejected.clone(),
        failed: result.failed.clone(),
        balance_range: range,
        engine: engine_notes(&model, &values, &result),
        search_seconds: result.search_seconds,
        auto_layout_seconds: (!auto_layouts.is_empty()).then_some(result.auto_seconds),
        auto_layouts,
        egraph_layouts: result.egraph_layouts.clone(),
        egraph_failed: result.egraph_failed.clone(),
        why,
    };
    Ok(Ranked {
        out,
        result,
        calib,
        capacity,
        opts,
        emitted,
    })
}

/// The search the flags ask for, checked: the options, the steering, the device's capacity
/// (before headroom) and the global batch.
struct Request {
    opts: RankOptions,
    steer: Steer,
    capacity: Rational,
    batch: Rational,
}

/// Checks the flags and builds the [`Request`].
fn request(
    args: &RankArgs,
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    calib: &Calibration,
) -> Result<Request, Error> {
    let gpus_per_node = args
        .search
        .gpus_per_node
        .unwrap_or_else(|| calib.gpus_per_node());
    crate::strategy::check_gpus_per_node(gpus_per_node).map_err(machine_error)?;
    if args.top == 0 {
        return Err(Error::Usage("--top must be at least 1".into()));
    }
    if args.search.max_microbatches == 0 {
        return Err(Error::Usage("--max-microbatches must be at least 1".into()));
    }
    if args.search.max_chunks == 0 || args.search.max_chunks > crate::strategy::MAX_DEVICES {
        return Err(Error::Usage(format!(
            "--max-chunks must be at least 1 (1: no interleaving), not {}",
            args.search.max_chunks
        )));
    }
    let steer = steering(args)?;
    // The knobs first, then the machine they need: a fixed degree the model cannot use is
    // what to change, not the devices.
    if let Some(pp) = steer.pp.fixed {
        crate::parallel::check_pipeline_stages(model, values, pp)?;
    }
    crate::strategy::check_fills_nodes(args.devices, gpus_per_node).map_err(machine_error)?;
    let capacity = match &args.search.memory {
        Some(m) => parse_memory(m).map_err(|e| Error::Usage(format!("--memory: {e}")))?,
        None => calib.memory_bytes(),
    };
    // A memory size given is what the user has; the default headroom is kept off the table's
    // capacity only.
    let headroom = match (&args.search.headroom, &args.search.memory) {
        (Some(h), _) => h.as_str(),
        (None, Some(_)) => "0%",
        (None, None) => DEFAULT_HEADROOM,
    };
    let memory = apply_headroom(headroom, &capacity)?;
    let batch = model
        .batch_value(values)
        .cloned()
        .unwrap_or_else(|| Rational::from_integer(1.into()));
    let opts = RankOptions {
        devices: args.devices,
        gpus_per_node,
        top: args.top,
        memory,
        max_microbatches: args.search.max_microbatches.max(1),
        seconds: args.seconds(),
        max_chunks: args.search.max_chunks,
        steer: steer.clone(),
        pareto: args.pareto,
        // Auto layouts by default only where the family annotates none: an annotated layout is
        // the one the training stacks run, and searching beside it triples the time.
        layouts: args.search.layouts.unwrap_or(
            match (args.emit, crate::search::auto::has_annotations(model)) {
                (Some(Emit::Megatron | Emit::Torchtitan), _) | (_, true) => Layouts::Annotated,
                _ => Layouts::Both,
            },
        ),
    };
    Ok(Request {
        opts,
        steer,
        capacity,
        batch,
    })
}

/// One point of a sweep: the search `rank MODEL --devices N --calib TABLE --top 1` runs with
/// the sweep's `--fix`, `--max` and `--headroom` and the point's `--set` (its batch and
/// sequence), on the point's machine: the same checks and options as the command line.
pub(crate) struct PointSearch<'a> {
    /// The model as named in the spec.
    pub model: &'a str,
    /// Devices.
    pub devices: u64,
    /// `--set SYM=VALUE` items.
    pub set: Vec<String>,
    /// `--fix` items (the point's precision among them).
    pub fix: Vec<String>,
    /// `--max` items.
    pub max: Vec<String>,
    /// `--headroom`.
    pub headroom: Option<String>,
}

impl PointSearch<'_> {
    /// The model's symbol values and the search's options, checked as `rank` checks its flags.
    pub(crate) fn options(
        &self,
        model: &crate::model::Model,
        calib: &Calibration,
    ) -> Result<(crate::sym::Bindings, RankOptions), Error> {
        let args = RankArgs {
            model: self.model.to_string(),
            devices: self.devices,
            top: 1,
            calib: Some(calib.name.clone()),
            with: None,
            stack: None,
            search: SearchArgs {
                gpus_per_node: None,
                memory: None,
                headroom: self.headroom.clone(),
                max_microbatches: DEFAULT_MAX_MICROBATCHES,
                max_chunks: crate::search::DEFAULT_MAX_CHUNKS,
                fix: self.fix.clone(),
                max: self.max.clone(),
                schedule: None,
                micro_batch_size: None,
                no_sp: false,
                layouts: None,
            },
            pareto: false,
            symbols: SymbolArgs {
                set: self.set.clone(),
                attention: None,
                loss: crate::model::LossMode::default(),
                train_metrics: 0,
                dropout: None,
                rules: None,
            },
            emit: None,
            why: false,
            format: Format::Json,
        };
        let values = args.symbols.apply(model)?;
        let req = request(&args, model, &values, calib)?;
        Ok((values, req.opts))
    }
}

/// When nothing fits: the smallest footprint reachable, and how the cheapest strategy gets
/// there.
pub(crate) fn nothing_fits_line(
    result: &crate::search::RankResult,
    memory: &Rational,
    batch: &Rational,
) -> Option<String> {
    let (s, _) = result.smallest.as_ref()?;
    let mut msg = format!(
        "nothing fits in {} per device: the smallest footprint reachable is {} ({})",
        units::bytes_rounded(memory),
        units::bytes(&s.memory.total),
        s.knobs.describe(Some(batch))
    );
    if let Some(c) = &result.cheapest {
        let changes = free_knobs(&c.knobs, std::slice::from_ref(&s.knobs), batch);
        if !changes.is_empty() {
            let list: Vec<String> = changes
                .iter()
                .map(|(k, v)| format!("{k} {}", v.join(" → ")))
                .collect();
            msg.push_str(&format!(
                "; from the cheapest strategy ({}) it is reached by {}",
                units::bytes(&c.memory.total),
                list.join(", ")
            ));
        }
    }
    Some(msg)
}

/// The shown tensor-parallel layouts run through the e-graph engine: the cheapest program the
/// laws prove equal to each (sequence parallelism, when it is cheaper, is one such program).
/// A layer the engine cannot build says why instead of being left out.
fn engine_notes(
    model: &crate::model::Model,
    values: &crate::sym::Bindings,
    result: &crate::search::RankResult,
) -> Vec<EngineNote> {
    let mut engine = Vec::new();
    let mut seen = Vec::new();
    for r in &result.rows {
        let k = &r.evaluation.knobs;
        if k.tp > 1 && !k.sequence_parallel && !seen.contains(&k.tp) {
            seen.push(k.tp);
            engine.push(match crate::rewrite::optimize_layer(model, k.tp, values) {
                Ok(rep) => EngineNote {
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
                    error: None,
                },
                Err(e) => EngineNote {
                    tp: k.tp,
                    error: Some(e.to_string()),
                    ..EngineNote::default()
                },
            });
        }
    }
    engine
}

/// What a ranking hands to `--emit` and `--why`.
struct Top<'a> {
    args: &'a RankArgs,
    model: &'a crate::model::Model,
    values: &'a crate::sym::Bindings,
    calib: &'a Calibration,
    opts: &'a RankOptions,
    result: &'a crate::search::RankResult,
}

impl Top<'_> {
    /// A row priced again on its own, as `compare` prices it.
    fn price(
        &self,
        k: &Knobs,
        seconds: bool,
        layout: &crate::search::RowLayout,
    ) -> Result<super::compare::Evaluated, Error> {
        super::compare::evaluate_knobs(
            self.model,
            self.values,
            k,
            self.calib,
            self.opts.gpus_per_node,
            &self.opts.memory,
            seconds,
            &layout.overrides(),
        )
    }

    /// `--emit`: per-operator placements carry any layout; Megatron-LM's and torchtitan's
    /// flags express only the annotated one, so they describe the best row that uses it.
    fn emitted(&self) -> Result<Option<super::emit::Emitted>, Error> {
        let (Some(emit), Some(top)) = (self.args.emit, self.result.rows.first()) else {
            return Ok(None);
        };
        if emit == Emit::Json {
            return super::emit::emit(
                Emit::Json,
                self.model,
                self.values,
                &top.evaluation,
                &top.layout.overrides(),
            )
            .map(Some);
        }
        let Some(r) = self
            .result
            .rows
            .iter()
            .find(|r| r.layout.kind == LayoutKind::Annotated || r.evaluation.knobs.tp == 1)
        else {
            return Err(Error::Usage(
                "--emit: no row shown uses the annotated layout, which is all Megatron-LM's and torchtitan's flags express; use --emit json for the auto layout's placements, or --layouts annotated".into(),
            ));
        };
        // A grouped row's other members, priced again when the row's own knobs are ones the
        // target cannot run.
        let reprice = |k: &Knobs| self.price(k, false, &r.layout).map(|e| e.evaluation);
        let mut e = super::emit::emit_ranked(emit, self.model, self.values, r, &reprice)?;
        if r.rank != top.rank {
            e.text = format!(
                "# row {} (the best row with the annotated layout: the flags cannot express the auto layout of row {})\n{}",
                r.rank, top.rank, e.text
            );
        }
        Ok(Some(e))
    }

    /// `--why`: #1 against #2, component by component.
    fn why(&self) -> Result<Option<super::compare::Comparison>, Error> {
        let rows = &self.result.rows;
        let (true, Some(first), Some(second)) = (self.args.why, rows.first(), rows.get(1)) else {
            return Ok(None);
        };
        let seconds = self.args.seconds();
        let a = self.price(&first.evaluation.knobs, seconds, &first.layout)?;
        let b = self.price(&second.evaluation.knobs, seconds, &second.layout)?;
        Ok(Some(super::compare::comparison(
            self.model,
            self.values,
            self.calib,
            &a,
            &b,
        )))
    }
}

/// What the table is followed by: the emitted configuration and `--why`'s comparison.
fn print_after_table(out: &Out, emitted: Option<&super::emit::Emitted>, why: bool) {
    if let Some(e) = emitted {
        println!();
        println!("{}", e.text);
    }
    if why {
        println!();
        match &out.why {
            Some(c) => {
                println!("why #1 and not #2: A is #1, B is #2");
                super::compare::print_comparison(c);
            }
            None => println!("--why: fewer than two strategies ranked, nothing to compare"),
        }
    }
}

fn auto_notes(result: &crate::search::RankResult) -> Vec<AutoNote> {
    let mut v: Vec<AutoNote> = result
        .auto_layouts
        .iter()
        .map(|a| AutoNote {
            tp: a.tp,
            search: a.method(),
            search_cost: Some(a.search_cost.to_string()),
            error: None,
        })
        .collect();
    v.extend(result.auto_same.iter().map(|&tp| AutoNote {
        tp,
        search: "annotated".into(),
        search_cost: None,
        error: None,
    }));
    v.extend(result.auto_failed.iter().map(|(&tp, e)| AutoNote {
        tp,
        search: "none".into(),
        search_cost: None,
        error: Some(e.to_string()),
    }));
    v.sort_by_key(|n| n.tp);
    v
}

fn cell(r: &Row, knob: &str, own: String) -> String {
    match r.knobs_that_do_not_matter.get(knob) {
        Some(v) => v.join("|"),
        None => own,
    }
}

/// Ranked by seconds: marks each row behind #1 by less than the model's own error on the
/// stacks the two rows assume (their order is then not significant).
fn mark_ties(rows: &mut [Row]) {
    let Some((first, rest)) = rows.split_first_mut() else {
        return;
    };
    let (Some(t1), true) = (first.iteration_seconds, first.feasible) else {
        return;
    };
    for r in rest.iter_mut().filter(|r| r.feasible) {
        if let Some(t) = r.iteration_seconds {
            r.tie = crate::search::stack::tie(t1, first.stack, t, r.stack).map(|t| t.to_string());
        }
    }
}

/// The line that says which rows tie with #1, if any.
fn ties_line(rows: &[Row]) -> Option<String> {
    let tied: Vec<String> = rows
        .iter()
        .filter(|r| r.tie.is_some())
        .map(|r| format!("#{}", r.rank))
        .collect();
    let first = rows.first()?;
    let example = rows.iter().find_map(|r| r.tie.as_ref())?;
    Some(format!(
        "ties: {} {} behind #1 ({}) by less than validate's error for the stacks assumed, so the order is not significant (e.g. #{}: {example}); stacks assumed: ZeRO 2–3 as PyTorch FSDP, other model parallelism as Megatron, plain data parallelism as DDP",
        tied.join(", "),
        if tied.len() == 1 { "is" } else { "are" },
        first.stack.label(),
        rows.iter().find(|r| r.tie.is_some()).map_or(0, |r| r.rank),
    ))
}

fn print_rows(rows: &[Row]) {
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let t = &r.relative.total;
            let sched = if r.schedule == "interleaved-1f1b" {
                format!("interleaved(v={})", r.chunks)
            } else {
                r.schedule.clone()
            };
            vec![
                r.rank.to_string(),
                r.dp.to_string(),
                r.tp.to_string(),
                r.pp.to_string(),
                r.ep.to_string(),
                r.cp.to_string(),
                cell(
                    r,
                    "mbs",
                    r.micro_batch_size.map_or("-".into(), |m| m.to_string()),
                ),
                cell(r, "schedule", sched),
                cell(
                    r,
                    "sp",
                    if r.sequence_parallel { "on" } else { "off" }.into(),
                ),
                cell(r, "recompute", r.recompute.clone()),
                cell(r, "zero", r.zero.to_string()),
                if r.tp == 1 {
                    "-".to_string()
                } else {
                    r.layout.name().to_string()
                },
                units::flops(t),
                units::percent(&(&r.relative.compute + &r.relative.kernels), t),
                units::percent(&r.relative.comm_intra, t),
                units::percent(&r.relative.comm_inter, t),
                bubble(r),
                if r.relative.hidden.is_zero() {
                    units::percent(&r.relative.hidden, t)
                } else {
                    format!("−{}", units::percent(&r.relative.hidden, t))
                },
                units::bytes(&r.memory_per_device),
                r.iteration_seconds
                    .map_or("-".to_string(), |x| format!("{x:.3}")),
                if r.feasible {
                    "yes".to_string()
                } else {
                    format!(
                        "no: {}",
                        r.reason
                            .as_ref()
                            .map(crate::parallel::Infeasible::describe)
                            .unwrap_or_default()
                    )
                },
            ]
        })
        .collect();
    super::output::print_table(
        "",
        ">>>>>>><<<><>>>>>>>><",
        &[
            "rank",
            "dp",
            "tp",
            "pp",
            "ep",
            "cp",
            "mbs",
            "schedule",
            "sp",
            "recompute",
            "zero",
            "layout",
            "rel. cost",
            "compute",
            "intra",
            "inter",
            "bubble",
            "hidden",
            "memory",
            "s/step",
            "fits",
        ],
        &table,
    );
}

/// The legend of the ranking's columns.
const RANK_LEGEND: &str = "dp, tp, pp, ep, cp: data-, tensor-, pipeline-, expert- and context-parallel degrees; mbs: micro-batch size (samples per micro-batch and data-parallel rank); sp: sequence parallelism; zero: ZeRO stage; layout: the tensor-parallel layout, `annotated` (the family's tp: marks, Megatron-LM's for the shipped transformers) or `auto` (the per-operator search's, --layouts; its placements in --format json); rel. cost: FLOP-equivalents of the busiest device per step, and its shares: compute (FLOPs, HBM bytes at κ hbm, and what kernels take beyond their FLOPs at the matmul plateau: GEMMs below it by their sizes, launches), intra- and inter-node communication and bubble, less hidden (what overlapping the data-parallel traffic with compute saves: the gradient reduction under the last backward, ZeRO 2's under every backward, ZeRO 3's weight gathers under both passes, less the compute throughput a running collective takes); memory: per device; s/step: simulated seconds per step (with --calib)";

fn print_table(
    out: &Out,
    calib: &Calibration,
    capacity: &Rational,
    args: &RankArgs,
    result: &crate::search::RankResult,
) {
    print_header(out, calib, capacity, args);
    print_rows(&out.strategies);
    print_links(out, calib);
    if let Some(line) = ties_line(&out.strategies) {
        println!("{line}");
    }
    println!("{RANK_LEGEND}; {}", units::BUBBLE_MEANS);
    if !units::exact() {
        println!("{}", units::UNITS_LEGEND);
    }
    if out
        .strategies
        .iter()
        .any(|r| !r.knobs_that_do_not_matter.is_empty())
    {
        println!("a|b: strategies that differ only in this knob have the same cost and memory; one line shows them all");
    }
    if let Some(msg) = &out.nothing_fits {
        println!();
        println!("{msg}");
    }
    if !out.pareto.is_empty() {
        println!();
        println!(
            "Pareto frontier of memory against {} ({} strategies, least memory first; each is {} than every one using less memory):",
            if out.simulated > 0 { "simulated seconds" } else { "relative cost" },
            units::tally(out.pareto.len() as u64),
            if out.simulated > 0 { "faster" } else { "cheaper" }
        );
        print_rows(&out.pareto);
    }
    println!();
    print_search_summary(out);
    print_notes(out);
    if let Some((lo, hi)) = &result.balance_range {
        print_balance_range(out, calib, lo, hi.as_ref());
    }
}

/// Where the top row's parallel dimensions run, on a table that describes its topology.
fn print_links(out: &Out, calib: &Calibration) {
    if let (Some(t), Some(r)) = (&calib.topology, out.strategies.first()) {
        let mesh = crate::strategy::Mesh::with_cp(r.tp, r.cp, r.dp, r.pp, out.gpus_per_node);
        let items = t.placements(&mesh);
        if !items.is_empty() {
            println!("links of #{}: {}", r.rank, items.join("; "));
        }
    }
}

/// The lines above the table: assumed sizes, the machine, the settings, the balance and what
/// the ranking is by, the steering.
fn print_header(out: &Out, calib: &Calibration, capacity: &Rational, args: &RankArgs) {
    if let Some(line) = super::cost::assumed_line(&out.assumed_sizes) {
        println!("{line}");
    }
    println!(
        "{}{} on {} devices ({} per node) of {}: {} per device{}",
        out.model,
        out.batch_and_sequence,
        out.devices,
        out.gpus_per_node,
        out.calibration,
        units::bytes_rounded(capacity),
        if &out.memory_limit != capacity {
            format!(
                ", {} usable (headroom {})",
                units::bytes_rounded(&out.memory_limit),
                match args.search.headroom.as_deref() {
                    Some(h) => h.to_string(),
                    None => format!("{DEFAULT_HEADROOM} by default, --headroom to change"),
                }
            )
        } else {
            String::new()
        }
    );
    if let Some(w) = &out.what_if {
        println!("{}", w.line());
    }
    if let Some(line) = units::settings_line(&out.settings) {
        println!("{line}");
    }
    if let Some(stack) = &out.stack_profile {
        println!("stack profile: {stack}");
    }
    println!(
        "balance: κ hbm {} FLOP/B, κ intra {} FLOP/B, κ inter {} FLOP/B; {}",
        units::ratio(&calib.hbm_balance()),
        units::ratio(&calib.balance(Tier::Intra)),
        units::ratio(&calib.balance(Tier::Inter)),
        if out.simulated > 0 || args.seconds() {
            "ranked by simulated seconds per step"
        } else {
            "ranked by relative cost (FLOP-equivalents of the busiest device per step)"
        }
    );
    if !out.steering.is_empty() {
        println!("search restricted by {}", out.steering);
    }
}

/// How much was searched: strategies priced and fitting, simulated, failed, rejected by kind.
fn print_search_summary(out: &Out) {
    println!(
        "{} strategies priced, {} fit in memory; {:.3} s",
        units::tally(out.evaluated as u64),
        units::tally(out.feasible as u64),
        out.search_seconds
    );
    if out.simulated > 0 {
        println!(
            "ranked by simulated seconds: {} strategies simulated in the order of their lower bounds, until the next bound exceeded the last row shown — no other strategy can be faster than the rows shown",
            units::tally(out.simulated as u64)
        );
    }
    if let Some(example) = &out.failed.example {
        println!(
            "  {} could not be priced or simulated, e.g. {example}",
            units::tally(out.failed.count as u64)
        );
    }
    // One line per kind of rejection, with one of its messages whole.
    for (kind, r) in out.rejected.by_kind() {
        println!(
            "  {} rejected: {kind}, e.g. {}{}",
            units::tally(r.count as u64),
            r.example(),
            match r.messages.len() {
                1 => String::new(),
                n => format!(" ({} distinct reasons)", units::tally(n as u64)),
            }
        );
    }
}

/// The notes after the summary: the auto layouts found and the e-graph engine's findings.
fn print_notes(out: &Out) {
    if !out.auto_layouts.is_empty() {
        let list: Vec<String> = out
            .auto_layouts
            .iter()
            .map(|n| match n.search.as_str() {
                "annotated" => format!("tp {}: the annotated one", n.tp),
                "none" => format!("tp {}: none", n.tp),
                s => format!("tp {}: {s}", n.tp),
            })
            .collect();
        println!(
            "auto layouts ({:.3} s): {}",
            out.auto_layout_seconds.unwrap_or(0.0),
            list.join(", ")
        );
        for n in &out.auto_layouts {
            if let Some(e) = &n.error {
                println!("  no auto layout at tp = {}: {e}", n.tp);
            }
        }
    }
    for e in &out.egraph_layouts {
        println!(
            "e-graph over the auto layout (tp = {}): `auto+e-graph` moves {} ({}; {} e-nodes); it sends {} less per device per step than the auto layout at tp = {} alone, as the rows price it (the laws' own forward estimate for one layer: {})",
            e.tp,
            e.moved.join(", "),
            e.stop,
            e.egraph_nodes,
            units::bytes(&e.step_comm_bytes_saved),
            e.tp,
            units::bytes(&e.layer_wire_bytes_saved)
        );
    }
    for (tp, why) in &out.egraph_failed {
        println!("e-graph over the auto layout (tp = {tp}): {why}");
    }
    for e in &out.engine {
        if let Some(why) = &e.error {
            println!(
                "e-graph (tp = {}): the layer could not be built: {why}",
                e.tp
            );
        } else if e.moved.is_empty() {
            println!("e-graph (tp = {}): no cheaper equivalent of the layer's communication ({}, {} e-nodes)", e.tp, e.stop, e.egraph_nodes);
        } else {
            println!(
                "e-graph (tp = {}): the laws prove a cheaper equivalent layer — {} operators move to sequence shards, saving {} and {} of activations per layer and tensor-parallel rank at the full batch ({}, {} e-nodes); the sp=on rows price it",
                e.tp,
                e.moved.len(),
                units::text(&e.saving_compute, units::flops),
                units::text(&e.saving_activation, units::bytes),
                e.stop,
                e.egraph_nodes
            );
        }
    }
}

/// Over which scalings of every κ the top row stays first (by relative cost).
fn print_balance_range(out: &Out, calib: &Calibration, lo: &Rational, hi: Option<&Rational>) {
    let (li, le) = crate::search::rank::scaled_balance(calib, lo);
    let lo_f = lo.to_f64().unwrap_or(0.0);
    // Ranked by seconds, the range is where the printed #1 also leads by relative cost; it
    // need not hold the table's own balance (×1), and the sentence says so when it does not.
    let by_seconds = out.simulated > 0;
    let subject = if by_seconds {
        "by relative cost the top row is first"
    } else {
        "the top strategy stays first"
    };
    let not_at_one = |contains_one: bool| {
        if by_seconds && !contains_one {
            "; not at the table's own κ (×1), where it leads by simulated seconds only"
        } else {
            ""
        }
    };
    match hi.map(|h| (h, h.to_f64().unwrap_or(f64::MAX))) {
            Some((_, h)) if h < lo_f => println!(
                "by relative cost the top row is first for no scaling of κ: it leads by simulated seconds only"
            ),
            Some((h, hf)) if hf < 1e6 => {
                let (hi_i, hi_e) = crate::search::rank::scaled_balance(calib, h);
                println!(
                    "{subject} while every κ is scaled by {:.3}…{:.3} (κ intra {}…{}, κ inter {}…{}){}",
                    lo_f,
                    hf,
                    units::ratio_rounded(&li),
                    units::ratio_rounded(&hi_i),
                    units::ratio_rounded(&le),
                    units::ratio_rounded(&hi_e),
                    not_at_one(lo_f <= 1.0 && 1.0 <= hf)
                );
            }
            _ => println!(
                "{subject} for every κ scaled by {:.3} or more, without upper limit (κ intra ≥ {}, κ inter ≥ {}){}",
                lo_f,
                units::ratio_rounded(&li),
                units::ratio_rounded(&le),
                not_at_one(lo_f <= 1.0)
            ),
        }
}
