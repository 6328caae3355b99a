//! Evaluating an analysis for one strategy: exact per-device FLOPs, collectives, point-to-point
//! bytes and memory, the pipeline partition, and the relative cost of DESIGN §3.

use super::analysis::{Analysis, BlockAnalysis, Comm, CP, DP, TP};
use crate::calib::Calibration;
use crate::model::Model;
use crate::rules::law::CollectiveKind;
use crate::strategy::{AxisKind, Knobs, Mesh, Recompute, Schedule, StrategyError, Tier};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, ToPrimitive, Zero};
use serde::Serialize;

/// Bytes of mixed-precision Adam state per parameter: bf16 weights, bf16 gradients, and fp32
/// master weights, momentum and variance (Rajbhandari et al. 2020).
pub const WEIGHT_BYTES: i64 = 2;
/// Gradient bytes per parameter.
pub const GRAD_BYTES: i64 = 2;
/// Optimizer-state bytes per parameter.
pub const OPTIMIZER_BYTES: i64 = 12;
/// HBM bytes per parameter element that each micro-batch's backward moves to add its weight
/// gradient to the fp32 gradient buffer: the 4-byte accumulator read and written back
/// (`timeline::grad_accumulation_bytes` times it; the relative cost prices it at κ_hbm).
pub const GRAD_ACCUMULATION_BYTES: i64 = 8;

/// Exact HBM bytes per micro-batch of adding the weight gradients of `params` parameter
/// elements of one device to its fp32 gradient buffer: all of them, or the `1/(dp·cp)` share a
/// device keeps when gradients are sharded (ZeRO ≥ 2).
pub fn grad_accumulation_hbm(params: &Rational, k: &Knobs) -> Rational {
    let bytes = params * Rational::from_integer(GRAD_ACCUMULATION_BYTES.into());
    if k.zero >= 2 {
        bytes / Rational::from_integer(k.replicas().max(1).into())
    } else {
        bytes
    }
}

/// One block evaluated for one (micro)batch on one device.
#[derive(Debug, Clone, Default)]
pub struct BlockNumbers {
    /// Copies of the block.
    pub repeat: u64,
    /// Forward FLOPs.
    pub forward: Rational,
    /// Backward FLOPs, recomputation inside fused kernels included.
    pub backward: Rational,
    /// The part of `backward` that fused kernels spend recomputing (not model FLOPs).
    pub kernel_recompute: Rational,
    /// Forward FLOPs of the attention core.
    pub attention_forward: Rational,
    /// Saved bytes.
    pub saved: Rational,
    /// Saved bytes of the attention core.
    pub attention_saved: Rational,
    /// Parameter elements.
    pub params: Rational,
    /// Per-microbatch collectives: (where in the block's analysis, evaluated wire bytes).
    pub comm: Vec<(CommRef, Rational)>,
    /// Per-step gradient reductions.
    pub grad_comm: Vec<(CommRef, Rational)>,
    /// Boundary activation bytes.
    pub boundary: Rational,
    /// Per-microbatch tensor-parallel wire bytes (all of `comm` on tp).
    pub tp_bytes: Rational,
    /// Per-step data-parallel gradient wire bytes.
    pub dp_grad: Rational,
    /// Per-step tensor-parallel gradient wire bytes.
    pub tp_grad: Rational,
    /// Parameter elements of expert weights (all experts), per device.
    pub expert_params: Rational,
    /// Their per-step data-parallel gradient wire bytes.
    pub expert_dp_grad: Rational,
    /// Bytes per device of one micro-batch's expert slots (what one all-to-all moves).
    pub slot_bytes: Rational,
    /// HBM bytes the memory-bound (not matmul-like) operators read and write, forward and
    /// backward.
    pub hbm: Rational,
    /// The forward part of `hbm` (what full recomputation moves again).
    pub hbm_forward: Rational,
    /// The forward HBM bytes of the memory-bound attention-core operators (what selective
    /// recomputation moves again).
    pub attention_hbm: Rational,
    /// Context parallelism: per attention operator, (operator position, bytes of its keys and
    /// values on one rank), what one step of the ring passes on.
    pub ring_ops: Vec<(usize, Rational)>,
    /// Context-parallel ring bytes one forward pass sends: (cp − 1) steps of every attention
    /// operator's keys and values. The backward pass sends twice this (keys and values again,
    /// and their gradients).
    pub ring_forward: Rational,
    /// The part of `ring_forward` of attention-core operators (what selective recomputation
    /// sends again).
    pub ring_core_forward: Rational,
    /// The same numbers as floats, for choosing (never for reporting).
    pub approx: Approx,
}

/// Where a collective of [`BlockNumbers::comm`] or [`BlockNumbers::grad_comm`] is in its
/// block's analysis (an index, so that evaluating a block copies no collective).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommRef {
    /// `ops[op].comm[index]`.
    Op {
        /// Operator position.
        op: usize,
        /// Position in its `comm`.
        index: usize,
    },
    /// `ops[op].grad_comm[index]`.
    Grad {
        /// Operator position.
        op: usize,
        /// Position in its `grad_comm`.
        index: usize,
    },
    /// `edges[index]`.
    Edge(usize),
}

impl CommRef {
    /// The collective in `block`.
    pub fn of<'a>(&self, block: &'a BlockAnalysis) -> &'a Comm {
        match *self {
            CommRef::Op { op, index } => &block.ops[op].comm[index],
            CommRef::Grad { op, index } => &block.ops[op].grad_comm[index],
            CommRef::Edge(index) => &block.edges[index],
        }
    }
}

/// [`BlockNumbers`]' exact numbers as floats, for choosing (never for reporting).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Approx {
    /// [`BlockNumbers::forward`].
    pub forward: f64,
    /// [`BlockNumbers::backward`].
    pub backward: f64,
    /// [`BlockNumbers::attention_forward`].
    pub attention_forward: f64,
    /// [`BlockNumbers::saved`].
    pub saved: f64,
    /// [`BlockNumbers::attention_saved`].
    pub attention_saved: f64,
    /// [`BlockNumbers::params`].
    pub params: f64,
    /// [`BlockNumbers::tp_bytes`].
    pub tp_bytes: f64,
    /// [`BlockNumbers::dp_grad`].
    pub dp_grad: f64,
    /// [`BlockNumbers::tp_grad`].
    pub tp_grad: f64,
    /// [`BlockNumbers::boundary`].
    pub boundary: f64,
    /// [`BlockNumbers::hbm`].
    pub hbm: f64,
    /// [`BlockNumbers::hbm_forward`].
    pub hbm_forward: f64,
    /// [`BlockNumbers::attention_hbm`].
    pub attention_hbm: f64,
    /// [`BlockNumbers::ring_forward`].
    pub ring_forward: f64,
    /// [`BlockNumbers::ring_core_forward`].
    pub ring_core_forward: f64,
}

impl Approx {
    /// The floats of `n`'s exact numbers.
    pub fn of(n: &BlockNumbers) -> Approx {
        let f = |x: &Rational| x.to_f64().unwrap_or(f64::MAX);
        Approx {
            forward: f(&n.forward),
            backward: f(&n.backward),
            attention_forward: f(&n.attention_forward),
            saved: f(&n.saved),
            attention_saved: f(&n.attention_saved),
            params: f(&n.params),
            tp_bytes: f(&n.tp_bytes),
            dp_grad: f(&n.dp_grad),
            tp_grad: f(&n.tp_grad),
            boundary: f(&n.boundary),
            hbm: f(&n.hbm),
            hbm_forward: f(&n.hbm_forward),
            attention_hbm: f(&n.attention_hbm),
            ring_forward: f(&n.ring_forward),
            ring_core_forward: f(&n.ring_core_forward),
        }
    }
}

fn eval(p: &Poly, b: &Bindings) -> Result<Rational, StrategyError> {
    Ok(p.eval(b)?)
}

/// The most block copies a pipeline partition places one by one.
pub const MAX_PIPELINED_LAYERS: u64 = 1_000_000;

/// Megatron-LM pads the vocabulary to a multiple of this times the tensor-parallel degree
/// (`--make-vocab-size-divisible-by`, default 128) when tensor parallelism splits it.
pub const VOCAB_PAD: u64 = 128;

/// The bindings of one microbatch: the model's values with its batch symbol (`B`) divided by
/// the micro-batch count, and a vocabulary `V` that tensor parallelism does not divide padded as
/// Megatron-LM pads it.
pub fn microbatch_bindings(model: &Model, values: &Bindings, k: &Knobs) -> Bindings {
    let mut b = values.clone();
    if let Some(v) = model.roles.vocab.as_ref().and_then(|v| b.get_mut(v)) {
        let t = r(k.tp);
        if k.tp > 1 && !(&*v / &t).is_integer() {
            let unit = r(VOCAB_PAD * k.tp);
            *v = (&*v / &unit).ceil() * unit;
        }
    }
    if let Some(v) = model.batch.as_ref().and_then(|s| b.get_mut(s)) {
        *v = &*v / Rational::from_integer(k.microbatches.into());
    }
    b.insert(DP.into(), Rational::from_integer(k.dp.into()));
    b.insert(TP.into(), Rational::from_integer(k.tp.into()));
    b.insert(CP.into(), Rational::from_integer(k.cp.into()));
    b
}

