//! [`rank`]: the hybrid-parallel strategies of a model on N devices, ranked by relative cost or
//! by simulated seconds, as [`RankOptions`] ask.

use super::{Machine, Model, Strategy};
use crate::calib::Calibration;
use crate::error::Error;
use crate::search::steer::{apply_headroom, parse_memory};
use crate::search::{LayoutKind, Layouts, Steer};
use crate::strategy::Knobs;
use crate::sym::{ser_rational, Bindings, Rational};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// The largest micro-batch count tried unless [`RankOptionsBuilder::max_microbatches`] says
/// otherwise. Published runs go past 256: NVIDIA's MLPerf Training v5.0 Llama 3.1 405B on 64
/// DGX H100 nodes runs 288 per data-parallel rank (config_DGXH100_64x8x288xtp8pp8cp2.sh,
/// MINIBS 288), and Narayanan et al.'s 1T-parameter run 512 (SC'21, Table 1: batch 3072 over
/// 6 data-parallel ranks, micro-batch size 1 in Megatron-LM's examples/sc21/run_table_1.sh).
pub const DEFAULT_MAX_MICROBATCHES: u64 = 512;

/// A numeric knob that the search can cap ([`RankOptionsBuilder::max`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// Data-parallel degree.
    Dp,
    /// Tensor-parallel degree.
    Tp,
    /// Pipeline stages.
    Pp,
    /// Expert-parallel degree.
    Ep,
    /// Context-parallel degree.
    Cp,
    /// Samples per micro-batch and data-parallel rank.
    MicroBatchSize,
    /// Micro-batches per step.
    Microbatches,
    /// Model chunks per device (interleaved schedule).
    Chunks,
    /// ZeRO stage.
    Zero,
}

impl Knob {
    /// The knob's name in `--fix` and `--max`.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Dp => "dp",
            Knob::Tp => "tp",
            Knob::Pp => "pp",
            Knob::Ep => "ep",
            Knob::Cp => "cp",
            Knob::MicroBatchSize => "mbs",
            Knob::Microbatches => "microbatches",
            Knob::Chunks => "chunks",
            Knob::Zero => "zero",
        }
    }
}

/// Memory kept free on each device.
#[derive(Debug, Clone, PartialEq)]
pub enum Headroom {
    /// A share of the device's memory, in percent (below 100).
    Percent(Rational),
    /// An amount of memory, in bytes (below the device's memory).
    Bytes(Rational),
}

impl Headroom {
    /// Headroom as the command line writes it: `10%`, `12.5%` or an amount (`8GB`).
    pub fn parse(text: &str) -> Result<Headroom, Error> {
        Headroom::parse_as(text, super::Spelling::CommandLine)
    }

    /// [`Headroom::parse`], its refusal naming the option as `spelling`'s caller writes it.
    pub fn parse_as(text: &str, spelling: super::Spelling) -> Result<Headroom, Error> {
        let option = spelling.name(super::OptionName::Headroom);
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            return crate::sym::size::decimal(p.trim())
                .map(Headroom::Percent)
                .ok_or_else(|| {
                    crate::search::SteerError::HeadroomPercent {
                        option,
                        text: text.into(),
                    }
                    .into()
                });
        }
        let h = parse_memory(t).map_err(|e| crate::search::SteerError::HeadroomMemory {
            option,
            error: Box::new(e.into()),
        })?;
        Ok(Headroom::Bytes(h))
    }

    /// As the header of a ranking names it.
    pub(crate) fn text(&self) -> String {
        match self {
            Headroom::Percent(p) => format!("{p}%"),
            Headroom::Bytes(b) => crate::units::bytes(b),
        }
    }

    /// The usable memory of a device of `capacity` bytes, in whole bytes; a headroom that leaves
    /// none is refused naming the option as `spelling`'s caller writes it.
    pub(crate) fn apply(
        &self,
        capacity: &Rational,
        spelling: super::Spelling,
    ) -> Result<Rational, Error> {
        use crate::search::steer::{usable_after_bytes, usable_after_share};
        let option = spelling.name(super::OptionName::Headroom);
        Ok(match self {
            Headroom::Percent(p) => usable_after_share(p, &self.text(), capacity, option)?,
            Headroom::Bytes(h) => usable_after_bytes(h, &self.text(), capacity, option)?,
        })
    }
}

/// Headroom as given: typed, or the command line's text (read when ranking, in its order of
/// errors).
#[derive(Debug, Clone, PartialEq)]
enum HeadroomArg {
    Typed(Headroom),
    Text(String),
}

/// One constraint of the search, in the order given: `--fix` or `--max` items with the name of
/// what gave them (for errors), or a whole set.
#[derive(Debug, Clone, PartialEq)]
enum SteerOp {
    Fix(String, String),
    Max(String, String),
    Set(Box<Steer>),
}

/// What [`rank`] searches: devices, the machine, the constraints on the knobs and what to
/// return. Built by [`RankOptions::builder`], which checks it.
#[derive(Debug, Clone)]
pub struct RankOptions {
    devices: u64,
    machine: Option<Machine>,
    spelling: super::Spelling,
    by_seconds: Option<bool>,
    memory_text: Option<String>,
    headroom: Option<HeadroomArg>,
    steer: Steer,
    top: usize,
    max_microbatches: u64,
    max_chunks: u64,
    layouts: Option<Layouts>,
    pareto: bool,
}

/// Builds [`RankOptions`]; [`RankOptionsBuilder::build`] checks them and returns the first
/// error, naming the offending item.
#[derive(Debug)]
pub struct RankOptionsBuilder {
    opts: RankOptions,
    ops: Vec<SteerOp>,
    fix_error: Option<Error>,
    spelling: super::Spelling,
}

