//! Timeline events: what runs on which stream of which device, when, and after what.

use super::schedule::Pass;

/// A stream of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// Operator compute.
    Compute,
    /// Tensor-parallel collectives.
    TpComm,
    /// Data-parallel gradient reductions.
    DpComm,
    /// Pipeline sends.
    P2p,
    /// Expert-parallel all-to-alls (dispatch and combine of mixture-of-experts layers).
    EpComm,
    /// Context-parallel ring exchanges of keys and values (and their gradients).
    CpComm,
}

impl Stream {
    /// All streams in display order.
    pub const ALL: [Stream; 6] = [
        Stream::Compute,
        Stream::TpComm,
        Stream::DpComm,
        Stream::P2p,
        Stream::EpComm,
        Stream::CpComm,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::TpComm => "tp_comm",
            Stream::DpComm => "dp_comm",
            Stream::P2p => "p2p",
            Stream::EpComm => "ep_comm",
            Stream::CpComm => "cp_comm",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What an event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// Operator `op` of block `block` (recomputed when `recompute`).
    Op {
        /// Block.
        block: usize,
        /// Operator.
        op: usize,
        /// A recomputation before backward.
        recompute: bool,
    },
    /// Step `step` of a block's pass (a collective).
    Comm {
        /// Block.
        block: usize,
        /// Index in the pass's steps.
        step: usize,
        /// In the recomputed forward.
        recompute: bool,
    },
    /// A per-step gradient reduction (`grad` of the block, or a data-parallel bucket).
    Grad {
        /// Bucket number on this device.
        bucket: usize,
    },
    /// An activation (forward) or gradient (backward) sent to the next or previous stage.
    Send,
    /// The optimizer step.
    Optimizer,
    /// The all-reduce of the gradient norm (for clipping) over every device.
    GradNorm,
    /// The distributed optimizer's all-gather of the updated weights.
    ParamGather,
}

/// One event of a device's timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Pipeline rank of the device.
    pub device: usize,
    /// Its stream.
    pub stream: Stream,
    /// Start, seconds.
    pub start: f64,
    /// Duration, seconds.
    pub dur: f64,
    /// What it does.
    pub what: What,
    /// Pass.
    pub pass: Pass,
    /// Virtual stage.
    pub stage: usize,
    /// Layer item (index into the plan's items), when it belongs to one.
    pub item: Option<usize>,
    /// Micro-batch, when it belongs to one.
    pub microbatch: Option<usize>,
    /// FLOPs it computes.
    pub flops: f64,
    /// Bytes it sends per rank (collectives, sends).
    pub bytes: f64,
    /// Events that must end before it starts.
    pub deps: Vec<usize>,
}

impl Event {
    /// End, seconds.
    pub fn end(&self) -> f64 {
        self.start + self.dur
    }
}
