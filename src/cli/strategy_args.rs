//! Strategy flags shared by `cost`, `timeline` and `analyze`.

use crate::calib::Calibration;
use crate::error::Error;
use crate::parallel::Layout;
use crate::strategy::{load_strategy, Knobs, Recompute, Schedule};
use crate::sym::Rational;
use clap::Args;
use std::path::PathBuf;

/// A strategy as flags or a file.
#[derive(Debug, Clone, Args, Default)]
pub struct StrategyFlags {
    /// A strategy file (YAML) or a knob string (`dp=8,tp=8,mbs=1,sp`, a rank row as printed);
    /// flags given as well override its knobs.
    #[arg(long, value_name = "FILE")]
    pub strategy: Option<PathBuf>,
    /// Data-parallel degree.
    #[arg(long)]
    pub dp: Option<u64>,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u64>,
    /// Pipeline stages.
    #[arg(long)]
    pub pp: Option<u64>,
    /// Micro-batch size: samples per micro-batch and data-parallel rank (global batch ÷ (dp ×
    /// size) micro-batches per step), as Megatron-LM's flag of the same name.
    #[arg(long, value_name = "N")]
    pub micro_batch_size: Option<u64>,
    /// Micro-batches per step (the count; `--micro-batch-size` states the size instead).
    #[arg(long)]
    pub microbatches: Option<u64>,
    /// Pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1; none (what `rank` prints) when pp is 1.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Model chunks per device for interleaved-1f1b.
    #[arg(long)]
    pub chunks: Option<u64>,
    /// Megatron-LM sequence parallelism.
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Activation recomputation: none, selective, full.
    #[arg(long)]
    pub recompute: Option<String>,
    /// ZeRO stage 0–3.
    #[arg(long)]
    pub zero: Option<u8>,
    /// Expert-parallel degree (mixture-of-experts models): divides dp.
    #[arg(long)]
    pub ep: Option<u64>,
    /// Context-parallel degree (Megatron-LM `--context-parallel-size`): each sequence is cut
    /// over cp ranks (2·cp must divide S); attention passes keys and values around them as a
    /// ring; gradients reduce over dp × cp.
    #[arg(long)]
    pub cp: Option<u64>,
    /// Timelines: tensor-parallel collectives pipelined with their GEMMs (Megatron-LM
    /// `--tp-comm-overlap`).
    #[arg(long)]
    pub tp_comm_overlap: bool,
    /// Timelines: the distributed optimizer's parameter all-gather overlaps the next forward
    /// (Megatron-LM `--overlap-param-gather`).
    #[arg(long)]
    pub overlap_param_gather: bool,
    /// Timelines: reduce gradients once after the backward pass instead of bucket by bucket
    /// during it (Megatron-LM without `--overlap-grad-reduce`).
    #[arg(long)]
    pub no_overlap_grad_reduce: bool,
    /// Mixed precision: bf16 (bf16 weights, fp32 master copy and gradient buffer; Megatron-LM,
    /// DeepSpeed) or autocast (fp32 weights under torch.autocast: each forward casts every
    /// weight to bf16, each backward casts its gradient back and adds it to `.grad`, and
    /// data-parallel collectives move fp32) or fp8 (bf16 with the repeated layers' linear layers
    /// as FP8 GEMMs, Transformer Engine's delayed-scaling recipe; needs a table with an FP8
    /// peak).
    #[arg(long, value_name = "PRECISION")]
    pub precision: Option<crate::strategy::Precision>,
    /// Interleaved schedule: count the embedding as a layer of the first model chunk when
    /// splitting the layers over the chunks (Megatron-Core's flag of the same name).
    #[arg(long)]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Interleaved schedule: count the output layer and loss as a layer of the last model chunk
    /// (Megatron-Core's flag of the same name).
    #[arg(long)]
    pub account_for_loss_in_pipeline_split: bool,
    /// Devices per node (default: the calibration's, 8 for the reference machine).
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// A calibration table (a file or a shipped name; `TABLE@KERNEL` times fused attention with
    /// one of its `attention_kernels`); default: the embedded reference machine.
    #[arg(long, value_name = "FILE")]
    pub calib: Option<String>,
    /// A what-if machine: change named quantities of the `--calib` table
    /// (`nvlink.bandwidth=x2,hbm.capacity=141GB,domain=72`; a factor `xF` or a value with its
    /// unit). Names: device.peak.DTYPE, hbm.bandwidth, hbm.capacity, nvlink.bandwidth,
    /// network.bandwidth, nvlink.latency, network.latency, domain, device.tdp. The machine is
    /// named `TABLE+what-if(CHANGES)`, a name `--calib` takes again.
    #[arg(long = "with", value_name = "NAME=VALUE,…", requires = "calib")]
    pub with: Option<String>,
    /// A software stack's profile (a file or a shipped name, `stacks/`): the seconds its host
    /// work adds per step, per micro-batch pass and per kernel; default: none, profile-free.
    #[arg(long, value_name = "NAME|FILE")]
    pub stack: Option<String>,
    /// Device memory: bytes, or with a unit (`75GB`, `80GiB`); default: the calibration's
    /// capacity.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
}