impl RankOptions {
    /// Options for `devices` devices: the reference machine, ranked by relative cost, the top
    /// 10 rows, nothing constrained.
    pub fn builder(devices: u64) -> RankOptionsBuilder {
        RankOptionsBuilder {
            opts: RankOptions {
                devices,
                machine: None,
                spelling: super::Spelling::default(),
                by_seconds: None,
                memory_text: None,
                headroom: None,
                steer: Steer::default(),
                top: 10,
                max_microbatches: DEFAULT_MAX_MICROBATCHES,
                max_chunks: crate::search::DEFAULT_MAX_CHUNKS,
                layouts: None,
                pareto: false,
            },
            ops: Vec::new(),
            fix_error: None,
            spelling: super::Spelling::default(),
        }
    }

    /// Devices to train on.
    pub fn devices(&self) -> u64 {
        self.devices
    }

    /// The machine given, if any (else the reference machine).
    pub fn machine(&self) -> Option<&Machine> {
        self.machine.as_ref()
    }

    /// Whether rows are ranked by simulated seconds (else by relative cost).
    pub fn by_seconds(&self) -> bool {
        self.by_seconds.unwrap_or(self.machine.is_some())
    }

    /// The constraints on the knobs.
    pub fn constraints(&self) -> &Steer {
        &self.steer
    }

    /// Rows returned.
    pub fn top(&self) -> usize {
        self.top
    }

    /// The headroom as the header of a ranking names it (the command line's text as given; the
    /// default, where none is given and the memory is the table's).
    pub(crate) fn headroom_text(&self) -> Option<String> {
        match &self.headroom {
            Some(HeadroomArg::Typed(h)) => Some(h.text()),
            Some(HeadroomArg::Text(t)) => Some(t.clone()),
            None if self.memory_text.is_some() => None,
            None => match &self.machine {
                Some(m) => m.headroom_text(),
                None => Some(super::machine::default_headroom_text()),
            },
        }
    }
}

impl RankOptionsBuilder {
    /// The machine (calibration table, what-if edits, stack profile, devices per node, device
    /// memory). A machine given ranks by simulated seconds unless [`Self::by_seconds`] says
    /// otherwise.
    pub fn machine(mut self, machine: Machine) -> Self {
        self.opts.machine = Some(machine);
        self
    }

    /// Rank by simulated seconds per step (`true`) or by relative cost (`false`).
    pub fn by_seconds(mut self, on: bool) -> Self {
        self.opts.by_seconds = Some(on);
        self
    }

    /// Rows to return (at least 1).
    pub fn top(mut self, n: usize) -> Self {
        self.opts.top = n;
        self
    }

    /// Largest micro-batch count tried (at least 1).
    pub fn max_microbatches(mut self, n: u64) -> Self {
        self.opts.max_microbatches = n;
        self
    }

    /// Most model chunks per device tried with the interleaved schedule (1: no interleaving).
    pub fn max_chunks(mut self, n: u64) -> Self {
        self.opts.max_chunks = n;
        self
    }

    /// Which tensor-parallel layouts to price; default: the annotated one for a model whose
    /// family annotates its layout, both for one that annotates none.
    pub fn layouts(mut self, layouts: Layouts) -> Self {
        self.opts.layouts = Some(layouts);
        self
    }

    /// Also return the Pareto frontier of memory against cost (or seconds).
    pub fn pareto(mut self, on: bool) -> Self {
        self.opts.pareto = on;
        self
    }

    /// Memory kept free on each device.
    pub fn headroom(mut self, h: Headroom) -> Self {
        self.opts.headroom = Some(HeadroomArg::Typed(h));
        self
    }

    /// Headroom as the command line's text, read when ranking.
    pub(crate) fn headroom_text(mut self, text: Option<String>) -> Self {
        self.opts.headroom = text.map(HeadroomArg::Text);
        self
    }

    /// Device memory as the command line's text (`75GB`), read when ranking.
    pub(crate) fn memory_text(mut self, text: Option<String>) -> Self {
        self.opts.memory_text = text;
        self
    }

    /// Fixes every knob `strategy` gives (a strategy file is refused: its knobs are not
    /// constraints). `sequence_parallel: true` fixes it on; [`Self::sequence_parallel`] fixes
    /// it off.
    pub fn fix(mut self, strategy: &Strategy) -> Self {
        match fix_items(strategy) {
            Ok(items) if !items.is_empty() => self.ops.push(SteerOp::Fix(items, "fix".into())),
            Ok(_) => {}
            Err(e) => {
                self.fix_error.get_or_insert(e);
            }
        }
        self
    }

    /// Fixes sequence parallelism on or off.
    pub fn sequence_parallel(mut self, on: bool) -> Self {
        let v = if on { "sp=on" } else { "sp=off" };
        self.ops
            .push(SteerOp::Fix(v.into(), "sequence_parallel".into()));
        self
    }

    /// Caps a knob.
    pub fn max(mut self, knob: Knob, value: u64) -> Self {
        self.ops.push(SteerOp::Max(
            format!("{}={value}", knob.name()),
            "max".into(),
        ));
        self
    }

    /// Refusals of these options name them as `spelling`'s caller writes them (`--fix`,
    /// `--top` on the command line, by default; `fix`, `top` in Python). Applies to the items
    /// given after it.
    pub fn spelled(mut self, spelling: super::Spelling) -> Self {
        self.spelling = spelling;
        self
    }

    /// Knobs fixed as `rank --fix` takes them (`tp=8,pp=4,zero=1,overlap=tp-comm`).
    pub fn fix_text(self, items: &str) -> Self {
        let option = self.spelling.name(super::OptionName::Fix);
        self.fix_as(items, option)
    }

    /// Knobs capped as `rank --max` takes them (`tp=8,pp=16`).
    pub fn max_text(self, items: &str) -> Self {
        let option = self.spelling.name(super::OptionName::Max);
        self.max_as(items, option)
    }

    /// `--fix` items that the option `flag` gave.
    pub(crate) fn fix_as(mut self, items: &str, flag: &str) -> Self {
        self.ops.push(SteerOp::Fix(items.into(), flag.into()));
        self
    }

    /// `--max` items that the option `flag` gave.
    pub(crate) fn max_as(mut self, items: &str, flag: &str) -> Self {
        self.ops.push(SteerOp::Max(items.into(), flag.into()));
        self
    }