/// Context-parallel ring bytes one rank sends per micro-batch: the forward pass's (cp − 1)
/// steps of keys and values, the backward pass's twice that (the keys and values again and
/// their gradients), and the forward's again where recomputation reruns the attention.
fn ring_bytes(n: &BlockNumbers, recompute: Recompute, layer: bool) -> Rational {
    let again = match (recompute, layer) {
        (Recompute::Full, true) => n.ring_forward.clone(),
        (Recompute::Selective, true) => n.ring_core_forward.clone(),
        _ => Rational::zero(),
    };
    r(3) * &n.ring_forward + again
}

fn ring_bytes_f64(x: &Approx, recompute: Recompute, layer: bool) -> f64 {
    let again = match (recompute, layer) {
        (Recompute::Full, true) => x.ring_forward,
        (Recompute::Selective, true) => x.ring_core_forward,
        _ => 0.0,
    };
    3.0 * x.ring_forward + again
}

/// Evaluates every block of an analysis for one microbatch, operator by operator (the
/// reference [`block_numbers_summed`] is held to).
pub fn block_numbers(a: &Analysis, b: &Bindings) -> Result<Vec<BlockNumbers>, StrategyError> {
    a.blocks.iter().map(|blk| block_of(blk, None, b)).collect()
}

/// [`block_numbers`] with each block's per-operator polynomials summed once beforehand
/// (`sums`, from [`block_sums`] of the same analysis): a block costs one evaluation per sum
/// instead of one per operator and sum. Exact arithmetic makes the numbers the same; a block
/// whose sums could evaluate where an operator's polynomial fails (terms cancelled), or whose
/// sums fail, is evaluated operator by operator, so errors are the same too.
pub fn block_numbers_summed(
    a: &Analysis,
    sums: &[BlockSums],
    b: &Bindings,
) -> Result<Vec<BlockNumbers>, StrategyError> {
    a.blocks
        .iter()
        .zip(sums)
        .map(|(blk, s)| {
            let sums = s.faithful.then_some(s);
            block_of(blk, sums, b).or_else(|_| block_of(blk, None, b))
        })
        .collect()
}

/// One block's per-operator polynomials summed, as [`BlockNumbers`] adds up their values.
#[derive(Debug, Clone)]
pub struct BlockSums {
    forward: Poly,
    attention_forward: Poly,
    attention_saved: Poly,
    hbm: Poly,
    hbm_forward: Poly,
    attention_hbm: Poly,
    backward: Poly,
    kernel_recompute: Poly,
    saved: Poly,
    params: Poly,
    expert_params: Poly,
    dispatch_out: Poly,
    /// Whether the sums fail to evaluate exactly where some summand does: they hold every
    /// symbol of the summands, and every symbol a summand divides by.
    faithful: bool,
}

/// The symbols of the polynomials and those they divide by: what decides whether
/// [`Poly::eval`] fails.
fn eval_signature(ps: &[&Poly]) -> (Vec<String>, Vec<String>) {
    let mut all = Vec::new();
    let mut divides = Vec::new();
    for p in ps {
        for (m, _) in p.terms() {
            for (name, e) in m.iter() {
                all.push(name.to_string());
                if e < 0 {
                    divides.push(name.to_string());
                }
            }
        }
    }
    for v in [&mut all, &mut divides] {
        v.sort_unstable();
        v.dedup();
    }
    (all, divides)
}

/// [`BlockSums`] of every block of `a`.
pub fn block_sums(a: &Analysis) -> Vec<BlockSums> {
    a.blocks
        .iter()
        .map(|blk| {
            let mut parts: Vec<&Poly> = Vec::new();
            let mut s = BlockSums {
                forward: Poly::zero(),
                attention_forward: Poly::zero(),
                attention_saved: Poly::zero(),
                hbm: Poly::zero(),
                hbm_forward: Poly::zero(),
                attention_hbm: Poly::zero(),
                backward: Poly::zero(),
                kernel_recompute: Poly::zero(),
                saved: Poly::zero(),
                params: Poly::zero(),
                expert_params: Poly::zero(),
                dispatch_out: Poly::zero(),
                faithful: true,
            };
            for op in &blk.ops {
                let mut add = |sum: &mut Poly, p| {
                    *sum = &*sum + p;
                    parts.push(p);
                };
                add(&mut s.forward, &op.forward);
                add(&mut s.saved, &op.saved);
                if op.attention_core {
                    add(&mut s.attention_forward, &op.forward);
                    add(&mut s.attention_saved, &op.recomputable_saved);
                }
                if op.class != crate::rules::FlopClass::Matmul {
                    add(&mut s.hbm, &op.io_bytes);
                    add(&mut s.hbm, &op.backward_io_bytes);
                    add(&mut s.hbm_forward, &op.io_bytes);
                    if op.attention_core {
                        add(&mut s.attention_hbm, &op.io_bytes);
                    }
                }
                add(&mut s.backward, &op.backward);
                add(&mut s.backward, &op.recompute);
                add(&mut s.kernel_recompute, &op.recompute);
                add(&mut s.params, &op.params);
                if op.rule == "expert_matmul" {
                    add(&mut s.expert_params, &op.params);
                }
                if op.rule == "moe_dispatch" {
                    add(&mut s.dispatch_out, &op.out_bytes);
                }
            }
            let summed = [
                &s.forward,
                &s.attention_forward,
                &s.attention_saved,
                &s.hbm,
                &s.hbm_forward,
                &s.attention_hbm,
                &s.backward,
                &s.kernel_recompute,
                &s.saved,
                &s.params,
                &s.expert_params,
                &s.dispatch_out,
            ];
            s.faithful = eval_signature(&summed) == eval_signature(&parts);
            s
        })
        .collect()
}

/// One block of an analysis evaluated for one microbatch: the sums from `sums` when given,
/// otherwise operator by operator.
fn block_of(
    blk: &BlockAnalysis,
    sums: Option<&BlockSums>,
    b: &Bindings,
) -> Result<BlockNumbers, StrategyError> {
    let cp = b.get(CP).cloned().unwrap_or_else(Rational::one);
    let repeat = eval(&blk.repeat, b)?;
    if !repeat.is_integer() || repeat <= Rational::zero() {
        return Err(StrategyError::Repeat {
            block: blk.name.clone(),
            repeat,
        });
    }
    let mut n = BlockNumbers {
        repeat: repeat
            .to_integer()
            .to_u64()
            .ok_or(StrategyError::RepeatTooLarge)?,
        ..BlockNumbers::default()
    };
    if let Some(s) = sums {
        n.forward = eval(&s.forward, b)?;
        n.attention_forward = eval(&s.attention_forward, b)?;
        n.attention_saved = eval(&s.attention_saved, b)?;
        n.hbm = eval(&s.hbm, b)?;
        n.hbm_forward = eval(&s.hbm_forward, b)?;
        n.attention_hbm = eval(&s.attention_hbm, b)?;
        n.backward = eval(&s.backward, b)?;
        n.kernel_recompute = eval(&s.kernel_recompute, b)?;
        n.saved = eval(&s.saved, b)?;
        n.params = eval(&s.params, b)?;
        n.expert_params = eval(&s.expert_params, b)?;
        if !s.dispatch_out.is_zero() {
            let dp = b.get(DP).cloned().unwrap_or_else(Rational::one);
            n.slot_bytes = eval(&s.dispatch_out, b)? / dp;
        }
    }
    for (oi, op) in blk.ops.iter().enumerate() {
        if sums.is_none() {
            let fwd = eval(&op.forward, b)?;
            let saved = eval(&op.saved, b)?;
            if op.attention_core {
                n.attention_forward += &fwd;
                n.attention_saved += eval(&op.recomputable_saved, b)?;
            }
            if op.class != crate::rules::FlopClass::Matmul {
                let f = eval(&op.io_bytes, b)?;
                let bw = eval(&op.backward_io_bytes, b)?;
                if op.attention_core {
                    n.attention_hbm += &f;
                }
                n.hbm += &f + &bw;
                n.hbm_forward += f;
            }
            n.forward += fwd;
            let recompute = eval(&op.recompute, b)?;
            n.backward += eval(&op.backward, b)? + &recompute;
            n.kernel_recompute += recompute;
            n.saved += saved;
            let params = eval(&op.params, b)?;
            if op.rule == "expert_matmul" {
                n.expert_params += &params;
            }
            if op.rule == "moe_dispatch" {
                let dp = b.get(DP).cloned().unwrap_or_else(Rational::one);
                n.slot_bytes += eval(&op.out_bytes, b)? / dp;
            }
            n.params += params;
        }
        if cp > Rational::one() && !op.ring_bytes.is_zero() {
            let x = eval(&op.ring_bytes, b)?;
            let steps = (&cp - Rational::one()) * &x;
            if op.attention_core {
                n.ring_core_forward += &steps;
            }
            n.ring_forward += steps;
            n.ring_ops.push((oi, x));
        }
        for (index, c) in op.comm.iter().enumerate() {
            let mut bytes = eval(&c.wire_bytes, b)?;
            // A window's halo formula (kernel − stride rows) is negative when the stride
            // exceeds the kernel (a 1×1 convolution of stride 2): no rows are needed.
            if c.kind == CollectiveKind::HaloExchange && bytes < Rational::zero() {
                bytes = Rational::zero();
            }
            if c.axis == AxisKind::Tp {
                n.tp_bytes += &bytes;
            }
            n.comm.push((CommRef::Op { op: oi, index }, bytes));
        }
        let expert = op.rule == "expert_matmul";
        for (index, c) in op.grad_comm.iter().enumerate() {
            let bytes = eval(&c.wire_bytes, b)?;
            match c.axis {
                AxisKind::Dp => {
                    if expert {
                        n.expert_dp_grad += &bytes;
                    }
                    n.dp_grad += &bytes;
                }
                AxisKind::Tp => n.tp_grad += &bytes,
                _ => {}
            }
            n.grad_comm.push((CommRef::Grad { op: oi, index }, bytes));
        }
    }
    for (index, c) in blk.edges.iter().enumerate() {
        let bytes = eval(&c.wire_bytes, b)?;
        if c.axis == AxisKind::Tp {
            n.tp_bytes += &bytes;
        }
        n.comm.push((CommRef::Edge(index), bytes));
    }
    n.boundary = eval(&blk.boundary_bytes, b)?;
    n.approx = Approx::of(&n);
    Ok(n)
}

