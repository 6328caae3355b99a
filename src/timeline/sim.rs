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

/// The weight-gradient share of an operator's backward, as floats: what ZB-H1 defers to a
/// step of its own.
struct WeightPart {
    /// Its FLOPs (the plan's [`PlanOp::weight_grad_flops`], exact from the rule).
    flops: f64,
    /// The backward's bytes in the proportion of its FLOPs.
    bytes: f64,
    /// The position in [`PlanOp::gemms`] of its GEMM: the last backward GEMM within the weight
    /// gradient's FLOPs (which add a bias's reduction to the weight's GEMM). The two backward
    /// GEMMs of a two-operand contraction have the same FLOPs, so only the shape, not the work,
    /// rides on which one this is; a linear layer's weight is its second operand, the last.
    gemm: Option<usize>,
}

impl WeightPart {
    fn of(o: &PlanOp) -> WeightPart {
        let w = f(&o.weight_grad_flops);
        let total = f(&o.backward_flops);
        let bytes = if total > 0.0 {
            f(&o.backward_bytes) * w / total
        } else {
            0.0
        };
        let gemm = (1..o.gemms.len()).rev().find(|&i| {
            let g = o.gemms[i].to_f64();
            w > 0.0 && 2.0 * g.iter().product::<f64>() <= w * (1.0 + 1e-9)
        });
        WeightPart {
            flops: w,
            bytes,
            gemm,
        }
    }
}

/// A gradient reduction as the simulator issues it.
#[derive(Clone, Copy)]
enum Grad {
    /// A tensor- or expert-parallel collective issued at once: its stream, seconds and bytes.
    Now(Stream, f64, f64),
    /// Data-parallel bytes added to the bucket: on the wire, and as the bus carries them.
    Bucket { wire: DpWire, full: f64 },
}

