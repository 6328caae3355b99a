//! Strategy files (YAML): the usual knobs, and per-operator overrides of the tensor-parallel
//! split.

use super::knobs::{Knobs, Recompute, Schedule};
use crate::diag::Source;
use crate::error::strategy::{StrategyError, Unsupported, MAX_DEVICES, MAX_GPUS_PER_NODE};
use crate::error::Result;
use crate::rules::spec::UniqueMap;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A strategy as strategy files (and validation rows) write it; [`StrategyFile::resolve`] checks
/// it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrategyFile {
    #[serde(default)]
    doc: Option<String>,
    #[serde(default = "one")]
    dp: u64,
    #[serde(default = "one")]
    tp: u64,
    #[serde(default = "one")]
    pp: u64,
    #[serde(default)]
    microbatches: Option<u64>,
    /// Samples per micro-batch and data-parallel rank (Megatron-LM's `--micro-batch-size`):
    /// the count follows from the global batch when a model is at hand.
    #[serde(default)]
    micro_batch_size: Option<u64>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default = "one")]
    chunks: u64,
    #[serde(default)]
    sequence_parallel: bool,
    #[serde(default)]
    recompute: Option<String>,
    #[serde(default)]
    zero: u8,
    #[serde(default = "one")]
    ep: u64,
    #[serde(default = "one")]
    cp: u64,
    #[serde(default)]
    overlap: crate::strategy::Overlap,
    #[serde(default)]
    precision: crate::strategy::Precision,
    /// What the interleaved split counts besides the layers.
    #[serde(default)]
    pipeline_split: crate::strategy::PipelineSplit,
    /// FP8 parameters ([`Knobs::fp8_params`]).
    #[serde(default)]
    fp8_params: bool,
    /// FP8 dispatch ([`Knobs::fp8_dispatch`]).
    #[serde(default)]
    fp8_dispatch: bool,
    /// Node-limited dispatch ([`Knobs::node_dispatch`]).
    #[serde(default)]
    node_dispatch: bool,
    #[serde(default)]
    gpus_per_node: Option<u64>,
    #[serde(default)]
    splits: UniqueMap<String>,
}

fn one() -> u64 {
    1
}

/// A strategy read from a file or flags.
#[derive(Debug, Clone)]
pub struct StrategyArgs {
    /// The knobs.
    pub knobs: Knobs,
    /// Devices per node, when the file says.
    pub gpus_per_node: Option<u64>,
    /// Per-operator tensor-parallel index overrides (`none` replicates the operator).
    pub splits: BTreeMap<String, String>,
    /// A description.
    pub doc: Option<String>,
    /// The micro-batch size the file gives instead of a count (see
    /// [`StrategyArgs::knobs_for_batch`]).
    pub micro_batch_size: Option<u64>,
}

impl StrategyArgs {
    /// The knobs at global batch `batch`: a micro-batch size given by the file becomes the
    /// count global batch ÷ (dp × size), checked again with it.
    pub fn knobs_for_batch(
        &self,
        batch: &crate::sym::Rational,
    ) -> std::result::Result<Knobs, StrategyError> {
        let mut k = self.knobs.clone();
        if let Some(size) = self.micro_batch_size {
            k.microbatches = Knobs::microbatches_for_size(batch, k.dp, size).map_err(|e| {
                StrategyError::FileMicroBatchSize {
                    size,
                    source: Box::new(e),
                }
            })?;
            check_knobs(&k)?;
        }
        Ok(k)
    }
}

/// Interleaving runs the micro-batches in groups of pp (Narayanan et al. SC'21, as Megatron-LM
/// orders it), and DualPipe and DualPipeV need the counts their published steps assert
/// ([`Schedule::refuses`]): another count has no order, and no activations in flight to count
/// from it.
pub fn check_schedule_microbatches(k: &Knobs) -> std::result::Result<(), StrategyError> {
    if k.schedule == Schedule::Interleaved && !k.microbatches.is_multiple_of(k.pp) {
        return Err(StrategyError::InterleavedMicrobatches {
            microbatches: k.microbatches,
            pp: k.pp,
        });
    }
    if let Some(reason) = k.schedule.refuses(k.pp, k.microbatches) {
        return Err(StrategyError::DualPipeShape { reason });
    }
    Ok(())
}

