//! The event flow, composed as DistSim composes it: layer events (operator compute, collectives
//! on the critical path) → stage events under the pipeline schedule → per-device timelines on
//! four streams. Devices of one pipeline stage behave alike (their data- and tensor-parallel
//! ranks are symmetric), so one representative device per stage is simulated.
//!
//! Each stream runs its events in issue order, one at a time (as a CUDA stream does); an event
//! starts when its stream is free and its dependencies have ended. Tensor-parallel collectives
//! block the next operator (Megatron-LM's synchronous all-reduces); activations and their
//! gradients cross stages on the sender's point-to-point stream; the data-parallel gradient
//! reduction runs on its own stream when Megatron-LM's DDP launches it (see [`GradLaunch`]):
//! after the last micro-batch's backward, and under ZeRO ≥ 2 (sharded gradients) after every
//! micro-batch's backward.

use super::cost::{bus_factor, KernelClass, Rates};
pub use super::event::{Event, PerStream, Stream, What};
use super::plan::{Axis, Collective, PlanBlock, PlanComm, PlanOp, Step, TimingPlan};
use super::schedule::{device_of, program_with_pairs, stage_ranks, Pass, PerPass, Task};
use crate::parallel::amount::HeldParams;
use crate::parallel::evaluate::GRAD_BYTES;
use crate::strategy::{AxisKind, Mesh, MeshAxis, Recompute, Schedule};
use num_traits::{ToPrimitive, Zero};

mod device;
mod events;
mod layout;
mod memo;
mod pass;
mod work;
use device::*;
use events::*;
use layout::*;
use memo::*;
pub use work::*;

/// The smallest gradient bucket, in bytes of gradients on the wire: Megatron-LM's DDP default
/// of `max(40_000_000, 1_000_000 × dp·cp)` parameters (megatron/core/distributed/
/// distributed_data_parallel.py, `--ddp-bucket-size` unset), at [`GRAD_BYTES`] per element.
pub const BUCKET_BYTES: f64 = 40e6 * GRAD_BYTES as f64;

/// Megatron-LM's gradient bucket for `replicas` data- × context-parallel ranks, in gradient
/// bytes: 40 M parameters, or 1 M per rank where that is more (so that each rank's chunk of a
/// ring stays bandwidth-bound).
pub fn bucket_bytes(replicas: u64) -> f64 {
    BUCKET_BYTES.max(1e6 * replicas as f64 * GRAD_BYTES as f64)
}

/// Why a plan could not be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The plan is not valid (its knobs, stages or layer items): bad input where the plan was
    /// read from a file or built by hand.
    #[error("{0}")]
    Plan(String),
    /// The stages' programs wait on each other for ever: a fault of the schedule, not of the
    /// input.
    #[error("the pipeline schedule deadlocks")]
    Deadlock,
}

impl From<SimError> for crate::Error {
    fn from(e: SimError) -> crate::Error {
        match e {
            SimError::Plan(m) => crate::Error::Usage(m),
            SimError::Deadlock => crate::Error::Internal(e.to_string()),
        }
    }
}

/// A simulated step.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// All events (empty from [`simulate_times`]).
    pub events: Vec<Event>,
    /// The mesh.
    pub mesh: Mesh,
    /// Step time: the last event's end.
    pub iteration: f64,
    /// Pipeline flush: the end of the last backward.
    pub flush: f64,
    /// Per pipeline rank: seconds spent inside its passes (from each pass's first event to its
    /// last).
    pub work: Vec<f64>,
    /// Per pipeline rank: each stream's busy seconds.
    pub busy: Vec<PerStream<f64>>,
}

/// When a stage's input arrives, and the event that delivers it.
type Arrival = Option<(f64, usize)>;