impl<'a> Ctx<'a> {
    fn new(plan: &'a TimingPlan, rates: &'a Rates, mesh: &'a Mesh) -> Ctx<'a> {
        let mut ctx = Ctx {
            plan,
            rates,
            tp: mesh.axis(AxisKind::Tp),
            dp: mesh.grad_axis(),
            edp: mesh.expert_grad_axis(plan.knobs.ep),
            cp: mesh.cp_axis(),
            ep: mesh.ep_axis(plan.knobs.ep),
            // A saved plan timed on nodes its groups spread over unevenly, which `cost` and
            // `timeline` refuse node dispatch on, moves its slots flat.
            route: crate::parallel::moe::node_route(
                &plan.knobs,
                plan.routing.as_ref(),
                mesh.ep_nodes(plan.knobs.ep),
            )
            .filter(|_| mesh.ep_even(plan.knobs.ep))
            .map(|r| {
                // The flat bytes are (ep − 1)/ep of the slots.
                let ep = plan.knobs.ep as f64;
                [&r.inter, &r.intra].map(|share| f(share) * ep / (ep - 1.0))
            }),
            grads: Vec::new(),
            split: plan.knobs.schedule.splits_backward(),
        };
        ctx.grads = plan
            .blocks
            .iter()
            .map(|b| {
                b.grads
                    .iter()
                    .map(|(op, c)| {
                        let g = match c.axis {
                            Axis::Tp | Axis::Ep => {
                                let (stream, dur, bytes) = ctx.comm(c);
                                Grad::Now(stream, dur, bytes)
                            }
                            Axis::Dp | Axis::ExpertDp => {
                                // The rules count bf16 gradients; autocast reduces fp32 ones.
                                let w = f(&c.bytes) * plan.knobs.precision.wire_factor() as f64;
                                let group = if c.axis == Axis::Dp {
                                    &ctx.dp
                                } else {
                                    &ctx.edp
                                };
                                Grad::Bucket {
                                    wire: DpWire::by_axis(|a| if a == c.axis { w } else { 0.0 }),
                                    full: w / bus_factor(c.kind, group.size.max(2)),
                                }
                            }
                        };
                        (*op, g)
                    })
                    .collect()
            })
            .collect();
        ctx
    }

    /// Seconds one micro-batch's backward spends adding the weight gradient of `params` local
    /// parameter elements to the fp32 gradient buffer ([`grad_accumulation_bytes`]).
    fn grad_accumulation_seconds(&self, params: f64) -> f64 {
        if params <= 0.0 {
            return 0.0;
        }
        let k = &self.plan.knobs;
        let bytes = grad_accumulation_bytes(params, k);
        self.rates.memory_seconds(bytes)
    }

    /// Seconds one forward spends casting `params` local weight elements to bf16 under
    /// autocast ([`crate::parallel::amount::weight_cast`]; none under bf16).
    fn weight_cast_seconds(&self, params: f64) -> f64 {
        let bytes = crate::parallel::amount::weight_cast(params, &self.plan.knobs);
        self.rates.memory_seconds(bytes)
    }

    /// [`dp_seconds`] over this mesh's gradient groups.
    fn dp_seconds(&self, kind: Collective, wire: DpWire, calls: f64) -> f64 {
        dp_seconds(self.rates, kind, wire, calls, (&self.dp, &self.edp))
    }

    fn comm(&self, c: &PlanComm) -> (Stream, f64, f64) {
        let (stream, axis) = match c.axis {
            Axis::Tp => (Stream::TpComm, self.tp),
            Axis::Dp => (Stream::DpComm, &self.dp),
            Axis::ExpertDp => (Stream::DpComm, &self.edp),
            Axis::Ep => (Stream::EpComm, &self.ep),
        };
        let calls = c.calls.max(1) as f64;
        match (&self.route, c.axis) {
            // Node by node: between the nodes and inside them at once, as long as the longer.
            (Some([to_nodes, in_node]), Axis::Ep) => {
                let (between, inside) = (f(&c.bytes) * to_nodes, f(&c.bytes) * in_node);
                let (across, within) = axis.by_node();
                let one = |bytes: f64, axis: &MeshAxis| {
                    self.rates.collective_seconds(c.kind, bytes / calls, axis)
                };
                let dur = calls * one(between, &across).max(one(inside, &within));
                (stream, dur, between)
            }
            _ => {
                let bytes = f(&c.bytes);
                let dur = calls * self.rates.collective_seconds(c.kind, bytes / calls, axis);
                (stream, dur, bytes)
            }
        }
    }

    /// Under `--tp-comm-overlap`: each blocking tensor-parallel collective of a forward pass
    /// next to a GEMM — the all-gather feeding it, the reduce-scatter it feeds — runs beside
    /// that GEMM, chunk by chunk (Transformer Engine's userbuffers): the collective no longer
    /// blocks, it starts with the GEMM, and the GEMM's step lasts as long as the longer of the
    /// two (the contention share is added where they overlap).
    fn overlap_tp(&self, steps: &mut [SimStep], b: &PlanBlock) {
        if !self.plan.knobs.overlap.tp_comm {
            return;
        }
        let gemm = |s: &SimStep| {
            s.op.is_some_and(|k| b.ops[k].matmul && !b.ops[k].fused_attention)
        };
        let mut i = 0;
        while i < steps.len() {
            let tp =
                steps[i].stream == Stream::TpComm && steps[i].blocking && !steps[i].after_dgrad;
            if tp {
                let partner = if i + 1 < steps.len() && gemm(&steps[i + 1]) {
                    Some(i + 1)
                } else if i > 0 && gemm(&steps[i - 1]) && steps[i - 1].blocking {
                    // Fed by the GEMM before it: issue it with that GEMM.
                    steps.swap(i - 1, i);
                    Some(i)
                } else {
                    None
                };
                if let Some(j) = partner {
                    let c = if j == i + 1 { i } else { i - 1 };
                    steps[c].blocking = false;
                    // Pushed beside a running collective, the GEMM is lengthened by the
                    // contention share of the overlap: this makes it last max(GEMM × (1 + c),
                    // collective), never longer than the two one after the other.
                    let c_share = self.rates.contention;
                    steps[j].dur = steps[j].dur.max(steps[c].dur / (1.0 + c_share));
                    i = j + 1;
                    continue;
                }
            }
            i += 1;
        }
    }

    /// An attention operator under context parallelism, as Megatron-Core's ring attention runs
    /// it: its work in cp blocks, one per ring step; before each of the first cp − 1 blocks the
    /// rank issues the exchange of the keys and values the next block needs (point-to-point on
    /// the context-parallel stream; in the backward pass the keys and values travel with their
    /// gradients, twice the bytes), and each block after the first waits for the exchange issued
    /// before its predecessor. An exchange is hidden behind the block it runs beside, and only
    /// the part longer than that block shows; a block slows by the table's contention share
    /// while an exchange runs beside it (as every compute kernel next to a collective does).
    fn ring(
        &self,
        i: usize,
        recompute: bool,
        backward: bool,
        ring: f64,
        block: impl Fn(u64) -> SimStep,
    ) -> Vec<SimStep> {
        let cp = self.plan.knobs.cp;
        let bytes = if backward { 2.0 * ring } else { ring };
        let dur = self
            .rates
            .collective_seconds(Collective::OneStep, bytes, &self.cp);
        let mut out = Vec::new();
        for j in 0..cp {
            if j + 1 < cp {
                out.push(SimStep {
                    blocking: false,
                    after_dgrad: false,
                    gather: false,
                    fused_next: false,
                    ring_wait: 0,
                    op: None,
                    step: i,
                    stream: Stream::CpComm,
                    dur,
                    flops: 0.0,
                    bytes,
                    recompute,
                });
            }
            out.push(block(j));
        }
        out
    }

    /// The events of one block's pass, with their durations.
    fn steps(&self, bi: usize, pass: Pass) -> Vec<SimStep> {
        let b = &self.plan.blocks[bi];
        if pass == Pass::Weight {
            return self.weight_steps(bi);
        }
        let to_sim = |(i, s): (usize, &Step), recompute: bool| -> Vec<SimStep> {
            match s {
                Step::Compute(k) => self.compute_steps(b, pass, (i, *k), recompute),
                Step::Collective(c) | Step::Overlapped(c) | Step::AfterDgrad(c) => {
                    let (stream, dur, bytes) = self.comm(c);
                    vec![SimStep {
                        blocking: !matches!(s, Step::Overlapped(_)),
                        // With the weight gradient deferred, nothing of the operator is left to
                        // overlap a collective launched after its input gradient: it follows it.
                        after_dgrad: matches!(s, Step::AfterDgrad(_)) && !self.split,
                        gather: matches!(s, Step::Overlapped(_)),
                        fused_next: false,
                        ring_wait: 0,
                        op: None,
                        step: i,
                        stream,
                        dur,
                        flops: 0.0,
                        bytes,
                        recompute,
                    }]
                }
            }
        };
        if pass == Pass::Forward {
            let mut steps: Vec<SimStep> = b
                .forward
                .iter()
                .enumerate()
                .flat_map(|s| to_sim(s, false))
                .collect();
            self.overlap_tp(&mut steps, b);
            return steps;
        }
        let mut out = Vec::new();
        let recompute = if b.layer {
            self.plan.knobs.recompute
        } else {
            Recompute::None
        };
        if recompute == Recompute::Full {
            let mut steps: Vec<SimStep> = b
                .forward
                .iter()
                .enumerate()
                .flat_map(|s| to_sim(s, true))
                .collect();
            self.overlap_tp(&mut steps, b);
            out.extend(steps);
        }
        let core = |s: &Step| matches!(s, Step::Compute(k) if b.ops[*k].attention_core);
        let mut pending = recompute == Recompute::Selective;
        for (i, s) in b.backward.iter().enumerate() {
            if pending && core(s) {
                pending = false;
                for (j, fs) in b.forward.iter().enumerate() {
                    if core(fs) {
                        out.extend(to_sim((j, fs), true));
                    }
                }
            }
            out.extend(to_sim((i, s), false));
        }
        out
    }

    /// The weight-gradient pass of block `bi` (ZB-H1's W): in the backward's order, one compute
    /// step per operator with parameters or a weight gradient, its weight-gradient GEMM (one
    /// kernel) with the addition of its gradient to the buffer and its own parameter-gradient
    /// kernel; the operator's gradient reductions follow it. Empty unless the schedule splits
    /// the backward.
    fn weight_steps(&self, bi: usize) -> Vec<SimStep> {
        let b = &self.plan.blocks[bi];
        if !self.split {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, s) in b.backward.iter().enumerate() {
            let Step::Compute(k) = *s else {
                continue;
            };
            let o = &b.ops[k];
            let w = WeightPart::of(o);
            let reduces = self.grads[bi].iter().any(|(g, _)| *g == k);
            if w.flops <= 0.0 && o.params.is_zero() && o.param_grad_bytes.is_zero() && !reduces {
                continue;
            }
            let gemms: Vec<[f64; 4]> = w.gemm.iter().map(|&g| o.gemms[g].to_f64()).collect();
            let (accumulate, own) = self.own_seconds(o, true);
            let param_kernel = own - self.fan_in_seconds(o);
            let dur = self
                .rates
                .gemm_seconds(w.flops, w.bytes, self.class(o), 1, &gemms)
                + accumulate
                + param_kernel;
            out.push(SimStep {
                blocking: true,
                after_dgrad: false,
                gather: false,
                fused_next: false,
                ring_wait: 0,
                op: Some(k),
                step: i,
                stream: Stream::Compute,
                dur,
                flops: w.flops,
                bytes: 0.0,
                recompute: false,
            });
        }
        out
    }

    /// Step `i` of block `b`'s `pass`, operator `k` computing (in the recomputed forward when
    /// `recompute`): one step, or under context parallelism, for an attention operator, its
    /// ring of blocks and exchanges ([`Ctx::ring`]).
    fn compute_steps(
        &self,
        b: &PlanBlock,
        pass: Pass,
        (i, k): (usize, usize),
        recompute: bool,
    ) -> Vec<SimStep> {
        let cp = self.plan.knobs.cp;
        let o = &b.ops[k];
        let backward = pass == Pass::Backward && !recompute;
        // Under ZB-H1 the backward computes the input gradient only: the weight's share (its
        // GEMM, one kernel) runs in the weight pass ([`Ctx::weight_steps`]).
        let w = (backward && self.split).then(|| WeightPart::of(o));
        let (fl, by) = match (backward, &w) {
            (true, Some(w)) => (
                f(&o.backward_flops) - w.flops,
                f(&o.backward_bytes) - w.bytes,
            ),
            (true, None) => (f(&o.backward_flops), f(&o.backward_bytes)),
            _ => (f(&o.forward_flops), f(&o.forward_bytes)),
        };
        let wgemm = w.as_ref().and_then(|w| w.gemm);
        // The backward runs the block's operators in reverse: operator k − 1 next.
        let fused_next = backward
            && k > 0
            && b.ops[k - 1].fused_with_next
            && matches!(b.backward.get(i + 1), Some(Step::Compute(j)) if j + 1 == k);
        let gemms: Vec<[f64; 4]> = match (backward, o.gemms.split_first()) {
            (false, Some((g, _))) => vec![g.to_f64()],
            (true, Some((_, rest))) => (1..=rest.len())
                .filter(|i| Some(*i) != wgemm)
                .map(|i| o.gemms[i].to_f64())
                .collect(),
            (_, None) => Vec::new(),
        };
        // The weight's GEMM (its kernel, whether or not its shape is known) leaves the backward.
        let weight_kernel = w.as_ref().is_some_and(|w| w.flops > 0.0);
        let kernels = o
            .kernels(backward)
            .saturating_sub(u32::from(weight_kernel))
            .max(1);
        let step = |fl: f64, by: f64, ring_wait: u8| SimStep {
            blocking: true,
            after_dgrad: false,
            gather: false,
            fused_next,
            ring_wait,
            op: Some(k),
            step: i,
            stream: Stream::Compute,
            dur: self
                .rates
                .gemm_seconds(fl, by, self.class(o), kernels, &gemms),
            flops: fl,
            bytes: 0.0,
            recompute,
        };
        let (mut accumulate, mut own_kernels) = self.own_seconds(o, backward);
        if w.is_some() {
            // The gradient's addition to the buffer and its own kernel go with the weight.
            accumulate = 0.0;
            own_kernels = self.fan_in_seconds(o);
        }
        accumulate += self.fp8_cast_seconds(o, backward, recompute);
        let ring = f(&o.ring_bytes);
        if cp <= 1 || ring <= 0.0 {
            let mut one = step(fl, by, 0);
            one.dur += accumulate + own_kernels;
            return vec![one];
        }
        self.ring(i, recompute, backward, ring, |j| {
            let n = cp as f64;
            // Block j computes on the keys and values of exchange j − 1: the one issued before
            // its own (the latest, for the last block, which issues none).
            let wait = match j {
                0 => 0,
                _ if j + 1 < cp => 2,
                _ => 1,
            };
            let mut part = step(fl / n, by / n, wait);
            if j + 1 == cp {
                part.dur += accumulate;
            }
            part
        })
    }

    /// The kind of kernel `o` runs as under the plan's precision: its low-precision GEMMs at
    /// the FP4 peak under NVFP4.
    fn class(&self, o: &PlanOp) -> KernelClass {
        match o.class() {
            KernelClass::Fp8Matmul
                if self.plan.knobs.precision.fp8_bytes().is_some_and(|b| b.fp4) =>
            {
                KernelClass::Fp4Matmul
            }
            c => c,
        }
    }

    /// Seconds an FP8 GEMM `o` spends casting its operands in a pass (none for other
    /// operators), each cast its own memory-bound kernel ([`Fp8Operands::cast_bytes`]): a
    /// forward casts its input, a backward its output gradient; the weight is cast once a step
    /// (on the first micro-batch, reused by the others and by recomputed forwards), timed as one
    /// kernel and spread evenly over the step's forwards.
    fn fp8_cast_seconds(&self, o: &PlanOp, backward: bool, recompute: bool) -> f64 {
        let (Some(ops), Some(bytes)) = (o.fp8_operands(), self.plan.knobs.fp8_bytes()) else {
            return 0.0;
        };
        let [input, grad, weight] = ops.cast_bytes(bytes).map(|b| f(&b));
        let kernel = |bytes: f64| self.rates.op_seconds(0.0, bytes, KernelClass::Other, 1);
        let input = if o.fp8_casts_input {
            kernel(input)
        } else {
            0.0
        };
        if backward {
            kernel(grad)
        } else if recompute {
            input
        } else {
            input + kernel(weight) / self.plan.knobs.microbatches.max(1) as f64
        }
    }

    /// Seconds operator `o` spends besides its kernels in a pass (its `backward` or a forward):
    /// the weight's own traffic, and the kernels of its own a backward runs.
    fn own_seconds(&self, o: &PlanOp, backward: bool) -> (f64, f64) {
        // The weight's own traffic: its gradient added to the buffer after a backward, its bf16
        // cast before a forward under autocast.
        let accumulate = if backward {
            self.grad_accumulation_seconds(f(&o.params))
        } else {
            self.weight_cast_seconds(f(&o.params))
        };
        // Kernels of their own once per backward: the parameter gradients' (a bias's reduction,
        // layer normalisation's second pass) and autograd's sums of the gradients whose last
        // reader this is.
        let own_kernels = if backward {
            let own = |bytes: &crate::sym::Rational| {
                self.rates.op_seconds(0.0, f(bytes), KernelClass::Other, 1)
            };
            own(&o.param_grad_bytes) + own(&o.fan_in_bytes)
        } else {
            0.0
        };
        (accumulate, own_kernels)
    }

    /// Seconds of autograd's sums of the gradients whose last reader is `o`, a kernel of their
    /// own in its backward (part of [`Ctx::own_seconds`]).
    fn fan_in_seconds(&self, o: &PlanOp) -> f64 {
        self.rates
            .op_seconds(0.0, f(&o.fan_in_bytes), KernelClass::Other, 1)
    }
}

/// Whether two times near `t` are equal to rounding: within relative 1e-12 of `t` (what the
/// steady-state shortcuts of [`Layout::run_task`] and [`Layout::run_layers`] compare their
/// states with).
fn near_at(t: f64) -> impl Fn(f64, f64) -> bool {
    let tol = 1e-12 * t.abs().max(1e-9);
    move |x, y| (x - y).abs() <= tol
}

/// The streams that issued events between two states: those whose last event changed.
fn used_streams(
    before: &PerStream<Option<usize>>,
    after: &PerStream<Option<usize>>,
) -> PerStream<bool> {
    after.zip(*before).map(|(a, b)| a != b)
}

/// A device's state after a layer of a task, for recognising the steady state of a run of
/// equal layers (see [`Layout::run_layers`]): when a layer changed it exactly as the layer before did, shifted
/// by the same seconds, so does every further layer of the run.
#[derive(Clone, Copy)]
struct Snapshot {
    /// The layer's block.
    block: usize,
    /// The task's time (what the next layer waits for).
    t: f64,
    /// Each stream's free time, busy seconds and last event.
    free: PerStream<f64>,
    busy: PerStream<f64>,
    last: PerStream<Option<usize>>,
    /// The last blocking event and the last compute step (start, end).
    prev: Option<usize>,
    last_compute: Option<(f64, f64)>,
    /// Events issued so far.
    count: usize,
}

impl Snapshot {
    fn of(dev: &Device, cur: &Cursor, count: usize) -> Snapshot {
        Snapshot {
            block: usize::MAX,
            t: cur.t,
            free: dev.free,
            busy: dev.busy,
            last: dev.last,
            prev: cur.prev,
            last_compute: cur.last_compute,
            count,
        }
    }