/// A collective as reported per device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommRow {
    /// Its kind.
    pub collective: CollectiveKind,
    /// Mesh axis.
    pub axis: AxisKind,
    /// Link tier.
    pub tier: Tier,
    /// Wire bytes per call per rank.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bytes: Rational,
    /// Calls per training step.
    pub count: u64,
    /// Operator or edge.
    pub op: String,
    /// Tensor moved.
    pub tensor: String,
    /// Why.
    pub reason: String,
    /// Whether it reduces a gradient (once per step, in the backward pass) rather than running
    /// in every micro-batch.
    #[serde(skip)]
    pub gradient: bool,
}

/// Memory per device in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Memory {
    /// Weights.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub params: Rational,
    /// Gradients.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub grads: Rational,
    /// Optimizer state.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub optimizer: Rational,
    /// Saved activations.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub activations: Rational,
    /// All together.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub total: Rational,
}

/// FLOP-equivalent cost (DESIGN §3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RelativeCost {
    /// Compute per device per step (with recomputation), in FLOP-equivalents: FLOPs, plus the
    /// memory-bound operators' HBM bytes × κ_hbm.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub compute: Rational,
    /// κ_intra × intra-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_intra: Rational,
    /// κ_inter × inter-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_inter: Rational,
    /// Idle pipeline time, in FLOP-equivalents.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bubble: Rational,
    /// The part of `total` that is FLOPs (compute and its share of the bubble).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flop_part: Rational,
    /// The part of `total` that is κ × bytes (scales with the machine balance).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub byte_part: Rational,
    /// The sum.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub total: Rational,
}

/// One pipeline stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// Stage number.
    pub stage: u64,
    /// Layer items (block copies) it runs, as `block×count`.
    pub items: Vec<(String, u64)>,
    /// FLOPs per device per step.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flops: Rational,
    /// κ_hbm × HBM bytes of the memory-bound operators per device per step (FLOP-equivalents).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub hbm_cost: Rational,
    /// Memory per device.
    pub memory: Memory,
}

/// A strategy evaluated on one machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// The knobs.
    pub knobs: Knobs,
    /// The mesh.
    pub mesh: Mesh,
    /// FLOPs per device per step on the busiest stage, with recomputation.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flops: Rational,
    /// Model FLOPs per step of the whole model (forward + backward, no recomputation).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub model_flops: Rational,
    /// Collectives of the busiest stage's device.
    pub comm: Vec<CommRow>,
    /// Point-to-point bytes sent per device per step.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub p2p_bytes: Rational,
    /// Memory of the fullest device.
    pub memory: Memory,
    /// Stages.
    pub stages: Vec<Stage>,
    /// Idle fraction of the pipeline schedule.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bubble_fraction: Rational,
    /// Relative cost.
    pub relative: RelativeCost,
    /// Whether it fits in memory.
    pub feasible: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// Checks that every split divides its index at these bindings.
