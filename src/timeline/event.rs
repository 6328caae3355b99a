//! Timeline events: what runs on which stream of which device, when, and after what.

use super::schedule::Pass;
use serde::Serialize;
use std::ops::{Index, IndexMut};

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

/// One value per stream of a device, named by stream: a summary's busy seconds, or a simulated
/// device's free times and last events. Indexed by [`Stream`]; iterated in [`Stream::ALL`]'s
/// order. As JSON, an object keyed by the streams' names, without `cp_comm` while it holds its
/// default (zero: a stream that only context parallelism uses).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(bound(serialize = "T: Serialize + Default + PartialEq"))]
pub struct PerStream<T> {
    /// Operator compute (and the optimizer step).
    pub compute: T,
    /// Tensor-parallel collectives.
    pub tp_comm: T,
    /// Data-parallel gradient reductions.
    pub dp_comm: T,
    /// Pipeline sends.
    pub p2p: T,
    /// Expert-parallel all-to-alls.
    pub ep_comm: T,
    /// Context-parallel ring exchanges (listed under context parallelism only).
    #[serde(skip_serializing_if = "is_default")]
    pub cp_comm: T,
}

fn is_default<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

impl<T> PerStream<T> {
    /// The values in [`Stream::ALL`]'s order.
    pub fn iter(&self) -> std::array::IntoIter<&T, 6> {
        [
            &self.compute,
            &self.tp_comm,
            &self.dp_comm,
            &self.p2p,
            &self.ep_comm,
            &self.cp_comm,
        ]
        .into_iter()
    }

    /// `f` of each stream's value.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerStream<U> {
        PerStream {
            compute: f(self.compute),
            tp_comm: f(self.tp_comm),
            dp_comm: f(self.dp_comm),
            p2p: f(self.p2p),
            ep_comm: f(self.ep_comm),
            cp_comm: f(self.cp_comm),
        }
    }

    /// Each stream's value paired with its value in `other`.
    pub fn zip<U>(self, other: PerStream<U>) -> PerStream<(T, U)> {
        PerStream {
            compute: (self.compute, other.compute),
            tp_comm: (self.tp_comm, other.tp_comm),
            dp_comm: (self.dp_comm, other.dp_comm),
            p2p: (self.p2p, other.p2p),
            ep_comm: (self.ep_comm, other.ep_comm),
            cp_comm: (self.cp_comm, other.cp_comm),
        }
    }
}

impl<T: Copy> PerStream<T> {
    /// The value of stream `s`.
    pub fn of(&self, s: Stream) -> T {
        self[s]
    }
}

impl PerStream<f64> {
    /// Every stream's value together.
    pub fn total(&self) -> f64 {
        Stream::ALL.iter().map(|&s| self.of(s)).sum()
    }
}

impl<T> Index<Stream> for PerStream<T> {
    type Output = T;

    /// The match names every stream, so a stream the simulator gains cannot be left out of
    /// what lists [`Stream::ALL`].
    fn index(&self, s: Stream) -> &T {
        match s {
            Stream::Compute => &self.compute,
            Stream::TpComm => &self.tp_comm,
            Stream::DpComm => &self.dp_comm,
            Stream::P2p => &self.p2p,
            Stream::EpComm => &self.ep_comm,
            Stream::CpComm => &self.cp_comm,
        }
    }
}

impl<T> IndexMut<Stream> for PerStream<T> {
    fn index_mut(&mut self, s: Stream) -> &mut T {
        match s {
            Stream::Compute => &mut self.compute,
            Stream::TpComm => &mut self.tp_comm,
            Stream::DpComm => &mut self.dp_comm,
            Stream::P2p => &mut self.p2p,
            Stream::EpComm => &mut self.ep_comm,
            Stream::CpComm => &mut self.cp_comm,
        }
    }
}

impl<'a, T> IntoIterator for &'a PerStream<T> {
    type Item = &'a T;
    type IntoIter = std::array::IntoIter<&'a T, 6>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
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
    /// Under DualPipe, the exchange that sums a rank's copies' gradients with its mirror's.
    GradSum,
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