    /// The streams used between `from` and `to` (their last event changed).
    fn used(from: &Snapshot, to: &Snapshot) -> PerStream<bool> {
        used_streams(&from.last, &to.last)
    }

    /// Whether `self` has the `used` streams as far from its task's time as `to` has them, the
    /// other streams free by `idle_by`, and the last compute step where `to` has it. Equal to
    /// rounding: relative 1e-12 of the times.
    fn placed_as(&self, to: &Snapshot, used: PerStream<bool>, idle_by: f64) -> bool {
        let near = near_at(self.t);
        let streams = Stream::ALL.iter().all(|&s| {
            if used[s] {
                near(self.free[s] - self.t, to.free[s] - to.t)
            } else {
                self.free[s] <= idle_by
            }
        });
        let compute = match (self.last_compute, to.last_compute) {
            (Some((s1, e1)), Some((s0, e0))) => {
                near(s1 - self.t, s0 - to.t) && near(e1 - self.t, e0 - to.t)
            }
            (None, None) => true,
            _ => false,
        };
        streams && compute
    }

    /// Whether the layer that led from `b` to `self` left the device as the layer before left
    /// it in `b`: every stream it used is as far from the task's time, every stream it did not
    /// use was free before the layer began (so it delayed neither this layer, through
    /// contention, nor any later one), and the last compute step sits where it sat. Then
    /// `b → self` is a steady step: every further layer of the run repeats it.
    fn repeats(&self, b: &Snapshot) -> bool {
        let shift = self.t - b.t;
        !shift.is_nan() && shift > 0.0 && self.placed_as(b, Snapshot::used(b, self), b.t)
    }

    /// Whether `self` (after a layer of a run) is the state the steady step `from → to` leads
    /// to: the streams that step uses as far from the task's time as in `to`, the others free,
    /// the last compute step where it sat. Every further layer of the run then repeats that
    /// step.
    fn is_steady(&self, from: &Snapshot, to: &Snapshot) -> bool {
        self.placed_as(to, Snapshot::used(from, to), self.t)
    }

    /// `self` moved on by `n` more layers, each the step from `from` to `to`: the times shifted
    /// by `to.t − from.t`, the same busy seconds added and as many events issued.
    fn advance(&mut self, from: &Snapshot, to: &Snapshot, n: usize) {
        let shift = to.t - from.t;
        let events = to.count - from.count;
        let x = n as f64;
        let used = Snapshot::used(from, to);
        for s in Stream::ALL {
            if used[s] {
                self.free[s] += x * shift;
                self.busy[s] += x * (to.busy[s] - from.busy[s]);
                self.last[s] = self.last[s].map(|id| id + n * events);
            }
        }
        self.t += x * shift;
        self.last_compute = self
            .last_compute
            .map(|(s, e)| (s + x * shift, e + x * shift));
        self.prev = self.prev.map(|id| id + n * events);
        self.count += n * events;
    }

    /// Writes the state back.
    fn store(&self, dev: &mut Device, cur: &mut Cursor, count: &mut usize) {
        dev.free = self.free;
        dev.busy = self.busy;
        dev.last = self.last;
        cur.t = self.t;
        cur.prev = self.prev;
        cur.last_compute = self.last_compute;
        *count = self.count;
    }
}

/// The most device states remembered per virtual stage and pass (a pipeline's tasks meet one
/// or two in its steady phase, a few more while it fills and drains).
const MEMOS_PER_TASK: usize = 8;

/// A device as a task of layers finds it: its start, each stream's free time after the start
/// (0 when the stream is free by then: it can delay nothing the task issues, since everything
/// the task issues is ready at the start or later), and the counters the task adds to.
struct TaskEntry {
    t0: f64,
    after: PerStream<f64>,
    busy: PerStream<f64>,
    last: PerStream<Option<usize>>,
    count: usize,
}

impl TaskEntry {
    fn of(dev: &Device, t0: f64, count: usize) -> TaskEntry {
        TaskEntry {
            t0,
            after: dev.free.map(|f| (f - t0).max(0.0)),
            busy: dev.busy,
            last: dev.last,
            count,
        }
    }
}

/// What a task's layers did to its device, relative to the state it met ([`TaskEntry`]): a
/// later task of the same stage and pass that meets the same state (to rounding: relative 1e-12
/// of the times) does the same, shifted to its own start, because the event loop only takes
/// maxima and sums of times.
#[derive(Clone, Copy)]
struct TaskMemo {
    /// The state met: each stream's free time after the start.
    entry: PerStream<f64>,
    /// The streams the task used, their free times after it (from its start) and their busy
    /// seconds added.
    used: PerStream<bool>,
    free: PerStream<f64>,
    busy: PerStream<f64>,
    /// The task's end and its first event's start, from its start.
    end: f64,
    started: Option<f64>,
    /// Events issued; each used stream's last event and the last blocking event, counted from
    /// the task's first.
    events: usize,
    last: PerStream<Option<usize>>,
    prev: Option<usize>,
}

impl TaskMemo {
    fn of(e: &TaskEntry, dev: &Device, cur: &Cursor, count: usize) -> TaskMemo {
        let used = used_streams(&e.last, &dev.last);
        TaskMemo {
            entry: e.after,
            used,
            free: dev.free.map(|f| f - e.t0),
            busy: dev.busy.zip(e.busy).map(|(now, then)| now - then),
            end: cur.t - e.t0,
            started: cur.started.map(|s| s - e.t0),
            events: count - e.count,
            last: dev
                .last
                .zip(used)
                .map(|(last, used)| last.filter(|_| used).map(|id| id - e.count)),
            prev: cur.prev.filter(|&id| id >= e.count).map(|id| id - e.count),
        }
    }

    /// Whether `e` is the state this task met.
    fn met(&self, e: &TaskEntry) -> bool {
        let near = near_at(e.t0);
        // The streams whose free times tell states apart most often first (a task starts on a
        // free compute stream): the same answer in fewer comparisons.
        const ORDER: [Stream; 6] = [
            Stream::P2p,
            Stream::DpComm,
            Stream::TpComm,
            Stream::EpComm,
            Stream::CpComm,
            Stream::Compute,
        ];
        ORDER.iter().all(|&s| near(e.after[s], self.entry[s]))
    }

    /// Does to `dev` (from the task's start, `cur.t`) what the remembered task did.
    fn apply(&self, dev: &mut Device, cur: &mut Cursor, count: &mut usize) {
        let (t0, base) = (cur.t, *count);
        for s in Stream::ALL {
            if self.used[s] {
                dev.free[s] = t0 + self.free[s];
                dev.busy[s] += self.busy[s];
                dev.last[s] = self.last[s].map(|o| base + o);
            }
        }
        if let Some(o) = self.prev {
            cur.prev = Some(base + o);
        }
        cur.started = self.started.map(|s| t0 + s);
        *count = base + self.events;
        cur.t = t0 + self.end;
    }
}

struct Device {
    /// Share of compute throughput a running collective takes (the table's contention).
    contention: f64,
    free: PerStream<f64>,
    last: PerStream<Option<usize>>,
    busy: PerStream<f64>,
    work: f64,
    bucket_wire: DpWire,
    bucket_full: f64,
    bucket_ready: Option<(usize, f64)>,
    buckets: usize,
    /// Gradients of finished model chunks waiting for their launch (interleaved schedule):
    /// on the wire, as the bus carries them, ready at (event, time), launched after the
    /// device's backward task of this index, in this many calls.
    pending: Vec<Pending>,
    /// Backward tasks finished.
    backwards: usize,
    /// When its previous task's last blocking step ended: a device runs its program in order.
    task_end: f64,
    /// Seconds of its first forward task (what an overlapped parameter gather can hide behind
    /// in the next step).
    first_forward: Option<f64>,
}

/// A model chunk's gradients waiting for their launch.
struct Pending {
    wire: DpWire,
    ready: (usize, f64),
    after: usize,
    calls: f64,
}

/// Where events go: kept for traces and tests, or only counted when just the times matter.
struct Recorder {
    keep: bool,
    events: Vec<Event>,
    count: usize,
}

impl Recorder {
    /// The dependencies of a new event: `prev`, when events are kept (a timing-only run
    /// allocates none).
    fn deps(&self, prev: Option<usize>) -> Vec<usize> {
        if self.keep {
            prev.into_iter().collect()
        } else {
            Vec::new()
        }
    }
}

impl Device {
    /// Issues `e` on its stream once `ready`; returns its id, start and end.
    fn push(&mut self, rec: &mut Recorder, e: Event, ready: f64) -> (usize, f64, f64) {
        let (stream, dur) = (e.stream, e.dur);
        self.push_with(rec, stream, dur, ready, move || e)
    }

    /// [`Device::push`] of an event of `dur` seconds on `stream` that `event` builds, called
    /// only when the events are kept (most simulations only time them).
    #[inline]
    fn push_with(
        &mut self,
        rec: &mut Recorder,
        stream: Stream,
        mut dur: f64,
        ready: f64,
        event: impl FnOnce() -> Event,
    ) -> (usize, f64, f64) {
        let start = ready.max(self.free[stream]);
        if stream == Stream::Compute && self.contention > 0.0 {
            // A collective still running on another stream takes its share of the SMs and
            // memory bandwidth for as long as the two overlap.
            let comm_until = [
                Stream::TpComm,
                Stream::DpComm,
                Stream::P2p,
                Stream::EpComm,
                Stream::CpComm,
            ]
            .iter()
            .map(|&c| self.free[c])
            .fold(0.0, f64::max);
            let overlap = (comm_until - start).clamp(0.0, dur);
            dur += self.contention * overlap;
        }
        let end = start + dur;
        if rec.keep {
            let mut e = event();
            e.start = start;
            e.dur = dur;
            if let Some(prev) = self.last[stream] {
                if !e.deps.contains(&prev) {
                    e.deps.push(prev);
                }
            }
            rec.events.push(e);
        }
        self.free[stream] = end;
        self.busy[stream] += dur;
        let id = rec.count;
        rec.count += 1;
        self.last[stream] = Some(id);
        (id, start, end)
    }
}

/// One pass's serial chain on one device: its seconds, and of them those spent waiting for a
/// collective (the compute stream idle).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChainSeconds {
    /// The whole chain: its operators and the collectives the next operator waits for.
    pub seconds: f64,
    /// The collectives of the chain, which the compute stream waits for.
    pub waits: f64,
}

