//! [`Strategy`]: a parallel layout's knobs as asked for (a strategy file, knobs, or both), and
//! its resolution on a model and a [`Machine`].

use super::Machine;
use crate::error::Error;
use crate::parallel::Layout;
use crate::strategy::{load_strategy, Knobs, Precision, Recompute, Schedule};
use crate::sym::Rational;
use std::path::PathBuf;

/// A strategy as asked for: a strategy file and knobs that override its own (knobs not given
/// keep the file's, else the defaults: dp = tp = pp = 1, one micro-batch, 1F1B, no
/// recomputation, ZeRO 0).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Strategy {
    /// A strategy file (YAML).
    pub file: Option<PathBuf>,
    /// Data-parallel degree.
    pub dp: Option<u64>,
    /// Tensor-parallel degree.
    pub tp: Option<u64>,
    /// Pipeline stages.
    pub pp: Option<u64>,
    /// Samples per micro-batch and data-parallel rank (Megatron-LM's `--micro-batch-size`).
    pub micro_batch_size: Option<u64>,
    /// Micro-batches per step.
    pub microbatches: Option<u64>,
    /// Pipeline schedule.
    pub schedule: Option<Schedule>,
    /// No pipeline (what `rank` prints as schedule `none`): refused when pp is above 1.
    pub no_pipeline: bool,
    /// Model chunks per device for the interleaved schedule.
    pub chunks: Option<u64>,
    /// Megatron-LM sequence parallelism.
    pub sequence_parallel: bool,
    /// Activation recomputation.
    pub recompute: Option<Recompute>,
    /// ZeRO stage 0–3.
    pub zero: Option<u8>,
    /// Expert-parallel degree.
    pub ep: Option<u64>,
    /// Context-parallel degree.
    pub cp: Option<u64>,
    /// Timelines: tensor-parallel collectives pipelined with their GEMMs.
    pub tp_comm_overlap: bool,
    /// Timelines: the parameter all-gather overlaps the next forward.
    pub overlap_param_gather: bool,
    /// Timelines: gradients reduced once after the backward pass.
    pub no_overlap_grad_reduce: bool,
    /// Mixed precision.
    pub precision: Option<Precision>,
    /// Interleaved schedule: the embedding counts as a layer of the first chunk.
    pub account_for_embedding_in_pipeline_split: bool,
    /// Interleaved schedule: the output layer and loss count as a layer of the last chunk.
    pub account_for_loss_in_pipeline_split: bool,
    /// FP8 parameters (Megatron-LM's `--fp8-param-gather`; [`Knobs::fp8_params`]).
    pub fp8_params: bool,
    /// FP8 dispatch (DeepSeek-V3's; [`Knobs::fp8_dispatch`]).
    pub fp8_dispatch: bool,
    /// Node-limited, two-tier dispatch (DeepSeek-V3's; [`Knobs::node_dispatch`]).
    pub node_dispatch: bool,
}

/// What a strategy file gives before the knobs override it.
struct Base {
    knobs: Knobs,
    layout: Layout,
    gpus_per_node: Option<u64>,
    micro_batch_size: Option<(u64, String)>,
}

/// A strategy resolved for a model on a machine.
pub struct Resolved {
    /// Knobs.
    pub knobs: Knobs,
    /// Layout overrides.
    pub layout: Layout,
    /// Machine.
    pub calib: crate::calib::Calibration,
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
        calib: Option<&crate::calib::Calibration>,
    ) -> Result<(crate::parallel::Analysis, crate::parallel::Evaluation), Error> {
        let on = self.machine().on(calib.unwrap_or(&self.calib));
        crate::parallel::evaluate_strategy(model, values, &self.knobs, &self.layout, on)
    }

    /// The machine it is resolved on: its table, devices per node and memory.
    pub fn machine(&self) -> crate::calib::MachineRef<'_> {
        crate::calib::MachineRef::new(&self.calib, self.gpus_per_node, &self.memory)
    }
}

impl Strategy {
    /// A strategy file's strategy.
    pub fn from_file(path: impl Into<PathBuf>) -> Strategy {
        Strategy {
            file: Some(path.into()),
            ..Strategy::default()
        }
    }

    /// Whether anything is asked for.
    pub fn given(&self) -> bool {
        *self != Strategy::default()
    }