    /// Replaces the constraints given so far with `steer` (later ones add to it).
    pub fn constraints(mut self, steer: Steer) -> Self {
        self.ops.push(SteerOp::Set(Box::new(steer)));
        self
    }

    /// Checks the options: devices per node, the counts, the constraints and that the fixed
    /// degrees divide the devices. The first error names what is wrong.
    pub fn build(self) -> Result<RankOptions, Error> {
        let mut opts = self.opts;
        opts.spelling = self.spelling;
        if let Some(m) = &opts.machine {
            crate::strategy::check_gpus_per_node(m.gpus_per_node())
                .map_err(|e| m.machine_error(e))?;
        }
        if opts.top == 0 {
            let top = self.spelling.name(super::OptionName::Top);
            return Err(Error::Usage(format!("{top} must be at least 1")));
        }
        if opts.max_microbatches == 0 {
            let option = self.spelling.name(super::OptionName::MaxMicrobatches);
            return Err(Error::Usage(format!("{option} must be at least 1")));
        }
        if opts.max_chunks == 0 || opts.max_chunks > crate::strategy::MAX_DEVICES {
            return Err(Error::Usage(format!(
                "{} must be at least 1 (1: no interleaving), not {}",
                self.spelling.name(super::OptionName::MaxChunks),
                opts.max_chunks
            )));
        }
        if let Some(e) = self.fix_error {
            return Err(e);
        }
        let mut steer = Steer {
            spelling: self.spelling,
            ..Steer::default()
        };
        for op in self.ops {
            match op {
                SteerOp::Fix(items, flag) => steer.fix(&items, &flag)?,
                SteerOp::Max(items, flag) => steer.max(&items, &flag)?,
                SteerOp::Set(s) => {
                    steer = Steer {
                        spelling: self.spelling,
                        ..*s
                    }
                }
            }
        }
        steer.check_devices(opts.devices)?;
        opts.steer = steer;
        Ok(opts)
    }
}

/// The knobs `s` gives as `--fix` items.
fn fix_items(s: &Strategy) -> Result<String, Error> {
    if let Some(f) = &s.file {
        return Err(Error::Usage(format!(
            "fix: a strategy file ({}) is not a constraint: give its knobs",
            f.display()
        )));
    }
    let mut items: Vec<String> = Vec::new();
    let mut num = |name: &str, v: Option<u64>| {
        if let Some(v) = v {
            items.push(format!("{name}={v}"));
        }
    };
    num("dp", s.dp);
    num("tp", s.tp);
    num("pp", s.pp.or(s.no_pipeline.then_some(1)));
    num("ep", s.ep);
    num("cp", s.cp);
    num("mbs", s.micro_batch_size);
    num("microbatches", s.microbatches);
    num("chunks", s.chunks);
    num("zero", s.zero.map(u64::from));
    if let Some(x) = s.schedule {
        items.push(format!("schedule={x}"));
    }
    if s.sequence_parallel {
        items.push("sp=on".into());
    }
    if let Some(r) = s.recompute {
        items.push(format!("recompute={r}"));
    }
    if let Some(p) = s.precision {
        items.push(format!("precision={p}"));
    }
    let overlaps: Vec<&str> = [
        (s.tp_comm_overlap, "tp-comm"),
        (s.overlap_param_gather, "param-gather"),
        (s.no_overlap_grad_reduce, "no-grad-reduce"),
    ]
    .into_iter()
    .filter_map(|(on, n)| on.then_some(n))
    .collect();
    if !overlaps.is_empty() {
        items.push(format!("overlap={}", overlaps.join("+")));
    }
    let account: Vec<&str> = [
        (s.account_for_embedding_in_pipeline_split, "embedding"),
        (s.account_for_loss_in_pipeline_split, "loss"),
    ]
    .into_iter()
    .filter_map(|(on, n)| on.then_some(n))
    .collect();
    if !account.is_empty() {
        items.push(format!("account={}", account.join("+")));
    }
    if s.fp8_params {
        items.push("fp8-params=on".into());
    }
    if s.fp8_dispatch {
        items.push("fp8-dispatch=on".into());
    }
    if s.node_dispatch {
        items.push("node-dispatch=on".into());
    }
    Ok(items.join(","))
}

/// One ranked strategy: its knobs, exact relative cost and memory, simulated seconds where
/// ranked by them, whether it fits and the stack it assumes. Its JSON is a row of `symshard rank
/// --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct RankRow {
    /// 1-based rank (0 for the smallest footprint shown when nothing fits).
    pub rank: usize,
    /// Data-parallel degree.
    pub dp: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Samples per micro-batch and data-parallel rank (Megatron-LM's `--micro-batch-size`).
    pub micro_batch_size: Option<u64>,
    /// Micro-batches per step: global batch ÷ (dp × micro-batch size).
    pub microbatches: u64,
    /// The pipeline schedule (`none` without a pipeline).
    pub schedule: String,
    /// Model chunks per device.
    pub chunks: u64,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// Activation recomputation.
    pub recompute: String,
    /// ZeRO stage.
    pub zero: u8,
    /// Expert-parallel degree.
    pub ep: u64,
    /// Context-parallel degree.
    pub cp: u64,
    /// The communication overlaps it runs with (`overlap=…` fixed; Megatron-LM's defaults
    /// otherwise: only the gradient reduction overlapped).
    pub overlap: crate::strategy::Overlap,
    /// How weights and gradients are kept in mixed precision (bf16 unless fixed).
    pub precision: crate::strategy::Precision,
    /// What the interleaved split counts besides the layers (absent when nothing).
    #[serde(skip_serializing_if = "crate::strategy::PipelineSplit::is_plain")]
    pub pipeline_split: crate::strategy::PipelineSplit,
    /// FP8 parameters ([`Knobs::fp8_params`]; absent when not kept).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fp8_params: bool,
    /// FP8 dispatch ([`Knobs::fp8_dispatch`]; absent when not used).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fp8_dispatch: bool,
    /// Node-limited dispatch ([`Knobs::node_dispatch`]; absent when not used).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub node_dispatch: bool,
    /// Relative cost: FLOP-equivalents of the busiest device per step.
    #[serde(serialize_with = "ser_rational")]
    pub relative_cost: Rational,
    /// The relative cost's parts.
    pub relative: crate::parallel::RelativeCost,
    /// Bytes per device.
    #[serde(serialize_with = "ser_rational")]
    pub memory_per_device: Rational,
    /// Memory by kind.
    pub memory: crate::parallel::Memory,
    /// Whether it fits in the usable memory.
    pub feasible: bool,
    /// Why not, where it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::parallel::Infeasible>,
    /// Simulated seconds per step, where ranked by seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration_seconds: Option<f64>,
    /// Knobs whose values do not change this row's cost or memory: each with the values that
    /// give the same row.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub knobs_that_do_not_matter: BTreeMap<String, Vec<String>>,
    /// The strategy as one string.
    pub strategy: String,
    /// The software stack the row assumes, whose validation error decides a tie.
    pub stack: crate::search::stack::Stack,
    /// Ranked by seconds: why this row's place behind #1 is within the model's own error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tie: Option<String>,
    /// The tensor-parallel layout.
    pub layout: LayoutKind,
    /// For the auto layout: per operator, the rule index the tensor-parallel axis splits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placements: Option<BTreeMap<String, String>>,
    /// For the auto layout: how it was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout_search: Option<String>,
    /// The row's knobs as a strategy for [`super::cost`] and [`super::timeline`] (the auto
    /// layout's placements are in `placements`).
    #[serde(skip)]
    pub knobs: Strategy,
}

