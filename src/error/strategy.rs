//! Why a strategy cannot run: bad knobs, knobs the model's sizes do not allow, or a pipeline
//! that cannot be laid out.

use crate::sym::{Poly, Rational, SymError};

/// Largest device count accepted anywhere (2^24): beyond any machine built.
pub const MAX_DEVICES: u64 = 1 << 24;

/// Most devices per node accepted.
pub const MAX_GPUS_PER_NODE: u64 = 1024;

/// The devices of each node of `gpus_per_node` a job on `devices` devices can use instead of all
/// of them: the largest power of two below a node that is not one (64 of a 72-GPU NVLink rack,
/// as MLPerf Training v5.0's GB200 NVL72 systems run), where the devices span more than one node
/// and fill that many of each; None otherwise.
pub fn partial_node_size(devices: u64, gpus_per_node: u64) -> Option<u64> {
    let g = gpus_per_node;
    if g == 0 || g.is_power_of_two() || devices <= g {
        return None;
    }
    let p = 1u64 << (u64::BITS - 1 - g.leading_zeros());
    (p >= 2 && devices.is_multiple_of(p)).then_some(p)
}

/// Why interleaving refuses a layer count, and the accounting that would take it where one
/// would.
fn interleaved_message(schedule: &str, chunks: u64, layers: u64, pp: u64, extra: u64) -> String {
    let n = pp * chunks;
    if extra == 0 {
        let hint = if (layers + 1).is_multiple_of(n) || (layers + 2).is_multiple_of(n) {
            " (or count the embedding or the loss as a layer of the split, as Megatron-Core's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split do)"
        } else {
            ""
        };
        format!("{schedule} with {chunks} chunks needs the {layers} layers divisible by pp × chunks = {n}{hint}")
    } else {
        format!(
            "{schedule} with {chunks} chunks needs the {layers} layers and the {extra} counted with them ({}) divisible by pp × chunks = {n}",
            layers + extra
        )
    }
}