/// Per block of `plan`: seconds of the serial chain of one micro-batch's forward and backward
/// pass on one device (operators and the collectives the next operator waits for, under the
/// plan's recomputation), and of them the waits; collectives that overlap other work are left
/// out. Every simulated device runs these chains one after another, so they bound its time
/// from below.
pub fn pass_chains(
    plan: &TimingPlan,
    rates: &Rates,
    gpus_per_node: u64,
) -> Vec<PerPass<ChainSeconds>> {
    let k = &plan.knobs;
    let mesh = Mesh::of(k, gpus_per_node);
    let ctx = Ctx::new(plan, rates, &mesh);
    let chain = |steps: Vec<SimStep>| -> ChainSeconds {
        let mut c = ChainSeconds::default();
        for s in steps.iter().filter(|s| s.blocking && !s.after_dgrad) {
            c.seconds += s.dur;
            if s.stream != Stream::Compute {
                c.waits += s.dur;
            }
        }
        c
    };
    (0..plan.blocks.len())
        .map(|b| PerPass {
            forward: chain(ctx.steps(b, Pass::Forward)),
            backward: chain(ctx.steps(b, Pass::Backward)),
            weight: chain(ctx.steps(b, Pass::Weight)),
        })
        .collect()
}

/// Bytes one micro-batch's backward moves to add the weight gradient of `params` parameter
/// elements (one device's share of an operator) into the fp32 gradient buffer: the buffer is
/// read and written back, [`crate::parallel::amount::MAIN_GRAD_BYTES`] each way, per element.
///
/// Megatron-LM keeps bf16 models' gradients in fp32 `main_grad` buffers and adds every
/// micro-batch's weight gradient to them: its linear layers fuse the addition into the
/// weight-gradient GEMM (`--gradient-accumulation-fusion`, APEX
/// `fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`: a GEMM with an fp32 output and
/// β = 1, which reads and writes that output), other layers add `param.grad` to `main_grad` in
/// a backward hook (megatron/model/distributed.py). Either way the traffic is proportional to
/// the parameters and paid per micro-batch, so it weighs most where a micro-batch has few
/// tokens per weight (one sequence on a wide layer). It is timed as a streaming pass after the
/// operator's backward, on every machine: in the fused form it is the GEMM's epilogue, which a
/// CUTLASS-style kernel runs after its tile's main loop (NVIDIA CUTLASS documentation,
/// "Efficient GEMM in CUDA"); persistent kernels that overlap one tile's epilogue with the next
/// tile's main loop (CUTLASS 3's ping-pong schedule on Hopper) can hide part of it, which this
/// does not credit. With gradients sharded (ZeRO ≥ 2) the buffer holds only the `1/replicas`
/// share that the device reduces.
/// The relative cost counts the same bytes ([`crate::parallel::amount::grad_accumulation`]).
pub fn grad_accumulation_bytes(params: f64, k: &crate::strategy::Knobs) -> f64 {
    crate::parallel::amount::grad_accumulation(params, k)
}

/// Seconds of the optimizer step over the parameter elements `held` by one device: its
/// memory-bound kernels ([`crate::parallel::amount::optimizer_traffic`]), each a streaming
/// kernel with its own launch. Gradient clipping's rescale runs only when the norm exceeds the
/// threshold and is left out.
pub fn optimizer_seconds(held: &HeldParams<f64>, k: &crate::strategy::Knobs, rates: &Rates) -> f64 {
    if held.params() <= 0.0 {
        return 0.0;
    }
    crate::parallel::amount::optimizer_traffic(held, k)
        .iter()
        .map(|b| rates.op_seconds(0.0, *b, KernelClass::Other, 1))
        .sum()
}

/// The bytes and seconds of a DualPipe rank's exchange with its mirror that sums their
/// copies' gradients, over the pipeline's links of tier `tier`, for the parameter elements
/// `held` by the rank ([`crate::parallel::amount::dualpipe_grad_sum`]; zero under the other
/// schedules).
pub fn grad_sum(
    held: &HeldParams<f64>,
    k: &crate::strategy::Knobs,
    rates: &Rates,
    tier: crate::strategy::Tier,
) -> (f64, f64) {
    let bytes = crate::parallel::amount::dualpipe_grad_sum(held.dense, held.experts, k);
    if bytes > 0.0 {
        (bytes, rates.p2p_seconds(bytes, tier))
    } else {
        (0.0, 0.0)
    }
}

/// Bytes per rank on the wire of one all-gather of block `b`'s weights (ZeRO 3's per-layer
/// gathers, ZeRO 1–2's gather after the step), from the block's data-parallel gradient
/// all-reduces as the collectives table reads them ([`crate::parallel::amount::zero_reduction`]):
/// half of each all-reduce's wire bytes (in the precision's gradient type, which is its weight
/// type), the dense weights' over the replicas and the experts' over the ranks holding the same
/// experts, as the plan states their gradients, less what FP8 parameters do not move
/// ([`crate::parallel::amount::fp8_gather_saving`]).
pub fn block_gather_split(b: &PlanBlock, k: &crate::strategy::Knobs) -> DpWire {
    DpWire::by_axis(|axis| {
        let all_reduced = grad_bytes(b, axis, |c| c == Collective::AllReduce);
        // Each FP8 GEMM's weights over the ranks holding the same share of them: the dp·cp
        // replicas, or for an expert GEMM the dp·cp/ep holding the same experts.
        let expert = axis == Axis::ExpertDp;
        let group = if expert {
            k.expert_replicas()
        } else {
            k.replicas()
        };
        let saving: f64 = b
            .ops
            .iter()
            .filter(|o| o.expert == expert)
            .filter_map(|o| o.fp8_operands())
            .map(|ops| crate::parallel::amount::fp8_gather_saving(f(&ops.weight), k, group))
            .sum();
        all_reduced * k.precision.wire_factor() as f64 / 2.0 - saving
    })
}

/// The bytes of block `b`'s gradient collectives on `axis` whose kind `kind` accepts.
fn grad_bytes(b: &PlanBlock, axis: Axis, kind: impl Fn(Collective) -> bool) -> f64 {
    b.grads
        .iter()
        .filter(|(_, c)| c.axis == axis && kind(c.kind))
        .map(|(_, c)| f(&c.bytes))
        .sum()
}

/// The wire bytes per rank of block `b`'s data-parallel gradient reductions per step (in the
/// precision's gradient type), dense and expert.
pub fn block_dp_grads(b: &PlanBlock, k: &crate::strategy::Knobs) -> DpWire {
    DpWire::by_axis(|axis| grad_bytes(b, axis, |_| true)).times(k.precision.wire_factor() as f64)
}

/// The parameter elements per device of `b`'s operators, dense and expert, and of each the FP8
/// GEMM weights under the plan's precision (none without an FP8 recipe): what the optimizer step
/// updates, and what FP8 parameters gather and write in FP8.
pub fn block_held(b: &PlanBlock) -> HeldParams<f64> {
    let mut held = HeldParams::default();
    for o in &b.ops {
        let fp8 = o.fp8_operands().map_or(0.0, |ops| f(&ops.weight));
        if o.expert {
            held.experts += f(&o.params);
            held.fp8_experts += fp8;
        } else {
            held.fp8_dense += fp8;
        }
    }
    held.dense = f(&b.params) - held.experts;
    held
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

/// A plan laid out for the event loop: what stays fixed while the devices run their programs.
struct Layout<'a> {
    ctx: Ctx<'a>,
    /// Pipeline ranks: the simulated devices.
    p: usize,
    /// Virtual stages.
    nst: usize,
    /// Per virtual stage, its first item (and after the last stage, the number of items).
    first: Vec<usize>,
    /// Per block, its parameter elements and FP8 GEMM weights, dense and expert, as floats once
    /// ([`block_held`]; FSDP gathers a block's weights per item).
    block_held: Vec<HeldParams<f64>>,
    /// Per block, the wire bytes of one all-gather of its weights ([`block_gather_split`]).
    block_gather: Vec<DpWire>,
    /// For each item, the first and last item of its run of copies of the same block.
    run_start: Vec<usize>,
    run_end: Vec<usize>,
    /// Each block's steps in each pass.
    passes: Vec<PerPass<Vec<SimStep>>>,
    /// Per virtual stage: the bytes of its last item's output, what a pipeline send after it
    /// moves, and that send's seconds (as floats once: every micro-batch sends them).
    boundary: Vec<(f64, f64)>,
    /// Each pipeline rank's tasks, in order.
    programs: Vec<Vec<Task>>,
    /// Per rank and virtual stage, the position of the stage's last backward (its last weight
    /// pass under ZB-H1 and DualPipe) in the rank's program: the task that produces its
    /// gradients (a stage runs on two ranks under DualPipe, one copy each).
    last_bwd: Vec<Vec<usize>>,
    /// Per rank and task of its program, whether it runs overlapped with the next (DualPipe's
    /// F&B chunks).
    paired: Vec<Vec<bool>>,
    /// Per rank and task of its program, whether its sends wait for the end of the next task
    /// (DualPipe's full backward chunks: [`super::schedule::sends_after_next`]).
    joined: Vec<Vec<bool>>,
    /// The pass whose tasks make the gradients: the backward, or the weight pass under ZB-H1.
    grad_pass: Pass,
    /// Data-parallel replicas of each device (dp × cp).
    replicas: u64,
    /// Whether a device keeps only its shard of the gradients (ZeRO ≥ 2).
    sharded_grads: bool,
    /// Whether gradient reductions overlap the backward (`--overlap-grad-reduce`).
    overlap: bool,
    /// Whether the schedule interleaves model chunks.
    interleaved: bool,
    /// The gradient bucket, in bytes as the bus carries them.
    cap: f64,
    /// Whether every layer's weights are gathered before its use (FSDP: ZeRO 3).
    fsdp: bool,
    /// The tier of the pipeline's links.
    p2p_tier: crate::strategy::Tier,
}