/// An auto layout searched: how it was found, or that it is the annotated one, or why none.
#[derive(Debug, Clone, Serialize)]
pub struct AutoNote {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// `exact`, `bounded, gap ≤ …%`, `annotated` or `none`.
    pub search: String,
    /// The search's own cost of the layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_cost: Option<String>,
    /// Why none was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the e-graph engine proves about a shown layer's communication at one degree.
#[derive(Debug, Clone, Serialize, Default)]
pub struct EngineNote {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// How the run ended.
    pub stop: String,
    /// E-nodes at the end.
    pub egraph_nodes: usize,
    /// Operators moved (`op: before → after`).
    pub moved: Vec<String>,
    /// FLOPs saved.
    pub saving_compute: String,
    /// Communication saved.
    pub saving_comm: String,
    /// Activation bytes saved.
    pub saving_activation: String,
    /// Why the engine could not build the layer, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The same devices placed on part of each NVLink domain. Where a machine's domain (its node)
/// holds a number of devices that is not a power of two (72 on GB200 and GB300 NVL72), the
/// power-of-two degrees of most models do not tile it: a group of 64 consecutive devices on
/// 72-GPU racks straddles two racks in 7 of every 9, and its collectives cross the slower
/// network. Large jobs on such racks use 64 of each rack's 72 GPUs (MLPerf Training v5.0's
/// GB200 NVL72 systems, mlcommons/training_results_v5.0 at 0fdc28f0: NVIDIA's Tyche runs 256
/// GPUs on "4x NVIDIA GB200 NVL72", 512 on "8x", IBM+CoreWeave+NVIDIA's Carina 1,024 on "16x",
/// in each submitter's `systems/<system>.json`), so [`rank`] also searches that placement and
/// reports its best row beside #1.
#[derive(Debug, Clone, Serialize)]
pub struct PartialDomains {
    /// Devices of each NVLink domain (node) of the machine.
    pub domain_size: u64,
    /// Devices used of each domain in this placement: the largest power of two it holds.
    pub gpus_per_domain: u64,
    /// Domains the job spans this way.
    pub domains: u64,
    /// Domains it spans on full domains.
    pub full_domains: u64,
    /// The best strategy on partial domains (rank 1 of that search).
    pub best: RankRow,
    /// Whether it beats #1 on full domains (or fits where nothing on them does).
    pub wins: bool,
    /// Its seconds per step (relative cost, ranking by cost) over #1's, less one: negative
    /// where it is faster; absent where #1 does not fit.
    pub change: Option<f64>,
    /// What changes for its groups: those that cross domains on full domains and stay inside
    /// one on partial ones (`dp = 64: 7 of 9 groups cross domains (on 64 of each, none)`), or
    /// that split unevenly over the domains they span, whose collectives then run flat over the
    /// network, and evenly on partial ones. Tensor-, context-, expert- and data-parallel groups,
    /// each a block of consecutive devices ([`crate::strategy::block_placement`]).
    pub straddling: Vec<String>,
}

impl PartialDomains {
    /// What it says of a ranking of `devices` devices, as `rank` prints it under the table.
    pub fn sentence(&self, devices: u64) -> String {
        let b = &self.best;
        let price = match b.iteration_seconds {
            Some(s) => format!("{s:.3} s per step"),
            None => format!("relative cost {}", crate::units::flops(&b.relative_cost)),
        };
        let verdict = match self.change {
            Some(c) => format!(
                "{} than #1: {}",
                crate::units::faster_or_slower(c),
                if c < 0.0 {
                    "it wins"
                } else {
                    "full domains win"
                }
            ),
            None => "it fits where nothing on full domains does".to_string(),
        };
        let why = if self.straddling.is_empty() {
            String::new()
        } else {
            format!("; on full domains {}", self.straddling.join("; "))
        };
        format!(
            "on {per} of each {g}-device NVLink domain ({n} domains for {devices} devices where full ones take {f}; {idle} devices of each idle) the best strategy is {s} at {price}, {verdict}{why}; --gpus-per-node {per} ranks that placement",
            per = self.gpus_per_domain,
            g = self.domain_size,
            n = self.domains,
            f = self.full_domains,
            idle = self.domain_size - self.gpus_per_domain,
            s = b.strategy,
        )
    }
}

/// What [`rank`] finds. Its JSON ([`serde_json::to_value`]) is `symshard rank --format json`'s.
#[derive(Debug, Clone)]
pub struct RankResult {
    /// The model's name.
    pub model: String,
    /// Sizes at the model file's placeholders that no binding gave.
    pub assumed_sizes: BTreeMap<String, Rational>,
    /// Global batch the strategies were ranked at.
    pub global_batch: Rational,
    /// The model's settings that change how its operators run.
    pub settings: BTreeMap<String, String>,
    /// Sequence length, where the model has one.
    pub sequence_length: Option<Rational>,
    /// Devices.
    pub devices: u64,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// The calibration table's name.
    pub calibration: String,
    /// The changes that derived a what-if machine from its table.
    pub what_if: Option<crate::calib::whatif::WhatIf>,
    /// The stack profile added to the seconds.
    pub stack_profile: Option<String>,
    /// The layouts the named stack profile runs, the only ones ranked (its `supports:`).
    pub stack_supports: Option<StackSupports>,
    /// Where the seconds of the rows shown use the bf16 matmul curve for a low-precision
    /// recipe's GEMMs, once per precision ([`crate::calib::Calibration::borrowed_gemm_curve`]);
    /// empty when ranking by relative cost.
    pub borrowed_curves: Vec<String>,
    /// Device memory before headroom, bytes.
    pub capacity: Rational,
    /// Usable memory per device (after headroom), bytes.
    pub memory_limit: Rational,
    /// The headroom as given.
    pub headroom: Option<String>,
    /// The constraints, as `--fix`/`--max` would state them.
    pub steering: String,
    /// Ranked by simulated seconds (else by relative cost).
    pub by_seconds: bool,
    /// The ranked rows, feasible first.
    pub rows: Vec<RankRow>,
    /// The Pareto frontier of memory against cost (or seconds), where asked for.
    pub pareto: Vec<RankRow>,
    /// When nothing fits: the smallest footprint reachable.
    pub smallest_footprint: Option<RankRow>,
    /// When nothing fits: the sentence that says so, and how to get there.
    pub nothing_fits: Option<String>,
    /// Strategies priced.
    pub evaluated: usize,
    /// Of them, those that fit.
    pub feasible: usize,
    /// Strategies rejected before pricing, by kind, each with its reasons.
    pub rejected: crate::search::error::Rejections,
    /// Strategies that passed the screen but could not be priced or simulated.
    pub failed: crate::search::error::Failed,
    /// Strategies simulated (0 when ranking by relative cost).
    pub simulated: usize,
    /// Range of the factor scaling every κ over which the top row stays first.
    pub balance_range: Option<(Rational, Option<Rational>)>,
    /// What the e-graph engine proves about each shown degree without sequence parallelism.
    pub engine: Vec<EngineNote>,
    /// Seconds the search took.
    pub search_seconds: f64,
    /// The auto layouts searched.
    pub auto_layouts: Vec<AutoNote>,
    /// Seconds spent finding the auto layouts.
    pub auto_layout_seconds: Option<f64>,
    /// The e-graph's variants of the auto layouts.
    pub egraph_layouts: Vec<crate::search::egraph::EGraphLayout>,
    /// Degrees whose e-graph pass over the auto layout failed, and why.
    pub egraph_failed: BTreeMap<u64, String>,
    /// The best strategy on part of each NVLink domain, where the machine's domain is not a
    /// power of two and the devices per node were not given ([`PartialDomains`]).
    pub partial_domains: Option<PartialDomains>,
    /// Warnings and notes (`warning: …`, `note: …`), as the command line prints them.
    pub warnings: Vec<String>,
}

fn ser_opt<S: Serializer>(r: &Option<Rational>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Some(r) => s.collect_str(r),
        None => s.serialize_none(),
    }
}

fn ser_range<S: Serializer>(
    r: &Option<(Rational, Option<Rational>)>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let texts = r
        .as_ref()
        .map(|(lo, hi)| (lo.to_string(), hi.as_ref().map(ToString::to_string)));
    texts.serialize(s)
}

/// A ranking's JSON document, with what the command line adds (`--emit`, `--why`).
#[derive(Serialize)]
pub(crate) struct Document<'a, E: Serialize, W: Serialize> {
    model: &'a str,
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "crate::sym::ser_rational_map"
    )]
    assumed_sizes: &'a BTreeMap<String, Rational>,
    #[serde(serialize_with = "ser_rational")]
    global_batch: &'a Rational,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    settings: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_opt")]
    sequence_length: &'a Option<Rational>,
    devices: u64,
    gpus_per_node: u64,
    calibration: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    what_if: &'a Option<crate::calib::whatif::WhatIf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_profile: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack_supports: &'a Option<StackSupports>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    borrowed_curves: &'a [String],
    #[serde(serialize_with = "ser_rational")]
    memory_limit: &'a Rational,
    #[serde(skip_serializing_if = "str::is_empty")]
    steering: &'a str,
    strategies: &'a [RankRow],
    #[serde(skip_serializing_if = "<[RankRow]>::is_empty")]
    pareto: &'a [RankRow],
    #[serde(skip_serializing_if = "Option::is_none")]
    smallest_footprint: &'a Option<RankRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nothing_fits: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    emitted: Option<E>,
    evaluated: usize,
    feasible: usize,
    rejected: &'a crate::search::error::Rejections,
    #[serde(skip_serializing_if = "crate::search::error::Failed::is_empty")]
    failed: &'a crate::search::error::Failed,
    simulated: usize,
    #[serde(serialize_with = "ser_range")]
    balance_range: &'a Option<(Rational, Option<Rational>)>,
    engine: &'a [EngineNote],
    search_seconds: f64,
    #[serde(skip_serializing_if = "<[AutoNote]>::is_empty")]
    auto_layouts: &'a [AutoNote],
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_layout_seconds: Option<f64>,
    #[serde(skip_serializing_if = "<[crate::search::egraph::EGraphLayout]>::is_empty")]
    egraph_layouts: &'a [crate::search::egraph::EGraphLayout],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    egraph_failed: &'a BTreeMap<u64, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partial_domains: &'a Option<PartialDomains>,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<W>,
}