struct SimStep {
    /// Whether the next step waits for it.
    blocking: bool,
    /// Launched once the previous matmul's input gradient (its first half) is done.
    after_dgrad: bool,
    /// A gather the next compute step's weight gradient (its second half) waits for: the
    /// input sequence parallelism gathers again overlaps the input gradient, and Megatron-LM
    /// waits for it before the weight-gradient GEMM.
    gather: bool,
    /// A backward compute step that is one GEMM with the next compute step (the query, key and
    /// value projections Megatron-LM runs as one linear layer: [`PlanOp::fused_with_next`]):
    /// the group's input gradients all run before its weight gradients, so a collective
    /// launched after the input gradient, or a gather the weight gradient waits for, meets the
    /// group's halves instead of one member's.
    ///
    /// [`PlanOp::fused_with_next`]: super::plan::PlanOp::fused_with_next
    fused_next: bool,
    /// A block of ring attention waits, besides the previous step, for the ring exchange that
    /// brings its keys and values: 1 the latest exchange issued, 2 the one before it (0: none).
    ring_wait: u8,
    op: Option<usize>,
    step: usize,
    stream: Stream,
    dur: f64,
    flops: f64,
    bytes: f64,
    recompute: bool,
}

fn f(r: &crate::sym::Rational) -> f64 {
    r.to_f64().unwrap_or(f64::MAX)
}

/// Data-parallel bytes on the wire per rank, by the group that moves them: the dp·cp replicas
/// (dense weights), and under expert parallelism the ranks holding the same experts (expert
/// weights, [`Axis::ExpertDp`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DpWire {
    /// Over the dp·cp replicas ([`Mesh::grad_axis`]).
    pub dense: f64,
    /// Over the ranks holding the same experts ([`Mesh::expert_grad_axis`]).
    pub expert: f64,
}

impl DpWire {
    /// Each group's from `bytes` of the plan's axis that carries it (dense weights' on
    /// [`Axis::Dp`], expert weights' on [`Axis::ExpertDp`]).
    pub fn by_axis(bytes: impl Fn(Axis) -> f64) -> DpWire {
        DpWire {
            dense: bytes(Axis::Dp),
            expert: bytes(Axis::ExpertDp),
        }
    }

    /// Both together.
    pub fn total(&self) -> f64 {
        self.dense + self.expert
    }

    /// Each scaled by `x`.
    pub fn times(&self, x: f64) -> DpWire {
        DpWire {
            dense: self.dense * x,
            expert: self.expert * x,
        }
    }
}

impl std::ops::Add for DpWire {
    type Output = DpWire;

    fn add(self, o: DpWire) -> DpWire {
        DpWire {
            dense: self.dense + o.dense,
            expert: self.expert + o.expert,
        }
    }
}

impl std::ops::AddAssign for DpWire {
    fn add_assign(&mut self, o: DpWire) {
        *self = *self + o;
    }
}

/// Seconds of `calls` equal collectives of `kind` moving `wire` (all calls together): each
/// group's share over its own axis, one after the other (Megatron-Core reduces the expert
/// weights' gradient buffers over the expert-data-parallel group beside the dense ones').
pub fn dp_seconds(
    rates: &Rates,
    kind: Collective,
    wire: DpWire,
    calls: f64,
    (dp, edp): (&MeshAxis, &MeshAxis),
) -> f64 {
    let one = |bytes: f64, axis: &MeshAxis| {
        if bytes > 0.0 {
            calls * rates.collective_seconds(kind, bytes / calls, axis)
        } else {
            0.0
        }
    };
    one(wire.dense, dp) + one(wire.expert, edp)
}