/// Checks knobs that need no model: positive, not absurd, valid schedule combinations.
pub fn check_knobs(k: &Knobs) -> std::result::Result<(), StrategyError> {
    for (name, v) in [
        ("dp", k.dp),
        ("tp", k.tp),
        ("pp", k.pp),
        ("microbatches", k.microbatches),
        ("chunks", k.chunks),
        ("cp", k.cp),
    ] {
        if v == 0 {
            return Err(StrategyError::Zero { knob: name });
        }
        if v > MAX_DEVICES {
            return Err(StrategyError::Absurd {
                knob: name,
                value: v,
            });
        }
    }
    if k.devices() > MAX_DEVICES {
        return Err(StrategyError::AbsurdDevices {
            devices: k.devices(),
        });
    }
    if k.ep == 0 || k.ep > MAX_DEVICES {
        return Err(StrategyError::EpRange { ep: k.ep });
    }
    if !k.replicas().is_multiple_of(k.ep) {
        return Err(StrategyError::EpDividesDp {
            ep: k.ep,
            dp: k.dp,
            cp: k.cp,
        });
    }
    if k.zero > 3 {
        return Err(StrategyError::ZeroStage { zero: k.zero });
    }
    if k.overlap.tp_comm && !(k.sequence_parallel && k.tp > 1) {
        return Err(Unsupported::TpCommOverlap.into());
    }
    if k.overlap.param_gather && !(k.zero == 1 || k.zero == 2) {
        return Err(Unsupported::ParamGatherOverlap.into());
    }
    if k.overlap.param_gather && !k.overlap.grad_reduce {
        return Err(Unsupported::ParamGatherWithoutGradReduce.into());
    }
    if k.schedule == Schedule::Interleaved && k.chunks < 2 {
        return Err(Unsupported::InterleavedChunks.into());
    }
    if k.schedule == Schedule::Interleaved && k.pp == 1 {
        return Err(Unsupported::InterleavedOneStage.into());
    }
    check_schedule_microbatches(k)?;
    if k.zero > 0 && k.replicas() == 1 {
        return Err(Unsupported::ZeroOneReplica { zero: k.zero }.into());
    }
    if k.schedule != Schedule::Interleaved && k.chunks != 1 {
        return Err(Unsupported::ChunksWithoutInterleaving { chunks: k.chunks }.into());
    }
    if k.sequence_parallel && k.tp == 1 {
        return Err(Unsupported::SequenceParallelOneRank.into());
    }
    if k.fp8_params && !k.precision.keeps_fp8_params() {
        return Err(Unsupported::Fp8ParamsPrecision {
            precision: k.precision.name(),
        }
        .into());
    }
    if k.fp8_params && k.zero == 0 {
        return Err(Unsupported::Fp8ParamsZero { zero: k.zero }.into());
    }
    if k.fp8_dispatch && k.precision.gemm_peak() != Some("fp8") {
        return Err(Unsupported::Fp8DispatchPrecision {
            precision: k.precision.name(),
        }
        .into());
    }
    if k.fp8_dispatch && k.ep <= 1 {
        return Err(Unsupported::Fp8DispatchOneRank.into());
    }
    if k.node_dispatch && k.ep <= 1 {
        return Err(Unsupported::NodeDispatchOneRank.into());
    }
    Ok(())
}

/// Checks a count of devices per node, 1 to [`MAX_GPUS_PER_NODE`]: the one check of that range,
/// whether the count comes from a flag, a strategy file, a calibration table or a saved
/// analysis.
pub fn check_gpus_per_node(gpus_per_node: u64) -> std::result::Result<u64, StrategyError> {
    if gpus_per_node == 0 || gpus_per_node > MAX_GPUS_PER_NODE {
        return Err(StrategyError::GpusPerNodeRange { gpus_per_node });
    }
    Ok(gpus_per_node)
}

/// Checks that `devices` sit on nodes of `gpus_per_node` (itself checked): up to one node is
/// one node partly used, a smaller machine of the same kind; more must fill whole nodes, since
/// the links of a mesh over partly used nodes are those of no machine anyone has. The one
/// rule of every command; the refusal names the counts that fill nodes and `gpus_per_node`.
pub fn check_fills_nodes(
    devices: u64,
    gpus_per_node: u64,
) -> std::result::Result<(), StrategyError> {
    check_gpus_per_node(gpus_per_node)?;
    if devices > gpus_per_node && !devices.is_multiple_of(gpus_per_node) {
        return Err(StrategyError::PartNodes {
            gpus_per_node,
            devices,
        });
    }
    Ok(())
}