impl RankResult {
    /// The JSON document with the command line's additions.
    pub(crate) fn document<E: Serialize, W: Serialize>(
        &self,
        emitted: Option<E>,
        why: Option<W>,
    ) -> Document<'_, E, W> {
        Document {
            model: &self.model,
            assumed_sizes: &self.assumed_sizes,
            global_batch: &self.global_batch,
            settings: &self.settings,
            sequence_length: &self.sequence_length,
            devices: self.devices,
            gpus_per_node: self.gpus_per_node,
            calibration: &self.calibration,
            what_if: &self.what_if,
            stack_profile: &self.stack_profile,
            stack_supports: &self.stack_supports,
            borrowed_curves: &self.borrowed_curves,
            memory_limit: &self.memory_limit,
            steering: &self.steering,
            strategies: &self.rows,
            pareto: &self.pareto,
            smallest_footprint: &self.smallest_footprint,
            nothing_fits: &self.nothing_fits,
            emitted,
            evaluated: self.evaluated,
            feasible: self.feasible,
            rejected: &self.rejected,
            failed: &self.failed,
            simulated: self.simulated,
            balance_range: &self.balance_range,
            engine: &self.engine,
            search_seconds: self.search_seconds,
            auto_layouts: &self.auto_layouts,
            auto_layout_seconds: self.auto_layout_seconds,
            egraph_layouts: &self.egraph_layouts,
            egraph_failed: &self.egraph_failed,
            partial_domains: &self.partial_domains,
            why,
        }
    }
}