impl<'a> Layout<'a> {
    fn new(plan: &'a TimingPlan, rates: &'a Rates, mesh: &'a Mesh) -> Layout<'a> {
        let k = &plan.knobs;
        let ctx = Ctx::new(plan, rates, mesh);
        let p = k.pp as usize;
        let v = k.virtual_chunks() as usize;
        let m = k.microbatches as usize;
        let nst = plan.stages.len();
        let mut first = vec![0usize; nst + 1];
        for (s, n) in plan.stages.iter().enumerate() {
            first[s + 1] = first[s] + n;
        }
        let (run_start, run_end) = block_runs(&plan.items);
        let passes = (0..plan.blocks.len())
            .map(|b| PerPass {
                forward: ctx.steps(b, Pass::Forward),
                backward: ctx.steps(b, Pass::Backward),
                weight: ctx.steps(b, Pass::Weight),
            })
            .collect();
        let (mut programs, mut paired, mut joined) = (Vec::new(), Vec::new(), Vec::new());
        for s in 0..p {
            let (tasks, pairs, sends) = program_with_pairs(k.schedule, s, p, m, v);
            programs.push(tasks);
            paired.push(pairs);
            joined.push(sends);
        }
        debug_assert_eq!(v * p, nst);
        // Megatron-LM's delayed launch of a chunk's gradients (below) is the interleaved
        // schedule's; ZB-V's ranks launch theirs as 1F1B's do.
        let interleaved = k.schedule == Schedule::Interleaved && v > 1;
        // When data-parallel gradients are reduced, as Megatron-LM's DDP launches them with
        // `--overlap-grad-reduce` and its default `delay_grad_reduce`
        // (megatron/core/pipeline_parallel/schedules.py: "Asynchronous communication tends to
        // slow down compute. To reduce idling from mismatched microbatch times, we launch
        // asynchronous communication at the same time across the pipeline-parallel group"):
        //
        // * 1F1B: pipeline rank 0 reduces bucket by bucket as its last backward fills them; the
        //   other ranks launch their gradients after their last backward ("Other pipeline stages
        //   do grad reduction during pipeline bubble"), one bucket each (DDP buckets only rank
        //   0).
        // * Interleaved: rank r launches a model chunk's gradients r backward tasks after the
        //   last backward of that chunk, so that every rank launches together; those the step
        //   has no task left for after the last backward. Only chunk 0 of rank 0 is cut into
        //   buckets.
        // * Without overlap: one reduction of everything after the last backward.
        // * ZeRO ≥ 2 keeps only the device's 1/replicas shard of the gradients, so each
        //   micro-batch's gradients are reduce-scattered after its backward (DeepSpeed ZeRO-2
        //   and PyTorch FSDP during gradient accumulation; Rajbhandari et al. 2020, §5.2):
        //   bucket by bucket during the backward with overlap, after it and before the device
        //   goes on without.
        // * ZB-H1: the weight pass makes the gradients, so all of the above happens at its
        //   tasks instead: after the last W, or after each W with ZeRO ≥ 2.
        let replicas = k.replicas();
        let grad_pass = if k.schedule.splits_backward() {
            Pass::Weight
        } else {
            Pass::Backward
        };
        let last_bwd = last_grad_tasks(&programs, nst, grad_pass);
        let boundary = boundary_sends(&ctx, &first, mesh.p2p_tier());
        Layout {
            p,
            nst,
            first,
            block_held: plan.blocks.iter().map(block_held).collect(),
            block_gather: plan
                .blocks
                .iter()
                .map(|b| block_gather_split(b, k))
                .collect(),
            run_start,
            run_end,
            passes,
            boundary,
            programs,
            last_bwd,
            paired,
            joined,
            grad_pass,
            replicas,
            sharded_grads: k.shards_gradients(),
            overlap: k.overlap.grad_reduce,
            interleaved,
            cap: bucket_bytes(replicas),
            // FSDP (ZeRO 3): every layer's weights are all-gathered before each forward and each
            // backward of every micro-batch (resharded after use, PyTorch FSDP's default), one
            // layer ahead: the gather of a layer is issued when the previous layer starts
            // computing (forward and backward prefetch), before that layer's gradient
            // reductions and its kernels (which it slows by the contention share while both
            // run), and the layer waits for it.
            fsdp: k.zero == 3 && replicas > 1,
            p2p_tier: mesh.p2p_tier(),
            ctx,
        }
    }

    fn plan(&self) -> &'a TimingPlan {
        self.ctx.plan
    }

    /// Runs every device's program, each task once its input has arrived, until all are done.
    fn run_programs(&self, st: &mut State) -> Result<(), SimError> {
        loop {
            let mut progress = false;
            let mut done = true;
            for d in 0..self.p {
                while st.pos[d] < self.programs[d].len() {
                    let task = self.programs[d][st.pos[d]];
                    let Some(input) = self.input(st, task) else {
                        break;
                    };
                    if self.paired[d][st.pos[d]] {
                        let second = self.programs[d][st.pos[d] + 1];
                        let Some(other) = self.input(st, second) else {
                            break;
                        };
                        self.run_pair(st, d, [task, second], [input, other]);
                        st.pos[d] += 2;
                    } else {
                        self.run_task(st, d, task, input);
                        st.pos[d] += 1;
                    }
                    progress = true;
                }
                done &= st.pos[d] == self.programs[d].len();
            }
            if done {
                return Ok(());
            }
            if !progress {
                return Err(SimError::Deadlock);
            }
        }
    }

    /// When `task`'s input (an activation, or its gradient) is there, and the event that
    /// delivers it (none for the first stage of its pass); `None` while it is on its way.
    fn input(&self, st: &State, task: Task) -> Option<(f64, Option<usize>)> {
        let head = match task.pass {
            Pass::Forward => task.stage == 0,
            Pass::Backward => task.stage + 1 == self.nst,
            // Its input is its own backward's, which ran before it on the same device.
            Pass::Weight => true,
        };
        if head {
            Some((0.0, None))
        } else {
            st.arrivals[task.stage][task.microbatch][task.pass].map(|(t, e)| (t, Some(e)))
        }
    }

    /// Runs `task` on device `d` once its input is there (at `ready`, by event `dep`): its
    /// layers, or what an earlier task that met the same state did; then its gradients and
    /// its hand-off to the neighbouring stage.
    fn run_task(&self, st: &mut State, d: usize, task: Task, (ready, dep): (f64, Option<usize>)) {
        let dev = &mut st.devices[d];
        let mut cur = Cursor {
            // A stack profile's host gap before every pass of a micro-batch (zero without one).
            t: ready.max(dev.task_end) + self.ctx.rates.microbatch_overhead,
            prev: dep,
            started: None,
            last_compute: None,
        };
        let last = task.pass == self.grad_pass && self.last_bwd[d][task.stage] == st.pos[d];
        let grads_now = task.pass == self.grad_pass && (self.sharded_grads || last);
        // Whether buckets are launched as the backward fills them.
        let eager =
            grads_now && self.overlap && (self.sharded_grads || (d == 0 && !self.interleaved));
        // A run of equal layers reaches a steady state: once a layer leaves the device as the
        // one before left it (each stream's free time the same distance from the task's time,
        // the streams it does not use idle), every further layer of the run repeats it shifted
        // by the same seconds, and is added at once. Only when just the times are kept, and
        // without per-layer gathers or gradient launches. Tasks that reduce their own
        // micro-batch's gradients (ZeRO ≥ 2) start and end with an empty bucket, so they may
        // still be remembered whole.
        let memo = !st.rec.keep && !self.fsdp && (!grads_now || self.sharded_grads);
        let run = TaskRun {
            d,
            task,
            grads_now,
            cap: if eager { self.cap } else { f64::INFINITY },
            repeat: memo && !grads_now,
        };
        // A task that finds its device as an earlier task of the same stage and pass found it
        // (each stream's free time the same distance after the task's start, or free by then)
        // does what that task did, shifted: its layers are not stepped.
        let memos = &mut st.memos[task.stage][task.pass];
        let entry = memo.then(|| TaskEntry::of(dev, cur.t, st.rec.count));
        let hit = entry
            .as_ref()
            .and_then(|e| memos.iter().find(|m| m.met(e)).copied());
        match &hit {
            Some(m) => m.apply(dev, &mut cur, &mut st.rec.count),
            None => self.run_layers(dev, &mut st.rec, &mut st.steady, &run, &mut cur),
        }
        if grads_now && self.sharded_grads {
            // This micro-batch's gradients leave before the next one adds to the shard.
            let end = flush_bucket(&self.ctx, dev, &mut st.rec, d);
            if let (Some(end), false) = (end, self.overlap) {
                let c = Stream::Compute;
                dev.free[c] = dev.free[c].max(end);
                cur.t = cur.t.max(end);
            }
        }
        if let (Some(e), None) = (&entry, &hit) {
            if memos.len() < MEMOS_PER_TASK {
                memos.push(TaskMemo::of(e, dev, &cur, st.rec.count));
            }
        }
        if task.pass == Pass::Backward {
            self.after_backward(dev, &mut st.rec, d, task, last, &cur);
        }
        let start = cur.started.unwrap_or(ready);
        dev.work += cur.t - start;
        if task.pass == Pass::Forward && dev.first_forward.is_none() {
            dev.first_forward = Some(cur.t - start);
        }
        dev.task_end = cur.t;
        if task.pass != Pass::Forward {
            st.flush = st.flush.max(cur.t);
        }
        self.send(st, d, task, &cur);
    }

    /// Hands on what `task` on device `d` made, once its chunk is done: now, with `cur` where
    /// it ended; or, where its sends wait for the next task (the forward of an F&B chunk,
    /// [`Layout::paired`], and a task of [`Layout::joined`]), after that task, with what waited
    /// before it.
    fn send(&self, st: &mut State, d: usize, task: Task, cur: &Cursor) {
        st.waiting[d].push(task);
        let pos = st.pos[d];
        if self.joined[d][pos] || self.paired[d][pos] {
            return;
        }
        let dev = &mut st.devices[d];
        // Emptied in place, its allocation kept for the next task.
        let mut waiting = std::mem::take(&mut st.waiting[d]);
        for t in waiting.drain(..) {
            if let Some((dest, arrival)) = self.hand_on(dev, &mut st.rec, d, t, cur) {
                st.arrivals[dest][t.microbatch][t.pass] = Some(arrival);
            }
        }
        st.waiting[d] = waiting;
    }