pub fn check_divisibility(
    model: &Model,
    a: &Analysis,
    b: &Bindings,
    k: &Knobs,
) -> Result<(), StrategyError> {
    // Operators share their index formulas (the hidden size, the heads, the tokens of a
    // micro-batch): each (formula, degree, sequence cut) is checked once, at its first operator.
    let mut checked: std::collections::HashSet<(&Poly, u64, bool)> =
        std::collections::HashSet::new();
    let cp = b.get(CP).cloned().unwrap_or_else(Rational::one);
    for (blk, ba) in model.blocks.iter().zip(&a.blocks) {
        for (node, op) in blk.ops().zip(&ba.ops) {
            let mut by_index: Vec<(String, u64, &str)> = Vec::new();
            if let Some(i) = &op.plan.dp {
                by_index.push((i.clone(), k.dp, "dp"));
            }
            if let Some((i, _)) = &op.plan.tp {
                match by_index.iter_mut().find(|(j, _, _)| j == i) {
                    Some(e) => {
                        e.1 *= k.tp;
                        e.2 = "dp × tp";
                    }
                    None => by_index.push((i.clone(), k.tp, "tp")),
                }
            }
            for (i, size, axis) in by_index {
                let formula = &node.bind[&i];
                let cut = a
                    .sequence
                    .as_deref()
                    .is_some_and(|s| formula.degree_in(s).1 >= 1);
                if !checked.insert((formula, size, cut)) {
                    continue;
                }
                let mut v = eval(formula, b)?;
                if cut {
                    // Each context-parallel rank holds 1/cp of the sequence.
                    v /= &cp;
                }
                let divides = v.is_integer()
                    && !v.is_zero()
                    && match (v.numer().to_i128(), i128::from(size)) {
                        (Some(n), d) => n % d == 0,
                        (None, _) => (v.numer() % num_bigint::BigInt::from(size)).is_zero(),
                    };
                if !divides {
                    return Err(StrategyError::NotDivisible(Box::new(
                        crate::strategy::NotDivisible {
                            axis,
                            degree: size,
                            op: node.name.clone(),
                            formula: node.bind[&i].clone(),
                            index: i,
                            size: v,
                        },
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Splits items of times `t` into exactly `pp` contiguous stages, minimising the largest stage
/// time: a binary search on the largest load with a greedy packing, then the stages with most
/// items split until there are `pp` (splitting never raises the largest load). Returns the stage
/// boundaries.
pub fn partition(t: &[f64], pp: usize) -> Option<Vec<usize>> {
    let n = t.len();
    if pp == 0 || pp > n {
        return None;
    }
    if pp == 1 {
        return Some(vec![0, n]);
    }
    let pack = |limit: f64| -> Vec<usize> {
        let mut bounds = vec![0];
        let mut load = 0.0;
        for (i, &x) in t.iter().enumerate() {
            if load > 0.0 && load + x > limit {
                bounds.push(i);
                load = 0.0;
            }
            load += x;
        }
        bounds.push(n);
        bounds
    };
    let runs = Runs::of(t);
    let (mut lo, mut hi) = (t.iter().cloned().fold(0.0, f64::max), t.iter().sum::<f64>());
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if runs.fits(mid, pp) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut bounds = pack(hi);
    while bounds.len() - 1 < pp {
        let s = (0..bounds.len() - 1).max_by_key(|&s| bounds[s + 1] - bounds[s])?;
        if bounds[s + 1] - bounds[s] < 2 {
            return None;
        }
        let mid = bounds[s] + (bounds[s + 1] - bounds[s]) / 2;
        bounds.insert(s + 1, mid);
    }
    Some(bounds)
}

/// Item times as runs of equal times, for counting the stages of the greedy packing of
/// [`partition`] a run at a time: a stage that starts inside a run of `x` holds the same items
/// wherever it starts (its loads are `x`, `x + x`, …, added as the packing adds them).
struct Runs {
    /// (time, items, loads of a stage started inside the run after 1, 2, … items).
    runs: Vec<(f64, usize, Vec<f64>)>,
    /// Whether a time is negative or not a number (the run-wise count assumes loads grow).
    irregular: bool,
    /// The times, item by item.
    items: Vec<f64>,
}

impl Runs {
    fn of(t: &[f64]) -> Runs {
        let mut runs: Vec<(f64, usize, Vec<f64>)> = Vec::new();
        for &x in t {
            match runs.last_mut() {
                Some((y, c, loads)) if y.to_bits() == x.to_bits() => {
                    *c += 1;
                    let last = loads.last().copied().unwrap_or(0.0);
                    loads.push(last + x);
                }
                _ => runs.push((x, 1, vec![0.0 + x])),
            }
        }
        let irregular = t.iter().any(|x| x.is_nan() || *x < 0.0);
        Runs {
            runs,
            irregular,
            // Item by item only where the run-wise count does not apply.
            items: if irregular { t.to_vec() } else { Vec::new() },
        }
    }

    /// Whether the greedy packing under `limit` needs at most `pp` stages: a stage ends before
    /// an item when its load is positive and the item would take it over `limit`.
    fn fits(&self, limit: f64, pp: usize) -> bool {
        if self.irregular {
            return fits_items(&self.items, limit, pp);
        }
        let mut stages = 1;
        let mut load = 0.0;
        for (x, count, loads) in &self.runs {
            let (x, count) = (*x, *count);
            // Items added to the stage open when the run begins, until it ends.
            let mut i = 0;
            while i < count {
                if load > 0.0 && load + x > limit {
                    break;
                }
                load += x;
                i += 1;
            }
            if i == count {
                continue;
            }
            // A stage starts at item `i`; every stage started inside the run holds `per`
            // items (the first k ≥ 1 whose next item ends it), the last what is left.
            let (mut per, mut hi) = (1, count);
            while per < hi {
                let k = (per + hi) / 2;
                if loads[k - 1] > 0.0 && loads[k] > limit {
                    hi = k;
                } else {
                    per = k + 1;
                }
            }
            let left = count - i;
            stages += left.div_ceil(per);
            if stages > pp {
                return false;
            }
            load = loads[(left - 1) % per];
        }
        true
    }
}

/// [`Runs::fits`] item by item.
fn fits_items(t: &[f64], limit: f64, pp: usize) -> bool {
    let mut stages = 1;
    let mut load = 0.0;
    for &x in t {
        if load > 0.0 && load + x > limit {
            stages += 1;
            if stages > pp {
                return false;
            }
            load = 0.0;
        }
        load += x;
    }
    true
}

/// Expert parallelism applied to a block: (dense parameters, expert parameters held, data-parallel
/// gradient bytes, all-to-all wire bytes per micro-batch). Each device holds E/ep experts; their
/// gradients are reduced among the dp/ep ranks holding the same experts; every micro-batch's
/// tokens go to their experts and back in the forward pass, and their gradients in the backward
/// pass: four all-to-alls of the slots, (ep − 1)/ep of them on the wire (GShard, Lepikhin et al.
/// 2021).
fn expert_view(
    n: &BlockNumbers,
    k: &Knobs,
) -> Result<(Rational, Rational, Rational, Rational), StrategyError> {
    let dense = &n.params - &n.expert_params;
    if k.ep <= 1 {
        return Ok((
            dense,
            n.expert_params.clone(),
            n.dp_grad.clone(),
            Rational::zero(),
        ));
    }
    let ep = r(k.ep);
    let held = &n.expert_params / &ep;
    let grad = &n.dp_grad - &n.expert_dp_grad
        + super::moe::expert_grad_allreduce(&n.expert_dp_grad, k.dp, k.ep)?;
    let wire = r(4) * (&ep - Rational::one()) / &ep * &n.slot_bytes;
    Ok((dense, held, grad, wire))
}

/// One block's per-microbatch numbers under the recomputation choice.
struct BlockCost {
    compute: Rational,
    /// HBM bytes of the memory-bound operators, recomputation included.
    hbm: Rational,
    tp_bytes: Rational,
    saved: Rational,
    /// Dense parameters (ZeRO shards them over dp).
    params: Rational,
    /// Expert parameters held (ZeRO shards them over dp/ep).
    params_expert: Rational,
    /// Expert-parallel all-to-all wire bytes per micro-batch.
    ep_bytes: Rational,
    /// Context-parallel ring bytes per micro-batch.
    cp_bytes: Rational,
    dp_grad: Rational,
    tp_grad: Rational,
    boundary: Rational,
}

/// [`BlockCost`] in floating point, for choosing: `compute` holds κ_hbm × the HBM bytes.
#[derive(Debug, Clone, Copy)]
struct RoughBlock {
    compute: f64,
    tp_bytes: f64,
    tp_grad: f64,
    dp_grad: f64,
    params: f64,
    saved: f64,
    params_expert: f64,
    ep_bytes: f64,
    cp_bytes: f64,
}

/// The pipeline layout of one strategy, chosen in floating point.
struct Plan {
    /// Per block, its costs as floats.
    cf: Vec<RoughBlock>,
    /// Block of each item (block copy), in order.
    items: Vec<usize>,
    /// Stage boundaries into `items`.
    bounds: Vec<usize>,
    /// Copies of each block on each stage, in order.
    stage_counts: Vec<Vec<(usize, u64)>>,
    /// Model chunks per device.
    v: u64,
    /// κ_hbm, for the per-micro-batch gradient accumulation (priced per stage, not per block:
    /// it depends on ZeRO and the data-parallel degree, which a cached partition does not).
    k_hbm: f64,
}

impl Plan {
    /// `f` of the blocks of stage `s`, summed over their copies on it.
    fn stage_sum(&self, s: usize, f: impl Fn(&RoughBlock) -> f64) -> f64 {
        self.stage_counts[s]
            .iter()
            .map(|(b, c)| f(&self.cf[*b]) * *c as f64)
            .sum::<f64>()
    }

    /// FLOP-equivalents of one micro-batch on stage `s`: its blocks' compute (memory-bound
    /// operators at κ_hbm) and the addition of their weight gradients to the fp32 gradient
    /// buffer, as the exact pricing counts them.
    fn stage_compute(&self, s: usize, k: &Knobs) -> f64 {
        let params = self.stage_sum(s, |c| c.params + c.params_expert);
        let accumulate = crate::timeline::grad_accumulation_bytes(params, k.zero, k.replicas());
        self.stage_sum(s, |c| c.compute) + self.k_hbm * accumulate
    }
}

/// Machine balance (FLOP-equivalents per byte) of the links of each parallel dimension and of
/// HBM, as floats.
#[derive(Debug, Clone, Copy)]
struct Kappas {
    tp: f64,
    ep: f64,
    cp: f64,
    hbm: f64,
}

fn plan_pipeline(
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
    kap: Kappas,
) -> Result<Plan, StrategyError> {
    let (kt, ke, kc, kh) = (kap.tp, kap.ep, kap.cp, kap.hbm);
    // The same in floating point, for choosing the partition and the stages to price.
    let cf: Vec<RoughBlock> = numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let x = &n.approx;
            let (params, expert, dp_grad, ep_bytes) = if k.ep > 1 || !n.expert_params.is_zero() {
                let f = |x: &Rational| x.to_f64().unwrap_or(f64::MAX);
                let (a, b, c, d) = expert_view(n, k).unwrap_or_default();
                (f(&a), f(&b), f(&c), f(&d))
            } else {
                (x.params, 0.0, x.dp_grad, 0.0)
            };
            let (extra, saved, extra_hbm) = match (k.recompute, layer_block[bi]) {
                (Recompute::Full, true) => (x.forward, x.boundary, x.hbm_forward),
                (Recompute::Selective, true) => (
                    x.attention_forward,
                    x.saved - x.attention_saved,
                    x.attention_hbm,
                ),
                _ => (0.0, x.saved, 0.0),
            };
            RoughBlock {
                compute: x.forward + x.backward + extra + kh * (x.hbm + extra_hbm),
                tp_bytes: x.tp_bytes,
                tp_grad: x.tp_grad,
                dp_grad,
                params,
                saved,
                params_expert: expert,
                ep_bytes,
                cp_bytes: ring_bytes_f64(x, k.recompute, layer_block[bi]),
            }
        })
        .collect();
    // Items: block copies in order.
    // Pipeline partition works on block copies one by one; without pipelining the copies are
    // only counted, so any number of layers is fine.
    let copies: u64 = numbers
        .iter()
        .map(|n| n.repeat)
        .fold(0u64, |a, r| a.saturating_add(r));
    if k.pp > 1 && copies > MAX_PIPELINED_LAYERS {
        return Err(StrategyError::TooManyLayers {
            copies,
            most: MAX_PIPELINED_LAYERS,
        });
    }
    let mut items: Vec<usize> = Vec::new();
    if k.pp > 1 {
        for (bi, n) in numbers.iter().enumerate() {
            items.extend(std::iter::repeat_n(bi, n.repeat as usize));
        }
    }
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    if k.pp > copies {
        return Err(StrategyError::TooManyStages {
            pp: k.pp,
            layers: items.len() as u64,
        });
    }
    let v = if k.schedule == Schedule::Interleaved {
        k.chunks
    } else {
        1
    };
    if v > 1 && !layers.is_multiple_of(k.pp * v) {
        return Err(StrategyError::InterleavedLayers {
            chunks: v,
            layers,
            pp: k.pp,
        });
    }
    let block_time: Vec<f64> = cf
        .iter()
        .map(|c| c.compute + kt * c.tp_bytes + ke * c.ep_bytes + kc * c.cp_bytes)
        .collect();
    if k.pp == 1 {
        let counts = numbers
            .iter()
            .enumerate()
            .map(|(b, n)| (b, n.repeat))
            .collect();
        return Ok(Plan {
            cf,
            items,
            bounds: vec![0, 0],
            stage_counts: vec![counts],
            v,
            k_hbm: kap.hbm,
        });
    }
    let t: Vec<f64> = items.iter().map(|&b| block_time[b]).collect();
    let bounds = partition(&t, k.pp as usize).ok_or(StrategyError::NoPartition)?;
    // Copies of each block on each stage, in order.
    let stage_counts: Vec<Vec<(usize, u64)>> = (0..k.pp as usize)
        .map(|s| {
            let mut counts: Vec<(usize, u64)> = Vec::new();
            for &b in &items[bounds[s]..bounds[s + 1]] {
                match counts.last_mut() {
                    Some((x, c)) if *x == b => *c += 1,
                    _ => counts.push((b, 1)),
                }
            }
            counts
        })
        .collect();
    Ok(Plan {
        cf,
        items,
        bounds,
        stage_counts,
        v,
        k_hbm: kap.hbm,
    })
}

/// Whether each block of `model` is a repeated layer (what recomputation applies to).
fn layer_blocks(model: &Model) -> Vec<bool> {
    model
        .blocks
        .iter()
        .map(|b| b.repeat != Poly::one())
        .collect()
}

/// The pipeline partition the exact evaluation of a strategy uses: the copies of each block on
/// each stage, in order (`kappa` the machine balance of each tier, as for [`estimate`]).
pub fn pipeline_stage_counts(
    model: &Model,
    numbers: &[BlockNumbers],
    k: &Knobs,
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    gpus_per_node: u64,
) -> Result<Vec<Vec<(usize, u64)>>, StrategyError> {
    let mesh = Mesh::of(k, gpus_per_node);
    let layer_block = layer_blocks(model);
    let kap = Kappas {
        tp: kappa(mesh.axis(AxisKind::Tp).tier),
        ep: kappa(mesh.ep_tier(k.ep)),
        cp: kappa(mesh.cp_axis().tier),
        hbm: kappa_hbm,
    };
    Ok(plan_pipeline(numbers, &layer_block, k, kap)?.stage_counts)
}

/// Floating-point (time, time with data-parallel and point-to-point traffic, memory) per stage,
/// for choosing which stages to price exactly.
#[allow(clippy::too_many_arguments)]
fn rough_stages(
    plan: &Plan,
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
    kt: f64,
    ke: f64,
    kc: f64,
    kd: f64,
    kp: f64,
) -> Vec<[f64; 3]> {
    let Plan {
        items,
        bounds,
        stage_counts,
        ..
    } = plan;
    let mf = k.microbatches as f64;
    let zero3 = if k.zero == 3 {
        (1.0 + 2.0 * k.microbatches as f64) / 2.0
    } else {
        1.0
    };
    let full_recompute = full_recompute_peak(numbers, layer_block, k);
    let mut rough: Vec<[f64; 3]> = Vec::with_capacity(stage_counts.len());
    // What depends on a stage's blocks alone, computed once for each distinct content (the
    // stages of a pipeline of equal layers hold one of a few): the same operations on the same
    // values, so the same floats.
    let mut seen: Vec<(&[(usize, u64)], StageParts)> = Vec::new();
    for (s, counts) in stage_counts.iter().enumerate() {
        let known = seen
            .iter()
            .find(|(c, _)| *c == counts.as_slice())
            .map(|(_, x)| *x);
        let (time, dp_grad, parts) = known.unwrap_or_else(|| {
            let sum = |f: fn(&RoughBlock) -> f64| plan.stage_sum(s, f);
            let time = plan.stage_compute(s, k) * mf
                + kt * (sum(|c| c.tp_bytes) * mf + sum(|c| c.tp_grad))
                + ke * sum(|c| c.ep_bytes) * mf
                + kc * sum(|c| c.cp_bytes) * mf;
            let x = (time, sum(|c| c.dp_grad), memory_parts(plan, k, s));
            seen.push((counts.as_slice(), x));
            x
        });
        let mut p2p = 0.0;
        if (s as u64) + 1 < k.pp {
            p2p += numbers[items[bounds[s + 1] - 1]].approx.boundary;
        }
        if s > 0 {
            p2p += numbers[items[bounds[s] - 1]].approx.boundary;
        }
        if let Some(b) = interleaved_boundary(counts, layer_block, plan.v) {
            p2p += 2.0 * (plan.v - 1) as f64 * numbers[b].approx.boundary;
        }
        let full = time + kd * dp_grad * zero3 + kp * p2p * mf;
        let mem = stage_memory(&parts, full_recompute, k, plan.v, s);
        rough.push([time, full, mem]);
    }
    rough
}

/// Under interleaving with `v` chunks a device holds `v` model chunks, each sending its output
/// forward and its input gradient back: 2·(v − 1) more layer-boundary exchanges per micro-batch
/// than the stage's own two (Narayanan et al. SC'21 §2.2: "the amount of communication also
/// increases by v"). The block whose boundary is exchanged, when there are such exchanges.
fn interleaved_boundary(counts: &[(usize, u64)], layer_block: &[bool], v: u64) -> Option<usize> {
    if v <= 1 {
        return None;
    }
    counts.iter().map(|(b, _)| *b).find(|b| layer_block[*b])
}

/// Micro-batches whose activations stage `s` holds at once, as (numerator, denominator): all of
/// them under GPipe; under 1F1B as many as the stages from `s` on (at most m); interleaving with
/// `v` chunks adds (pp − 1)/(pp·v) of that (Narayanan et al. SC'21 §2.2).
fn in_flight(k: &Knobs, v: u64, s: usize) -> (u64, u64) {
    match k.schedule {
        Schedule::Gpipe => (k.microbatches, 1),
        _ if k.pp == 1 => (1, 1),
        Schedule::OneFOneB => (k.microbatches.min(k.pp - s as u64), 1),
        Schedule::Interleaved => {
            let base = k.microbatches.min(k.pp - s as u64);
            (base * (k.pp * v + k.pp - 1), k.pp * v)
        }
    }
}

/// A stage's time, data-parallel gradient bytes and memory parts: what depends on its blocks
/// alone.
type StageParts = (f64, f64, MemoryParts);

/// The memory of a stage's blocks that does not depend on its place in the pipeline: weights,
/// gradients and optimizer state, and the activations one micro-batch saves.
#[derive(Debug, Clone, Copy)]
struct MemoryParts {
    state: f64,
    saved: f64,
}

fn memory_parts(plan: &Plan, k: &Knobs, s: usize) -> MemoryParts {
    let zero = |min: u8| {
        if k.zero >= min {
            k.replicas() as f64
        } else {
            1.0
        }
    };
    let zero_expert = |min: u8| {
        if k.zero >= min {
            (k.dp / k.ep * k.cp) as f64
        } else {
            1.0
        }
    };
    let sum = |f: fn(&RoughBlock) -> f64| plan.stage_sum(s, f);
    let state = |bytes: i64, stage: u8| {
        sum(|c| c.params) * bytes as f64 / zero(stage)
            + sum(|c| c.params_expert) * bytes as f64 / zero_expert(stage)
    };
    MemoryParts {
        state: state(WEIGHT_BYTES, 3) + state(GRAD_BYTES, 2) + state(OPTIMIZER_BYTES, 1),
        saved: sum(|c| c.saved),
    }
}

/// Under full recomputation, the largest activations one layer holds while it is recomputed.
fn full_recompute_peak(numbers: &[BlockNumbers], layer_block: &[bool], k: &Knobs) -> f64 {
    if k.recompute != Recompute::Full {
        return 0.0;
    }
    numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.approx.saved)
        .fold(0.0, f64::max)
}

/// Memory of stage `s` in floating point: the same formula the exact pricing uses.
fn stage_memory(parts: &MemoryParts, full_recompute: f64, k: &Knobs, v: u64, s: usize) -> f64 {
    let (num, den) = in_flight(k, v, s);
    let fly = num as f64 / den as f64;
    let mut act = parts.saved * fly;
    if k.recompute == Recompute::Full {
        act += full_recompute;
    }
    parts.state + act
}

/// A strategy priced in floating point: enough to order thousands of strategies quickly; the
/// ones shown are then priced exactly with [`evaluate_with`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Relative cost.
    pub total: f64,
    /// Its FLOP part.
    pub flop_part: f64,
    /// Its κ × bytes part.
    pub byte_part: f64,
    /// Memory of the fullest device.
    pub memory: f64,
}

/// Prices a strategy in floating point (see [`Estimate`]).
pub fn estimate(
    model: &Model,
    numbers: &[BlockNumbers],
    k: &Knobs,
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    gpus_per_node: u64,
) -> Result<Estimate, StrategyError> {
    estimate_variants(
        model,
        numbers,
        std::slice::from_ref(k),
        kappa,
        kappa_hbm,
        gpus_per_node,
    )
    .pop()
    .unwrap_or(Err(StrategyError::Nothing("strategy")))
}

/// [`estimate`] of several strategies that share dp, tp, pp and the micro-batch count and
/// differ in schedule, chunks, ZeRO stage, recomputation or expert parallelism: the pipeline
/// partition, which depends on none of the schedule, chunks and ZeRO stage, is computed once per
/// (recomputation, expert-parallel degree).
pub fn estimate_variants(
    model: &Model,
    numbers: &[BlockNumbers],
    ks: &[Knobs],
    kappa: &dyn Fn(Tier) -> f64,
    kappa_hbm: f64,
    gpus_per_node: u64,
) -> Vec<Result<Estimate, StrategyError>> {
    let layer_block = layer_blocks(model);
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    let mut plans: Vec<((Recompute, u64), Result<Plan, StrategyError>)> = Vec::new();
    ks.iter()
        .map(|k| {
            let mesh = Mesh::of(k, gpus_per_node);
            let (kt, kd, kp) = (
                kappa(mesh.axis(AxisKind::Tp).tier),
                kappa(mesh.grad_axis().tier),
                kappa(mesh.p2p_tier()),
            );
            let ke = kappa(mesh.ep_tier(k.ep));
            let kc = kappa(mesh.cp_axis().tier);
            let key = (k.recompute, k.ep);
            let at = match plans.iter().position(|(x, _)| *x == key) {
                Some(i) => i,
                None => {
                    // The partition of the plain schedule: interleaving places the same copies.
                    let plain = Knobs {
                        schedule: Schedule::OneFOneB,
                        chunks: 1,
                        ..k.clone()
                    };
                    let kap = Kappas {
                        tp: kt,
                        ep: ke,
                        cp: kc,
                        hbm: kappa_hbm,
                    };
                    let p = plan_pipeline(numbers, &layer_block, &plain, kap);
                    plans.push((key, p));
                    plans.len() - 1
                }
            };
            let plan = plans[at].1.as_mut().map_err(|e| e.clone())?;
            let v = k.virtual_chunks();
            if v > 1 && !layers.is_multiple_of(k.pp * v) {
                return Err(StrategyError::InterleavedLayers {
                    chunks: v,
                    layers,
                    pp: k.pp,
                });
            }
            plan.v = v;
            Ok(estimate_planned(
                plan,
                numbers,
                &layer_block,
                k,
                [kt, ke, kc, kd, kp],
            ))
        })
        .collect()
}

fn estimate_planned(
    plan: &Plan,
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
    [kt, ke, kc, kd, kp]: [f64; 5],
) -> Estimate {
    let rough = rough_stages(plan, numbers, layer_block, k, kt, ke, kc, kd, kp);
    let mf = k.microbatches as f64;
    let bs = (0..rough.len())
        .max_by(|a, b| rough[*a][1].total_cmp(&rough[*b][1]))
        .unwrap_or(0);
    let tm = (0..rough.len())
        .max_by(|a, b| rough[*a][0].total_cmp(&rough[*b][0]))
        .unwrap_or(0);
    let frac = (k.pp - 1) as f64 / (mf * plan.v as f64);
    let flops = |s: usize| plan.stage_compute(s, k) * mf;
    let total = rough[bs][1] + rough[tm][0] * frac;
    let flop_part = flops(bs) + flops(tm) * frac;
    let memory = rough.iter().map(|x| x[2]).fold(0.0f64, f64::max);
    Estimate {
        total,
        flop_part,
        byte_part: total - flop_part,
        memory,
    }
}

/// Layers (copies of repeated blocks) of `model` under `numbers`: what interleaving divides.
pub fn layer_count(model: &Model, numbers: &[BlockNumbers]) -> u64 {
    let layer_block = layer_blocks(model);
    numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum()
}

/// The links a strategy's traffic crosses and their machine balance: the tier of each parallel
/// dimension's links under the strategy's mesh, and κ (FLOP-equivalents per byte) of each, and
/// of HBM.
struct Links {
    /// The mesh the tiers come from.
    mesh: Mesh,
    /// Tensor-parallel links.
    tp_tier: Tier,
    /// Gradient-reduction links: gradients are reduced over the ranks holding the same
    /// weights, dp × cp.
    dp_tier: Tier,
    /// Context-parallel ring links.
    cp_tier: Tier,
    /// Pipeline point-to-point links.
    p2p_tier: Tier,
    /// Expert-parallel all-to-all links.
    ep_tier: Tier,
    k_tp: Rational,
    k_dp: Rational,
    k_cp: Rational,
    k_p2p: Rational,
    k_ep: Rational,
    k_hbm: Rational,
}

impl Links {
    /// The links of `k` on nodes of `gpus_per_node` devices, priced by `calib`.
    fn of(k: &Knobs, calib: &Calibration, gpus_per_node: u64) -> Links {
        let mesh = Mesh::of(k, gpus_per_node);
        let tp_tier = mesh.axis(AxisKind::Tp).tier;
        let dp_tier = mesh.grad_axis().tier;
        let cp_tier = mesh.cp_axis().tier;
        let p2p_tier = mesh.p2p_tier();
        let ep_tier = mesh.ep_tier(k.ep);
        Links {
            k_tp: calib.balance(tp_tier),
            k_dp: calib.balance(dp_tier),
            k_cp: calib.balance(cp_tier),
            k_p2p: calib.balance(p2p_tier),
            k_ep: calib.balance(ep_tier),
            k_hbm: calib.hbm_balance(),
            mesh,
            tp_tier,
            dp_tier,
            cp_tier,
            p2p_tier,
            ep_tier,
        }
    }

    /// The balances the floating-point pipeline plan uses.
    fn kappas(&self) -> Kappas {
        Kappas {
            tp: self.k_tp.to_f64().unwrap_or(0.0),
            ep: f64_or_max(&self.k_ep),
            cp: f64_or_max(&self.k_cp),
            hbm: f64_or_max(&self.k_hbm),
        }
    }
}

/// `x` as a float, the largest float where it does not fit.
fn f64_or_max(x: &Rational) -> f64 {
    x.to_f64().unwrap_or(f64::MAX)
}

/// Each block's exact per-micro-batch costs under `k`: recomputation adds the forward FLOPs and
/// HBM bytes it reruns and keeps only the activations it does not rerun; expert parallelism
/// shards the expert weights and adds its all-to-all bytes; context parallelism its ring bytes.
fn block_costs(
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
) -> Result<Vec<BlockCost>, StrategyError> {
    numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let (extra, saved, extra_hbm) = match (k.recompute, layer_block[bi]) {
                (Recompute::Full, true) => {
                    (n.forward.clone(), n.boundary.clone(), n.hbm_forward.clone())
                }
                (Recompute::Selective, true) => (
                    n.attention_forward.clone(),
                    &n.saved - &n.attention_saved,
                    n.attention_hbm.clone(),
                ),
                _ => (Rational::zero(), n.saved.clone(), Rational::zero()),
            };
            let (params, params_expert, dp_grad, ep_bytes) = expert_view(n, k)?;
            let cp_bytes = ring_bytes(n, k.recompute, layer_block[bi]);
            let accumulate = grad_accumulation_hbm(&(&params + &params_expert), k);
            Ok(BlockCost {
                cp_bytes,
                hbm: &n.hbm + &extra_hbm + accumulate,
                compute: &n.forward + &n.backward + &extra,
                tp_bytes: n.tp_bytes.clone(),
                saved,
                params,
                params_expert,
                ep_bytes,
                dp_grad,
                tp_grad: n.tp_grad.clone(),
                boundary: n.boundary.clone(),
            })
        })
        .collect()
}

/// Bytes one device of a stage moves per step on each parallel dimension.
#[derive(Clone)]
struct Traffic {
    /// Gradient reduction (and, under ZeRO-3, weight gathering) over the data-parallel group.
    dp: Rational,
    /// Tensor-parallel collectives, per-micro-batch and gradient ones.
    tp: Rational,
    /// Pipeline point-to-point activations and their gradients.
    p2p: Rational,
    /// Expert-parallel all-to-alls.
    ep: Rational,
    /// Context-parallel ring passes.
    cp: Rational,
}

/// One stage priced exactly.
struct PricedStage {
    /// What the evaluation reports of it.
    stage: Stage,
    /// Its time in FLOP-equivalents: compute, HBM traffic, and tensor-, expert- and
    /// context-parallel traffic (what runs once per micro-batch on the stage).
    time: Rational,
    /// Its bytes per dimension.
    traffic: Traffic,
}

/// What pricing the stages of one strategy exactly needs.
struct StagePricer<'a> {
    a: &'a Analysis,
    k: &'a Knobs,
    links: &'a Links,
    costs: &'a [BlockCost],
    plan: &'a Plan,
    layer_block: &'a [bool],
    /// Micro-batches per step.
    m: Rational,
    /// Under full recomputation, the saved activations of the largest layer (what the
    /// layer being recomputed holds again).
    full_layer_saved: Rational,
}

impl StagePricer<'_> {
    /// What ZeRO divides the dense state of `stage_min` (1 optimizer, 2 gradients, 3 weights)
    /// by: the replicas of the weights.
    fn zero_div(&self, stage_min: u8) -> Rational {
        if self.k.zero >= stage_min {
            r(self.k.replicas())
        } else {
            Rational::one()
        }
    }

    /// What ZeRO divides the expert state of `stage_min` by: the ranks holding the same
    /// experts.
    fn zero_expert(&self, stage_min: u8) -> Rational {
        let k = self.k;
        if k.zero >= stage_min {
            r(k.dp / k.ep * k.cp)
        } else {
            Rational::one()
        }
    }

    /// Micro-batches whose activations stage `s` holds at once.
    fn inflight(&self, s: usize) -> Rational {
        let (num, den) = in_flight(self.k, self.plan.v, s);
        Rational::new(num.into(), den.into())
    }

    /// Point-to-point bytes stage `s` sends per step: activations forward to the next stage,
    /// their gradients back to the previous one, and under interleaving the boundaries of its
    /// further chunks.
    fn boundary_bytes(&self, s: usize) -> Rational {
        let Plan {
            items,
            bounds,
            stage_counts,
            v,
            ..
        } = self.plan;
        let costs = self.costs;
        let mut p2p = Rational::zero();
        if (s as u64) + 1 < self.k.pp {
            p2p += costs[items[bounds[s + 1] - 1]].boundary.clone();
        }
        if s > 0 {
            p2p += costs[items[bounds[s] - 1]].boundary.clone();
        }
        if let Some(b) = interleaved_boundary(&stage_counts[s], self.layer_block, *v) {
            p2p += r(2 * (v - 1)) * &costs[b].boundary;
        }
        p2p * &self.m
    }

    /// The sum over the blocks of stage `s` of `f` of each block, times its copies there.
    fn total(&self, s: usize, f: &dyn Fn(&BlockCost) -> &Rational) -> Rational {
        self.plan.stage_counts[s]
            .iter()
            .map(|(b, c)| f(&self.costs[*b]) * r(*c))
            .sum()
    }

    /// Memory per device of stage `s`: weights, gradients and optimizer state (dense state
    /// sharded by ZeRO over the data-parallel group, expert state over the ranks that hold the
    /// same experts) and the activations of the micro-batches in flight.
    fn memory(&self, s: usize) -> Memory {
        let params = self.total(s, &|c| &c.params);
        let experts = self.total(s, &|c| &c.params_expert);
        let mut activations = self.total(s, &|c| &c.saved) * self.inflight(s);
        if self.k.recompute == Recompute::Full {
            activations += self.full_layer_saved.clone();
        }
        let state = |bytes: i64, stage: u8| {
            &params * r(bytes as u64) / self.zero_div(stage)
                + &experts * r(bytes as u64) / self.zero_expert(stage)
        };
        let weights = state(WEIGHT_BYTES, 3);
        let grads = state(GRAD_BYTES, 2);
        let optimizer = state(OPTIMIZER_BYTES, 1);
        let total = &weights + &grads + &optimizer + &activations;
        Memory {
            params: weights,
            grads,
            optimizer,
            activations,
            total,
        }
    }

    /// Data-parallel bytes of stage `s` per step. ZeRO-3 (FSDP) reduce-scatters the gradients
    /// once a step (half the all-reduce's bytes) and all-gathers the weights before each
    /// forward and each backward of every micro-batch (each gather half the all-reduce's
    /// bytes): (1 + 2m)/2 of the all-reduce bytes, the ZeRO paper's 3/2 at one micro-batch
    /// (Rajbhandari et al. 2020, §7.2.2).
    fn dp_bytes(&self, s: usize) -> Rational {
        let mut dp_bytes = self.total(s, &|c| &c.dp_grad);
        if self.k.zero == 3 {
            dp_bytes *= Rational::new((1 + 2 * self.k.microbatches).into(), 2.into());
        }
        dp_bytes
    }

    /// Stage `s` priced exactly: its compute (memory-bound operators cost their HBM traffic at
    /// κ_hbm), memory, time and traffic.
    fn price(&self, s: usize) -> PricedStage {
        let (m, l) = (&self.m, self.links);
        let compute = self.total(s, &|c| &c.compute) * m;
        let hbm_cost = &l.k_hbm * self.total(s, &|c| &c.hbm) * m;
        let tp = self.total(s, &|c| &c.tp_bytes) * m + self.total(s, &|c| &c.tp_grad);
        let ep = self.total(s, &|c| &c.ep_bytes) * m;
        let cp = self.total(s, &|c| &c.cp_bytes) * m;
        let memory = self.memory(s);
        let time = &compute + &hbm_cost + &l.k_tp * &tp + &l.k_ep * &ep + &l.k_cp * &cp;
        let items = self.plan.stage_counts[s]
            .iter()
            .map(|(b, c)| (self.a.blocks[*b].name.clone(), *c))
            .collect();
        PricedStage {
            stage: Stage {
                stage: s as u64,
                items,
                flops: compute,
                hbm_cost,
                memory,
            },
            time,
            traffic: Traffic {
                dp: self.dp_bytes(s),
                tp,
                p2p: self.boundary_bytes(s),
                ep,
                cp,
            },
        }
    }
}