impl Serialize for RankResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.document::<(), ()>(None, None).serialize(s)
    }
}

/// What the command line and the report need beside a [`RankResult`].
pub(crate) struct RankDetail {
    /// The model loaded.
    pub model: crate::model::Model,
    /// Its symbols' values.
    pub values: Bindings,
    /// The rules it was built with.
    pub rules: crate::rules::RuleSet,
    /// The machine.
    pub calib: Calibration,
    /// The search's options.
    pub search: crate::search::RankOptions,
    /// The search's result: each row's evaluation and layout.
    pub result: crate::search::RankResult,
}

/// Ranks the strategies of `model` as `opts` ask. Warnings and notes (a model file that
/// shadows a shipped one) are returned in [`RankResult::warnings`], not printed.
pub fn rank(model: &Model, opts: &RankOptions) -> Result<RankResult, Error> {
    let (out, notes) = crate::diag::capture_notes(|| {
        let loaded = model.load()?;
        rank_loaded(&loaded, opts, &mut |_, _| {})
    });
    let (mut result, _) = out?;
    result.warnings = notes;
    Ok(result)
}

/// [`rank`] of a model loaded, with the search's progress reported to `progress` (done, all)
/// and what the command line needs beside the result. Notes go to stderr.
pub(crate) fn rank_loaded(
    loaded: &super::model::Loaded,
    opts: &RankOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(RankResult, RankDetail), Error> {
    let machine = match &opts.machine {
        Some(m) => m.clone(),
        None => Machine::reference()?.spelled(opts.spelling),
    };
    let calib = machine.calibration().clone();
    let (search, capacity) = search_options(&loaded.model, &loaded.values, &machine, opts)?;
    let result =
        crate::search::rank_with_progress(&loaded.model, &loaded.values, &calib, &search, progress)
            .map_err(|e| devices_named(e, opts.spelling))?;
    let mut out = result_of(loaded, opts, &calib, &search, &result, capacity);
    let given = machine.given_gpus_per_node().is_some();
    let per = crate::strategy::partial_node_size(opts.devices, machine.gpus_per_node())
        .filter(|_| !given);
    if let Some(per) = per {
        out.partial_domains = partial_domains(loaded, &calib, &search, per, &out)?;
    }
    let detail = RankDetail {
        model: loaded.model.clone(),
        values: loaded.values.clone(),
        rules: loaded.rules.clone(),
        calib,
        search,
        result,
    };
    Ok((out, detail))
}

/// The search's refusal of the device count, naming the option as the caller writes it
/// (`--devices`, Python's `devices`); any other error as it is.
fn devices_named(e: crate::search::SearchError, spelling: super::Spelling) -> Error {
    use crate::search::SearchError;
    let devices = spelling.name(super::OptionName::Devices);
    match e {
        SearchError::NoDevices => Error::Usage(format!("{devices} must be at least 1")),
        SearchError::AbsurdDevices { devices: n, most } => {
            Error::Usage(format!("{devices} {n} is absurd (more than {most})"))
        }
        other => other.into(),
    }
}

/// A search on part of each domain ([`PartialDomains`]) that the input refuses (a fixed knob no
/// strategy there satisfies: exit code 2) is no comparison; any other failure stays an error.
pub(crate) fn refused_as_none<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(x) => Ok(Some(x)),
        Err(e) if e.exit_code() == 2 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The best strategy on `per` devices of each domain, searched with `search`'s options, against
/// `out`'s #1 on full domains; None where nothing fits that way.
fn partial_domains(
    loaded: &super::model::Loaded,
    calib: &Calibration,
    search: &crate::search::RankOptions,
    per: u64,
    out: &RankResult,
) -> Result<Option<PartialDomains>, Error> {
    let opts = crate::search::RankOptions {
        gpus_per_node: per,
        top: 1,
        pareto: false,
        ..search.clone()
    };
    let alt = match refused_as_none(
        crate::search::rank(&loaded.model, &loaded.values, calib, &opts).map_err(Error::from),
    )? {
        Some(alt) => alt,
        None => return Ok(None),
    };
    let Some(best) = alt.rows.first().filter(|r| r.evaluation.feasible) else {
        return Ok(None);
    };
    let best = row_of(best, &out.global_batch);
    let measure = |r: &RankRow| match r.iteration_seconds {
        Some(s) => s,
        None => crate::sym::float(&r.relative_cost),
    };
    let first = out.rows.first().filter(|r| r.feasible);
    let change = first.map(|f| measure(&best) / measure(f) - 1.0);
    let (g, devices) = (search.gpus_per_node, search.devices);
    let straddling = [
        ("tp", best.tp, best.tp),
        ("cp", best.cp, best.tp * best.cp),
        ("ep", best.ep, best.tp * best.ep),
        ("dp", best.dp, best.tp * best.cp * best.dp),
    ]
    .into_iter()
    .filter(|(_, degree, _)| *degree > 1)
    .filter_map(|(name, degree, span)| {
        let [groups, crossing, uneven] = crate::strategy::block_placement(span, g, devices);
        let [_, crossing_p, uneven_p] = crate::strategy::block_placement(span, per, devices);
        if crossing > 0 && crossing_p == 0 {
            Some(format!(
                "{name} = {degree}: {crossing} of {groups} groups cross domains (on {per} of each, none)"
            ))
        } else if uneven > 0 && uneven_p == 0 {
            Some(format!(
                "{name} = {degree}: {uneven} of {groups} groups split unevenly over their domains (on {per} of each, evenly)"
            ))
        } else {
            None
        }
    })
    .collect();
    Ok(Some(PartialDomains {
        domain_size: g,
        gpus_per_domain: per,
        domains: devices / per,
        full_domains: devices / g,
        wins: change.is_none_or(|c| c < 0.0),
        change,
        straddling,
        best,
    }))
}

/// The search's options for `model` on `machine`, checked in the command line's order (a fixed
/// pipeline depth the model cannot take before the devices, then the memory), and the device's
/// capacity before headroom.
pub(crate) fn search_options(
    model: &crate::model::Model,
    values: &Bindings,
    machine: &Machine,
    opts: &RankOptions,
) -> Result<(crate::search::RankOptions, Rational), Error> {
    let gpus_per_node = machine.gpus_per_node();
    crate::strategy::check_gpus_per_node(gpus_per_node).map_err(|e| machine.machine_error(e))?;
    if let Some(pp) = opts.steer.pp.fixed {
        crate::parallel::check_pipeline_stages(model, values, pp)?;
    }
    crate::strategy::check_fills_nodes(opts.devices, gpus_per_node)
        .map_err(|e| machine.machine_error(e))?;
    let capacity = match &opts.memory_text {
        Some(m) => parse_memory(m).map_err(|e| Error::Usage(format!("--memory: {e}")))?,
        None => machine.memory(),
    };
    // A memory size given is what the user has; the default headroom is kept off the table's
    // capacity only.
    let memory = match &opts.headroom {
        Some(HeadroomArg::Text(h)) => apply_headroom(h, &capacity)?,
        Some(HeadroomArg::Typed(h)) => h.apply(&capacity, machine.spelling())?,
        None if opts.memory_text.is_some() => capacity.clone(),
        None => machine.usable_memory()?,
    };
    let layouts = opts
        .layouts
        .unwrap_or(if crate::search::auto::has_annotations(model) {
            Layouts::Annotated
        } else {
            Layouts::Both
        });
    // A named stack profile ranks only the layouts its stack runs (its `supports:`).
    let mut steer = opts.steer.clone();
    if let Some(s) = machine.calibration().stack_supports() {
        steer.restrict_to(s)?;
    }
    let search = crate::search::RankOptions {
        devices: opts.devices,
        gpus_per_node,
        top: opts.top,
        memory,
        max_microbatches: opts.max_microbatches.max(1),
        seconds: opts.by_seconds(),
        max_chunks: opts.max_chunks,
        steer,
        pareto: opts.pareto,
        layouts,
    };
    Ok((search, capacity))
}

/// The global batch of `model` at `values` (1 where it has none).
fn global_batch(model: &crate::model::Model, values: &Bindings) -> Rational {
    model
        .batch_value(values)
        .cloned()
        .unwrap_or_else(|| Rational::from_integer(1.into()))
}

/// The layouts a named stack profile runs, as a ranking reports them.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StackSupports {
    /// The profile.
    pub profile: String,
    /// What it runs: `zero ≤ 1, cp ≤ 1; schedules 1f1b, interleaved-1f1b; precision bf16`.
    pub runs: String,
    /// Where the limits come from.
    pub source: String,
}

