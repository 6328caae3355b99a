//! `symshard rank`: the ranked list of hybrid-parallel strategies for a model on N devices.

use super::output::print_json;
use super::units;
use super::{Format, SymbolArgs};
use crate::api::Ranked;
use crate::api::{Machine, RankOptions, RankResult, RankRow, DEFAULT_MAX_MICROBATCHES};
use crate::calib::Calibration;
use crate::error::Error;
use crate::search::Layouts;
use crate::strategy::Tier;
use crate::sym::Rational;
use clap::Args;
use num_traits::{ToPrimitive, Zero};

pub use crate::emit::Emit;

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
    /// Only this pipeline schedule (gpipe, 1f1b, interleaved-1f1b) where pp > 1; zb-h1, zb-v,
    /// dualpipe and dualpipev are opt-in: searched only when named here or by `--fix schedule=`.
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
    /// The machine: a calibration table, a what-if change of it, a stack profile.
    #[command(flatten)]
    pub machine: super::strategy_args::MachineArgs,
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
        self.machine.seconds()
    }
}

impl SearchArgs {
    /// The search's options as these flags give them, on `machine` (`--memory` and
    /// `--headroom` are read when ranking, in the command line's order of errors).
    pub(crate) fn options(
        &self,
        devices: u64,
        machine: Machine,
        emit: Option<Emit>,
    ) -> crate::api::RankOptionsBuilder {
        let mut b = RankOptions::builder(devices)
            .machine(machine)
            .max_microbatches(self.max_microbatches)
            .max_chunks(self.max_chunks)
            .memory_text(self.memory.clone())
            .headroom_text(self.headroom.clone());
        for f in &self.fix {
            b = b.fix_as(f, "--fix");
        }
        if let Some(s) = &self.schedule {
            b = b.fix_as(&format!("schedule={s}"), "--schedule");
        }
        if let Some(m) = self.micro_batch_size {
            b = b.fix_as(&format!("mbs={m}"), "--micro-batch-size");
        }
        if self.no_sp {
            b = b.fix_as("sp=off", "--no-sp");
        }
        for m in &self.max {
            b = b.max_as(m, "--max");
        }
        // Megatron-LM's and torchtitan's flags express only the annotated layout.
        match (self.layouts, emit) {
            (Some(l), _) => b.layouts(l),
            (None, Some(Emit::Megatron | Emit::Torchtitan)) => b.layouts(Layouts::Annotated),
            (None, _) => b,
        }
    }
}

/// Runs `rank`.
pub fn run(args: RankArgs) -> Result<(), Error> {
    let r = ranked(&args)?;
    match args.format {
        Format::Json => print_json(&r.document()),
        Format::Table => {
            print_table(&r);
            print_after_table(&r, args.why);
            Ok(())
        }
    }
}

/// Ranks as the flags ask: the model loaded, the machine, the options checked, the search,
/// `--emit` and `--why`.
pub fn ranked(args: &RankArgs) -> Result<Ranked, Error> {
    let loaded = args.symbols.model(&args.model).load()?;
    let machine = args.machine.machine(args.search.gpus_per_node)?;
    let opts = args
        .search
        .options(args.devices, machine, args.emit)
        .by_seconds(args.seconds())
        .top(args.top)
        .pareto(args.pareto)
        .build()?;
    super::progress::ranking(|progress| {
        crate::api::ranked_loaded(&loaded, &opts, args.emit, args.why, progress)
    })
}

/// What the table is followed by: the emitted configuration and `--why`'s comparison.
fn print_after_table(r: &Ranked, why: bool) {
    if let Some(e) = &r.emitted {
        println!();
        println!("{}", e.text);
    }
    if why {
        println!();
        match &r.why {
            Some(c) => {
                println!("why #1 and not #2: A is #1, B is #2");
                super::compare::print_comparison(c);
            }
            None => println!("--why: fewer than two strategies ranked, nothing to compare"),
        }
    }
}

/// A row's bubble as a share of its relative cost ([`units::BUBBLE_MEANS`]); `-` without a
/// pipeline, which has none.
fn bubble(r: &RankRow) -> String {
    if r.pp == 1 {
        "-".into()
    } else {
        units::percent(&r.relative.bubble, &r.relative.total)
    }
}