/// A resolved strategy.
pub struct Resolved {
    /// Knobs.
    pub knobs: Knobs,
    /// Layout overrides.
    pub layout: Layout,
    /// Machine.
    pub calib: Calibration,
    /// Devices per node.
    pub gpus_per_node: u64,
    /// Device memory.
    pub memory: Rational,
}

impl Resolved {
    /// The strategy evaluated for `model` on its machine (`calib` in place of its own table
    /// where given: `compare --plateau` prices at the matmul plateau).
    pub fn evaluate(
        &self,
        model: &crate::model::Model,
        values: &crate::sym::Bindings,
        calib: Option<&Calibration>,
    ) -> Result<(crate::parallel::Analysis, crate::parallel::Evaluation), Error> {
        crate::parallel::evaluate_strategy(
            model,
            values,
            &self.knobs,
            &self.layout,
            calib.unwrap_or(&self.calib),
            self.gpus_per_node,
            &self.memory,
        )
    }
}

impl StrategyFlags {
    /// Whether any strategy was given.
    pub fn given(&self) -> bool {
        self.strategy.is_some()
            || self.dp.is_some()
            || self.tp.is_some()
            || self.pp.is_some()
            || self.microbatches.is_some()
            || self.micro_batch_size.is_some()
            || self.schedule.is_some()
            || self.chunks.is_some()
            || self.sequence_parallel
            || self.recompute.is_some()
            || self.zero.is_some()
            || self.ep.is_some()
            || self.cp.is_some()
            || self.tp_comm_overlap
            || self.overlap_param_gather
            || self.account_for_embedding_in_pipeline_split
            || self.account_for_loss_in_pipeline_split
            || self.no_overlap_grad_reduce
            || self.precision.is_some()
    }

    /// Without a strategy ([`StrategyArgs::given`]): checks the machine flags given all the
    /// same (`--calib`, `--stack`, `--memory`), so that a bad value is refused rather than
    /// ignored, and returns a note naming those that only a strategy reads.
    pub fn unused_machine_flags(&self) -> Result<Option<String>, Error> {
        let mut unused = Vec::new();
        if self.calib.is_some() || self.stack.is_some() {
            self.calibration()?;
            unused.extend(self.calib.as_ref().map(|_| "--calib"));
            unused.extend(self.stack.as_ref().map(|_| "--stack"));
        }
        if let Some(m) = &self.memory {
            crate::search::steer::parse_memory(m)
                .map_err(|e| Error::Usage(format!("--memory: {e}")))?;
            unused.push("--memory");
        }
        Ok((!unused.is_empty()).then(|| {
            format!(
                "note: {} price a strategy's devices, and no strategy is given (--dp, --tp, --pp, … or --strategy): the model's totals below do not read them",
                unused.join(", ")
            )
        }))
    }

    /// The machine named by `--calib`, or the reference.
    pub fn calibration(&self) -> Result<Calibration, Error> {
        Calibration::resolve_with(self.calib.as_deref(), self.with.as_deref())?
            .with_stack(self.stack.as_deref())
    }