/// Checks how the knobs sit on nodes of `gpus_per_node` devices: the devices fill whole nodes
/// (or part of one, [`check_fills_nodes`]), and a tensor-parallel group should stay inside a
/// node. Returns the notes worth a warning, or why the machine is refused.
pub fn check_nodes(
    k: &Knobs,
    gpus_per_node: u64,
) -> std::result::Result<Vec<String>, StrategyError> {
    check_fills_nodes(k.devices(), gpus_per_node)?;
    let mut notes = Vec::new();
    if k.tp > gpus_per_node {
        notes.push(format!(
            "tensor parallelism of tp = {} spans nodes of {gpus_per_node} devices: its collectives cross the slower inter-node links",
            k.tp
        ));
    }
    Ok(notes)
}

/// Loads a strategy file.
pub fn load_strategy(path: &Path) -> Result<StrategyArgs> {
    parse_strategy(&Source::read(path)?)
}

/// Parses a strategy from its text.
pub fn parse_strategy(src: &Source) -> Result<StrategyArgs> {
    src.parse::<StrategyFile>()?.resolve(src, &[])
}

impl StrategyFile {
    /// The strategy it states, checked; errors point into `src` below `at` (the path of this
    /// mapping in the document: empty for a strategy file).
    pub fn resolve(self, src: &Source, at: &[&str]) -> Result<StrategyArgs> {
        let f = self;
        let err = |key: &str, m: String| {
            let mut path: Vec<&str> = at.to_vec();
            path.push(key);
            src.error_at(&path, m)
        };
        let schedule = match f.schedule.as_deref() {
            None => Schedule::OneFOneB,
            // What `rank` prints for a strategy without a pipeline.
            Some("none") if f.pp <= 1 => Schedule::OneFOneB,
            Some("none") => {
                return Err(err(
                    "schedule",
                    format!("schedule `none` means no pipeline, but pp is {}: give gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe or dualpipev", f.pp),
                ))
            }
            Some(s) => Schedule::from_name(s).ok_or_else(|| {
                err(
                    "schedule",
                    format!("unknown schedule `{s}` (gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, dualpipe, dualpipev; none when pp is 1)"),
                )
            })?,
        };
        let recompute = match f.recompute.as_deref() {
            None => Recompute::None,
            Some(s) => Recompute::from_name(s).ok_or_else(|| {
                err(
                    "recompute",
                    format!("unknown recomputation `{s}` (none, selective, full)"),
                )
            })?,
        };
        if let (Some(_), Some(_)) = (f.microbatches, f.micro_batch_size) {
            return Err(err(
                "micro_batch_size",
                "give `microbatches` (a count) or `micro_batch_size` (samples per micro-batch), not both".into(),
            ));
        }
        if f.micro_batch_size == Some(0) {
            return Err(err(
                "micro_batch_size",
                "`micro_batch_size` must be at least 1".into(),
            ));
        }
        // With a size, the count waits for the global batch; until then the schedule's checks
        // see a count they accept (the knobs are checked again with the real one).
        let microbatches = match (f.microbatches, f.micro_batch_size) {
            (Some(m), _) => m,
            (None, Some(_)) => f.pp,
            (None, None) => 1,
        };
        let knobs = Knobs {
            dp: f.dp,
            tp: f.tp,
            pp: f.pp,
            microbatches,
            schedule,
            chunks: f.chunks,
            sequence_parallel: f.sequence_parallel,
            recompute,
            zero: f.zero,
            ep: f.ep,
            cp: f.cp,
            overlap: f.overlap,
            precision: f.precision,
            pipeline_split: f.pipeline_split,
            fp8_params: f.fp8_params,
            fp8_dispatch: f.fp8_dispatch,
            node_dispatch: f.node_dispatch,
        };
        check_knobs(&knobs).map_err(|e| err(e.knob().unwrap_or("dp"), e.to_string()))?;
        if let Some(g) = f.gpus_per_node {
            check_nodes(&knobs, g).map_err(|e| err("gpus_per_node", e.to_string()))?;
        }
        Ok(StrategyArgs {
            knobs,
            gpus_per_node: f.gpus_per_node,
            splits: f.splits.0.into_iter().collect(),
            doc: f.doc,
            micro_batch_size: f.micro_batch_size,
        })
    }
}