    /// Runs DualPipe's F&B chunk on device `d`: the forward of one micro-batch and the
    /// backward (input gradient) of another, overlapped as DeepSeek-V3 runs them
    /// (arXiv:2412.19437, §3.2.1 and Figure 4: the all-to-all and tensor-parallel
    /// communication of one chunk under the other's compute). The two tasks' steps are issued
    /// in turn on the device's streams, each step of a task after its own previous blocking
    /// step, always the step that can start first (the forward's on a tie): while one task
    /// waits for its collective, the other computes. The streams stay in-order queues, so a
    /// step issued later never starts before one issued earlier on the same stream, where a
    /// hand-tuned kernel order could; under FSDP (ZeRO 3) the two run one after the other.
    fn run_pair(
        &self,
        st: &mut State,
        d: usize,
        tasks: [Task; 2],
        inputs: [(f64, Option<usize>); 2],
    ) {
        if self.fsdp {
            self.run_task(st, d, tasks[0], inputs[0]);
            st.pos[d] += 1;
            let (ready, dep) = inputs[1];
            self.run_task(st, d, tasks[1], (ready, dep));
            st.pos[d] -= 1;
            return;
        }
        let dev = &mut st.devices[d];
        let overhead = self.ctx.rates.microbatch_overhead;
        // The chunk starts once both inputs are there, as `DualPipe._forward_backward_chunk`
        // receives both before it computes (deepseek-ai/DualPipe, dualpipe/dualpipe.py).
        let both = inputs[0].0.max(inputs[1].0).max(dev.task_end) + overhead;
        let mut curs = inputs.map(|(_, dep)| Cursor {
            t: both,
            prev: dep,
            started: None,
            last_compute: None,
        });
        let runs = tasks.map(|task| TaskRun {
            d,
            task,
            grads_now: false,
            cap: f64::INFINITY,
            repeat: false,
        });
        // Each task's (item, block) in the order it runs them, and where it stands.
        let order = |task: Task| -> Vec<(usize, usize)> {
            let range = self.first[task.stage]..self.first[task.stage + 1];
            let items: Vec<usize> = if task.pass == Pass::Forward {
                range.collect()
            } else {
                range.rev().collect()
            };
            items
                .into_iter()
                .map(|i| (i, self.plan().items[i]))
                .collect()
        };
        let orders = tasks.map(order);
        let mut at = [(0usize, 0usize); 2];
        let mut layers = [LayerState::default(), LayerState::default()];
        loop {
            let next = |i: usize| -> Option<&SimStep> {
                let (li, si) = at[i];
                let &(_, bi) = orders[i].get(li)?;
                self.passes[bi][tasks[i].pass].get(si)
            };
            let start_of = |i: usize, s: &SimStep| curs[i].t.max(dev.free[s.stream]);
            let pick = match (next(0), next(1)) {
                (None, None) => break,
                (Some(_), None) => 0,
                (None, Some(_)) => 1,
                (Some(a), Some(b)) => usize::from(start_of(1, b) < start_of(0, a)),
            };
            let (li, si) = at[pick];
            let (item, bi) = orders[pick][li];
            let s = &self.passes[bi][tasks[pick].pass][si];
            let run = &runs[pick];
            self.pair_step(
                dev,
                &mut st.rec,
                run,
                (item, bi, s),
                &mut curs[pick],
                &mut layers[pick],
            );
            at[pick].1 += 1;
            if at[pick].1 == self.passes[bi][tasks[pick].pass].len() {
                at[pick] = (li + 1, 0);
                layers[pick] = LayerState::default();
            }
        }
        self.finish_pair(st, d, tasks, inputs, curs);
    }

    /// After the F&B chunk `tasks` on device `d`, which ran from `inputs` to `curs`: its work,
    /// its backward's bookkeeping, and both its sends, when the chunk is done
    /// (`_forward_backward_chunk` sends after computing both).
    fn finish_pair(
        &self,
        st: &mut State,
        d: usize,
        tasks: [Task; 2],
        inputs: [(f64, Option<usize>); 2],
        curs: [Cursor; 2],
    ) {
        let dev = &mut st.devices[d];
        let start = curs
            .iter()
            .zip(&inputs)
            .map(|(c, (ready, _))| c.started.unwrap_or(*ready))
            .fold(f64::INFINITY, f64::min);
        let end = curs[0].t.max(curs[1].t);
        dev.work += end - start;
        dev.task_end = end;
        for (task, cur) in tasks.iter().zip(&curs) {
            if task.pass == Pass::Backward {
                self.after_backward(dev, &mut st.rec, d, *task, false, cur);
            }
            if task.pass == Pass::Forward && dev.first_forward.is_none() {
                dev.first_forward = Some(cur.t - start);
            }
            if task.pass != Pass::Forward {
                st.flush = st.flush.max(cur.t);
            }
        }
        let last = usize::from(curs[1].t > curs[0].t);
        let [c0, c1] = curs;
        let done = if last == 1 { c1 } else { c0 };
        self.send(st, d, tasks[0], &done);
        st.pos[d] += 1;
        self.send(st, d, tasks[1], &done);
        st.pos[d] -= 1;
    }

    /// One step `s` of block `bi` in `item` of a task of an F&B chunk ([`Layout::run_pair`]):
    /// what [`Layout::run_layer`] does with a step, without FSDP's gathers (not paired) and
    /// without gradient launches (a paired task makes no gradients: its weight gradient is a
    /// task of its own).
    fn pair_step(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        (item, bi, s): (usize, usize, &SimStep),
        cur: &mut Cursor,
        layer: &mut LayerState,
    ) {
        let keep = rec.keep;
        let prev = cur.prev;
        let event = || self.step_event(run, bi, item, s, prev, keep);
        if s.after_dgrad {
            let event = || Event {
                deps: Vec::new(),
                ..event()
            };
            issue_after_dgrad(dev, rec, s, cur, layer, event);
            return;
        }
        let ready = match s.ring_wait {
            1 => cur.t.max(layer.ring_last),
            2 => cur.t.max(layer.ring_prev),
            _ => cur.t,
        };
        let (id, start, end) = dev.push_with(rec, s.stream, s.dur, ready, event);
        if s.stream == Stream::CpComm {
            layer.ring_prev = layer.ring_last;
            layer.ring_last = end;
        }
        cur.started.get_or_insert(start);
        let mut held = end;
        if s.stream == Stream::Compute {
            layer.item_started = true;
            held = after_compute(dev, cur, layer, s, start, end);
        }
        if s.blocking {
            cur.t = held;
            cur.prev = Some(id);
        }
    }

    /// Runs the task's layers (its block copies, in the order it runs them: backward in
    /// reverse) from `cur`; once a run of equal layers is steady, adds the rest of the run at
    /// once (see [`Snapshot`]).
    fn run_layers(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        steady: &mut [PerPass<Option<(Snapshot, Snapshot)>>],
        run: &TaskRun,
        cur: &mut Cursor,
    ) {
        let plan = self.plan();
        let task = run.task;
        let range = self.first[task.stage]..self.first[task.stage + 1];
        let forward = task.pass == Pass::Forward;
        let n_items = range.len();
        let item_at = |j: usize| {
            if forward {
                range.start + j
            } else {
                range.end - 1 - j
            }
        };
        let mut prefetch = Prefetch {
            at: cur.t,
            gathered: None,
        };
        let mut before: Option<Snapshot> = None;
        let mut j = 0;
        while j < n_items {
            let item = item_at(j);
            j += 1;
            let next = (j < n_items).then(|| item_at(j));
            self.run_layer(dev, rec, run, (item, next), cur, &mut prefetch);
            if !run.repeat {
                continue;
            }
            let bi = plan.items[item];
            let after = Snapshot::of(dev, cur, rec.count);
            // The copies of the same block still to come in this task.
            let rest = if forward {
                self.run_end[item].min(range.end - 1) - item
            } else {
                item - self.run_start[item].max(range.start)
            };
            // The steady step of this block and pass, once any task has shown it.
            let known = &mut steady[bi][task.pass];
            let step = match (&before, &*known) {
                (_, Some((from, to))) if after.is_steady(from, to) => Some((*from, *to)),
                (Some(b), _) if b.block == bi && after.repeats(b) => {
                    let found = (*b, after);
                    *known = Some(found);
                    Some(found)
                }
                _ => None,
            };
            if let Some((from, to)) = step {
                if rest > 0 {
                    let mut x = after;
                    x.advance(&from, &to, rest);
                    x.store(dev, cur, &mut rec.count);
                    j += rest;
                }
                before = None;
                continue;
            }
            before = Some(Snapshot { block: bi, ..after });
        }
    }

    /// Runs one layer of the task: copy `item` of a block (with `next` the task's next item, if
    /// any), after FSDP's gather of its weights.
    fn run_layer(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        (item, next): (usize, Option<usize>),
        cur: &mut Cursor,
        prefetch: &mut Prefetch,
    ) {
        let bi = self.plan().items[item];
        let params = self.block_held[bi].params();
        // The weight gradient reads activations and output gradients, not the weights: no
        // gather before it.
        let gathers = self.fsdp && run.task.pass != Pass::Weight;
        if gathers && params > 0.0 {
            let end = match prefetch.gathered.take() {
                Some(end) => end,
                None => self.push_gather(dev, rec, run, item, prefetch.at),
            };
            cur.t = cur.t.max(end);
        }
        let mut layer = LayerState::default();
        for s in &self.passes[bi][run.task.pass] {
            // Built only when the events are kept.
            let keep = rec.keep;
            let prev = cur.prev;
            let event = || self.step_event(run, bi, item, s, prev, keep);
            if s.after_dgrad {
                let event = || Event {
                    deps: Vec::new(),
                    ..event()
                };
                issue_after_dgrad(dev, rec, s, cur, &layer, event);
                continue;
            }
            let ready = match s.ring_wait {
                1 => cur.t.max(layer.ring_last),
                2 => cur.t.max(layer.ring_prev),
                _ => cur.t,
            };
            let first_compute = !layer.item_started && s.stream == Stream::Compute;
            if let Some(next) = next.filter(|_| gathers && first_compute) {
                // The next layer's weights are gathered as this layer starts computing, and
                // before its gradients are reduce-scattered: in issue order on the one
                // data-parallel stream (see `push_gather`).
                if self.block_held[self.plan().items[next]].params() > 0.0 {
                    let at = ready.max(dev.free[Stream::Compute]);
                    prefetch.gathered = Some(self.push_gather(dev, rec, run, next, at));
                }
            }
            let (id, start, end) = dev.push_with(rec, s.stream, s.dur, ready, event);
            if s.stream == Stream::CpComm {
                layer.ring_prev = layer.ring_last;
                layer.ring_last = end;
            }
            cur.started.get_or_insert(start);
            if !layer.item_started && s.stream == Stream::Compute {
                layer.item_started = true;
                prefetch.at = start;
            }
            let mut held = end;
            if s.stream == Stream::Compute {
                held = after_compute(dev, cur, &mut layer, s, start, end);
            }
            // Under ZB-H1 the weight gradient that reads the gather runs in a later task, by
            // when the gather has long arrived: the input gradient does not wait for it.
            if s.gather && !self.ctx.split {
                layer.gathered = Some(end);
            }
            if !s.blocking {
                continue;
            }
            cur.t = held;
            cur.prev = Some(id);
            if run.grads_now && !s.recompute {
                if let Some(op) = s.op {
                    let ready = (run.d, id, end);
                    launch_grads(&self.ctx, dev, rec, bi, op, item, ready, run.cap);
                }
            }
        }
    }