    /// Resolves file and flags into one strategy for `model`: per-operator overrides must name
    /// its operators and their indices (errors point into the strategy file).
    pub fn resolve_for(
        &self,
        model: &crate::model::Model,
        values: &crate::sym::Bindings,
    ) -> Result<Resolved, Error> {
        let batch = model
            .batch_value(values)
            .cloned()
            .unwrap_or_else(|| Rational::from_integer(1.into()));
        let r = self.assemble(&batch)?;
        if let Err((op, msg)) = crate::parallel::check_overrides(model, &r.layout) {
            if let Some(p) = &self.strategy {
                return Err(crate::diag::Source::read(p)?.error_at(&["splits", &op], msg));
            }
            return Err(Error::Usage(msg));
        }
        let nodes = node_notes(&r);
        if nodes.is_err() {
            // A strategy refused both for a knob and for the machine is refused for the knob
            // (`--pp 99` on 98 blocks, `--tp 7` on 96 heads): that is what to change. Only
            // on this path, so that a strategy the machine takes is checked once, when priced.
            crate::parallel::check_knobs_on_model(model, values, &r.knobs, &r.layout)?;
        }
        for n in nodes? {
            eprintln!("warning: {n}");
        }
        if r.knobs.recompute == crate::strategy::Recompute::Selective
            && matches!(
                model.attention,
                Some(crate::model::AttentionMode::Flash | crate::model::AttentionMode::FlashCausal)
            )
        {
            eprintln!(
                "note: selective recomputation recomputes nothing here: with fused attention no S×S tensor is saved (--attention eager to compare)"
            );
        }
        Ok(r)
    }

    /// Resolves file and flags into one strategy (`batch`, the global batch, turns a
    /// micro-batch size into a count).
    pub fn resolve(&self, batch: &Rational) -> Result<Resolved, Error> {
        let (r, notes) = self.resolve_quietly(batch)?;
        for n in notes {
            eprintln!("warning: {n}");
        }
        Ok(r)
    }

    /// [`StrategyFlags::resolve`] returning its warnings instead of printing them (for commands
    /// that resolve one strategy at many symbol values).
    pub fn resolve_quietly(&self, batch: &Rational) -> Result<(Resolved, Vec<String>), Error> {
        let r = self.assemble(batch)?;
        let notes = node_notes(&r)?;
        Ok((r, notes))
    }