fn cell(r: &RankRow, knob: &str, own: String) -> String {
    match r.knobs_that_do_not_matter.get(knob) {
        Some(v) => v.join("|"),
        None => own,
    }
}

/// Which stack a row is assumed to run on ([`crate::search::stack::Stack::of`]), as the notes
/// under the table say it.
const STACKS_ASSUMED: &str =
    "ZeRO 2–3 as PyTorch FSDP, other model parallelism as Megatron, plain data parallelism as DDP";

/// The line that says which rows tie with #1, if any.
fn ties_line(rows: &[RankRow]) -> Option<String> {
    let tied: Vec<String> = rows
        .iter()
        .filter(|r| r.tie.is_some())
        .map(|r| format!("#{}", r.rank))
        .collect();
    let first = rows.first()?;
    let example = rows.iter().find_map(|r| r.tie.as_ref())?;
    Some(format!(
        "ties: {} {} behind #1 ({}) by less than validate's error for the stacks assumed, so the order is not significant (e.g. #{}: {example}); stacks assumed: {STACKS_ASSUMED}",
        tied.join(", "),
        if tied.len() == 1 { "is" } else { "are" },
        first.stack.label(),
        rows.iter().find(|r| r.tie.is_some()).map_or(0, |r| r.rank),
    ))
}

/// The note that a profile named by `--stack NAME` (fitted on runs of one stack, its `label`)
/// times rows that assume another stack: their seconds carry the named stack's overheads, not
/// their own.
fn other_stack_line(rows: &[RankRow], calib: &Calibration) -> Option<String> {
    let profile = calib.stack.as_ref()?;
    let label = profile.label.as_deref()?;
    let own = crate::search::stack::Stack::from_label(label);
    let others: Vec<&RankRow> = rows.iter().filter(|r| Some(r.stack) != own).collect();
    if others.is_empty() {
        return None;
    }
    let stacks: std::collections::BTreeSet<&str> = others.iter().map(|r| r.stack.label()).collect();
    let ranks: Vec<String> = others.iter().map(|r| format!("#{}", r.rank)).collect();
    let one = ranks.len() == 1;
    Some(format!(
        "stack: --stack {} is a profile of {label} runs; {} {} another stack ({}: {STACKS_ASSUMED}) and {} timed with {}'s overheads all the same; --stack auto times each row on the profile of the stack it assumes",
        profile.name,
        ranks.join(", "),
        if one { "assumes" } else { "assume" },
        stacks.into_iter().collect::<Vec<_>>().join(", "),
        if one { "is" } else { "are" },
        profile.name,
    ))
}

fn print_rows(rows: &[RankRow]) {
    // A precision column where a row is not bf16 (`--fix precision=…`).
    let precision = rows
        .iter()
        .any(|r| r.precision != crate::strategy::Precision::Bf16);
    let mut table: Vec<Vec<String>> = rows
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
                r.stack.label().to_string(),
                fits(r),
            ]
        })
        .collect();
    let mut head = vec![
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
        "stack",
        "fits",
    ];
    let mut align = String::from(">>>>>>><<<><>>>>>>>><<");
    if precision {
        // After `zero` (the 11th column).
        head.insert(11, "precision");
        align.insert(11, '<');
        for (row, r) in table.iter_mut().zip(rows) {
            row.insert(11, r.precision_label());
        }
    }
    super::output::print_table("", &align, &head, &table);
}

/// The `fits` cell of a row: yes, or no with why.
fn fits(r: &RankRow) -> String {
    if r.feasible {
        return "yes".to_string();
    }
    format!(
        "no: {}",
        r.reason
            .as_ref()
            .map(crate::parallel::Infeasible::describe)
            .unwrap_or_default()
    )
}