    /// The event of step `s` of block `bi`'s pass in `item`, depending on `prev` where events
    /// are kept.
    fn step_event(
        &self,
        run: &TaskRun,
        bi: usize,
        item: usize,
        s: &SimStep,
        prev: Option<usize>,
        keep: bool,
    ) -> Event {
        Event {
            device: run.d,
            stream: s.stream,
            start: 0.0,
            dur: s.dur,
            what: match s.op {
                Some(op) => What::Op {
                    block: bi,
                    op,
                    recompute: s.recompute,
                },
                None => What::Comm {
                    block: bi,
                    step: s.step,
                    recompute: s.recompute,
                },
            },
            pass: run.task.pass,
            stage: run.task.stage,
            item: Some(item),
            microbatch: Some(run.task.microbatch),
            flops: s.flops,
            bytes: s.bytes,
            deps: if keep {
                prev.into_iter().collect()
            } else {
                Vec::new()
            },
        }
    }

    /// FSDP's gather of `item`'s weights, issued at `ready`; returns when it ends.
    ///
    /// PyTorch FSDP issues a layer's backward prefetch (the next layer's all-gather,
    /// `BackwardPrefetch.BACKWARD_PRE`, the default) in that layer's pre-backward hook, before
    /// its gradients are computed, and the layer's reduce-scatter in its post-backward hook,
    /// after them (pytorch/pytorch 00ae0bc, torch/distributed/fsdp/_runtime_utils.py:
    /// `_pre_backward_hook` → `_prefetch_handles`, `_post_backward_hook`). The two run from
    /// different CUDA streams (`unshard`, `post_backward`) but through the same process group,
    /// whose NCCL kernels all run on its one internal stream per device, in the order they were
    /// issued (pytorch/pytorch 0007e75, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the
    /// "[Sync Streams]" note: "NCCL communications run on ncclStreams"; one per device of the
    /// process group): one data-parallel stream in issue order, so the gather a layer waits for
    /// never queues behind the reductions of the layer before it.
    fn push_gather(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        run: &TaskRun,
        item: usize,
        ready: f64,
    ) -> f64 {
        let (dur, wire) = self.gather_seconds(self.plan().items[item]);
        let mut e = grad_event(run.d, Stream::DpComm, dur, wire, dev.buckets, Some(item), 0);
        e.what = What::ParamGather;
        e.pass = run.task.pass;
        e.microbatch = Some(run.task.microbatch);
        e.deps.clear();
        dev.push(rec, e, ready).2
    }

    /// Seconds and bytes on the wire of one all-gather of block `b`'s weights (ZeRO 3's).
    fn gather_seconds(&self, b: usize) -> (f64, f64) {
        let wire = self.block_gather[b];
        (
            self.ctx.dp_seconds(Collective::AllGather, wire, 1.0),
            wire.total(),
        )
    }

    /// After backward `task` on device `d` (its last for its stage when `last`), with `cur`
    /// where it ended: queues an interleaved chunk's gradients for their launch, and launches
    /// those now due.
    fn after_backward(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        task: Task,
        last: bool,
        cur: &Cursor,
    ) {
        let index = dev.backwards;
        dev.backwards += 1;
        if last && self.overlap && self.interleaved && !self.sharded_grads {
            if let Some(ready) = dev.bucket_ready.take() {
                let full = std::mem::take(&mut dev.bucket_full);
                let calls = if task.stage == 0 {
                    (full / self.cap).ceil()
                } else {
                    1.0
                };
                dev.pending.push(Pending {
                    wire: std::mem::take(&mut dev.bucket_wire),
                    ready,
                    after: index + d,
                    calls: calls.max(1.0),
                });
            }
        }
        let ready = (cur.prev.unwrap_or(0), cur.t);
        launch_pending(&self.ctx, dev, rec, d, Some(index), ready);
    }

    /// Hands `task`'s activation (or its gradient) to the neighbouring stage: returns that
    /// stage and when (and by which event) it arrives, after a send unless the stage is on the
    /// same device.
    fn hand_on(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        task: Task,
        cur: &Cursor,
    ) -> Option<(usize, (f64, usize))> {
        let (dest, boundary_stage) = match task.pass {
            Pass::Forward if task.stage + 1 < self.nst => (task.stage + 1, task.stage),
            Pass::Backward if task.stage > 0 => (task.stage - 1, task.stage - 1),
            _ => return None,
        };
        let (bytes, dur) = self.boundary[boundary_stage];
        let k = &self.plan().knobs;
        let m = k.microbatches as usize;
        if device_of(k.schedule, dest, task.microbatch, self.p, m) == d {
            return Some((dest, (cur.t, cur.prev.unwrap_or(0))));
        }
        let e = Event {
            device: d,
            stream: Stream::P2p,
            start: 0.0,
            dur,
            what: What::Send,
            pass: task.pass,
            stage: task.stage,
            item: None,
            microbatch: Some(task.microbatch),
            flops: 0.0,
            bytes,
            deps: rec.deps(cur.prev),
        };
        let (id, _, end) = dev.push(rec, e, cur.t);
        // Megatron-LM's pipeline exchange is synchronous: the stage waits for its batched
        // send/receive before computing again.
        let c = Stream::Compute;
        dev.free[c] = dev.free[c].max(end);
        Some((dest, (end, id)))
    }

    /// After the devices' programs: on each device the remaining gradient buckets, the
    /// gradient-norm all-reduce, the optimizer step and, with a distributed optimizer, the
    /// all-gather of the updated parameters. Returns the step time.
    fn finish_step(&self, st: &mut State, gpus_per_node: u64) -> f64 {
        let k = &self.plan().knobs;
        let all_devices = k.devices();
        let norm_tier = if all_devices > gpus_per_node {
            crate::strategy::Tier::Inter
        } else {
            crate::strategy::Tier::Intra
        };
        let norm_seconds = if all_devices > 1 {
            // One fp32 number, reduced over every device: latency-bound, a tree (NCCL picks
            // one for tiny messages).
            super::cost::steps(Collective::AllReduce, all_devices, true)
                * self.ctx.rates.link(norm_tier).latency
        } else {
            0.0
        };
        let mut iteration: f64 = 0.0;
        for (d, dev) in st.devices.iter_mut().enumerate() {
            self.finish_device(dev, &mut st.rec, d, norm_seconds, &mut iteration);
        }
        iteration
    }

    /// [`Layout::finish_step`] on device `d`, taking `iteration` to at least its end.
    fn finish_device(
        &self,
        dev: &mut Device,
        rec: &mut Recorder,
        d: usize,
        norm_seconds: f64,
        iteration: &mut f64,
    ) {
        let plan = self.plan();
        let (k, rates) = (&plan.knobs, self.ctx.rates);
        let ready = (dev.last[Stream::Compute].unwrap_or(0), dev.task_end);
        launch_pending(&self.ctx, dev, rec, d, None, ready);
        flush_bucket(&self.ctx, dev, rec, d);
        if norm_seconds > 0.0 {
            let ready = dev.free.iter().cloned().fold(0.0, f64::max);
            let deps: Vec<usize> = dev.last.iter().flatten().copied().collect();
            let mut e = grad_event(d, Stream::DpComm, norm_seconds, 4.0, dev.buckets, None, 0);
            e.deps = deps;
            e.what = What::GradNorm;
            dev.push(rec, e, ready);
        }
        // The blocks of the items it holds (under DualPipe a copy of stages d and p − 1 − d).
        let blocks: Vec<usize> = (0..self.nst)
            .filter(|&s| stage_ranks(k.schedule, s, self.p).any(|r| r == d))
            .flat_map(|s| self.first[s]..self.first[s + 1])
            .map(|i| plan.items[i])
            .collect();
        // Their parameters, and of those the FP8 GEMM weights.
        let held = blocks
            .iter()
            .fold(HeldParams::default(), |sum, &b| sum + self.block_held[b]);
        // Under DualPipe, the sum of its copies' gradients with its mirror's, before the step.
        let (sum_bytes, sum_seconds) = grad_sum(&held, k, rates, self.p2p_tier);
        if sum_bytes > 0.0 {
            let ready = dev.free.iter().cloned().fold(0.0, f64::max);
            let e = Event {
                device: d,
                stream: Stream::P2p,
                start: 0.0,
                dur: sum_seconds,
                what: What::GradSum,
                pass: Pass::Backward,
                stage: d,
                item: None,
                microbatch: None,
                flops: 0.0,
                bytes: sum_bytes,
                deps: dev.last.iter().flatten().copied().collect(),
            };
            dev.push(rec, e, ready);
        }
        let ready = dev.free.iter().cloned().fold(0.0, f64::max);
        let deps: Vec<usize> = dev.last.iter().flatten().copied().collect();
        let e = Event {
            device: d,
            stream: Stream::Compute,
            start: 0.0,
            dur: optimizer_seconds(&held, k, rates),
            what: What::Optimizer,
            pass: Pass::Backward,
            stage: d,
            item: None,
            microbatch: None,
            flops: 0.0,
            bytes: 0.0,
            deps,
        };
        let (opt, _, opt_end) = dev.push(rec, e, ready);
        if k.zero >= 1 && k.zero < 3 && self.replicas > 1 {
            // The distributed optimizer gathers the updated model weights from their owners.
            let wire = blocks
                .iter()
                .fold(DpWire::default(), |sum, &b| sum + self.block_gather[b]);
            let dur = self.ctx.dp_seconds(Collective::AllGather, wire, 1.0);
            let before = dev.free.iter().cloned().fold(0.0, f64::max);
            let mut e = grad_event(d, Stream::DpComm, dur, wire.total(), dev.buckets, None, opt);
            e.what = What::ParamGather;
            dev.push(rec, e, opt_end);
            if k.overlap.param_gather {
                // Gathered bucket by bucket while the next step's forward runs: only what
                // outlasts this device's first forward task lengthens the step.
                let hidden = dev.first_forward.unwrap_or(0.0);
                let exposed = (dur - hidden).max(0.0);
                *iteration = iteration.max(before).max(opt_end + exposed);
                return;
            }
        }
        *iteration = iteration.max(dev.free.iter().cloned().fold(0.0, f64::max));
    }
}

/// For each of `items` (block indices), the first and the last item of its run of copies of
/// the same block.
fn block_runs(items: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let n = items.len();
    let mut run_start = vec![0usize; n];
    let mut run_end = vec![0usize; n];
    for i in 0..n {
        run_start[i] = if i > 0 && items[i - 1] == items[i] {
            run_start[i - 1]
        } else {
            i
        };
    }
    for i in (0..n).rev() {
        run_end[i] = if i + 1 < n && items[i + 1] == items[i] {
            run_end[i + 1]
        } else {
            i
        };
    }
    (run_start, run_end)
}