    /// Resolves file and knobs into one strategy for `model` on `machine`: per-operator
    /// overrides must name its operators and their indices (errors point into the strategy
    /// file). Warnings go to stderr.
    pub(crate) fn resolve_for(
        &self,
        machine: &Machine,
        model: &crate::model::Model,
        values: &crate::sym::Bindings,
    ) -> Result<Resolved, Error> {
        let batch = model
            .batch_value(values)
            .cloned()
            .unwrap_or_else(|| Rational::from_integer(1.into()));
        let r = self.assemble(machine, &batch)?;
        if let Err((op, msg)) = crate::parallel::check_overrides(model, &r.layout) {
            if let Some(p) = &self.file {
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
            crate::diag::note(format!("warning: {n}"));
        }
        // Under fused attention `core_attn` recomputes nothing; another module still may.
        if r.knobs.recompute == Recompute::Selective
            && matches!(
                model.attention,
                Some(crate::model::AttentionMode::Flash | crate::model::AttentionMode::FlashCausal)
            )
            && !model
                .ops()
                .any(|(_, op)| op.recomputed(&model.recompute_modules))
        {
            crate::diag::note(
                "note: selective recomputation recomputes nothing here: with fused attention no S×S tensor is saved (--attention eager to compare)".into(),
            );
        }
        Ok(r)
    }

    /// Resolves file and knobs into one strategy (`batch`, the global batch, turns a
    /// micro-batch size into a count), with the warnings on how it sits on its nodes.
    pub(crate) fn resolve_quietly(
        &self,
        machine: &Machine,
        batch: &Rational,
    ) -> Result<(Resolved, Vec<String>), Error> {
        let r = self.assemble(machine, batch)?;
        let notes = node_notes(&r)?;
        Ok((r, notes))
    }

    /// The strategy file's knobs (or the defaults), layout, devices per node and micro-batch
    /// size (with the file's name).
    fn base(&self) -> Result<Base, Error> {
        Ok(match &self.file {
            Some(p) => {
                let s = load_strategy(p)?;
                Base {
                    layout: Layout {
                        sequence_parallel: s.knobs.sequence_parallel,
                        tp_overrides: s.splits,
                    },
                    knobs: s.knobs,
                    gpus_per_node: s.gpus_per_node,
                    micro_batch_size: s.micro_batch_size.map(|m| (m, p.display().to_string())),
                }
            }
            None => Base {
                knobs: Knobs::data_parallel(1),
                layout: Layout::default(),
                gpus_per_node: None,
                micro_batch_size: None,
            },
        })
    }

    /// File and knobs as one strategy, its knobs checked, not yet placed on nodes.
    fn assemble(&self, machine: &Machine, batch: &Rational) -> Result<Resolved, Error> {
        let Base {
            mut knobs,
            mut layout,
            gpus_per_node: gpn,
            micro_batch_size: file_size,
        } = self.base()?;
        knobs.dp = self.dp.unwrap_or(knobs.dp);
        knobs.tp = self.tp.unwrap_or(knobs.tp);
        knobs.pp = self.pp.unwrap_or(knobs.pp);
        knobs.microbatches = self.microbatches.unwrap_or(knobs.microbatches);
        if self.no_pipeline && knobs.pp > 1 {
            return Err(Error::Usage(format!(
                "{} none means no pipeline (what `rank` prints when pp is 1), but pp is {}: give gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe or dualpipev",
                machine.spelling().name(super::OptionName::Schedule),
                knobs.pp
            )));
        }
        if self.no_pipeline {
            // `none` names one stage under 1F1B ([`Knobs::without_pipeline`]), whatever a file
            // under it says.
            knobs.schedule = Schedule::OneFOneB;
        }
        if let Some(s) = self.schedule {
            knobs.schedule = s;
            if s == Schedule::Interleaved && self.chunks.is_none() && knobs.chunks < 2 {
                knobs.chunks = 2;
            }
        }
        knobs.chunks = self.chunks.unwrap_or(knobs.chunks);
        self.micro_batches(&mut knobs, batch, file_size, machine.spelling())?;
        knobs.sequence_parallel |= self.sequence_parallel;
        layout.sequence_parallel = knobs.sequence_parallel;
        knobs.recompute = self.recompute.unwrap_or(knobs.recompute);
        knobs.zero = self.zero.unwrap_or(knobs.zero);
        knobs.ep = self.ep.unwrap_or(knobs.ep);
        knobs.cp = self.cp.unwrap_or(knobs.cp);
        knobs.overlap.tp_comm |= self.tp_comm_overlap;
        knobs.overlap.param_gather |= self.overlap_param_gather;
        knobs.overlap.grad_reduce &= !self.no_overlap_grad_reduce;
        knobs.precision = self.precision.unwrap_or(knobs.precision);
        knobs.pipeline_split.embedding |= self.account_for_embedding_in_pipeline_split;
        knobs.pipeline_split.loss |= self.account_for_loss_in_pipeline_split;
        knobs.fp8_params |= self.fp8_params;
        knobs.fp8_dispatch |= self.fp8_dispatch;
        knobs.node_dispatch |= self.node_dispatch;
        let gpus_per_node = machine
            .given_gpus_per_node()
            .or(gpn)
            .unwrap_or_else(|| machine.calibration().gpus_per_node());
        crate::strategy::check_knobs(&knobs)?;
        crate::strategy::check_gpus_per_node(gpus_per_node)
            .map_err(|e| machine.machine_error(e))?;
        Ok(Resolved {
            knobs,
            layout,
            calib: machine.calibration().clone(),
            gpus_per_node,
            memory: machine.usable_memory()?,
        })
    }

    /// The micro-batch count: the file's micro-batch size holds unless the knobs give the
    /// count or the size.
    fn micro_batches(
        &self,
        knobs: &mut Knobs,
        batch: &Rational,
        file_size: Option<(u64, String)>,
        spelling: super::Spelling,
    ) -> Result<(), Error> {
        let size_option = spelling.name(super::OptionName::MicroBatchSize);
        let count_option = spelling.name(super::OptionName::Microbatches);
        if let (Some((size, file)), None, None) =
            (&file_size, self.micro_batch_size, self.microbatches)
        {
            knobs.microbatches = Knobs::microbatches_for_size(batch, knobs.dp, *size)
                .map_err(|e| Error::Usage(format!("{file}: `micro_batch_size` = {size}: {e}")))?;
        }
        if let Some(size) = self.micro_batch_size {
            let m = Knobs::microbatches_for_size(batch, knobs.dp, size)
                .map_err(|e| Error::Usage(format!("{size_option} {size}: {e}")))?;
            if let Some(count) = self.microbatches {
                if count != m {
                    return Err(Error::Usage(format!(
                        "{size_option} {size} means {m} micro-batches (global batch {batch} ÷ (dp = {} × {size})), but {count_option} says {count}",
                        knobs.dp
                    )));
                }
            }
            knobs.microbatches = m;
        }
        Ok(())
    }

    /// These knobs with every one that `over` gives replaced by its value there (the file is
    /// `over`'s where it names one).
    pub fn overlaid_by(self, over: &Strategy) -> Strategy {
        let o = over.clone();
        // `none` (no pipeline) is a schedule: given either way, it replaces the other.
        let (schedule, no_pipeline) = if o.schedule.is_some() || o.no_pipeline {
            (o.schedule, o.no_pipeline)
        } else {
            (self.schedule, self.no_pipeline)
        };
        Strategy {
            file: o.file.or(self.file),
            dp: o.dp.or(self.dp),
            tp: o.tp.or(self.tp),
            pp: o.pp.or(self.pp),
            micro_batch_size: o.micro_batch_size.or(self.micro_batch_size),
            microbatches: o.microbatches.or(self.microbatches),
            schedule,
            no_pipeline,
            chunks: o.chunks.or(self.chunks),
            sequence_parallel: self.sequence_parallel | o.sequence_parallel,
            recompute: o.recompute.or(self.recompute),
            zero: o.zero.or(self.zero),
            ep: o.ep.or(self.ep),
            cp: o.cp.or(self.cp),
            tp_comm_overlap: self.tp_comm_overlap | o.tp_comm_overlap,
            overlap_param_gather: self.overlap_param_gather | o.overlap_param_gather,
            no_overlap_grad_reduce: self.no_overlap_grad_reduce | o.no_overlap_grad_reduce,
            precision: o.precision.or(self.precision),
            account_for_embedding_in_pipeline_split: self.account_for_embedding_in_pipeline_split
                | o.account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split: self.account_for_loss_in_pipeline_split
                | o.account_for_loss_in_pipeline_split,
            fp8_params: self.fp8_params | o.fp8_params,
            fp8_dispatch: self.fp8_dispatch | o.fp8_dispatch,
            node_dispatch: self.node_dispatch | o.node_dispatch,
        }
    }
}

impl Strategy {
    /// Parses a knob string such as `tp=8,pp=4,dp=32,mbs=1,sp,recompute=selective,zero=1` into
    /// a strategy, with the vocabulary and error messages of `rank --fix` (the same parser):
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
    ///   `--account-for-loss-in-pipeline-split` do;
    /// * the bare word `fp8-params` (or Megatron-LM's `fp8-param-gather`) keeps the FP8 GEMMs'
    ///   weights as FP8 parameters, as `--fp8-params` does;
    /// * the bare word `fp8-dispatch` dispatches the experts' tokens in FP8, as `--fp8-dispatch`
    ///   does, and `node-dispatch` dispatches them node by node, as `--node-dispatch` does;
    /// * `none` (or `schedule=none`), the schedule of a strategy without a pipeline, means pp is
    ///   1 under 1F1B, and is refused with pp above 1.
    ///
    /// So a strategy column of `rank` (`dp=8 tp=8 pp=1 mbs=1 none sp=on recompute=none zero=1`) can
    /// be pasted as it is. Knobs not given keep the defaults of `cost` (dp = tp = pp = 1, one
    /// micro-batch, 1F1B, no recomputation, ZeRO 0).
    pub fn from_knobs(text: &str, what: &str) -> Result<Strategy, Error> {
        let mut flags = Strategy::default();
        let mut items: Vec<String> = Vec::new();
        // `schedule=none`, as `rank --format json` says of a strategy without a pipeline.
        let mut no_pipeline = false;
        for word in text.split(|c: char| c == ',' || c.is_whitespace()) {
            if word.is_empty() {
                continue;
            }
            match word {
            // Bare, as the schedule of a strategy text without a pipeline (`pp=1 mbs=1 none`).
            "schedule=none" | "none" => no_pipeline = true,
            "sp" | "sequence-parallel" => items.push("sp=on".into()),
            "fp8-params" | "fp8-param-gather" => items.push("fp8-params=on".into()),
            "fp8-dispatch" => items.push("fp8-dispatch=on".into()),
            "node-dispatch" => items.push("node-dispatch=on".into()),
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
                        "{what} `{text}`: `{word}` is neither KNOB=VALUE nor a known word (sp, a schedule name or none, tp-comm-overlap, overlap-param-gather, no-overlap-grad-reduce, fp8-params, fp8-dispatch), nor a strategy file"
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
        flags.take_steer(steer, no_pipeline, &format!("{what} `{text}`"))?;
        Ok(flags)
    }

    /// Sets the knobs `steer` fixes (a knob string's items, parsed as `--fix` parses them);
    /// `no_pipeline` where the string said `schedule=none`, `what` naming the string in errors.
    fn take_steer(
        &mut self,
        steer: crate::search::Steer,
        no_pipeline: bool,
        what: &str,
    ) -> Result<(), Error> {
        let flags = self;
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
            any_precision,
            pipeline_split,
            fp8_params,
            fp8_dispatch,
            node_dispatch,
            // Set by a named stack profile when ranking, never by a knob string.
            supports: _,
            // Which flag fixed a knob, and how the caller names the options: for messages only.
            fixed_by: _,
            spelling: _,
        } = steer;
        if any_precision {
            return Err(Error::Usage(format!(
                "{what}: precision=any searches precisions, and one strategy has one: name it (bf16, fp8, …)"
            )));
        }
        flags.precision = precision;
        flags.fp8_params |= fp8_params == Some(true);
        flags.fp8_dispatch |= fp8_dispatch == Some(true);
        flags.node_dispatch |= node_dispatch == Some(true);
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
        flags.schedule = schedule;
        flags.no_pipeline = no_pipeline && schedule.is_none();
        flags.sequence_parallel = sequence_parallel.unwrap_or(false);
        flags.recompute = recompute;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_row_parses_as_a_knob_string() {
        let f = Strategy::from_knobs(
            "dp=8 tp=8 pp=2 mbs=1 interleaved-1f1b(v=2) sp=on recompute=selective zero=1",
            "strategy A",
        )
        .unwrap();
        assert_eq!((f.dp, f.tp, f.pp), (Some(8), Some(8), Some(2)));
        assert_eq!(f.micro_batch_size, Some(1));
        assert_eq!(f.schedule, Some(Schedule::Interleaved));
        assert_eq!(f.chunks, Some(2));
        assert!(f.sequence_parallel);
        assert_eq!(f.recompute, Some(Recompute::Selective));
        assert_eq!(f.zero, Some(1));
        assert_eq!(
            Strategy::from_knobs("tp=2,cp=4", "strategy C").unwrap().cp,
            Some(4)
        );
        let g = Strategy::from_knobs("tp=4,sp,gpipe,pp=2,overlap=tp-comm", "strategy B").unwrap();
        assert_eq!(g.schedule, Some(Schedule::Gpipe));
        assert!(g.sequence_parallel && g.tp_comm_overlap);
    }

    #[test]
    fn a_row_without_a_pipeline_parses_with_its_schedule_none() {
        let f = Strategy::from_knobs(
            "dp=64 tp=1 pp=1 mbs=1 none sp=off recompute=none zero=3",
            "strategy A",
        )
        .unwrap();
        assert!(f.no_pipeline);
        assert_eq!((f.schedule, f.pp), (None, Some(1)));
        assert_eq!(f.recompute, Some(Recompute::None));
    }

    #[test]
    fn knob_string_errors_name_the_item() {
        let e = |t: &str| match Strategy::from_knobs(t, "strategy A") {
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