/// Why a strategy is refused. The messages name the knob, the model item and the sizes
/// involved; [`crate::Error`] carries them unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StrategyError {
    /// A knob that must be at least 1 is 0.
    #[error("`{knob}` must be at least 1")]
    Zero {
        /// The knob: `dp`, `tp`, `pp`, `microbatches`, `chunks` or `cp`.
        knob: &'static str,
    },
    /// A knob beyond any machine built.
    #[error("`{knob}` = {value} is absurd (more than {MAX_DEVICES})")]
    Absurd {
        /// The knob.
        knob: &'static str,
        /// Its value.
        value: u64,
    },
    /// More devices than any machine built.
    #[error("dp × tp × pp × cp = {devices} devices is absurd (more than {MAX_DEVICES})")]
    AbsurdDevices {
        /// dp × tp × pp × cp.
        devices: u64,
    },
    /// An expert-parallel degree of 0 or beyond any machine.
    #[error("`ep` must be 1 to {MAX_DEVICES}, not {ep}")]
    EpRange {
        /// The degree.
        ep: u64,
    },
    /// The expert-parallel degree does not divide dp × cp: expert-parallel groups are drawn from
    /// the data- and context-parallel ranks (Megatron-Core's expert rank generator).
    #[error("`ep` = {ep} must divide dp × cp = {dp} × {cp}: expert-parallel groups are drawn from the data- and context-parallel ranks (an expert tensor-parallel size below tp, with which Megatron-Core's expert layers re-slice the tp × dp ranks, is not modelled)")]
    EpDividesDp {
        /// Expert-parallel degree.
        ep: u64,
        /// Data-parallel degree.
        dp: u64,
        /// Context-parallel degree.
        cp: u64,
    },
    /// A ZeRO stage other than 0 to 3.
    #[error("`zero` must be 0, 1, 2 or 3, not {zero}")]
    ZeroStage {
        /// The stage given.
        zero: u8,
    },
    /// A combination of knobs that is not modelled or that the frameworks refuse.
    #[error("{}", .0.message())]
    Unsupported(Unsupported),
    /// An FP8 (or FP4) recipe asked of a machine whose calibration table gives no FP8 (or FP4)
    /// peak: no such tensor cores (FP8: A100, V100, A40; FP4: before Blackwell).
    #[error("precision={precision} needs {} tensor cores, and calibration table `{table}` gives no `peak_flops.{peak}`: price it with bf16, or on a table with an {} peak ({})", peak.to_uppercase(), peak.to_uppercase(), if *peak == "fp4" { "b200, gb200-nvl72, gb300-nvl72" } else { "h100-sxm, h200-sxm, b200, …" })]
    NoLowPrecisionPeak {
        /// The calibration table.
        table: String,
        /// The FP8 or FP4 recipe asked for.
        precision: String,
        /// The peak it needs: `fp8` or `fp4`.
        peak: &'static str,
    },
    /// A block-scaled format the machine's tensor cores do not run (MXFP8 before Blackwell).
    #[error("precision={format} needs tensor cores that scale blocks themselves, and calibration table `{table}` does not list `{format}` under `device.scaled_formats`{listed}: price it with fp8 or fp8-block, or on a table that runs it (b200, gb200-nvl72, gb300-nvl72)")]
    NoScaledFormat {
        /// The calibration table.
        table: String,
        /// The format asked for.
        format: String,
        /// `" (it lists …)"` where the table lists others.
        listed: String,
    },
    /// DualPipe with an odd pp, or an odd count of micro-batches or fewer than 2·pp; DualPipeV
    /// with fewer than 2·pp micro-batches ([`crate::strategy::Schedule::refuses`]).
    #[error("{reason}")]
    DualPipeShape {
        /// What is wrong, with the values.
        reason: String,
    },
    /// `microbatches` not a multiple of `pp` under interleaving.
    #[error("`microbatches` = {microbatches} must be a multiple of pp = {pp} for interleaved-1f1b (Narayanan et al. SC'21)")]
    InterleavedMicrobatches {
        /// Micro-batches.
        microbatches: u64,
        /// Pipeline stages.
        pp: u64,
    },
    /// A device count per node of 0 or beyond any node built.
    #[error("`gpus_per_node` must be 1 to {MAX_GPUS_PER_NODE}, not {gpus_per_node}")]
    GpusPerNodeRange {
        /// The count given.
        gpus_per_node: u64,
    },
    /// More devices than one node that do not fill whole nodes.
    #[error("`gpus_per_node` = {gpus_per_node} does not divide the {devices} devices: nodes would be partly used ({}; nodes of another size: set `gpus_per_node`)", filling_counts(*.devices, *.gpus_per_node))]
    PartNodes {
        /// Devices per node.
        gpus_per_node: u64,
        /// Devices of the strategy.
        devices: u64,
    },
    /// A micro-batch size of 0.
    #[error("the micro-batch size must be at least 1")]
    MicroBatchSizeZero,
    /// A micro-batch size that does not divide the global batch over the data-parallel ranks.
    #[error("micro-batch size {size} does not divide the global batch {batch} over dp = {dp} (global batch ÷ (dp × size) must be a whole number of micro-batches)")]
    MicroBatchSize {
        /// Samples per micro-batch.
        size: u64,
        /// The global batch.
        batch: Rational,
        /// Data-parallel degree.
        dp: u64,
    },
    /// More micro-batches than a counter holds.
    #[error("micro-batch size {size}: too many micro-batches")]
    TooManyMicrobatches {
        /// Samples per micro-batch.
        size: u64,
    },
    /// A strategy file's micro-batch size refused.
    #[error("`micro_batch_size` = {size}: {source}")]
    FileMicroBatchSize {
        /// The size the file gives.
        size: u64,
        /// Why it is refused.
        source: Box<StrategyError>,
    },
    /// The batch does not split over data parallelism and micro-batches.
    #[error(
        "batch {symbol} = {batch} is not divisible by dp × microbatches = {dp} × {microbatches}"
    )]
    BatchNotDivisible {
        /// The batch symbol.
        symbol: String,
        /// Its value.
        batch: Rational,
        /// Data-parallel degree.
        dp: u64,
        /// Micro-batches.
        microbatches: u64,
    },
    /// Data parallelism or micro-batches asked of a model without a batch.
    #[error("model `{model}` has no batch symbol to split (a graph declares it: `roles: {{batch: SYMBOL}}`)")]
    NoBatch {
        /// The model.
        model: String,
    },
    /// A split degree that does not divide the index it splits.
    #[error(transparent)]
    NotDivisible(Box<NotDivisible>),
    /// A block repeat count that is not a positive integer.
    #[error("block `{block}` repeats {repeat} times")]
    Repeat {
        /// The block.
        block: String,
        /// Its repeat count.
        repeat: Rational,
    },
    /// A block repeat count beyond a 64-bit counter.
    #[error("repeat count too large")]
    RepeatTooLarge,
    /// Too many layers to place one by one.
    #[error("{copies} layers are too many to partition into pipeline stages (at most {most})")]
    TooManyLayers {
        /// Block copies of the model.
        copies: u64,
        /// The most a partition places.
        most: u64,
    },
    /// More stages than layers.
    #[error("pp = {pp} is more than the {layers} layers to place")]
    TooManyStages {
        /// Pipeline stages.
        pp: u64,
        /// Block copies of the model.
        layers: u64,
    },
    /// Interleaving (or ZB-V) whose chunks do not divide the layers.
    #[error("{}", interleaved_message(.schedule, *.chunks, *.layers, *.pp, *.extra))]
    InterleavedLayers {
        /// The schedule's name: interleaved 1F1B's, or ZB-V's (two chunks per device).
        schedule: &'static str,
        /// Model chunks per device.
        chunks: u64,
        /// Repeated layers of the model.
        layers: u64,
        /// Pipeline stages.
        pp: u64,
        /// The embedding and loss counted as layers of the split (0–2).
        extra: u64,
    },
    /// No pipeline partition was found.
    #[error("no pipeline partition")]
    NoPartition,
    /// Nothing to price: no stages, or no strategy.
    #[error("no {0}")]
    Nothing(&'static str),
    /// Context parallelism asked of a model without a sequence.
    #[error(
        "cp = {cp}: model `{model}` has no sequence to split (no symbol has the `sequence` role)"
    )]
    CpNoSequence {
        /// Context-parallel degree.
        cp: u64,
        /// The model.
        model: String,
    },
    /// Context parallelism asked of a model without attention.
    #[error("cp = {cp}: model `{model}` has no attention (no operator reading keys and values whose work grows with S²) to run as a ring")]
    CpNoAttention {
        /// Context-parallel degree.
        cp: u64,
        /// The model.
        model: String,
    },
    /// 2·cp does not divide the sequence.
    #[error("cp = {cp}: 2·cp = {} does not divide the sequence length {symbol} = {sequence} (causal load balancing cuts each sequence into 2·cp chunks)", 2 * .cp)]
    CpSequence {
        /// Context-parallel degree.
        cp: u64,
        /// The model's sequence symbol (its `sequence` role).
        symbol: String,
        /// The sequence length.
        sequence: Rational,
    },
    /// An expert-parallel degree that is not a single term.
    #[error("the expert-parallel degree `{ep}` must be a number or a product of symbols")]
    EpNotMonomial {
        /// The degree.
        ep: Poly,
    },
    /// A data-parallel degree the expert slots cannot be divided by.
    #[error("data-parallel degree `{dp}`: {source}")]
    DpDegree {
        /// The degree.
        dp: Poly,
        /// Why.
        source: SymError,
    },
    /// Expert parallelism asked of a model without experts.
    #[error("ep = {ep}: model `{model}` has no mixture-of-experts layer")]
    EpNoExperts {
        /// Expert-parallel degree.
        ep: u64,
        /// The model.
        model: String,
    },
    /// An expert-parallel degree that does not divide a layer's experts.
    #[error("ep = {ep} does not divide the {experts} experts of `{op}`")]
    EpExperts {
        /// Expert-parallel degree.
        ep: u64,
        /// Experts of the layer.
        experts: Rational,
        /// Its dispatch operator.
        op: String,
    },
    /// A formula could not be evaluated (an unbound symbol, a division by zero).
    #[error(transparent)]
    Sym(#[from] SymError),
}