struct Ctx<'a> {
    plan: &'a TimingPlan,
    rates: &'a Rates,
    tp: &'a MeshAxis,
    /// The gradient group: the data-parallel ranks of every context-parallel rank (dp × cp).
    dp: MeshAxis,
    /// The ranks holding the same experts, which reduce the expert weights' gradients.
    edp: MeshAxis,
    /// The context-parallel ring.
    cp: MeshAxis,
    /// The expert-parallel groups: `ep` consecutive ranks of the cp × dp ones.
    ep: MeshAxis,
    /// Under node-limited dispatch, where the groups span nodes: the bytes one rank moves
    /// between nodes and inside its node per byte of the plan's flat all-to-all
    /// ([`crate::parallel::moe::NodeRoute`], from the plan's routing on this mesh).
    route: Option<[f64; 2]>,
    /// Per block, its gradient reductions as floats once (the backward that launches them runs
    /// them for every copy of the block): the operator that makes each ready, and what it does.
    grads: Vec<Vec<(usize, Grad)>>,
    /// Whether the schedule runs each backward as the input gradient and, as a task of its
    /// own, the weight gradient ([`crate::strategy::Schedule::splits_backward`]).
    split: bool,
}

/// A gradient reduction as the simulator issues it.
#[derive(Clone, Copy)]
enum Grad {
    /// A tensor- or expert-parallel collective issued at once: its stream, seconds and bytes.
    Now(Stream, f64, f64),
    /// Data-parallel bytes added to the bucket: on the wire, and as the bus carries them.
    Bucket { wire: DpWire, full: f64 },
}

/// Simulates one training step of `plan` on the machine `rates`, with `gpus_per_node` devices
/// per node.
pub fn simulate(
    plan: &TimingPlan,
    rates: &Rates,
    gpus_per_node: u64,
) -> Result<Simulation, SimError> {
    run(plan, rates, gpus_per_node, true)
}

/// As [`simulate`], keeping no events: the times and busy seconds only.
pub fn simulate_times(
    plan: &TimingPlan,
    rates: &Rates,
    gpus_per_node: u64,
) -> Result<Simulation, SimError> {
    run(plan, rates, gpus_per_node, false)
}

fn run(
    plan: &TimingPlan,
    rates: &Rates,
    gpus_per_node: u64,
    keep: bool,
) -> Result<Simulation, SimError> {
    plan.check().map_err(SimError::Plan)?;
    let mesh = Mesh::of(&plan.knobs, gpus_per_node);
    // Compute runs at the pace of the slowest of the step's devices.
    let rates = &*rates.paced(plan.knobs.devices());
    let layout = Layout::new(plan, rates, &mesh);
    let mut state = State::new(&layout, keep);
    layout.run_programs(&mut state)?;
    // A stack profile's host work once per step (zero without one).
    let iteration = layout.finish_step(&mut state, gpus_per_node) + rates.step_overhead;
    Ok(Simulation {
        events: state.rec.events,
        iteration,
        flush: state.flush,
        work: state.devices.iter().map(|d| d.work).collect(),
        busy: state.devices.iter().map(|d| d.busy).collect(),
        mesh,
    })
}

/// Per rank and virtual stage, the position in the rank's program of the stage's last task of
/// `grad_pass` (usize::MAX where the rank runs none of the stage).
fn last_grad_tasks(programs: &[Vec<Task>], nst: usize, grad_pass: Pass) -> Vec<Vec<usize>> {
    programs
        .iter()
        .map(|prog| {
            let mut last = vec![usize::MAX; nst];
            for (i, t) in prog.iter().enumerate() {
                if t.pass == grad_pass {
                    last[t.stage] = i;
                }
            }
            last
        })
        .collect()
}

/// Per virtual stage (`first`: each stage's first item), the bytes and seconds of a pipeline
/// send after it, through the slowest tier a send crosses: its last item's output (none before
/// an empty first stage).
fn boundary_sends(ctx: &Ctx, first: &[usize], tier: crate::strategy::Tier) -> Vec<(f64, f64)> {
    let plan = ctx.plan;
    (0..first.len() - 1)
        .map(|s| {
            let Some(last_item) = first[s + 1].checked_sub(1) else {
                return (0.0, 0.0);
            };
            let bytes = f(&plan.blocks[plan.items[last_item]].boundary_bytes);
            (bytes, send_seconds(ctx, bytes, tier))
        })
        .collect()
}