impl StackSupports {
    fn of(s: &crate::calib::stack::Supports) -> StackSupports {
        StackSupports {
            profile: s.profile.clone(),
            runs: s.describe(),
            source: s.source.clone(),
        }
    }

    /// The line a ranking prints.
    pub fn line(&self) -> String {
        format!(
            "supports: --stack {} runs {}; other layouts are not ranked (the profile's `supports:` cites where each limit comes from)",
            self.profile, self.runs
        )
    }
}

/// The typed result of a search.
fn result_of(
    loaded: &super::model::Loaded,
    opts: &RankOptions,
    calib: &Calibration,
    search: &crate::search::RankOptions,
    result: &crate::search::RankResult,
    capacity: Rational,
) -> RankResult {
    let (model, values) = (&loaded.model, &loaded.values);
    let batch = global_batch(model, values);
    let mut rows: Vec<RankRow> = result.rows.iter().map(|r| row_of(r, &batch)).collect();
    mark_ties(&mut rows, calib.per_row.is_some());
    let smallest = result.smallest.as_ref().map(|(e, layout)| {
        let r = crate::search::RankedRow {
            rank: 0,
            evaluation: e.clone(),
            seconds: None,
            alike: Vec::new(),
            layout: layout.clone(),
        };
        row_of(&r, &batch)
    });
    let auto_layouts = auto_notes(result);
    RankResult {
        model: model.name.clone(),
        assumed_sizes: super::assumed_sizes(model, &loaded.bound, values),
        settings: crate::timeline::setting_map(model),
        sequence_length: model
            .roles
            .sequence
            .as_ref()
            .and_then(|s| values.get(s))
            .cloned(),
        devices: opts.devices,
        gpus_per_node: search.gpus_per_node,
        calibration: calib.name.clone(),
        what_if: calib.what_if.clone(),
        stack_profile: calib.stack_text(),
        stack_supports: search.steer.supports.as_ref().map(StackSupports::of),
        borrowed_curves: if search.seconds {
            calib.borrowed_gemm_curves(rows.iter().map(|r| r.precision))
        } else {
            Vec::new()
        },
        capacity,
        memory_limit: search.memory.clone(),
        headroom: opts.headroom_text(),
        steering: search.steer.describe(),
        by_seconds: search.seconds,
        rows,
        pareto: result.pareto.iter().map(|r| row_of(r, &batch)).collect(),
        smallest_footprint: smallest,
        nothing_fits: nothing_fits_line(result, &search.memory, &batch),
        evaluated: result.evaluated,
        feasible: result.feasible,
        rejected: result.rejected.clone(),
        failed: result.failed.clone(),
        simulated: result.simulated,
        balance_range: result.balance_range.clone(),
        engine: engine_notes(model, values, result),
        search_seconds: result.search_seconds,
        auto_layout_seconds: (!auto_layouts.is_empty()).then_some(result.auto_seconds),
        auto_layouts,
        egraph_layouts: result.egraph_layouts.clone(),
        egraph_failed: result.egraph_failed.clone(),
        global_batch: batch,
        partial_domains: None,
        warnings: Vec::new(),
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
        crate::strategy::Schedule::Interleaved => format!("interleaved(v={})", k.chunks),
        _ => k.schedule_name(),
    }
}