/// A split degree that does not divide the index it splits.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{axis} = {degree} does not divide `{op}` index `{index}` = {formula} = {size}")]
pub struct NotDivisible {
    /// The axis or axes splitting the index: `dp`, `tp` or `dp × tp`.
    pub axis: &'static str,
    /// Their degree (the product for `dp × tp`).
    pub degree: u64,
    /// The operator.
    pub op: String,
    /// Its index.
    pub index: String,
    /// The index's size as a formula.
    pub formula: Poly,
    /// Its value on one rank (the sequence already divided by cp).
    pub size: Rational,
}

/// Knob combinations refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// Tensor-parallel communication overlap without sequence parallelism.
    TpCommOverlap,
    /// Parameter-gather overlap without the distributed optimizer.
    ParamGatherOverlap,
    /// Parameter-gather overlap without the gradient reduction's overlap.
    ParamGatherWithoutGradReduce,
    /// Interleaving with fewer than two chunks.
    InterleavedChunks,
    /// Interleaving with one stage.
    InterleavedOneStage,
    /// ZeRO with one replica of the weights.
    ZeroOneReplica {
        /// The ZeRO stage.
        zero: u8,
    },
    /// Chunks without interleaving.
    ChunksWithoutInterleaving {
        /// The chunks given.
        chunks: u64,
    },
    /// Sequence parallelism without tensor parallelism.
    SequenceParallelOneRank,
    /// FP8 parameters under a precision whose weights cannot be them.
    Fp8ParamsPrecision {
        /// The precision given, by name.
        precision: &'static str,
    },
    /// FP8 dispatch without an FP8 recipe of the GEMMs it feeds.
    Fp8DispatchPrecision {
        /// The precision given, by name.
        precision: &'static str,
    },
    /// FP8 dispatch without expert parallelism: nothing is dispatched.
    Fp8DispatchOneRank,
    /// Node-limited dispatch without expert parallelism: nothing is dispatched.
    NodeDispatchOneRank,
    /// Node-limited dispatch over an expert-parallel group whose nodes hold different numbers
    /// of its ranks.
    NodeDispatchUneven {
        /// The expert-parallel degree.
        ep: u64,
        /// Ranks of a group in one full node.
        per_node: u64,
    },
    /// FP8 dispatch of activations that are not 2-byte (bf16 or fp16) ones.
    Fp8DispatchActivations {
        /// Bytes per activation element of the model.
        bytes: u32,
    },
    /// FP8 parameters without sharded weights or optimizer state to gather from (ZeRO 0).
    Fp8ParamsZero {
        /// The ZeRO stage.
        zero: u8,
    },
}