    /// File and flags as one strategy, its knobs checked, not yet placed on nodes.
    fn assemble(&self, batch: &Rational) -> Result<Resolved, Error> {
        // `--strategy` takes a knob string too (a rank row pasted as it is), as `compare` does;
        // the flags given beside it win.
        if let Some(text) = self.knob_text() {
            return knob_string(text, "--strategy")?
                .overlaid_by(self)
                .assemble(batch);
        }
        let mut file_size: Option<(u64, String)> = None;
        let (mut knobs, mut layout, mut gpn) = match &self.strategy {
            Some(p) => {
                let s = load_strategy(p)?;
                file_size = s.micro_batch_size.map(|m| (m, p.display().to_string()));
                let layout = Layout {
                    sequence_parallel: s.knobs.sequence_parallel,
                    tp_overrides: s.splits,
                };
                (s.knobs, layout, s.gpus_per_node)
            }
            None => (Knobs::data_parallel(1), Layout::default(), None),
        };
        if let Some(v) = self.dp {
            knobs.dp = v;
        }
        if let Some(v) = self.tp {
            knobs.tp = v;
        }
        if let Some(v) = self.pp {
            knobs.pp = v;
        }
        if let Some(v) = self.microbatches {
            knobs.microbatches = v;
        }
        if self.schedule.as_deref() == Some("none") && knobs.pp > 1 {
            return Err(Error::Usage(format!(
                "--schedule none means no pipeline (what `rank` prints when pp is 1), but pp is {}: give gpipe, 1f1b, interleaved-1f1b or zb-h1",
                knobs.pp
            )));
        }
        if let Some(s) = self.schedule.as_deref().filter(|s| *s != "none") {
            knobs.schedule = Schedule::from_name(s).ok_or_else(|| {
                Error::Usage(format!(
                    "unknown schedule `{s}` (gpipe, 1f1b, interleaved-1f1b, zb-h1; none when pp is 1)"
                ))
            })?;
            if knobs.schedule == Schedule::Interleaved && self.chunks.is_none() && knobs.chunks < 2
            {
                knobs.chunks = 2;
            }
        }
        if let Some(v) = self.chunks {
            knobs.chunks = v;
        }
        // The file's micro-batch size holds unless the flags give the count or the size.
        if let (Some((size, file)), None, None) =
            (&file_size, self.micro_batch_size, self.microbatches)
        {
            knobs.microbatches = Knobs::microbatches_for_size(batch, knobs.dp, *size)
                .map_err(|e| Error::Usage(format!("{file}: `micro_batch_size` = {size}: {e}")))?;
        }
        if let Some(size) = self.micro_batch_size {
            let m = Knobs::microbatches_for_size(batch, knobs.dp, size)
                .map_err(|e| Error::Usage(format!("--micro-batch-size {size}: {e}")))?;
            if let Some(count) = self.microbatches {
                if count != m {
                    return Err(Error::Usage(format!(
                        "--micro-batch-size {size} means {m} micro-batches (global batch {batch} ÷ (dp = {} × {size})), but --microbatches says {count}",
                        knobs.dp
                    )));
                }
            }
            knobs.microbatches = m;
        }
        if self.sequence_parallel {
            knobs.sequence_parallel = true;
        }
        layout.sequence_parallel = knobs.sequence_parallel;
        if let Some(s) = &self.recompute {
            knobs.recompute = Recompute::from_name(s).ok_or_else(|| {
                Error::Usage(format!(
                    "unknown recomputation `{s}` (none, selective, full)"
                ))
            })?;
        }
        if let Some(z) = self.zero {
            knobs.zero = z;
        }
        if let Some(e) = self.ep {
            knobs.ep = e;
        }
        if let Some(c) = self.cp {
            knobs.cp = c;
        }
        if self.tp_comm_overlap {
            knobs.overlap.tp_comm = true;
        }
        if self.overlap_param_gather {
            knobs.overlap.param_gather = true;
        }
        if self.no_overlap_grad_reduce {
            knobs.overlap.grad_reduce = false;
        }
        if let Some(p) = self.precision {
            knobs.precision = p;
        }
        knobs.pipeline_split.embedding |= self.account_for_embedding_in_pipeline_split;
        knobs.pipeline_split.loss |= self.account_for_loss_in_pipeline_split;
        let calib = self.calibration()?;
        if let Some(g) = self.gpus_per_node {
            gpn = Some(g);
        }
        let gpus_per_node = gpn.unwrap_or_else(|| calib.gpus_per_node());
        crate::strategy::check_knobs(&knobs)?;
        crate::strategy::check_gpus_per_node(gpus_per_node).map_err(machine_error)?;
        let memory = match &self.memory {
            Some(m) => crate::search::steer::parse_memory(m)
                .map_err(|e| Error::Usage(format!("--memory: {e}")))?,
            None => calib.memory_bytes(),
        };
        Ok(Resolved {
            knobs,
            layout,
            calib,
            gpus_per_node,
            memory,
        })
    }

    /// `--strategy`'s text when it is a knob string rather than a file.
    fn knob_text(&self) -> Option<&str> {
        let p = self.strategy.as_deref()?;
        let text = p.to_str()?;
        let file = p.exists() || text.ends_with(".yaml") || text.ends_with(".yml");
        (text.contains('=') && !file).then_some(text)
    }

    /// These flags with every one that `over` gives replaced by its value there.
    fn overlaid_by(mut self, over: &StrategyFlags) -> StrategyFlags {
        let o = over.clone();
        self.strategy = None;
        self.dp = o.dp.or(self.dp);
        self.tp = o.tp.or(self.tp);
        self.pp = o.pp.or(self.pp);
        self.micro_batch_size = o.micro_batch_size.or(self.micro_batch_size);
        self.microbatches = o.microbatches.or(self.microbatches);
        self.schedule = o.schedule.or(self.schedule);
        self.chunks = o.chunks.or(self.chunks);
        self.sequence_parallel |= o.sequence_parallel;
        self.recompute = o.recompute.or(self.recompute);
        self.zero = o.zero.or(self.zero);
        self.ep = o.ep.or(self.ep);
        self.cp = o.cp.or(self.cp);
        self.tp_comm_overlap |= o.tp_comm_overlap;
        self.overlap_param_gather |= o.overlap_param_gather;
        self.no_overlap_grad_reduce |= o.no_overlap_grad_reduce;
        self.precision = o.precision.or(self.precision);
        self.account_for_embedding_in_pipeline_split |= o.account_for_embedding_in_pipeline_split;
        self.account_for_loss_in_pipeline_split |= o.account_for_loss_in_pipeline_split;
        self.gpus_per_node = o.gpus_per_node.or(self.gpus_per_node);
        self.calib = o.calib.or(self.calib);
        self.with = o.with.or(self.with);
        self.stack = o.stack.or(self.stack);
        self.memory = o.memory.or(self.memory);
        self
    }