/// What the event loop changes as the devices run their programs.
struct State {
    /// The simulated devices, one per pipeline rank.
    devices: Vec<Device>,
    /// Per device, the tasks of its program it has run.
    pos: Vec<usize>,
    /// Per virtual stage and micro-batch: when (and by which event) its forward input and its
    /// backward gradient arrive.
    arrivals: Vec<Vec<PerPass<Arrival>>>,
    rec: Recorder,
    /// The end of the last backward.
    flush: f64,
    /// Per block and pass, the steady step of a run of its layers (two states a layer apart),
    /// once a task has shown one; later tasks recognise it after a single layer.
    steady: Vec<PerPass<Option<(Snapshot, Snapshot)>>>,
    /// Per virtual stage and pass, what its tasks did from the device states they met.
    memos: Vec<PerPass<Vec<TaskMemo>>>,
    /// Per device, the tasks run whose sends wait for the end of their chunk.
    waiting: Vec<Vec<Task>>,
}

impl State {
    fn new(layout: &Layout, keep: bool) -> State {
        let plan = layout.plan();
        let m = plan.knobs.microbatches as usize;
        let device = || Device {
            contention: layout.ctx.rates.contention,
            free: PerStream::default(),
            last: PerStream::default(),
            busy: PerStream::default(),
            work: 0.0,
            bucket_wire: DpWire::default(),
            bucket_full: 0.0,
            bucket_ready: None,
            buckets: 0,
            pending: Vec::new(),
            backwards: 0,
            task_end: 0.0,
            first_forward: None,
        };
        State {
            devices: (0..layout.p).map(|_| device()).collect(),
            pos: vec![0usize; layout.p],
            arrivals: vec![vec![PerPass::default(); m]; layout.nst],
            rec: Recorder {
                keep,
                events: Vec::new(),
                count: 0,
            },
            flush: 0.0,
            steady: vec![PerPass::default(); plan.blocks.len()],
            memos: vec![PerPass::default(); layout.nst],
            waiting: vec![Vec::new(); layout.p],
        }
    }
}

/// A task as its layers see it.
struct TaskRun {
    /// The device (pipeline rank) that runs it.
    d: usize,
    task: Task,
    /// Whether its backward reduces the gradients it makes (the stage's last backward, or
    /// every backward with sharded gradients).
    grads_now: bool,
    /// The bucket at which data-parallel gradients are launched: [`Layout::cap`] where the
    /// backward launches buckets as it fills them, else never during the task.
    cap: f64,
    /// Whether a run of equal layers is added at once once it is steady.
    repeat: bool,
}

/// Where a task stands on its device.
#[derive(Clone, Copy)]
struct Cursor {
    /// When the next step may start: the end of the last blocking step (or the task's start).
    t: f64,
    /// The last blocking event (or the event that delivered the task's input).
    prev: Option<usize>,
    /// The start of the task's first event.
    started: Option<f64>,
    /// The last compute step's start and end.
    last_compute: Option<(f64, f64)>,
}

/// FSDP's prefetch across a task's layers.
struct Prefetch {
    /// When the previous layer of the task began computing: the next gather's issue time.
    at: f64,
    /// The end of the weight gather already issued for the next layer.
    gathered: Option<f64>,
}

/// What a layer's steps leave for the steps after them.
#[derive(Default)]
struct LayerState {
    /// Whether the layer has begun computing.
    item_started: bool,
    /// Ends of the latest two ring exchanges (context parallelism).
    ring_prev: f64,
    ring_last: f64,
    /// The end of a gather the next compute step's weight gradient waits for.
    gathered: Option<f64>,
    /// The start of the GEMM group the last compute step belongs to (one linear layer written
    /// as several operators), and whether the next compute step joins it.
    group_start: Option<f64>,
    joining: bool,
}

/// Issues step `s`, a collective launched when the matmul's input gradient (the first of its
/// two GEMMs) is done, beside its weight gradient; what follows waits. A group's input
/// gradients all run first: the collective is issued halfway through the group.
fn issue_after_dgrad(
    dev: &mut Device,
    rec: &mut Recorder,
    s: &SimStep,
    cur: &mut Cursor,
    layer: &LayerState,
    event: impl FnOnce() -> Event,
) {
    let (st, en) = cur.last_compute.unwrap_or((cur.t, cur.t));
    let st = layer.group_start.unwrap_or(st).min(st);
    let issue = st + (en - st) / 2.0;
    let (id, cs, end) = dev.push_with(rec, s.stream, s.dur, issue, event);
    // The weight-gradient GEMM it overlaps gives up the table's contention share of its
    // throughput while both run: the compute stream is held that much longer after it (what
    // depends on the GEMM's result keeps its recorded end, and busy seconds stay the sum of the
    // recorded events).
    let overlap = (end.min(en) - cs).max(0.0);
    let extra = dev.contention * overlap;
    if extra > 0.0 && cur.last_compute.is_some() {
        let c = Stream::Compute;
        dev.free[c] = dev.free[c].max(en) + extra;
        cur.t = cur.t.max(dev.free[c]);
    }
    cur.t = cur.t.max(end);
    cur.prev = Some(id);
}

/// After compute step `s` ran from `start` to `end`: records it as the last compute step and in
/// its GEMM group, and returns when what follows may start. The weight gradient (the step's
/// second half; in a group, the group's, checked at its last member) starts once the gather it
/// reads has arrived: the compute stream and what follows wait for the difference (busy seconds
/// keep the recorded event).
fn after_compute(
    dev: &mut Device,
    cur: &mut Cursor,
    layer: &mut LayerState,
    s: &SimStep,
    start: f64,
    end: f64,
) -> f64 {
    let mut held = end;
    cur.last_compute = Some((start, end));
    let first = if layer.joining {
        layer.group_start.unwrap_or(start)
    } else {
        start
    };
    layer.group_start = Some(first);
    layer.joining = s.fused_next;
    if let Some(g) = layer.gathered.filter(|_| !s.fused_next) {
        layer.gathered = None;
        let wait = g - (first + (end - first) / 2.0);
        if wait > 0.0 {
            held = end + wait;
            let c = Stream::Compute;
            dev.free[c] = dev.free[c].max(held);
        }
    }
    held
}

/// Seconds of one pipeline send of `bytes` per device. An activation that tensor parallelism
/// keeps whole on every rank is sent in 1/tp slices and all-gathered inside the receiving node
/// (Megatron-LM's scatter/gather optimisation, Narayanan et al. SC'21 §4.1); a sequence-parallel
/// activation is already a 1/tp slice.
fn send_seconds(ctx: &Ctx, bytes: f64, tier: crate::strategy::Tier) -> f64 {
    let k = &ctx.plan.knobs;
    if k.tp > 1 && !k.sequence_parallel {
        let t = k.tp as f64;
        let gather =
            ctx.rates
                .collective_seconds(Collective::AllGather, bytes * (t - 1.0) / t, ctx.tp);
        ctx.rates.p2p_seconds(bytes / t, tier) + gather
    } else {
        ctx.rates.p2p_seconds(bytes, tier)
    }
}

/// Gradients of operator `op` are ready at event `ready`: tensor-parallel ones reduce at once,
/// data-parallel ones join the bucket, which is launched once it holds `cap` bytes.
#[allow(clippy::too_many_arguments)]
fn launch_grads(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    bi: usize,
    op: usize,
    item: usize,
    (d, ready, t): (usize, usize, f64),
    cap: f64,
) {
    for (k, g) in &ctx.grads[bi] {
        if *k != op {
            continue;
        }
        match *g {
            Grad::Now(stream, dur, bytes) => {
                let e = grad_event(d, stream, dur, bytes, dev.buckets, Some(item), ready);
                dev.buckets += 1;
                dev.push(rec, e, t);
            }
            Grad::Bucket { wire, full } => {
                dev.bucket_wire += wire;
                dev.bucket_full += full;
                dev.bucket_ready = Some((ready, t));
                if dev.bucket_full >= cap {
                    flush_bucket(ctx, dev, rec, d);
                }
            }
        }
    }
}

fn grad_event(
    d: usize,
    stream: Stream,
    dur: f64,
    bytes: f64,
    bucket: usize,
    item: Option<usize>,
    ready: usize,
) -> Event {
    Event {
        device: d,
        stream,
        start: 0.0,
        dur,
        what: What::Grad { bucket },
        pass: Pass::Backward,
        stage: d,
        item,
        microbatch: None,
        flops: 0.0,
        bytes,
        deps: vec![ready],
    }
}

/// Launches the pending gradients of finished model chunks due after backward task `index`
/// (all of them when `None`), once `now` (an event and its end).
fn launch_pending(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    d: usize,
    index: Option<usize>,
    now: (usize, f64),
) {
    while let Some(i) = dev
        .pending
        .iter()
        .position(|g| index.is_none_or(|x| g.after <= x))
    {
        let g = dev.pending.remove(i);
        let ready = if g.ready.1 >= now.1 { g.ready } else { now };
        reduce_grads(ctx, dev, rec, d, g.wire, ready, g.calls);
    }
}

/// Launches the bucket's gradients in one collective; returns when it ends.
fn flush_bucket(ctx: &Ctx, dev: &mut Device, rec: &mut Recorder, d: usize) -> Option<f64> {
    let ready = dev.bucket_ready.take()?;
    let wire = std::mem::take(&mut dev.bucket_wire);
    dev.bucket_full = 0.0;
    Some(reduce_grads(ctx, dev, rec, d, wire, ready, 1.0))
}

/// Reduces `wire` bytes of data-parallel gradients (as an all-reduce carries them) in `calls`
/// equal collectives, once event `ready` has ended at time `t`; returns when they end.
fn reduce_grads(
    ctx: &Ctx,
    dev: &mut Device,
    rec: &mut Recorder,
    d: usize,
    mut wire: DpWire,
    (ready, t): (usize, f64),
    calls: f64,
) -> f64 {
    let k = &ctx.plan.knobs;
    // A distributed optimizer (ZeRO 1–2) and FSDP (ZeRO 3) reduce-scatter the gradients to their
    // owners (half an all-reduce's traffic); ZeRO 1–2 gather the weights after the step, ZeRO 3
    // before each layer's use.
    let kind = if (1..=3).contains(&k.zero) && k.replicas() > 1 {
        wire = wire.times(0.5);
        Collective::ReduceScatter
    } else {
        Collective::AllReduce
    };
    let dur = ctx.dp_seconds(kind, wire, calls);
    let e = grad_event(
        d,
        Stream::DpComm,
        dur,
        wire.total(),
        dev.buckets,
        None,
        ready,
    );
    dev.buckets += 1;
    dev.push(rec, e, t).2
}