impl Unsupported {
    /// Why the combination is refused.
    pub fn message(&self) -> String {
        match *self {
            Unsupported::TpCommOverlap => "`overlap` tp-comm needs tp > 1 with sequence parallelism (Megatron-LM asserts \
             `--tp-comm-overlap` only with `--sequence-parallel`)"
                .into(),
            Unsupported::ParamGatherOverlap => "`overlap` param-gather needs the distributed optimizer, zero 1 or 2 (Megatron-LM \
             asserts `--overlap-param-gather` only with `--use-distributed-optimizer`)"
                .into(),
            Unsupported::ParamGatherWithoutGradReduce => "`overlap` param-gather needs the gradient reduction overlapped too (Megatron-LM \
             asserts `--overlap-param-gather` only with `--overlap-grad-reduce`): drop `--no-overlap-grad-reduce` or `grad-reduce: false`"
                .into(),
            Unsupported::InterleavedChunks => "interleaved-1f1b needs `chunks` of at least 2".into(),
            Unsupported::InterleavedOneStage => "`schedule` interleaved-1f1b needs pp > 1: with one stage there is nothing to interleave".into(),
            Unsupported::ZeroOneReplica { zero } => format!(
                "`zero` = {zero} needs dp > 1 or cp > 1: ZeRO shards over the data- and context-parallel ranks, and one rank has nothing to shard"
            ),
            Unsupported::ChunksWithoutInterleaving { chunks } => {
                format!("`chunks` = {chunks} needs the interleaved-1f1b schedule")
            }
            Unsupported::SequenceParallelOneRank => "sequence parallelism needs tp > 1".into(),
            Unsupported::Fp8ParamsPrecision { precision } => format!(
                "`fp8_params` needs an FP8 recipe whose weights it keeps (fp8, fp8-current or fp8-block), not precision={precision}: \
                 an MXFP8 weight's columnwise copy is quantized again from higher precision and NVFP4 has its own parameter gather, \
                 neither modelled"
            ),
            Unsupported::Fp8DispatchPrecision { precision } => format!(
                "`fp8_dispatch` needs an FP8 recipe of the expert GEMMs the tokens are dispatched to (fp8, fp8-current, fp8-block or mxfp8), \
                 not precision={precision}: DeepSeek-V3 quantizes the activation before the MoE up-projections for their FP8 GEMM"
            ),
            Unsupported::Fp8DispatchOneRank => "`fp8_dispatch` needs expert parallelism, ep > 1: with one rank no token is dispatched".into(),
            Unsupported::NodeDispatchOneRank => "`node_dispatch` needs expert parallelism, ep > 1: with one rank no token is dispatched".into(),
            Unsupported::NodeDispatchUneven { ep, per_node } => format!(
                "`node_dispatch` prices an expert-parallel group spread evenly over its nodes, and ep = {ep} does not split into nodes of {per_node} of its ranks (devices per node ÷ tp): choose an ep that {per_node} divides"
            ),
            Unsupported::Fp8DispatchActivations { bytes } => format!(
                "`fp8_dispatch` prices 1 byte and a 4-byte scale per 128 elements against a 2-byte (bf16) activation, and this model's activations take {bytes} bytes"
            ),
            Unsupported::Fp8ParamsZero { zero } => format!(
                "`fp8_params` needs a gather of the weights, zero 1 or 2 (the distributed optimizer) or zero 3 (Megatron-FSDP), \
                 not zero {zero} (Megatron-LM asserts `--fp8-param-gather` only with the distributed optimizer, torch FSDP2 or \
                 Megatron-FSDP: megatron/training/arguments.py)"
            ),
        }
    }