/// The legend of the ranking's columns.
const RANK_LEGEND: &str = "dp, tp, pp, ep, cp: data-, tensor-, pipeline-, expert- and context-parallel degrees; mbs: micro-batch size (samples per micro-batch and data-parallel rank); sp: sequence parallelism; zero: ZeRO stage; precision (a column where a row is not bf16): bf16 or the FP8/FP4 recipe of the linear layers; layout: the tensor-parallel layout, `annotated` (the family's tp: marks, Megatron-LM's for the shipped transformers) or `auto` (the per-operator search's, --layouts; its placements in --format json); rel. cost: FLOP-equivalents of the busiest device per step, and its shares: compute (FLOPs, HBM bytes at κ hbm, and what kernels take beyond their FLOPs at the matmul plateau: GEMMs below it by their sizes, launches), intra- and inter-node communication and bubble, less hidden (what overlapping the data-parallel traffic with compute saves: the gradient reduction under the last backward, ZeRO 2's under every backward, ZeRO 3's weight gathers under both passes, less the compute throughput a running collective takes); memory: per device; s/step: simulated seconds per step (with --calib); stack: the software stack the row assumes, whose measured error decides ties and whose profile --stack auto prices it on";

fn print_table(r: &Ranked) {
    let out = &r.result;
    print_header(r);
    print_rows(&out.rows);
    print_links(out, &r.calib);
    if let Some(line) = ties_line(&out.rows) {
        println!("{line}");
    }
    if let Some(line) = other_stack_line(&out.rows, &r.calib) {
        println!("{line}");
    }
    if let Some(p) = &out.partial_domains {
        println!("partial domains: {}", p.sentence(out.devices));
    }
    if out.rows.iter().any(|r| r.node_dispatch) {
        println!("node dispatch: the rows with ep > 1 send each token once to each other node holding its experts, then fan it out inside the node (DeepSeek-V3's node-limited dispatch through DeepEP; the strategy's `node-dispatch`)");
    }
    println!("{RANK_LEGEND} ({STACKS_ASSUMED}); {}", units::BUBBLE_MEANS);
    if !units::exact() {
        println!("{}", units::UNITS_LEGEND);
    }
    if out
        .rows
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
    if let Some((lo, hi)) = &out.balance_range {
        print_balance_range(out, &r.calib, lo, hi.as_ref());
    }
}

/// Where the top row's parallel dimensions run, on a table that describes its topology.
fn print_links(out: &RankResult, calib: &Calibration) {
    if let (Some(t), Some(r)) = (&calib.topology, out.rows.first()) {
        let mesh = crate::strategy::Mesh::with_cp(r.tp, r.cp, r.dp, r.pp, out.gpus_per_node);
        let items = t.placements(&mesh);
        if !items.is_empty() {
            println!("links of #{}: {}", r.rank, items.join("; "));
        }
    }
}

/// The lines above the table: assumed sizes, the machine, the settings, the balance and what
/// the ranking is by, the steering.
fn print_header(r: &Ranked) {
    let (out, calib, capacity) = (&r.result, &r.calib, &r.result.capacity);
    let assumed = out
        .assumed_sizes
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    if let Some(line) = super::cost::assumed_line(&assumed) {
        println!("{line}");
    }
    println!(
        "{}{} on {} devices ({} per node) of {}: {} per device{}",
        out.model,
        r.batch_and_sequence,
        out.devices,
        out.gpus_per_node,
        out.calibration,
        units::bytes_rounded(capacity),
        if &out.memory_limit != capacity {
            format!(
                ", {} usable (headroom {})",
                units::bytes_rounded(&out.memory_limit),
                out.headroom.as_deref().unwrap_or("")
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
    if out.stack_profile.is_some() || out.simulated > 0 || out.by_seconds {
        println!("{}", units::stack_line(out.stack_profile.as_deref()));
        if let Some(s) = &out.stack_supports {
            println!("{}", s.line());
        }
        for line in &out.borrowed_curves {
            println!("{line}");
        }
    }
    println!(
        "balance: κ hbm {} FLOP/B, κ intra {} FLOP/B, κ inter {} FLOP/B; {}",
        units::ratio(&calib.hbm_balance()),
        units::ratio(&calib.balance(Tier::Intra)),
        units::ratio(&calib.balance(Tier::Inter)),
        if out.simulated > 0 || out.by_seconds {
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
fn print_search_summary(out: &RankResult) {
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
fn print_notes(out: &RankResult) {
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
fn print_balance_range(
    out: &RankResult,
    calib: &Calibration,
    lo: &Rational,
    hi: Option<&Rational>,
) {
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