/// The stages worth pricing exactly, in order: every stage within a relative 1e-9 of a maximum
/// of the floating-point `rough` (time, full time, memory), so that a near tie cannot hide the
/// true maximum; stages with the same blocks, neighbours and micro-batches in flight are the
/// same stage, and one of each kind is priced. With `detail`, all stages.
fn stages_to_price(rough: &[[f64; 3]], plan: &Plan, k: &Knobs, detail: bool) -> Vec<usize> {
    let Plan {
        items,
        bounds,
        stage_counts,
        ..
    } = plan;
    let key = |s: usize| {
        let prev = (s > 0).then(|| items[bounds[s] - 1]);
        let next = ((s as u64) + 1 < k.pp).then(|| items[bounds[s + 1] - 1]);
        let fly = if k.schedule == Schedule::Gpipe {
            k.microbatches
        } else {
            k.microbatches.min(k.pp - s as u64)
        };
        (stage_counts[s].clone(), prev, next, fly)
    };
    let mut pick: Vec<usize> = Vec::new();
    let mut seen = Vec::new();
    for i in 0..3 {
        let top = rough.iter().map(|x| x[i]).fold(f64::MIN, f64::max);
        for (s, x) in rough.iter().enumerate() {
            if x[i] >= top - top.abs() * 1e-9 && !pick.contains(&s) {
                let kk = key(s);
                if !seen.contains(&kk) {
                    seen.push(kk);
                    pick.push(s);
                }
            }
        }
    }
    if detail {
        pick = (0..stage_counts.len()).collect();
    }
    pick.sort_unstable();
    pick
}