    /// A strategy named on the command line of `compare` and `crossover`: a strategy file (a path
    /// that exists, or one ending in `.yaml`/`.yml`), or a knob string (see [`knob_string`]).
    /// `what` names the argument in errors.
    pub fn from_argument(text: &str, what: &str) -> Result<StrategyFlags, Error> {
        let path = std::path::Path::new(text);
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml || (path.is_file() && !text.contains('=')) {
            return Ok(StrategyFlags {
                strategy: Some(path.to_path_buf()),
                ..StrategyFlags::default()
            });
        }
        knob_string(text, what)
    }
}

/// How the strategy sits on its nodes: the warnings worth giving, or why the machine is
/// refused ([`crate::strategy::check_nodes`]).
fn node_notes(r: &Resolved) -> Result<Vec<String>, Error> {
    crate::strategy::check_nodes(&r.knobs, r.gpus_per_node).map_err(machine_error)
}

/// A refusal of the devices per node, worded for the command line (`--gpus-per-node`, which
/// sets them, rather than the strategy file's `gpus_per_node`).
pub fn machine_error(e: crate::strategy::StrategyError) -> Error {
    Error::Usage(e.to_string().replace("`gpus_per_node`", "--gpus-per-node"))
}

/// Parses a knob string such as `tp=8,pp=4,dp=32,mbs=1,sp,recompute=selective,zero=1` into
/// strategy flags, with the vocabulary and error messages of `rank --fix` (the same parser):
///
/// * items are separated by commas or spaces; each is `KNOB=VALUE` with a knob of `--fix` (dp, tp,
///   pp, ep, cp, mbs, microbatches, chunks, zero, schedule, sp, recompute, precision);
/// * a bare `sp` means `sp=on`; a bare schedule name (`gpipe`, `1f1b`, `interleaved-1f1b`)
///   means `schedule=` it, and `interleaved-1f1b(v=2)` (as `rank` prints it) adds `chunks=2`;
/// * the bare words `tp-comm-overlap`, `overlap-param-gather` and `no-overlap-grad-reduce` are
///   the timeline flags of the same names, also written as `rank` prints them
///   (`overlap=tp-comm,param-gather,no-grad-reduce`);
/// * `account=embedding+loss` (or either) counts the embedding or the loss as a layer of the
///   interleaved split, as `--account-for-embedding-in-pipeline-split` and
///   `--account-for-loss-in-pipeline-split` do.
///
/// So a strategy column of `rank` (`dp=8 tp=8 pp=1 mbs=1 1f1b sp=on recompute=none zero=1`) can
/// be pasted as it is. Knobs not given keep the defaults of `cost` (dp = tp = pp = 1, one
/// micro-batch, 1F1B, no recomputation, ZeRO 0).
pub fn knob_string(text: &str, what: &str) -> Result<StrategyFlags, Error> {
    let mut flags = StrategyFlags::default();
    let mut items: Vec<String> = Vec::new();
    // `schedule=none`, as `rank --format json` says of a strategy without a pipeline.
    let mut no_pipeline = false;
    for word in text.split(|c: char| c == ',' || c.is_whitespace()) {
        if word.is_empty() {
            continue;
        }
        match word {
            "schedule=none" => no_pipeline = true,
            "sp" | "sequence-parallel" => items.push("sp=on".into()),
            // `rank` prints the overlaps as `overlap=tp-comm,param-gather,no-grad-reduce`.
            "tp-comm-overlap" | "overlap=tp-comm" | "tp-comm" => flags.tp_comm_overlap = true,
            "overlap-param-gather" | "overlap=param-gather" | "param-gather" => {
                flags.overlap_param_gather = true
            }
            "no-overlap-grad-reduce" | "overlap=no-grad-reduce" | "no-grad-reduce" => {
                flags.no_overlap_grad_reduce = true
            }
            _ if !word.contains('=') && Schedule::from_name(word).is_some() => {
                items.push(format!("schedule={word}"))
            }
            _ => match word
                .strip_prefix("interleaved-1f1b(v=")
                .or_else(|| word.strip_prefix("interleaved(v="))
                .and_then(|r| r.strip_suffix(')'))
            {
                Some(v) => {
                    items.push("schedule=interleaved-1f1b".into());
                    items.push(format!("chunks={v}"));
                }
                None if word.contains('=') => items.push(word.to_string()),
                None => {
                    return Err(Error::Usage(format!(
                        "{what} `{text}`: `{word}` is neither KNOB=VALUE nor a known word (sp, a schedule name, tp-comm-overlap, overlap-param-gather, no-overlap-grad-reduce), nor a strategy file"
                    )))
                }
            },
        }
    }
    if items.is_empty() && !flags.given() && !no_pipeline {
        return Err(Error::Usage(format!(
            "{what} `{text}`: no knobs (expected a strategy file or KNOB=VALUE,… such as tp=8,pp=4,mbs=1)"
        )));
    }
    let mut steer = crate::search::Steer::default();
    if !items.is_empty() {
        steer.fix(&items.join(","), what)?;
    }
    // Every knob `--fix` knows becomes a flag: the pattern names them all, so a knob added to
    // `Steer` does not compile here until it is passed on.
    let crate::search::Steer {
        dp,
        tp,
        pp,
        ep,
        cp,
        mbs,
        microbatches,
        chunks,
        zero,
        schedule,
        sequence_parallel,
        recompute,
        tp_comm_overlap,
        overlap_grad_reduce,
        overlap_param_gather,
        precision,
        pipeline_split,
    } = steer;
    flags.precision = precision;
    if let Some(p) = pipeline_split {
        flags.account_for_embedding_in_pipeline_split |= p.embedding;
        flags.account_for_loss_in_pipeline_split |= p.loss;
    }
    flags.tp_comm_overlap |= tp_comm_overlap == Some(true);
    flags.overlap_param_gather |= overlap_param_gather == Some(true);
    flags.no_overlap_grad_reduce |= overlap_grad_reduce == Some(false);
    flags.dp = dp.fixed;
    flags.tp = tp.fixed;
    flags.pp = pp.fixed;
    flags.ep = ep.fixed;
    flags.cp = cp.fixed;
    flags.micro_batch_size = mbs.fixed;
    flags.microbatches = microbatches.fixed;
    flags.chunks = chunks.fixed;
    flags.zero = zero.fixed.map(|z| z as u8);
    flags.schedule = schedule
        .map(|s| s.to_string())
        .or(no_pipeline.then(|| "none".to_string()));
    flags.sequence_parallel = sequence_parallel.unwrap_or(false);
    flags.recompute = recompute.map(|r| r.to_string());
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_row_parses_as_a_knob_string() {
        let f = knob_string(
            "dp=8 tp=8 pp=2 mbs=1 interleaved-1f1b(v=2) sp=on recompute=selective zero=1",
            "strategy A",
        )
        .unwrap();
        assert_eq!((f.dp, f.tp, f.pp), (Some(8), Some(8), Some(2)));
        assert_eq!(f.micro_batch_size, Some(1));
        assert_eq!(f.schedule.as_deref(), Some("interleaved-1f1b"));
        assert_eq!(f.chunks, Some(2));
        assert!(f.sequence_parallel);
        assert_eq!(f.recompute.as_deref(), Some("selective"));
        assert_eq!(f.zero, Some(1));
        assert_eq!(knob_string("tp=2,cp=4", "strategy C").unwrap().cp, Some(4));
        let g = knob_string("tp=4,sp,gpipe,pp=2,overlap=tp-comm", "strategy B").unwrap();
        assert_eq!(g.schedule.as_deref(), Some("gpipe"));
        assert!(g.sequence_parallel && g.tp_comm_overlap);
    }

    #[test]
    fn knob_string_errors_name_the_item() {
        let e = |t: &str| match knob_string(t, "strategy A") {
            Err(Error::Usage(m)) => m,
            other => panic!("{t}: {:?}", other.map(|f| f.tp)),
        };
        assert!(e("tp=8,foo=1").contains("unknown knob `foo`"));
        assert!(e("tp=8 zig").contains("`zig`"));
        assert!(e("tp=8,tp=4").contains("given twice"));
        assert!(e("zero=5").contains("ZeRO stages"));
        assert!(e(" , ").contains("no knobs"));
    }
}