    /// The knob a strategy file states that the refusal points at.
    pub fn knob(&self) -> &'static str {
        match self {
            Unsupported::TpCommOverlap
            | Unsupported::ParamGatherOverlap
            | Unsupported::ParamGatherWithoutGradReduce => "overlap",
            Unsupported::InterleavedChunks | Unsupported::ChunksWithoutInterleaving { .. } => {
                "chunks"
            }
            Unsupported::InterleavedOneStage => "schedule",
            Unsupported::ZeroOneReplica { .. } => "zero",
            Unsupported::SequenceParallelOneRank => "sequence_parallel",
            Unsupported::Fp8ParamsPrecision { .. } | Unsupported::Fp8ParamsZero { .. } => {
                "fp8_params"
            }
            Unsupported::Fp8DispatchPrecision { .. }
            | Unsupported::Fp8DispatchOneRank
            | Unsupported::Fp8DispatchActivations { .. } => "fp8_dispatch",
            Unsupported::NodeDispatchOneRank | Unsupported::NodeDispatchUneven { .. } => {
                "node_dispatch"
            }
        }
    }
}

impl StrategyError {
    /// The kind of refusal, in words: refusals of one kind differ only in the knobs, operators
    /// and sizes they name.
    pub fn kind(&self) -> &'static str {
        match self {
            StrategyError::Zero { .. } => "a knob is 0",
            StrategyError::Absurd { .. } | StrategyError::AbsurdDevices { .. } => {
                "more devices than any machine"
            }
            StrategyError::EpRange { .. } => "expert-parallel degree out of range",
            StrategyError::EpDividesDp { .. } => "ep does not divide dp × cp",
            StrategyError::ZeroStage { .. } => "no such ZeRO stage",
            StrategyError::Unsupported(_) => "knobs not modelled together",
            StrategyError::NoLowPrecisionPeak { .. } => "no FP8 on this machine",
            StrategyError::NoScaledFormat { .. } => "format not run by this machine",
            StrategyError::InterleavedMicrobatches { .. } => {
                "interleaving needs micro-batches a multiple of pp"
            }
            StrategyError::DualPipeShape { .. } => {
                "dualpipe needs pp even and micro-batches even, at least 2·pp (dualpipev at least 2·pp)"
            }
            StrategyError::GpusPerNodeRange { .. } | StrategyError::PartNodes { .. } => {
                "devices do not fill whole nodes"
            }
            StrategyError::MicroBatchSizeZero
            | StrategyError::MicroBatchSize { .. }
            | StrategyError::TooManyMicrobatches { .. }
            | StrategyError::FileMicroBatchSize { .. } => "micro-batch size does not fit the batch",
            StrategyError::BatchNotDivisible { .. } => "batch not divisible by dp × micro-batches",
            StrategyError::NoBatch { .. } => "no batch to split",
            StrategyError::NotDivisible(_) => "split degree does not divide an operator index",
            StrategyError::Repeat { .. } | StrategyError::RepeatTooLarge => {
                "block repeat count not a counter"
            }
            StrategyError::TooManyLayers { .. } => "too many layers to partition",
            StrategyError::TooManyStages { .. } => "more pipeline stages than layers",
            StrategyError::InterleavedLayers { .. } => {
                "model chunks (interleaving, ZB-V, DualPipeV) do not divide the layers"
            }
            StrategyError::NoPartition | StrategyError::Nothing(_) => "no pipeline partition",
            StrategyError::CpNoSequence { .. } | StrategyError::CpNoAttention { .. } => {
                "nothing for context parallelism to split"
            }
            StrategyError::CpSequence { .. } => "2·cp does not divide the sequence",
            StrategyError::EpNotMonomial { .. }
            | StrategyError::DpDegree { .. }
            | StrategyError::EpNoExperts { .. }
            | StrategyError::EpExperts { .. } => "expert parallelism does not fit the experts",
            StrategyError::Sym(_) => "formula cannot be evaluated",
        }
    }

    /// The knob of a strategy file the error is about, where it is about one.
    pub fn knob(&self) -> Option<&'static str> {
        match self {
            StrategyError::Zero { knob } | StrategyError::Absurd { knob, .. } => Some(knob),
            StrategyError::EpRange { .. } | StrategyError::EpDividesDp { .. } => Some("ep"),
            StrategyError::ZeroStage { .. } => Some("zero"),
            StrategyError::NoLowPrecisionPeak { .. } | StrategyError::NoScaledFormat { .. } => {
                Some("precision")
            }
            StrategyError::Unsupported(u) => Some(u.knob()),
            StrategyError::InterleavedMicrobatches { .. } => Some("microbatches"),
            StrategyError::DualPipeShape { .. } => Some("schedule"),
            StrategyError::GpusPerNodeRange { .. } | StrategyError::PartNodes { .. } => {
                Some("gpus_per_node")
            }
            _ => None,
        }
    }
}

/// The device counts nearest `devices` that fill whole nodes of `gpus_per_node`, in words.
fn filling_counts(devices: u64, gpus_per_node: u64) -> String {
    let g = gpus_per_node.max(1);
    let below = devices / g * g;
    let counts = match (below, below.checked_add(g)) {
        (0, Some(above)) => format!("{above} devices fill a node"),
        (b, Some(above)) => format!("{b} or {above} devices fill whole nodes"),
        (b, None) => format!("{b} devices fill whole nodes"),
    };
    // On nodes that are not a power of two (72-GPU NVLink racks), the largest power of two of
    // each node may tile the devices: 1,024 GPUs as 64 of each of 16 racks.
    match partial_node_size(devices, g) {
        Some(p) => format!("{counts}, or {p} devices of each of {} nodes", devices / p),
        None => counts,
    }
}

impl From<Unsupported> for StrategyError {
    fn from(u: Unsupported) -> StrategyError {
        StrategyError::Unsupported(u)
    }
}