/// The busiest device and the relative cost of a step on it.
struct Busiest {
    /// Position in the priced stages of the stage with the largest time including its own
    /// data-parallel and point-to-point traffic: the busiest device.
    at: usize,
    /// Idle fraction of the pipeline schedule, (pp − 1)/(m·v).
    bubble_fraction: Rational,
    /// Relative cost of a step.
    relative: RelativeCost,
}

/// Finds the busiest of the priced stages and prices a step on it: its compute, its traffic on
/// intra- and inter-node links, and the bubble, the longest per-micro-batch stage time idle for
/// the bubble fraction.
fn relative_cost(
    priced: &[PricedStage],
    links: &Links,
    k: &Knobs,
    v: u64,
) -> Result<Busiest, StrategyError> {
    let full: Vec<Rational> = priced
        .iter()
        .map(|p| &p.time + &links.k_dp * &p.traffic.dp + &links.k_p2p * &p.traffic.p2p)
        .collect();
    let bs = (0..full.len())
        .max_by(|x, y| full[*x].cmp(&full[*y]))
        .ok_or(StrategyError::Nothing("stages"))?;
    let tm = (0..priced.len())
        .max_by(|x, y| priced[*x].time.cmp(&priced[*y].time))
        .ok_or(StrategyError::Nothing("stages"))?;
    let bubble_fraction = Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    let bubble = &priced[tm].time * &bubble_fraction;
    let busiest = &priced[bs].stage;
    let t = &priced[bs].traffic;
    let mut relative = RelativeCost {
        compute: &busiest.flops + &busiest.hbm_cost,
        bubble,
        ..RelativeCost::default()
    };
    for (bytes, tier, kappa) in [
        (&t.dp, links.dp_tier, &links.k_dp),
        (&t.tp, links.tp_tier, &links.k_tp),
        (&t.p2p, links.p2p_tier, &links.k_p2p),
        (&t.ep, links.ep_tier, &links.k_ep),
        (&t.cp, links.cp_tier, &links.k_cp),
    ] {
        let c = kappa * bytes;
        match tier {
            Tier::Intra => relative.comm_intra += c,
            Tier::Inter => relative.comm_inter += c,
        }
    }
    let slowest = &priced[tm].stage;
    relative.total =
        &relative.compute + &relative.comm_intra + &relative.comm_inter + &relative.bubble;
    relative.flop_part =
        &relative.compute + (&slowest.flops + &slowest.hbm_cost) * &bubble_fraction;
    relative.byte_part = &relative.total - &relative.flop_part;
    Ok(Busiest {
        at: bs,
        bubble_fraction,
        relative,
    })
}