impl RankRow {
    /// Its precision as the rank table prints it: the recipe, `+params` where the row keeps FP8
    /// parameters (`--fix fp8-params=on`), `+dispatch` where it dispatches in FP8
    /// (`--fix fp8-dispatch=on`).
    pub fn precision_label(&self) -> String {
        let params = if self.fp8_params { "+params" } else { "" };
        let dispatch = if self.fp8_dispatch { "+dispatch" } else { "" };
        format!("{}{params}{dispatch}", self.precision)
    }
}

/// A row's knobs as a strategy.
fn strategy_of(k: &Knobs) -> Strategy {
    Strategy {
        dp: Some(k.dp),
        tp: Some(k.tp),
        pp: Some(k.pp),
        microbatches: Some(k.microbatches),
        schedule: (!k.without_pipeline()).then_some(k.schedule),
        no_pipeline: k.without_pipeline(),
        chunks: Some(k.chunks),
        sequence_parallel: k.sequence_parallel,
        recompute: Some(k.recompute),
        zero: Some(k.zero),
        ep: Some(k.ep),
        cp: Some(k.cp),
        tp_comm_overlap: k.overlap.tp_comm,
        overlap_param_gather: k.overlap.param_gather,
        no_overlap_grad_reduce: !k.overlap.grad_reduce,
        precision: Some(k.precision),
        account_for_embedding_in_pipeline_split: k.pipeline_split.embedding,
        account_for_loss_in_pipeline_split: k.pipeline_split.loss,
        fp8_params: k.fp8_params,
        fp8_dispatch: k.fp8_dispatch,
        node_dispatch: k.node_dispatch,
        ..Strategy::default()
    }
}

fn row_of(r: &crate::search::RankedRow, batch: &Rational) -> RankRow {
    let e = &r.evaluation;
    let k = &e.knobs;
    RankRow {
        rank: r.rank,
        dp: k.dp,
        tp: k.tp,
        pp: k.pp,
        micro_batch_size: k.micro_batch_size(batch),
        microbatches: k.microbatches,
        schedule: k.schedule_name(),
        chunks: k.chunks,
        sequence_parallel: k.sequence_parallel,
        recompute: k.recompute.to_string(),
        zero: k.zero,
        ep: k.ep,
        cp: k.cp,
        overlap: k.overlap,
        precision: k.precision,
        pipeline_split: k.pipeline_split,
        fp8_params: k.fp8_params,
        fp8_dispatch: k.fp8_dispatch,
        node_dispatch: k.node_dispatch,
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
        knobs: strategy_of(k),
    }
}

/// Ranked by seconds: marks each row behind #1 by less than the model's own error on the
/// stacks the two rows assume (their order is then not significant).
fn mark_ties(rows: &mut [RankRow], per_row: bool) {
    let Some((first, rest)) = rows.split_first_mut() else {
        return;
    };
    let (Some(t1), true) = (first.iteration_seconds, first.feasible) else {
        return;
    };
    for r in rest.iter_mut().filter(|r| r.feasible) {
        if let Some(t) = r.iteration_seconds {
            r.tie = crate::search::stack::tie(t1, first.stack, t, r.stack, per_row)
                .map(|t| t.to_string());
        }
    }
}

/// When nothing fits: the smallest footprint reachable, and how the cheapest strategy gets
/// there.
pub(crate) fn nothing_fits_line(
    result: &crate::search::RankResult,
    memory: &Rational,
    batch: &Rational,
) -> Option<String> {
    use crate::units;
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
/// laws prove equal to each. A layer the engine cannot build says why instead of being left out.
fn engine_notes(
    model: &crate::model::Model,
    values: &Bindings,
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
    ) -> Result<(crate::sym::Bindings, crate::search::RankOptions), Error> {
        self.options_on(model, calib, None)
    }

    /// [`PointSearch::options`] on nodes of `gpus_per_node` devices where given (else the
    /// table's).
    pub(crate) fn options_on(
        &self,
        model: &crate::model::Model,
        calib: &Calibration,
        gpus_per_node: Option<u64>,
    ) -> Result<(crate::sym::Bindings, crate::search::RankOptions), Error> {
        let mut m = super::Model::named(self.model);
        for s in &self.set {
            m = m.set_text(s.as_str());
        }
        let values = m.bind(model)?;
        let mut machine = Machine::from_calibration(calib.clone());
        if let Some(g) = gpus_per_node {
            machine = machine.with_gpus_per_node(g)?;
        }
        let mut b = RankOptions::builder(self.devices)
            .machine(machine.clone())
            .by_seconds(true)
            .top(1)
            .headroom_text(self.headroom.clone());
        for f in &self.fix {
            b = b.fix_as(f, "--fix");
        }
        for m in &self.max {
            b = b.max_as(m, "--max");
        }
        let opts = b.build()?;
        let (search, _) = search_options(model, &values, &machine, &opts)?;
        Ok((values, search))
    }
}