/// The collectives of the analysis that the blocks `counts` (block, copies) of one device run
/// per step: per-micro-batch collectives, and gradient reductions once a step (expert weights
/// reduced only among the ranks that hold the same experts).
fn analysis_rows(
    a: &Analysis,
    numbers: &[BlockNumbers],
    k: &Knobs,
    links: &Links,
    counts: &[(usize, u64)],
) -> Result<Vec<CommRow>, StrategyError> {
    let mut comm = Vec::new();
    let plain_dp_tier = links.mesh.axis(AxisKind::Dp).tier;
    let tier_of = |ax: AxisKind, grad: bool| match ax {
        AxisKind::Dp if grad => links.dp_tier,
        AxisKind::Dp => plain_dp_tier,
        _ => links.tp_tier,
    };
    for &(bi, copies) in counts {
        for (at, b) in &numbers[bi].comm {
            let c = at.of(&a.blocks[bi]);
            comm.push(CommRow {
                collective: c.kind,
                axis: c.axis,
                tier: tier_of(c.axis, false),
                bytes: b / r(c.calls.into()),
                count: copies * k.microbatches * c.calls as u64,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
                reason: c.reason.clone(),
                gradient: false,
            });
        }
        let experts: Vec<&str> = a.blocks[bi]
            .ops
            .iter()
            .filter(|o| o.rule == "expert_matmul")
            .map(|o| o.name.as_str())
            .collect();
        for (at, b) in &numbers[bi].grad_comm {
            let c = at.of(&a.blocks[bi]);
            let b = if k.ep > 1 && c.axis == AxisKind::Dp && experts.contains(&c.op.as_str()) {
                super::moe::expert_grad_allreduce(b, k.dp, k.ep)?
            } else {
                b.clone()
            };
            comm.push(CommRow {
                collective: c.kind,
                axis: c.axis,
                tier: tier_of(c.axis, true),
                bytes: b / r(c.calls.into()),
                count: copies * c.calls as u64,
                op: c.op.clone(),
                tensor: c.tensor.clone(),
                reason: c.reason.clone(),
                gradient: true,
            });
        }
    }
    Ok(comm)
}

/// The context-parallel ring passes of the blocks `counts` per step: forward (cp − 1) steps,
/// backward 2·(cp − 1), plus the forward's again where recomputation reruns the operator.
fn ring_rows(
    a: &Analysis,
    numbers: &[BlockNumbers],
    k: &Knobs,
    links: &Links,
    layer_block: &[bool],
    counts: &[(usize, u64)],
) -> Vec<CommRow> {
    let mut comm = Vec::new();
    for &(bi, copies) in counts {
        let n = &numbers[bi];
        for (oi, x) in &n.ring_ops {
            let op = &a.blocks[bi].ops[*oi];
            let reruns = match (k.recompute, layer_block[bi]) {
                (Recompute::Full, true) => 1,
                (Recompute::Selective, true) => u64::from(op.attention_core),
                _ => 0,
            };
            comm.push(CommRow {
                collective: CollectiveKind::SendRecv,
                axis: AxisKind::Cp,
                tier: links.cp_tier,
                bytes: x.clone(),
                count: copies * k.microbatches * (k.cp - 1) * (3 + reruns),
                op: op.name.clone(),
                tensor: "key, value".into(),
                gradient: false,
                reason: "context parallelism passes each rank's keys and values to the next rank of the ring, cp − 1 steps forward; backward passes them again with their gradients".into(),
            });
        }
    }
    comm
}

/// The expert-parallel all-to-alls of the blocks `counts` per step: tokens go to the devices
/// holding their experts and back, forward and backward.
fn all_to_all_rows(
    a: &Analysis,
    numbers: &[BlockNumbers],
    k: &Knobs,
    links: &Links,
    counts: &[(usize, u64)],
) -> Vec<CommRow> {
    let mut comm = Vec::new();
    for &(bi, copies) in counts {
        let n = &numbers[bi];
        if n.slot_bytes.is_zero() {
            continue;
        }
        let per_call = (r(k.ep) - Rational::one()) / r(k.ep) * &n.slot_bytes;
        comm.push(CommRow {
            collective: CollectiveKind::AllToAll,
            axis: AxisKind::Ep,
            tier: links.ep_tier,
            bytes: per_call,
            count: copies * k.microbatches * 4,
            op: format!("{} experts", a.blocks[bi].name),
            tensor: "expert slots".into(),
            reason: "tokens go to the devices holding their experts and back, forward and backward"
                .into(),
            gradient: false,
        });
    }
    comm
}

/// Whole-model FLOPs per step without recomputation, over all devices of one pipeline stage's
/// replicas: forward and backward, less the fused kernels' recomputation.
fn model_flops(numbers: &[BlockNumbers], k: &Knobs) -> Rational {
    numbers
        .iter()
        .map(|n| (&n.forward + &n.backward - &n.kernel_recompute) * r(n.repeat))
        .sum::<Rational>()
        * r(k.microbatches)
        * r(k.dp)
        * r(k.tp)
        * r(k.cp)
}

/// Evaluates a strategy. `memory` is the device capacity in bytes. With `detail`, the
/// collectives of the busiest device are listed (slower; `rank` asks only for its top rows).
///
/// The steps: the links and their balance (`Links::of`); each block's exact costs
/// (`block_costs`); the pipeline partition and the stages that matter, chosen in floating
/// point (`plan_pipeline`, `rough_stages`, `stages_to_price`); those stages priced exactly
/// (`StagePricer::price`); the busiest device and its relative cost (`relative_cost`); its
/// collectives (`analysis_rows`, `ring_rows`, `all_to_all_rows`); memory and model FLOPs.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_with(
    model: &Model,
    a: &Analysis,
    numbers: &[BlockNumbers],
    knobs: &Knobs,
    calib: &Calibration,
    gpus_per_node: u64,
    memory: &Rational,
    detail: bool,
) -> Result<Evaluation, StrategyError> {
    let k = knobs;
    let links = Links::of(k, calib, gpus_per_node);
    let layer_block = layer_blocks(model);
    let costs = block_costs(numbers, &layer_block, k)?;
    let kap = links.kappas();
    let plan = plan_pipeline(numbers, &layer_block, k, kap)?;
    let rough = rough_stages(
        &plan,
        numbers,
        &layer_block,
        k,
        kap.tp,
        kap.ep,
        kap.cp,
        f64_or_max(&links.k_dp),
        f64_or_max(&links.k_p2p),
    );
    let pricer = StagePricer {
        a,
        k,
        links: &links,
        costs: &costs,
        plan: &plan,
        layer_block: &layer_block,
        m: r(k.microbatches),
        full_layer_saved: numbers
            .iter()
            .enumerate()
            .filter(|(bi, _)| layer_block[*bi])
            .map(|(_, n)| n.saved.clone())
            .max()
            .unwrap_or_default(),
    };
    let pick = stages_to_price(&rough, &plan, k, detail);
    let priced: Vec<PricedStage> = pick.iter().map(|&s| pricer.price(s)).collect();
    let Busiest {
        at: bs,
        bubble_fraction,
        relative,
    } = relative_cost(&priced, &links, k, plan.v)?;
    let mut comm = Vec::new();
    let busiest_blocks = &plan.stage_counts[pick[bs]];
    if detail {
        comm.extend(analysis_rows(a, numbers, k, &links, busiest_blocks)?);
    }
    if detail && k.cp > 1 {
        comm.extend(ring_rows(
            a,
            numbers,
            k,
            &links,
            &layer_block,
            busiest_blocks,
        ));
    }
    if detail && k.ep > 1 {
        comm.extend(all_to_all_rows(a, numbers, k, &links, busiest_blocks));
    }
    let p2p_bytes = priced[bs].traffic.p2p.clone();
    let stages: Vec<Stage> = priced.into_iter().map(|p| p.stage).collect();
    let fullest = stages
        .iter()
        .map(|s| &s.memory)
        .max_by(|a, b| a.total.cmp(&b.total))
        .cloned()
        .unwrap_or_default();
    let feasible = fullest.total <= *memory;
    let reason = (!feasible).then(|| {
        format!(
            "needs {} bytes per device, more than {}",
            fullest.total.to_integer(),
            memory.to_integer()
        )
    });
    Ok(Evaluation {
        knobs: k.clone(),
        mesh: links.mesh,
        flops: stages[bs].flops.clone(),
        model_flops: model_flops(numbers, k),
        comm,
        p2p_bytes,
        memory: fullest,
        stages,
        bubble_fraction,
        relative,
        feasible,
        reason,
    })
}

/// Evaluates a strategy with the busiest device's collectives listed.
pub fn evaluate(
    model: &Model,
    a: &Analysis,
    numbers: &[BlockNumbers],
    knobs: &Knobs,
    calib: &Calibration,
    gpus_per_node: u64,
    memory: &Rational,
) -> Result<Evaluation, StrategyError> {
    evaluate_with(model, a, numbers, knobs, calib, gpus_per_node, memory, true)
}

fn r(v: u64) -> Rational {
    Rational::from_integer(v.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Counting the packing's stages a run at a time agrees with counting item by item.
        #[test]
        fn run_wise_packing_matches_item_wise(
            runs in proptest::collection::vec((0u32..6, 1usize..40), 1..6),
            scale in 0.1f64..1e12,
            limit_share in 0.0f64..1.2,
            pp in 1usize..64,
        ) {
            let t: Vec<f64> = runs
                .iter()
                .flat_map(|&(x, c)| std::iter::repeat_n(x as f64 * scale / 3.0, c))
                .collect();
            let total: f64 = t.iter().sum();
            let limit = total * limit_share;
            prop_assert_eq!(Runs::of(&t).fits(limit, pp), fits_items(&t, limit, pp));
        }
    }
}
