//! Evaluating an analysis for one strategy: exact per-device FLOPs, collectives, point-to-point
//! bytes and memory, the pipeline partition, and the relative cost of DESIGN §3.

use super::amount::{float, Amount, Amounts, Apart, BlockCost, ExpertView, Kappas};
use super::analysis::{Analysis, BlockAnalysis, Comm, CP, DP, TP};
use super::kernels::KernelEfficiency;
use super::traced::{At, Fix, Priced, Traced};
use crate::calib::Calibration;
use crate::model::Model;
use crate::rules::law::CollectiveKind;
use crate::rules::Role;
use crate::strategy::{
    AxisKind, Knobs, Mesh, MeshAxis, PipelineSplit, Recompute, Schedule, StrategyError, Tier,
};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, ToPrimitive, Zero};
use serde::Serialize;
use std::collections::BTreeSet;

/// Bytes of mixed-precision Adam state per parameter: bf16 weights ([`WEIGHT_BYTES`]), bf16
/// gradients, and fp32 master weights, momentum and variance (Rajbhandari et al. 2020).
pub use crate::strategy::WEIGHT_BYTES;
/// Gradient bytes per parameter.
pub const GRAD_BYTES: i64 = 2;
/// Optimizer-state bytes per parameter.
pub const OPTIMIZER_BYTES: i64 = 12;
/// HBM bytes per parameter element that each micro-batch's backward moves to add its weight
/// gradient to the fp32 gradient buffer: the 4-byte accumulator read and written back
/// ([`super::amount::grad_accumulation`]).
pub const GRAD_ACCUMULATION_BYTES: i64 = 8;

/// One block evaluated for one (micro)batch on one device: exact numbers ([`Rational`]), or
/// exact numbers with their formulas ([`Traced`]).
#[derive(Debug, Clone, Default)]
pub struct BlockNumbers<T = Rational> {
    /// Copies of the block.
    pub repeat: u64,
    /// Its amounts (FLOPs, bytes saved and moved, parameters), exact.
    pub exact: Amounts<T>,
    /// The same amounts as floats, for choosing (never for reporting).
    pub approx: Amounts<f64>,
    /// The part of `backward` that fused kernels spend recomputing (not model FLOPs).
    pub kernel_recompute: T,
    /// Per-microbatch collectives: (where in the block's analysis, evaluated wire bytes).
    pub comm: Vec<(CommRef, T)>,
    /// Per-step gradient reductions.
    pub grad_comm: Vec<(CommRef, T)>,
    /// Parameter elements of expert weights (all experts), per device.
    pub expert_params: T,
    /// Their per-step data-parallel gradient wire bytes.
    pub expert_dp_grad: T,
    /// Weight elements of the expert GEMMs among [`Amounts::fp8_weights`] (all experts).
    pub expert_fp8_weights: T,
    /// Bytes per device of one micro-batch's expert slots (what one all-to-all moves).
    pub slot_bytes: T,
    /// How the model routes the tokens of those slots, where it has experts and its routing
    /// symbols are bound ([`super::moe::Routing`]).
    pub routing: Option<super::moe::Routing>,
    /// Context parallelism: per attention operator, (operator position, bytes of its keys and
    /// values on one rank), what one step of the ring passes on.
    pub ring_ops: Vec<(usize, T)>,
    /// Per FP8 GEMM operator, (operator position, its weight elements on one device): what
    /// FP8 parameters gather in FP8 ([`crate::strategy::Knobs::fp8_params`]).
    pub fp8_op_weights: Vec<(usize, T)>,
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

fn eval(p: &Poly, b: &Bindings) -> Result<Rational, StrategyError> {
    Ok(p.eval(b)?)
}

/// The most block copies a pipeline partition places.
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
/// Evaluates every block of an analysis for one microbatch, operator by operator (the
/// reference [`block_numbers_summed`] is held to).
/// `kernels` prices what the blocks' kernels take beyond their FLOPs (the table's
/// size-dependent efficiencies and launch cost; [`KernelEfficiency::plateau`] for none).
pub fn block_numbers(
    a: &Analysis,
    b: &Bindings,
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers>, StrategyError> {
    let at = At {
        bindings: b,
        fix: None,
    };
    let numbers = a
        .blocks
        .iter()
        .map(|blk| block_of(blk, None, &at, kernels))
        .collect();
    routed(a, b, numbers)
}

/// [`block_numbers`] with each amount's formula in the model's symbols ([`Fix`]).
pub fn block_numbers_traced(
    a: &Analysis,
    b: &Bindings,
    fix: &Fix,
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers<Traced>>, StrategyError> {
    let at = At {
        bindings: b,
        fix: Some(fix),
    };
    let numbers = a
        .blocks
        .iter()
        .map(|blk| block_of(blk, None, &at, kernels))
        .collect();
    routed(a, b, numbers)
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
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers>, StrategyError> {
    let at = At {
        bindings: b,
        fix: None,
    };
    let numbers = a
        .blocks
        .iter()
        .zip(sums)
        .map(|(blk, s)| {
            let sums = s.faithful.then_some(s);
            block_of(blk, sums, &at, kernels).or_else(|_| block_of(blk, None, &at, kernels))
        })
        .collect();
    routed(a, b, numbers)
}

/// `numbers` with the model's routing at `b` on each block that dispatches tokens to experts.
fn routed<T: Priced>(
    a: &Analysis,
    b: &Bindings,
    numbers: Result<Vec<BlockNumbers<T>>, StrategyError>,
) -> Result<Vec<BlockNumbers<T>>, StrategyError> {
    let mut numbers = numbers?;
    let routing = a.routing.as_ref().and_then(|r| r.at(b));
    for n in numbers.iter_mut().filter(|n| !n.slot_bytes.is_zero()) {
        n.routing.clone_from(&routing);
    }
    Ok(numbers)
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
    weight: Poly,
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
    let mut all: BTreeSet<&str> = BTreeSet::new();
    let mut divides: BTreeSet<&str> = BTreeSet::new();
    for p in ps {
        for (m, _) in p.terms() {
            for (name, e) in m.iter() {
                all.insert(name);
                if e < 0 {
                    divides.insert(name);
                }
            }
        }
    }
    let owned = |v: BTreeSet<&str>| v.into_iter().map(str::to_string).collect();
    (owned(all), owned(divides))
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
                weight: Poly::zero(),
                kernel_recompute: Poly::zero(),
                saved: Poly::zero(),
                params: Poly::zero(),
                expert_params: Poly::zero(),
                dispatch_out: Poly::zero(),
                faithful: true,
            };
            for op in &blk.ops {
                let mut add = |sum: &mut Poly, p| {
                    *sum += p;
                    parts.push(p);
                };
                add(&mut s.forward, &op.forward);
                add(&mut s.saved, &op.saved);
                if op.recomputed {
                    add(&mut s.attention_forward, &op.forward);
                }
                // A reader of a discarded output saves less too.
                if !op.recomputable_saved.is_zero() {
                    add(&mut s.attention_saved, &op.recomputable_saved);
                }
                if op.class != crate::rules::FlopClass::Matmul {
                    add(&mut s.hbm, &op.io_bytes);
                    add(&mut s.hbm, &op.backward_io_bytes);
                    add(&mut s.hbm_forward, &op.io_bytes);
                    // A loss's separate fp32 passes and training metrics, as timed.
                    let [lf, lb] = &op.loss_pass_bytes;
                    if !lf.is_zero() {
                        add(&mut s.hbm, lf);
                        add(&mut s.hbm_forward, lf);
                    }
                    if !lb.is_zero() {
                        add(&mut s.hbm, lb);
                    }
                    if op.recomputed {
                        add(&mut s.attention_hbm, &op.io_bytes);
                    }
                }
                add(&mut s.backward, &op.backward);
                add(&mut s.backward, &op.recompute);
                add(&mut s.weight, &op.weight_grad);
                add(&mut s.kernel_recompute, &op.recompute);
                add(&mut s.params, &op.params);
                if op.role == Some(Role::ExpertGemm) {
                    add(&mut s.expert_params, &op.params);
                }
                if op.role == Some(Role::MoeDispatch) {
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
                &s.weight,
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
fn block_of<T: Priced>(
    blk: &BlockAnalysis,
    sums: Option<&BlockSums>,
    at: &At<'_>,
    kernels: &KernelEfficiency,
) -> Result<BlockNumbers<T>, StrategyError> {
    let b = at.bindings;
    let ev = |p: &Poly| T::eval(p, at);
    let cp = b.get(CP).cloned().unwrap_or_else(Rational::one);
    let dp = T::constant(b.get(DP).cloned().unwrap_or_else(Rational::one));
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
        from_sums(&mut n, s, &ev, &dp)?;
    }
    for (oi, op) in blk.ops.iter().enumerate() {
        if sums.is_none() {
            add_op_amounts(&mut n, op, &ev, &dp)?;
        }
        if op.linear_input.is_some() {
            let weight = add_fp8(
                &mut n.exact,
                op,
                &ev,
                [kernels.fp8_gain(), kernels.fp4_gain()],
            )?;
            if let (Some(w), Some(Role::ExpertGemm)) = (&weight, op.role) {
                n.expert_fp8_weights = std::mem::take(&mut n.expert_fp8_weights) + w.clone();
            }
            n.fp8_op_weights.extend(weight.map(|w| (oi, w)));
        }
        add_op_comm(&mut n, (oi, op), &ev, &cp)?;
    }
    let add = |sum: &mut T, x: T| *sum = std::mem::take(sum) + x;
    for (index, c) in blk.edges.iter().enumerate() {
        let bytes = ev(&c.wire_bytes)?;
        if c.axis == AxisKind::Tp {
            add(&mut n.exact.tp_bytes, bytes.clone());
        }
        n.comm.push((CommRef::Edge(index), bytes));
    }
    n.exact.boundary = ev(&blk.boundary_bytes)?;
    // What kernels take beyond their FLOPs is read from the table's curves: a number, no
    // formula (none at all at the plateau).
    let kc = kernels.block(blk, b)?;
    let curve = |x: Rational| {
        if kernels.is_plateau() && x.is_zero() {
            T::zero()
        } else {
            T::number(x)
        }
    };
    n.exact.kernel_forward = curve(kc.forward);
    n.exact.kernel_backward = curve(kc.backward);
    n.exact.kernel_attention_forward = curve(kc.attention_forward);
    n.approx = n.exact.map(|x| float(x.value()));
    Ok(n)
}

/// A block's amounts from the sums of its operators' formulas ([`BlockSums`]).
fn from_sums<T: Priced>(
    n: &mut BlockNumbers<T>,
    s: &BlockSums,
    ev: &impl Fn(&Poly) -> Result<T, StrategyError>,
    dp: &T,
) -> Result<(), StrategyError> {
    let x = &mut n.exact;
    x.forward = ev(&s.forward)?;
    x.attention_forward = ev(&s.attention_forward)?;
    x.attention_saved = ev(&s.attention_saved)?;
    x.hbm = ev(&s.hbm)?;
    x.hbm_forward = ev(&s.hbm_forward)?;
    x.attention_hbm = ev(&s.attention_hbm)?;
    x.backward = ev(&s.backward)?;
    x.weight = ev(&s.weight)?;
    n.kernel_recompute = ev(&s.kernel_recompute)?;
    x.saved = ev(&s.saved)?;
    x.params = ev(&s.params)?;
    n.expert_params = ev(&s.expert_params)?;
    if !s.dispatch_out.is_zero() {
        n.slot_bytes = ev(&s.dispatch_out)? / dp.clone();
    }
    Ok(())
}

/// Adds operator `op`'s FLOPs, HBM bytes, saved activations and parameters to a block's
/// amounts (what [`from_sums`] reads at once when the block's sums are faithful).
fn add_op_amounts<T: Priced>(
    n: &mut BlockNumbers<T>,
    op: &super::analysis::OpAnalysis,
    ev: &impl Fn(&Poly) -> Result<T, StrategyError>,
    dp: &T,
) -> Result<(), StrategyError> {
    let add = |sum: &mut T, x: T| *sum = std::mem::take(sum) + x;
    let x = &mut n.exact;
    let fwd = ev(&op.forward)?;
    let saved = ev(&op.saved)?;
    if op.recomputed {
        add(&mut x.attention_forward, fwd.clone());
    }
    // A reader of a discarded output saves less too.
    if !op.recomputable_saved.is_zero() {
        add(&mut x.attention_saved, ev(&op.recomputable_saved)?);
    }
    if op.class != crate::rules::FlopClass::Matmul {
        let f = ev(&op.io_bytes)?;
        if op.recomputed {
            add(&mut x.attention_hbm, f.clone());
        }
        add(&mut x.hbm, f.clone() + ev(&op.backward_io_bytes)?);
        add(&mut x.hbm_forward, f);
        // A loss's separate fp32 passes and training metrics, as timed.
        if op.loss_pass_bytes.iter().any(|p| !p.is_zero()) {
            let lf = ev(&op.loss_pass_bytes[0])?;
            add(&mut x.hbm, ev(&op.loss_pass_bytes[1])? + lf.clone());
            add(&mut x.hbm_forward, lf);
        }
    }
    add(&mut x.forward, fwd);
    let recompute = ev(&op.recompute)?;
    add(&mut x.backward, ev(&op.backward)? + recompute.clone());
    add(&mut x.weight, ev(&op.weight_grad)?);
    add(&mut n.kernel_recompute, recompute);
    add(&mut x.saved, saved);
    let params = ev(&op.params)?;
    if op.role == Some(Role::ExpertGemm) {
        add(&mut n.expert_params, params.clone());
    }
    if op.role == Some(Role::MoeDispatch) {
        add(&mut n.slot_bytes, ev(&op.out_bytes)? / dp.clone());
    }
    let x = &mut n.exact;
    x.params = std::mem::take(&mut x.params) + params;
    Ok(())
}

/// Adds operator `oi`'s context-parallel ring, collectives and gradient collectives to a
/// block's amounts, under a context-parallel degree of `cp`.
fn add_op_comm<T: Priced>(
    n: &mut BlockNumbers<T>,
    (oi, op): (usize, &super::analysis::OpAnalysis),
    ev: &impl Fn(&Poly) -> Result<T, StrategyError>,
    cp: &Rational,
) -> Result<(), StrategyError> {
    let add = |sum: &mut T, x: T| *sum = std::mem::take(sum) + x;
    if *cp > Rational::one() && !op.ring_bytes.is_zero() {
        let x = ev(&op.ring_bytes)?;
        let steps = T::constant(cp - Rational::one()) * x.clone();
        if op.recomputed {
            add(&mut n.exact.ring_core_forward, steps.clone());
        }
        add(&mut n.exact.ring_forward, steps);
        n.ring_ops.push((oi, x));
    }
    for (index, c) in op.comm.iter().enumerate() {
        let mut bytes = ev(&c.wire_bytes)?;
        // A window's halo formula (kernel − stride rows) is negative when the stride
        // exceeds the kernel (a 1×1 convolution of stride 2): no rows are needed.
        if c.kind == CollectiveKind::HaloExchange && *bytes.value() < Rational::zero() {
            bytes = T::zero();
        }
        if c.axis == AxisKind::Tp {
            add(&mut n.exact.tp_bytes, bytes.clone());
        }
        n.comm.push((CommRef::Op { op: oi, index }, bytes));
    }
    let expert = op.role == Some(Role::ExpertGemm);
    for (index, c) in op.grad_comm.iter().enumerate() {
        let bytes = ev(&c.wire_bytes)?;
        match c.axis {
            AxisKind::Dp => {
                if expert {
                    add(&mut n.expert_dp_grad, bytes.clone());
                }
                add(&mut n.exact.dp_grad, bytes.clone());
            }
            AxisKind::Tp => add(&mut n.exact.tp_grad, bytes.clone()),
            _ => {}
        }
        n.grad_comm.push((CommRef::Grad { op: oi, index }, bytes));
    }
    Ok(())
}

/// Adds to a block's amounts those of its linear layer `op` run as an FP8 GEMM
/// ([`crate::strategy::Precision::Fp8`]; a repeated layer's are spent under FP8 only, by
/// [`BlockCost::of`]): the FLOP-equivalents its GEMMs save at the FP8 and FP4 peaks (`gains`
/// of their FLOPs), the elements it casts (its input's where it is the first layer to read it)
/// and its weight's ([`crate::parallel::amount::Fp8Operands`]), and the input elements it
/// keeps in FP8 ([`super::analysis::OpFormulas::fp8_saved_elements`]). Returns its weight
/// elements (none for an operator without a GEMM).
fn add_fp8<T: Priced>(
    x: &mut Amounts<T>,
    op: &super::analysis::OpAnalysis,
    ev: &impl Fn(&Poly) -> Result<T, StrategyError>,
    [fp8_gain, fp4_gain]: [&Rational; 2],
) -> Result<Option<T>, StrategyError> {
    let Some(g) = op.gemms.first() else {
        return Ok(None);
    };
    let add = |sum: &mut T, v: T| *sum = std::mem::take(sum) + v;
    let ops = crate::parallel::amount::Fp8Operands::of([
        ev(&g.batch)?,
        ev(&g.rows)?,
        ev(&g.cols)?,
        ev(&g.inner)?,
    ]);
    let (forward, backward) = (ev(&op.forward)?, ev(&op.backward)?);
    // A table without the peak saves nothing there.
    for (gain, [f, b]) in [
        (
            fp8_gain,
            [&mut x.fp8_gain_forward, &mut x.fp8_gain_backward],
        ),
        (
            fp4_gain,
            [&mut x.fp4_gain_forward, &mut x.fp4_gain_backward],
        ),
    ] {
        if !gain.is_zero() {
            let gain = T::constant(gain.clone());
            add(f, forward.clone() * gain.clone());
            add(b, backward.clone() * gain);
        }
    }
    if op.fp8_casts_input {
        add(&mut x.fp8_cast_forward, ops.input);
    }
    add(&mut x.fp8_cast_backward, ops.grad);
    add(&mut x.fp8_weights, ops.weight.clone());
    let kept = ev(&op.fp8_saved_elements)?;
    if op.fp8_replaces_bf16 {
        add(&mut x.fp8_replaced_elements, kept.clone());
    }
    add(&mut x.fp8_saved_elements, kept);
    Ok(Some(ops.weight))
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
    /// Whether it runs over the ranks holding the same experts
    /// ([`Mesh::expert_grad_axis`]) rather than the whole axis: an expert weight's gradient
    /// collective under expert parallelism.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub expert_group: bool,
    /// `bytes` as a formula in the model's symbols, where the evaluation folded formulas
    /// ([`block_numbers_traced`]).
    #[serde(skip)]
    pub formula: Option<Poly>,
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
    /// memory-bound operators' and the optimizer step's HBM bytes × κ_hbm. A polynomial in the
    /// model's symbols.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub compute: Rational,
    /// What the same device's kernels take beyond their FLOPs at the matmul plateau
    /// ([`Stage::kernel_cost`]): GEMMs and fused attention below it by their sizes, and every
    /// kernel's launch, read from the calibration table's curves, tiling and per-kernel time.
    /// A number, with no formula (the curves interpolate in log size).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub kernels: Rational,
    /// κ_intra × intra-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_intra: Rational,
    /// κ_inter × inter-node bytes.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub comm_inter: Rational,
    /// Idle pipeline time, in FLOP-equivalents.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub bubble: Rational,
    /// The part of the data-parallel traffic (counted in `comm_intra` or `comm_inter`) that
    /// runs while the device computes: gradient reductions under the backward, ZeRO 3's weight
    /// gathers under both passes ([`super::amount::BlockCost::dp_hidden`]). Subtracted from
    /// the total. The smaller of two polynomials, so a polynomial only piecewise.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub hidden: Rational,
    /// The part of `total` that is FLOPs (compute and its share of the bubble, less `hidden`
    /// where the compute it runs under, not the traffic, bounds it).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub flop_part: Rational,
    /// The part of `total` that is κ × bytes (scales with the machine balance).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub byte_part: Rational,
    /// compute + kernels + comm_intra + comm_inter + bubble − hidden.
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
    /// κ_hbm × HBM bytes of the memory-bound operators and the optimizer step per device per
    /// step (FLOP-equivalents).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub hbm_cost: Rational,
    /// FLOP-equivalents its kernels take per device per step beyond their FLOPs at the matmul
    /// plateau: GEMMs and fused attention below it, by their sizes, and every kernel's launch
    /// (the calibration table's curves, tiling and per-kernel time).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub kernel_cost: Rational,
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
    /// Of `p2p_bytes`, under DualPipe, the sum of the busiest rank's copies' gradients with
    /// its mirror's ([`crate::parallel::amount::dualpipe_grad_sum`]); zero, and not
    /// serialized, under the other schedules.
    #[serde(
        serialize_with = "crate::sym::ser_rational",
        skip_serializing_if = "num_traits::Zero::is_zero"
    )]
    pub grad_sum_bytes: Rational,
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
    pub reason: Option<Infeasible>,
    /// The amounts above as formulas in the model's symbols, from the same fold, where the
    /// evaluation folded formulas ([`block_numbers_traced`]).
    #[serde(skip)]
    pub formulas: Option<Box<Formulas>>,
}

/// An evaluation's amounts as formulas in the model's symbols (the mesh sizes and the
/// micro-batch count put in, the machine balances as exact constants), each `None` where the
/// amount is no polynomial: the busiest stage's compute and traffic, the relative cost's parts
/// and the fullest device's memory. They come from the same computation as the numbers, so
/// each evaluates at the model's values to its number.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Formulas {
    /// FLOPs per device per step ([`Evaluation::flops`]).
    pub compute: Option<Poly>,
    /// Of them, the forward pass's.
    pub forward: Option<Poly>,
    /// The backward pass's, without recomputation.
    pub backward: Option<Poly>,
    /// Recomputed forward FLOPs.
    pub recomputed: Option<Poly>,
    /// The busiest stage's κ_hbm × HBM bytes ([`Stage::hbm_cost`]).
    pub hbm_cost: Option<Poly>,
    /// [`Evaluation::p2p_bytes`].
    pub p2p_bytes: Option<Poly>,
    /// [`Evaluation::bubble_fraction`].
    pub bubble_fraction: Option<Poly>,
    /// [`Evaluation::relative`]'s parts.
    pub relative: RelativeFormulas,
    /// [`Evaluation::memory`]'s parts.
    pub memory: MemoryFormulas,
}

/// [`RelativeCost`]'s parts as formulas.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct RelativeFormulas {
    pub compute: Option<Poly>,
    pub kernels: Option<Poly>,
    pub comm_intra: Option<Poly>,
    pub comm_inter: Option<Poly>,
    pub bubble: Option<Poly>,
    pub hidden: Option<Poly>,
    pub total: Option<Poly>,
}

/// [`Memory`]'s parts as formulas.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct MemoryFormulas {
    pub params: Option<Poly>,
    pub grads: Option<Poly>,
    pub optimizer: Option<Poly>,
    pub activations: Option<Poly>,
    pub total: Option<Poly>,
}

/// Why a strategy does not fit: the memory its fullest device needs against what a device has
/// (bytes). Printed as `needs N bytes per device, more than M` (whole bytes); serialised as
/// data, `{"need": "N", "have": "M"}` (exact byte counts as strings, as every exact amount).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Infeasible {
    /// Bytes the fullest device needs.
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub need: Rational,
    /// Bytes a device has (after headroom).
    #[serde(serialize_with = "crate::sym::ser_rational")]
    pub have: Rational,
}

impl std::fmt::Display for Infeasible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "needs {} bytes per device, more than {}",
            self.need.to_integer(),
            self.have.to_integer()
        )
    }
}

impl Infeasible {
    /// Why the strategy does not fit, with both amounts in [`crate::units::bytes`] (as
    /// [`std::fmt::Display`] states them with `--exact`).
    pub fn describe(&self) -> String {
        if crate::units::exact() {
            return self.to_string();
        }
        crate::units::fit_text(&self.need, &self.have)
    }
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

/// Splits items given as runs of equal times — (time, items) in order, as a model's blocks
/// and their copies — into exactly `pp` contiguous stages, minimising the largest stage time:
/// a binary search on the largest load with a greedy packing ([`pack_runs`]), then the stages
/// with most items split until there are `pp` (splitting never raises the largest load).
/// Returns the stage boundaries (item indices).
fn partition_runs(runs: &[(f64, usize)], pp: usize) -> Option<Vec<usize>> {
    let n: usize = runs.iter().map(|r| r.1).sum();
    if pp == 0 || pp > n {
        return None;
    }
    if pp == 1 {
        return Some(vec![0, n]);
    }
    // Negative or undefined times break the run-wise packing's premise that loads grow: those
    // are packed item by item.
    let regular = runs.iter().all(|(x, _)| *x >= 0.0);
    let items: Vec<f64> = if regular {
        Vec::new()
    } else {
        runs.iter()
            .flat_map(|&(x, c)| std::iter::repeat_n(x, c))
            .collect()
    };
    let pack = |limit: f64, stop: usize, bounds: Option<&mut Vec<usize>>| {
        if regular {
            pack_runs(runs, limit, stop, bounds)
        } else {
            pack_items(&items, limit, stop, bounds)
        }
    };
    let mut lo = runs.iter().map(|r| r.0).fold(0.0, f64::max);
    // One stage holding everything, loaded as the packing loads it: this limit always fits.
    let mut hi = if regular {
        runs.iter()
            .fold(0.0, |l, &(x, c)| if c == 0 { l } else { l + c as f64 * x })
    } else {
        items.iter().sum::<f64>()
    };
    // Until `lo` and `hi` are adjacent floats: from there on a midpoint is one of them, and
    // (`lo` once shown not to fit) the search can no longer move.
    let mut lo_fails = false;
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if mid >= hi || (mid <= lo && lo_fails) {
            break;
        }
        if pack(mid, pp, None) <= pp {
            hi = mid;
        } else {
            lo = mid;
            lo_fails = true;
        }
    }
    let mut bounds = Vec::with_capacity(pp + 1);
    if pack(hi, usize::MAX, Some(&mut bounds)) > pp {
        return None;
    }
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

/// The greedy packing of runs of equal times under `limit`: a stage ends before an item when
/// its load is positive and the item would take it over `limit`. A stage's load inside a run
/// is its load on entering plus whole multiples of the run's time, so the items a stage takes
/// from a run are found by binary search, and the stages started inside a run all hold the same
/// number of items (the first k ≥ 1 whose next item ends the stage), the last what is left: the
/// cost does not grow with the copies. Returns the number of stages (counting stops past
/// `stop`); with `bounds`, records each stage's first item and, last, the item count.
fn pack_runs(
    runs: &[(f64, usize)],
    limit: f64,
    stop: usize,
    mut bounds: Option<&mut Vec<usize>>,
) -> usize {
    if let Some(b) = bounds.as_deref_mut() {
        b.push(0);
    }
    let mut stages = 1;
    let mut load = 0.0f64;
    let mut at = 0;
    for &(x, count) in runs {
        // The stage open when the run begins takes its items while they fit.
        let before = |i: usize| if i == 0 { load } else { load + i as f64 * x };
        let i = first_true(0, count, ((limit - load) / x).floor(), |m| {
            before(m) > 0.0 && load + (m + 1) as f64 * x > limit
        });
        if i == count {
            load = before(count);
            at += count;
            continue;
        }
        let per = first_true(1, count, (limit / x).floor(), |k| {
            k as f64 * x > 0.0 && (k + 1) as f64 * x > limit
        });
        let left = count - i;
        let new = left.div_ceil(per);
        if let Some(b) = bounds.as_deref_mut() {
            b.extend((0..new).map(|s| at + i + s * per));
        }
        stages += new;
        if stages > stop {
            return stages;
        }
        load = ((left - 1) % per + 1) as f64 * x;
        at += count;
    }
    if let Some(b) = bounds {
        b.push(at);
    }
    stages
}

/// The first `i` in `lo..hi` where `pred`, false and then true along the range, holds (`hi`
/// when it never does): the binary search's answer, found from `guess` in two probes when the
/// guess is at the boundary or next to it, by binary search within what the probes leave
/// otherwise.
fn first_true(lo: usize, hi: usize, guess: f64, pred: impl Fn(usize) -> bool) -> usize {
    // Every index below `a` is false; `b` is `hi` or a true index.
    let (mut a, mut b) = (lo, hi);
    if guess.is_finite() {
        let g = (guess.max(0.0).min(hi as f64) as usize).clamp(lo, hi);
        if g < b {
            if pred(g) {
                b = g;
            } else {
                a = g + 1;
            }
        }
        if b == g && g > a {
            if pred(g - 1) {
                b = g - 1;
            } else {
                a = g;
            }
        } else if a == g + 1 && a < b {
            if pred(a) {
                b = a;
            } else {
                a += 1;
            }
        }
    }
    while a < b {
        let m = (a + b) / 2;
        if pred(m) {
            b = m;
        } else {
            a = m + 1;
        }
    }
    a
}

/// [`pack_runs`] item by item, for times that are negative or undefined.
fn pack_items(t: &[f64], limit: f64, stop: usize, mut bounds: Option<&mut Vec<usize>>) -> usize {
    if let Some(b) = bounds.as_deref_mut() {
        b.push(0);
    }
    let mut stages = 1;
    let mut load = 0.0;
    for (i, &x) in t.iter().enumerate() {
        if load > 0.0 && load + x > limit {
            stages += 1;
            if stages > stop {
                return stages;
            }
            if let Some(b) = bounds.as_deref_mut() {
                b.push(i);
            }
            load = 0.0;
        }
        load += x;
    }
    if let Some(b) = bounds {
        b.push(t.len());
    }
    stages
}

/// Expert parallelism applied to a block: (dense parameters, expert parameters held, data-parallel
/// gradient bytes, all-to-all wire bytes per micro-batch). Each device holds E/ep experts; their
/// gradients are reduced among the dp·cp/ep ranks holding the same experts; every micro-batch's
/// tokens on the device (S/cp of each sequence under context parallelism: `slot_bytes` is
/// already per context-parallel rank) go to their experts and back in the forward pass, and their
/// gradients in the backward pass: four all-to-alls of the slots, (ep − 1)/ep of them on the wire
/// (GShard, Lepikhin et al. 2021).
fn expert_view<T: Priced>(
    n: &BlockNumbers<T>,
    k: &Knobs,
    share: &Rational,
) -> Result<ExpertView<T>, StrategyError> {
    let x = &n.exact;
    let dense = x.params.clone() - n.expert_params.clone();
    if k.ep <= 1 {
        return Ok(ExpertView {
            dense,
            experts: n.expert_params.clone(),
            dp_grad: x.dp_grad.clone(),
            expert_dp_grad: T::zero(),
            ep_bytes: T::zero(),
            fp8_weights: x.fp8_weights.clone(),
            fp8_experts: n.expert_fp8_weights.clone(),
        });
    }
    let ep = T::int(k.ep);
    let held = n.expert_params.clone() / ep.clone();
    let expert_grad = super::moe::expert_grad_allreduce(&n.expert_dp_grad, k.dp, k.cp, k.ep)?;
    let grad = x.dp_grad.clone() - n.expert_dp_grad.clone() + expert_grad.clone();
    let [dispatch, combine, combine_grad, dispatch_grad] =
        super::moe::all_to_all_wire(n.slot_bytes.clone(), k, share);
    let wire = if k.fp8_dispatch {
        dispatch + combine + combine_grad + dispatch_grad
    } else {
        // The four alike, as counted before FP8 dispatch (the same number, one product).
        T::int(4) * combine
    };
    // A device's FP8 expert weights are those of its E/ep experts, as its parameters are.
    let fp8_experts = n.expert_fp8_weights.clone() / T::int(k.ep);
    let fp8_weights = x.fp8_weights.clone() - n.expert_fp8_weights.clone() + fp8_experts.clone();
    Ok(ExpertView {
        dense,
        experts: held,
        dp_grad: grad,
        expert_dp_grad: expert_grad,
        ep_bytes: wire,
        fp8_weights,
        fp8_experts,
    })
}

/// The pipeline layout of one strategy, chosen in floating point.
struct Plan {
    /// Per block, its costs as floats.
    cf: Vec<BlockCost<f64>>,
    /// The stages, in order, as runs of consecutive stages that hold the same copies (a
    /// pipeline of equal layers has a few runs however many stages it has).
    groups: Vec<StageGroup>,
    /// Pipeline stages.
    stages: usize,
    /// Model chunks per device.
    v: u64,
    /// With model chunks (interleaving, ZB-V), per rank how its chunks are held apart
    /// ([`rank_chunks`]); empty otherwise.
    chunks: std::sync::Arc<RankChunks>,
}

/// Copies of each block on a stage or a chunk, in order.
type Copies = Vec<(usize, u64)>;

/// An interleaved placement: the stages, and how each rank's chunks are held apart.
type ChunkPlace = (Vec<StageGroup>, std::sync::Arc<RankChunks>);

/// Per pipeline rank, how its chunks are held apart ([`Plan::held_apart`]): each chunk's class,
/// in the rank's order, and the copies of each class (chunks of a class hold the same copies);
/// none where all its chunks hold the same copies.
type RankChunks = Vec<Option<(Vec<usize>, Vec<Copies>)>>;

/// [`RankChunks`] of `chunks` (the copies on each chunk, in model order) over `p` ranks, each
/// rank's chunks where [`crate::strategy::schedule::rank_of`] places them.
fn rank_chunks(chunks: &[Copies], schedule: Schedule, p: usize) -> RankChunks {
    let mut mine: Vec<Vec<&Copies>> = vec![Vec::new(); p];
    for (c, copies) in chunks.iter().enumerate() {
        mine[crate::strategy::schedule::rank_of(schedule, c, p)].push(copies);
    }
    mine.into_iter()
        .map(|mine| {
            if mine.iter().all(|x| *x == mine[0]) {
                return None;
            }
            let (mut firsts, mut class): (Vec<Copies>, Vec<usize>) = (Vec::new(), Vec::new());
            for x in mine {
                class.push(firsts.iter().position(|y| y == x).unwrap_or_else(|| {
                    firsts.push(x.clone());
                    firsts.len() - 1
                }));
            }
            Some((class, firsts))
        })
        .collect()
}

/// A stage's copies and the blocks whose boundaries it receives and sends ([`Plan::place`]).
type StagePlace<'a> = (&'a [(usize, u64)], Option<usize>, Option<usize>);

/// Consecutive pipeline stages holding the same block copies.
#[derive(PartialEq)]
struct StageGroup {
    /// The first of them.
    first: usize,
    /// How many.
    len: usize,
    /// Copies of each block on each of them, in order.
    counts: Vec<(usize, u64)>,
}

impl Plan {
    /// The copies of each block on stage `s`, in order.
    fn counts(&self, s: usize) -> &[(usize, u64)] {
        let g = self.groups.partition_point(|g| g.first <= s) - 1;
        &self.groups[g].counts
    }

    /// The parts whose memory rank `s` holds apart, as [`BlockCost::rank_memory`] takes them
    /// (`costs`: per block): under ZB-V its chunks s and 2·pp − 1 − s; interleaved, its chunks
    /// in order where they differ (the embedding's, the head's, an uneven split), none where
    /// they hold the same copies (priced as the rank's sum,
    /// [`in_flight`](super::amount::in_flight)); under DualPipe its stage (`own`, summed) and
    /// the mirrored stage; none where the rank runs one stage.
    fn held_apart<T: Amount>(
        &self,
        costs: &[BlockCost<T>],
        k: &Knobs,
        s: usize,
        own: &BlockCost<T>,
    ) -> Option<Apart<T>> {
        if !self.chunks.is_empty() {
            let (class, firsts) = self.chunks.get(s)?.as_ref()?;
            return Some(Apart {
                classes: firsts.iter().map(|x| BlockCost::stage(costs, x)).collect(),
                class: class.clone(),
                mirror: false,
            });
        }
        let mirror = BlockCost::stage(costs, self.counts(dualpipe_mirror(k, s)?));
        Some(Apart {
            classes: vec![own.clone(), mirror],
            class: vec![0, 1],
            mirror: true,
        })
    }

    /// Memory of the device that runs stage `s` (`c`: its summed costs; `costs`: per block):
    /// its parts held apart where it runs several ([`Plan::held_apart`]), else the stage whole.
    fn memory<T: Amount>(
        &self,
        costs: &[BlockCost<T>],
        k: &Knobs,
        s: usize,
        c: &BlockCost<T>,
        full_layer_saved: &T,
    ) -> [T; 4] {
        match self.held_apart(costs, k, s, c) {
            Some(apart) => c.rank_memory(&apart, k, self.v, s, full_layer_saved),
            None => c.memory(k, self.v, s, full_layer_saved),
        }
    }

    /// The block of stage `s`'s last copy: the block whose output the stage sends on.
    fn last_block(&self, s: usize) -> Option<usize> {
        if s >= self.stages {
            return None;
        }
        self.counts(s).last().map(|(b, _)| *b)
    }

    /// What stage `s`'s exact times depend on (of `pp` stages): its copies and the blocks whose
    /// boundaries it receives and sends.
    fn place(&self, s: usize, pp: u64) -> StagePlace<'_> {
        let prev = if s > 0 { self.last_block(s - 1) } else { None };
        let next = if (s as u64) + 1 < pp {
            self.last_block(s)
        } else {
            None
        };
        (self.counts(s), prev, next)
    }

    /// Copies of each block on each stage, stage by stage.
    fn stage_counts(&self) -> Vec<Vec<(usize, u64)>> {
        self.groups
            .iter()
            .flat_map(|g| std::iter::repeat_n(g.counts.clone(), g.len))
            .collect()
    }

    /// The stages that stand for all: of each group its first, its second and its last. A
    /// group's stages hold the same copies; its inner stages have neighbours holding them too,
    /// so they send and receive the same boundaries and differ only in the micro-batches in
    /// flight, which never grow with the stage index
    /// ([`in_flight`](super::amount::in_flight)): the first holds the most.
    /// With `all`, every stage.
    fn representatives(&self, all: bool) -> impl Iterator<Item = (usize, usize, &StageGroup)> + '_ {
        self.groups.iter().enumerate().flat_map(move |(gi, g)| {
            let n = if all { g.len } else { g.len.min(3) };
            (0..n).map(move |i| {
                let s = if all || i == 0 {
                    g.first + i
                } else if i + 1 == n {
                    g.first + g.len - 1
                } else {
                    g.first + 1
                };
                (s, gi, g)
            })
        })
    }
}

/// Each block's costs under `k`, as floats: the exact amounts converted once, combined by the
/// same [`BlockCost::of`] as the exact pricing (the expert view, which can fail, converted from
/// the exact one where the model has experts).
fn rough_costs<N: Priced>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    share: &Rational,
) -> Vec<BlockCost<f64>> {
    numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let x = &n.approx;
            let e = if k.ep > 1 || !n.expert_params.is_zero() {
                expert_view(n, k, share)
                    .unwrap_or_default()
                    .map(|x| float(x.value()))
            } else {
                ExpertView {
                    dense: x.params,
                    experts: 0.0,
                    dp_grad: x.dp_grad,
                    expert_dp_grad: 0.0,
                    ep_bytes: 0.0,
                    fp8_weights: x.fp8_weights,
                    fp8_experts: 0.0,
                }
            };
            BlockCost::of(x, e, layer_block[bi], k.recompute, k.precision)
        })
        .collect()
}

fn plan_pipeline<N: Priced>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    share: &Rational,
) -> Result<Plan, StrategyError> {
    let cf = rough_costs(numbers, layer_block, k, share);
    // The partition places block copies (a run of copies per block); without pipelining the
    // copies are only counted, so any number of layers is fine.
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
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    if k.pp > copies {
        return Err(StrategyError::TooManyStages {
            pp: k.pp,
            layers: copies,
        });
    }
    let v = k.virtual_chunks();
    // The activations in flight are counted from the interleaved order.
    crate::strategy::check_schedule_microbatches(k)?;
    if v > 1 && !(layers + k.pipeline_split.extra()).is_multiple_of(k.pp * v) {
        return Err(StrategyError::InterleavedLayers {
            schedule: k.schedule.name(),
            chunks: v,
            layers,
            pp: k.pp,
            extra: k.pipeline_split.extra(),
        });
    }
    if k.pp == 1 {
        let counts = numbers
            .iter()
            .enumerate()
            .map(|(b, n)| (b, n.repeat))
            .collect();
        return Ok(Plan {
            cf,
            groups: vec![StageGroup {
                first: 0,
                len: 1,
                counts,
            }],
            stages: 1,
            v,
            chunks: Default::default(),
        });
    }
    if v > 1 {
        // Checked above: the layers divide evenly over the chunks.
        let (groups, chunks) = interleaved_groups(
            numbers,
            layer_block,
            (k.pp as usize, v),
            k.schedule,
            k.pipeline_split,
        )
        .ok_or(StrategyError::InterleavedLayers {
            schedule: k.schedule.name(),
            chunks: v,
            layers,
            pp: k.pp,
            extra: k.pipeline_split.extra(),
        })?;
        return Ok(Plan {
            cf,
            groups,
            stages: k.pp as usize,
            v,
            chunks: std::sync::Arc::new(chunks),
        });
    }
    // Each block copy's time for one micro-batch, what the partition balances: a run of equal
    // times per block (blocks without copies hold no items).
    let (blocks, runs): (Vec<usize>, Vec<(f64, usize)>) = numbers
        .iter()
        .enumerate()
        .filter(|(_, n)| n.repeat > 0)
        .map(|(b, n)| (b, (cf[b].block_time(kap), n.repeat as usize)))
        .unzip();
    let bounds = partition_runs(&runs, k.pp as usize).ok_or(StrategyError::NoPartition)?;
    Ok(Plan {
        cf,
        groups: stage_groups(&blocks, &runs, &bounds),
        stages: bounds.len() - 1,
        v,
        chunks: Default::default(),
    })
}

/// Copies of each block on each stage, in order: the items of `runs` (one run of equal items
/// per block of `blocks`) cut at the partition's `bounds`; consecutive stages with the same
/// copies form one group.
fn stage_groups(blocks: &[usize], runs: &[(f64, usize)], bounds: &[usize]) -> Vec<StageGroup> {
    let mut groups: Vec<StageGroup> = Vec::new();
    let mut counts = Vec::new();
    let mut run = 0;
    let mut start = 0; // first item of `runs[run]`
    for (s, w) in bounds.windows(2).enumerate() {
        let (a, b) = (w[0], w[1]);
        counts.clear();
        while run < runs.len() && start + runs[run].1 <= a {
            start += runs[run].1;
            run += 1;
        }
        let (mut r, mut first) = (run, start);
        while r < runs.len() && first < b {
            let end = first + runs[r].1;
            let held = end.min(b) - first.max(a);
            if held > 0 {
                counts.push((blocks[r], held as u64));
            }
            first = end;
            r += 1;
        }
        match groups.last_mut() {
            Some(g) if g.counts == counts => g.len += 1,
            _ => groups.push(StageGroup {
                first: s,
                len: 1,
                counts: counts.clone(),
            }),
        }
    }
    groups
}

/// Block copies on each model chunk of the interleaved schedule, as Megatron-LM places them and
/// the timeline runs them: the layers split evenly over the `chunks`, the blocks before the first
/// layer (embeddings) on the first chunk and those after the last (the head) on the last. With
/// `split` counting the embedding or the loss as a layer ([`PipelineSplit`]), the split is of
/// the layers and those, so the first or last chunk holds one layer fewer. `None` when there
/// are no layers or they do not divide evenly.
pub fn interleaved_chunks(
    repeats: &[u64],
    layer_block: &[bool],
    chunks: u64,
    split: PipelineSplit,
) -> Option<Vec<Vec<(usize, u64)>>> {
    let layers: u64 = repeats
        .iter()
        .zip(layer_block)
        .filter(|(_, l)| **l)
        .map(|(r, _)| *r)
        .sum();
    let units = layers + split.extra();
    if layers == 0 || !units.is_multiple_of(chunks) {
        return None;
    }
    let per = units / chunks;
    let last = chunks as usize - 1;
    let mut out: Vec<Vec<(usize, u64)>> = vec![Vec::new(); chunks as usize];
    // Units of the split placed so far: the embedding's first, where it counts.
    let mut seen = u64::from(split.embedding);
    let mut placed = 0u64;
    let mut add = |c: usize, b: usize, n: u64| match out[c].last_mut() {
        Some((x, m)) if *x == b => *m += n,
        _ => out[c].push((b, n)),
    };
    for (b, &r) in repeats.iter().enumerate() {
        if layer_block[b] {
            let mut left = r;
            while left > 0 {
                let take = (per - seen % per).min(left);
                add(((seen / per) as usize).min(last), b, take);
                seen += take;
                placed += take;
                left -= take;
            }
        } else if placed == 0 {
            add(0, b, r);
        } else if placed < layers {
            add(((seen / per) as usize).min(last), b, r);
        } else {
            add(last, b, r);
        }
    }
    Some(out)
}

/// The stages of the interleaved schedule with `v` chunks per device ([`interleaved_chunks`];
/// stage `s` holds chunks `s`, `s + pp`, …, or under ZB-V chunks `s` and `2pp − 1 − s`:
/// [`rank_of`]), as runs of consecutive stages holding the same copies. No balancing moves a
/// layer to offset the head or the embeddings, so the stage that holds them is the busiest.
///
/// [`rank_of`]: crate::strategy::schedule::rank_of
fn interleaved_groups<N>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    (pp, v): (usize, u64),
    schedule: Schedule,
    split: PipelineSplit,
) -> Option<(Vec<StageGroup>, RankChunks)> {
    let repeats: Vec<u64> = numbers.iter().map(|n| n.repeat).collect();
    let chunks = interleaved_chunks(&repeats, layer_block, pp as u64 * v, split)?;
    let mut held = vec![vec![0u64; numbers.len()]; pp];
    for (c, copies) in chunks.iter().enumerate() {
        for &(b, n) in copies {
            held[crate::strategy::schedule::rank_of(schedule, c, pp)][b] += n;
        }
    }
    let mut groups: Vec<StageGroup> = Vec::new();
    for (s, h) in held.iter().enumerate() {
        let counts: Vec<(usize, u64)> = h
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, c)| (b, *c))
            .collect();
        match groups.last_mut() {
            Some(g) if g.counts == counts => g.len += 1,
            _ => groups.push(StageGroup {
                first: s,
                len: 1,
                counts,
            }),
        }
    }
    Some((groups, rank_chunks(&chunks, schedule, pp)))
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
    // The partition balances per-micro-batch time, in which no overlap is credited.
    let kap = mesh_kappas(&mesh, k, kappa, kappa_hbm, 1.0);
    let share = ep_share(numbers, k, &mesh);
    Ok(plan_pipeline(numbers, &layer_block, k, &kap, &share)?.stage_counts())
}

/// The balances of the links of `k`'s parallel dimensions on `mesh` (`kappa` of each link's
/// tier), and of HBM.
fn mesh_kappas<T: Amount>(
    mesh: &Mesh,
    k: &Knobs,
    kappa: impl Fn(Tier) -> T,
    kappa_hbm: T,
    overlap: T,
) -> Kappas<T> {
    Kappas {
        tp: axis_kappa(mesh.axis(AxisKind::Tp), &kappa),
        ep: kappa(mesh.ep_tier(k.ep)),
        cp: kappa(mesh.cp_axis().tier),
        dp: axis_kappa(&mesh.grad_axis(), &kappa),
        edp: axis_kappa(&mesh.expert_grad_axis(k.ep), &kappa),
        p2p: kappa(mesh.p2p_tier()),
        hbm: kappa_hbm,
        overlap,
    }
}

/// κ of the ring collectives (all-reduce, reduce-scatter, all-gather) over `axis`: each tier's
/// κ weighted by the share of the wire bytes that cross it ([`MeshAxis::tier_shares`]).
pub fn axis_kappa<T: Amount>(axis: &MeshAxis, kappa: &impl Fn(Tier) -> T) -> T {
    axis.tier_shares()
        .into_iter()
        .fold(T::zero(), |sum, (tier, num, den)| {
            sum + kappa(tier) * T::ratio(num, den)
        })
}

/// The boundary bytes stage `s` sends per micro-batch (`boundary` of each block): its output
/// forward to the next stage, its input gradient back to the previous one, and under
/// interleaving the boundaries of its further chunks.
fn stage_boundary<T: Amount>(
    plan: &Plan,
    k: &Knobs,
    layer_block: &[bool],
    s: usize,
    boundary: impl Fn(usize) -> T,
) -> T {
    let v = plan.v;
    let mut p2p = T::zero();
    if k.schedule.v_shaped() && v > 1 {
        // ZB-V: each neighbouring rank receives one chunk's output and sends back its
        // gradient, and sends the other's; the turn of the "V" (rank pp − 1, chunk 0 to
        // chunk 1) and the ends (rank 0's first chunk's input, its last chunk's output) stay
        // on the device.
        let neighbours = u64::from(s > 0) + u64::from((s as u64) + 1 < k.pp);
        if let Some(b) = interleaved_boundary(plan.counts(s), layer_block, v) {
            p2p = T::int(2 * neighbours) * boundary(b);
        }
        return p2p;
    }
    if (s as u64) + 1 < k.pp {
        if let Some(b) = plan.last_block(s) {
            p2p = p2p + boundary(b);
        }
    }
    if s > 0 {
        if let Some(b) = plan.last_block(s - 1) {
            p2p = p2p + boundary(b);
        }
    }
    if let Some(b) = interleaved_boundary(plan.counts(s), layer_block, v) {
        p2p = p2p + T::int(2 * (v - 1)) * boundary(b);
    }
    p2p
}

/// Under full recomputation, the largest activations one layer holds while it is recomputed
/// (`saved` of each block).
fn full_layer_saved<T: Amount, N>(
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    saved: impl Fn(&BlockNumbers<N>) -> T,
) -> T {
    let mut most = T::zero();
    let mut kinds = 0;
    if k.recompute == Recompute::Full {
        for (n, _) in numbers.iter().zip(layer_block).filter(|(_, l)| **l) {
            let x = saved(n);
            kinds += 1;
            if x > most {
                most = x;
            }
        }
    }
    // The largest of several kinds of layer is a maximum, not a polynomial.
    if kinds > 1 {
        most.piecewise()
    } else {
        most
    }
}

/// What a stage of `group` takes from its blocks alone under `k` ([`StageParts`]).
fn group_parts(plan: &Plan, group: &StageGroup, k: &Knobs, kap: &Kappas<f64>) -> StageParts {
    parts_of(plan, &group.counts, k, kap, k.microbatches as f64)
}

/// What a device running the blocks `counts` for `mf` micro-batches each takes from them
/// alone under `k` ([`StageParts`]).
fn parts_of(
    plan: &Plan,
    counts: &[(usize, u64)],
    k: &Knobs,
    kap: &Kappas<f64>,
    mf: f64,
) -> StageParts {
    let c = BlockCost::stage(&plan.cf, counts);
    let hidden = c.dp_hidden_bound(&mf, kap, k);
    StageParts {
        compute: c.compute_time(&mf, kap, k),
        time: c.time(&mf, kap, k),
        dp: c.dp_traffic(k),
        edp: c.edp_traffic(k),
        hidden: hidden.0,
        hidden_by_compute: hidden.1,
        cost: c,
    }
}

/// Floating-point (time, time with data-parallel and point-to-point traffic, memory) of each
/// stage (`all`), for choosing which stages to price exactly, or of each stage that stands for
/// others ([`Plan::representatives`], in their order), for the screen, handed to `visit` in
/// order: the formulas of the exact pricing ([`StagePricer::price`]) on the costs as floats.
/// The stages a representative stands for have its time and at most its memory, so the maxima
/// over all stages are the maxima over the representatives. `parts`, when given, holds
/// [`group_parts`] of each group of the plan (shared by strategies that differ only in schedule
/// and chunks).
#[allow(clippy::too_many_arguments)]
fn rough_each<N>(
    plan: &Plan,
    numbers: &[BlockNumbers<N>],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    all: bool,
    parts: Option<&[StageParts]>,
    mut visit: impl FnMut(RoughStage),
) {
    let full_recompute = full_layer_saved(numbers, layer_block, k, |n| n.approx.saved);
    let boundary =
        |s: usize| stage_boundary(plan, k, layer_block, s, |b| numbers[b].approx.boundary);
    // Under DualPipe a stage stands for its rank, whose stages another group may hold: every
    // stage is visited.
    let all = all || k.schedule.bidirectional();
    // What depends on a stage's blocks alone, computed once for each group of stages holding
    // the same copies: the same operations on the same values, so the same floats.
    let mut current: Option<(usize, StageParts)> = None;
    for (s, gi, group) in plan.representatives(all) {
        let own = match (current, parts) {
            (Some((g, x)), _) if g == gi => x,
            (_, Some(known)) => known[gi],
            _ => group_parts(plan, group, k, kap),
        };
        current = Some((gi, own));
        // The blocks the device runs, for how many micro-batches each, sending how much per
        // micro-batch, and its memory.
        let (parts, mf, p2p) = match dualpipe_rank(plan, k, s) {
            Some((m, counts)) => {
                // DualPipe: stages s and pp − 1 − s, half the micro-batches through each
                // ([`StagePricer::price`]).
                let half = k.microbatches as f64 / 2.0;
                let p2p = boundary(s) + boundary(m);
                (parts_of(plan, &counts, k, kap, half), half, p2p)
            }
            None => (own, k.microbatches as f64, boundary(s)),
        };
        let memory = plan
            .memory(&plan.cf, k, s, &own.cost, &full_recompute)
            .iter()
            .sum();
        let full = parts.time + kap.dp * parts.dp + kap.edp * parts.edp - parts.hidden
            + kap.p2p * (p2p * mf + parts.cost.grad_sum_bytes(k));
        visit(RoughStage {
            compute: parts.compute,
            hidden_flops: if parts.hidden_by_compute {
                parts.hidden
            } else {
                0.0
            },
            time: parts.time,
            full,
            memory,
            weight: parts.cost.weight * mf,
            dualpipe: if k.schedule.overlaps_chunks() {
                parts.cost.dualpipe_bubble(&mf, kap, k)
            } else {
                0.0
            },
        });
    }
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

/// Under DualPipe with more than one stage, the stage whose rank also runs stage `s`,
/// pp − 1 − s: the second of [`stage_ranks`](crate::strategy::schedule::stage_ranks).
fn dualpipe_mirror(k: &Knobs, s: usize) -> Option<usize> {
    crate::strategy::schedule::stage_ranks(k.schedule, s, k.pp as usize).nth(1)
}

/// Under DualPipe, the rank that runs stage `s`: its mirrored stage ([`dualpipe_mirror`]) and
/// the blocks of both, copies of the same block added, in order of first appearance.
fn dualpipe_rank(plan: &Plan, k: &Knobs, s: usize) -> Option<(usize, Vec<(usize, u64)>)> {
    let mirror = dualpipe_mirror(k, s)?;
    let (own, theirs) = (plan.counts(s), plan.counts(mirror));
    let mut counts: Vec<(usize, u64)> = Vec::with_capacity(own.len() + theirs.len());
    for &(b, n) in own.iter().chain(theirs) {
        match counts.iter_mut().find(|(c, _)| *c == b) {
            Some((_, m)) => *m += n,
            None => counts.push((b, n)),
        }
    }
    Some((mirror, counts))
}

/// A stage priced in floating point, for choosing.
#[derive(Debug, Clone, Copy)]
struct RoughStage {
    /// Its compute per step (FLOPs and HBM bytes at κ_hbm).
    compute: f64,
    /// What overlap saves where the compute, not the traffic, bounds it (a FLOP part).
    hidden_flops: f64,
    /// What it runs per step apart from its gradient reduction and pipeline sends.
    time: f64,
    /// The same with them.
    full: f64,
    /// Memory per device.
    memory: f64,
    /// Its weight-gradient FLOPs per step (what ZB-H1 defers into the bubble).
    weight: f64,
    /// Its DualPipe bubble per step ([`BlockCost::dualpipe_bubble`]; zero under the other
    /// schedules).
    dualpipe: f64,
}

/// What the floating-point pricing of a stage takes from its blocks alone (not from its place
/// in the pipeline): its compute, time, data-parallel bytes, weight, gradient and optimizer
/// state, and its summed costs.
#[derive(Debug, Clone, Copy)]
struct StageParts {
    compute: f64,
    time: f64,
    dp: f64,
    /// Of the data-parallel bytes, those over the ranks holding the same experts
    /// ([`BlockCost::edp_traffic`]).
    edp: f64,
    /// The part of `dp` and `edp` at their κ that runs under compute ([`BlockCost::dp_hidden`]).
    hidden: f64,
    /// Whether the compute it runs under, not the traffic, bounds `hidden`.
    hidden_by_compute: bool,
    cost: BlockCost<f64>,
}

/// A strategy priced in floating point: enough to order thousands of strategies quickly; the
/// ones shown are then priced exactly with [`evaluate_with`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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
    overlap: f64,
    gpus_per_node: u64,
) -> Result<Estimate, StrategyError> {
    estimate_variants(
        model,
        numbers,
        std::slice::from_ref(k),
        kappa,
        kappa_hbm,
        overlap,
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
    overlap: f64,
    gpus_per_node: u64,
) -> Vec<Result<Estimate, StrategyError>> {
    let layer_block = layer_blocks(model);
    let layers: u64 = numbers
        .iter()
        .enumerate()
        .filter(|(bi, _)| layer_block[*bi])
        .map(|(_, n)| n.repeat)
        .sum();
    // Per (recomputation, expert degree, interleaved, V-shaped, expert-parallel share): the
    // partitions.
    type PlanKey = (Recompute, u64, bool, bool, Rational);
    let mut plans: Vec<(PlanKey, Result<Plan, StrategyError>)> = Vec::new();
    // The interleaved stages of each (pp, chunks, V-shaped).
    let mut chunk_groups: Vec<((u64, u64, bool), ChunkPlace)> = Vec::new();
    // The links' balances of each mesh, and each plan's group parts per ZeRO stage (the same
    // for every schedule and chunk count): computed once, shared by the strategies. A mesh is
    // keyed with whether its experts dispatch node by node, which sets their wire share.
    type MeshKey = (u64, u64, u64, u64, u64, bool);
    type PartsKey = (usize, u8, u64, MeshKey, [bool; 2]);
    let mut kaps: Vec<(MeshKey, (Kappas<f64>, Rational))> = Vec::new();
    let mut shared: Vec<(PartsKey, Vec<StageParts>)> = Vec::new();
    ks.iter()
        .map(|k| {
            let mesh_key = (k.dp, k.tp, k.pp, k.cp, k.ep, k.node_dispatch);
            let (kap, share) = match kaps.iter().find(|(x, _)| *x == mesh_key) {
                Some((_, x)) => x.clone(),
                None => {
                    let mesh = Mesh::of(k, gpus_per_node);
                    let x = mesh_kappas(&mesh, k, kappa, kappa_hbm, overlap);
                    let x = (x, ep_share(numbers, k, &mesh));
                    kaps.push((mesh_key, x.clone()));
                    x
                }
            };
            let v = k.virtual_chunks();
            if v > 1 && !(layers + k.pipeline_split.extra()).is_multiple_of(k.pp * v) {
                return Err(StrategyError::InterleavedLayers {
                    schedule: k.schedule.name(),
                    chunks: v,
                    layers,
                    pp: k.pp,
                    extra: k.pipeline_split.extra(),
                });
            }
            // The plain schedule's partition is balanced; interleaving places its chunks by
            // layer count ([`interleaved_groups`]), which for most models gives every chunk
            // count the same stages: a plan (and its group parts) is shared by the chunk counts
            // whose stages agree.
            let key = (k.recompute, k.ep, v > 1, k.v_placed(), share.clone());
            let groups = (v > 1).then(|| {
                let at = chunk_groups
                    .iter()
                    .position(|(x, _)| *x == (k.pp, v, k.v_placed()))
                    .unwrap_or_else(|| {
                        // The layers divide (checked above), so the placement exists.
                        let g = interleaved_groups(
                            numbers,
                            &layer_block,
                            (k.pp as usize, v),
                            k.schedule,
                            k.pipeline_split,
                        );
                        let (groups, chunks) = g.unwrap_or_default();
                        let place = (groups, std::sync::Arc::new(chunks));
                        chunk_groups.push(((k.pp, v, k.v_placed()), place));
                        chunk_groups.len() - 1
                    });
                &chunk_groups[at].1
            });
            let same = |x: &PlanKey, p: &Result<Plan, StrategyError>| {
                *x == key && groups.is_none_or(|g| p.as_ref().is_ok_and(|p| p.groups == g.0))
            };
            let at = match plans.iter().position(|(x, p)| same(x, p)) {
                Some(i) => i,
                None => {
                    let p = plan_pipeline(numbers, &layer_block, k, &kap, &share);
                    plans.push((key, p));
                    plans.len() - 1
                }
            };
            let plan = plans[at].1.as_mut().map_err(|e| e.clone())?;
            // A plan shared by chunk counts: this one's chunks.
            plan.v = v;
            if let Some((_, chunks)) = groups {
                plan.chunks = chunks.clone();
            }
            let overlap = [k.overlap.grad_reduce, k.overlap.param_gather];
            let parts_key = (at, k.zero, k.microbatches, mesh_key, overlap);
            let parts = match shared.iter().position(|(x, _)| *x == parts_key) {
                Some(i) => i,
                None => {
                    let parts = plan
                        .groups
                        .iter()
                        .map(|g| group_parts(plan, g, k, &kap))
                        .collect();
                    shared.push((parts_key, parts));
                    shared.len() - 1
                }
            };
            Ok(estimate_planned(
                plan,
                numbers,
                &layer_block,
                k,
                &kap,
                &shared[parts].1,
            ))
        })
        .collect()
}

fn estimate_planned(
    plan: &Plan,
    numbers: &[BlockNumbers],
    layer_block: &[bool],
    k: &Knobs,
    kap: &Kappas<f64>,
    parts: &[StageParts],
) -> Estimate {
    // The stage with the largest full time and the one with the largest time (the last of
    // equals, as `max_by` picks), and the largest memory, without collecting the stages.
    let mut busiest: Option<RoughStage> = None;
    let mut longest: Option<RoughStage> = None;
    let mut memory = 0.0f64;
    rough_each(
        plan,
        numbers,
        layer_block,
        k,
        kap,
        false,
        Some(parts),
        |x| {
            if busiest.is_none_or(|b| x.full.total_cmp(&b.full) != std::cmp::Ordering::Less) {
                busiest = Some(x);
            }
            if longest.is_none_or(|b| x.time.total_cmp(&b.time) != std::cmp::Ordering::Less) {
                longest = Some(x);
            }
            memory = memory.max(x.memory);
        },
    );
    let (Some(bs), Some(tm)) = (busiest, longest) else {
        return Estimate::default();
    };
    let mf = k.microbatches as f64;
    let frac = (k.pp - 1) as f64 / (mf * plan.v as f64);
    // ZB-H1 idles twice its weight gradients less ([`zb_h1_bubble`]).
    let deferred = if k.schedule.splits_backward() {
        2.0 * tm.weight
    } else {
        0.0
    };
    let (total, flop_part) = if k.schedule.overlaps_chunks() {
        // DualPipe's bubble ([`BlockCost::dualpipe_bubble`]), its FLOP part in the slowest
        // stage's own proportion.
        let share = if tm.time > 0.0 {
            tm.compute / tm.time
        } else {
            0.0
        };
        (
            bs.full + tm.dualpipe,
            bs.compute - bs.hidden_flops + tm.dualpipe * share,
        )
    } else {
        (
            bs.full + (tm.time - deferred) * frac,
            bs.compute - bs.hidden_flops + (tm.compute - deferred) * frac,
        )
    };
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
    /// κ of each.
    kap: Kappas<Rational>,
    /// κ of the intra- and inter-node tiers.
    tiers: [Rational; 2],
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
            kap: mesh_kappas(
                &mesh,
                k,
                |t| calib.balance(t),
                calib.hbm_balance(),
                calib.overlap_saving(),
            ),
            tiers: [calib.balance(Tier::Intra), calib.balance(Tier::Inter)],
            mesh,
            tp_tier,
            dp_tier,
            cp_tier,
            p2p_tier,
            ep_tier,
        }
    }

    /// κ of a tier.
    fn tier_kappa(&self, tier: Tier) -> &Rational {
        &self.tiers[usize::from(tier == Tier::Inter)]
    }

    /// The balances the floating-point pipeline plan uses.
    fn kappas(&self) -> Kappas<f64> {
        self.kap.map(float)
    }
}

/// The model's routing, as the blocks that dispatch to experts carry it.
pub fn routing_of<T>(numbers: &[BlockNumbers<T>]) -> Option<&super::moe::Routing> {
    numbers.iter().find_map(|n| n.routing.as_ref())
}

/// The share of a device's expert slots each all-to-all of `k` puts on the expert-parallel links
/// of `mesh` ([`super::moe::wire_share`], with the model's routing).
pub fn ep_share<T>(numbers: &[BlockNumbers<T>], k: &Knobs, mesh: &Mesh) -> Rational {
    super::moe::wire_share(k, routing_of(numbers), mesh.ep_nodes(k.ep))
}

/// Each block's exact per-micro-batch costs under `k` ([`BlockCost::of`]).
fn block_costs<T: Priced>(
    numbers: &[BlockNumbers<T>],
    layer_block: &[bool],
    k: &Knobs,
    share: &Rational,
) -> Result<Vec<BlockCost<T>>, StrategyError> {
    numbers
        .iter()
        .enumerate()
        .map(|(bi, n)| {
            let e = expert_view(n, k, share)?;
            Ok(BlockCost::of(
                &n.exact,
                e,
                layer_block[bi],
                k.recompute,
                k.precision,
            ))
        })
        .collect()
}

/// Bytes one device of a stage moves per step on each parallel dimension.
#[derive(Clone)]
struct Traffic<T> {
    /// Gradient reduction (and, under ZeRO-3, weight gathering) over the data-parallel group.
    dp: T,
    /// The same for expert weights under expert parallelism, over the ranks holding the same
    /// experts.
    edp: T,
    /// Tensor-parallel collectives, per-micro-batch and gradient ones.
    tp: T,
    /// Pipeline point-to-point activations and their gradients.
    p2p: T,
    /// Expert-parallel all-to-alls.
    ep: T,
    /// Context-parallel ring passes.
    cp: T,
}

/// Memory per device, in the fold's number type ([`Memory`] of the values).
#[derive(Clone)]
struct Held<T> {
    params: T,
    grads: T,
    optimizer: T,
    activations: T,
    total: T,
}

impl<T: Priced> Held<T> {
    fn values(&self) -> Memory {
        let v = |x: &T| x.value().clone();
        Memory {
            params: v(&self.params),
            grads: v(&self.grads),
            optimizer: v(&self.optimizer),
            activations: v(&self.activations),
            total: v(&self.total),
        }
    }

    fn formulas(&self) -> MemoryFormulas {
        let f = |x: &T| x.formula().cloned();
        MemoryFormulas {
            params: f(&self.params),
            grads: f(&self.grads),
            optimizer: f(&self.optimizer),
            activations: f(&self.activations),
            total: f(&self.total),
        }
    }
}

/// One stage priced exactly.
#[derive(Clone)]
struct PricedStage<T> {
    /// Stage number.
    stage: u64,
    /// Its block copies, by name.
    items: Vec<(String, u64)>,
    /// FLOPs per device per step, recomputation included.
    flops: T,
    /// Of them, the backward pass's without recomputation.
    backward: T,
    /// Of them, the weight gradients' (what ZB-H1 defers).
    weight: T,
    /// Its DualPipe bubble per step ([`BlockCost::dualpipe_bubble`]; zero under the other
    /// schedules).
    dualpipe: T,
    /// Of them, the forward FLOPs recomputation reruns.
    recomputed: T,
    /// κ_hbm × HBM bytes per step.
    hbm_cost: T,
    /// What its kernels take beyond their FLOPs per step.
    kernel_cost: T,
    /// Memory per device.
    memory: Held<T>,
    /// Its time in FLOP-equivalents: compute, HBM traffic, and tensor-, expert- and
    /// context-parallel traffic (what runs once per micro-batch on the stage).
    time: T,
    /// Its bytes per dimension.
    traffic: Traffic<T>,
    /// Of its point-to-point bytes, the DualPipe sum of its copies' gradients with its
    /// mirror's ([`BlockCost::grad_sum_bytes`]; zero under the other schedules).
    grad_sum: T,
    /// The FLOP-equivalents of its data-parallel traffic that run under its compute
    /// ([`BlockCost::dp_hidden`]).
    hidden: T,
    /// Whether the compute it runs under, not the traffic, bounds `hidden`.
    hidden_by_compute: bool,
}

impl<T: Priced> PricedStage<T> {
    /// What the evaluation reports of it.
    fn report(&self) -> Stage {
        Stage {
            stage: self.stage,
            items: self.items.clone(),
            flops: self.flops.value().clone(),
            hbm_cost: self.hbm_cost.value().clone(),
            kernel_cost: self.kernel_cost.value().clone(),
            memory: self.memory.values(),
        }
    }
}

/// What pricing the stages of one strategy exactly needs.
struct StagePricer<'a, T> {
    a: &'a Analysis,
    k: &'a Knobs,
    costs: &'a [BlockCost<T>],
    plan: &'a Plan,
    layer_block: &'a [bool],
    /// The machine balances, as constants of the fold.
    kap: Kappas<T>,
    /// Micro-batches per step.
    m: T,
    /// Under full recomputation, the saved activations of the largest layer (what the
    /// layer being recomputed holds again).
    full_layer_saved: T,
}

impl<T: Priced> StagePricer<'_, T> {
    /// Memory per device of stage `s` (its summed costs `c`): weights, gradients and optimizer
    /// state ([`BlockCost::state`]) and the activations of the micro-batches in flight.
    fn memory(&self, c: &BlockCost<T>, s: usize) -> Held<T> {
        let [params, grads, optimizer, activations] =
            self.plan
                .memory(self.costs, self.k, s, c, &self.full_layer_saved);
        let total = params.clone() + grads.clone() + optimizer.clone() + activations.clone();
        Held {
            params,
            grads,
            optimizer,
            activations,
            total,
        }
    }

    /// The stages `pick`, priced exactly: stages in the same place ([`Plan::place`]) share
    /// their times and traffic, priced once; each has its own memory. Under DualPipe a stage
    /// stands for its rank, whose place is its two stages'.
    fn price_all(&self, pick: &[usize]) -> Vec<PricedStage<T>> {
        type Place<'p> = (StagePlace<'p>, Option<StagePlace<'p>>);
        let mut known: Vec<(Place<'_>, usize, BlockCost<T>)> = Vec::new();
        let mut priced: Vec<PricedStage<T>> = Vec::with_capacity(pick.len());
        let place_of = |s: usize| self.plan.place(s, self.k.pp);
        for &s in pick {
            let place = (place_of(s), dualpipe_mirror(self.k, s).map(place_of));
            if let Some((_, at, c)) = known.iter().find(|(p, ..)| *p == place) {
                let mut p = priced[*at].clone();
                p.stage = s as u64;
                p.memory = self.memory(c, s);
                priced.push(p);
            } else {
                let c = BlockCost::stage(self.costs, self.plan.counts(s));
                let p = self.price(s, &c);
                known.push((place, priced.len(), c));
                priced.push(p);
            }
        }
        priced
    }

    /// Pipeline point-to-point bytes of stage `s` per micro-batch.
    fn boundary(&self, s: usize) -> T {
        stage_boundary(self.plan, self.k, self.layer_block, s, |b| {
            self.costs[b].boundary.clone()
        })
    }

    /// Stage `s` (its summed costs `c`) priced exactly: its compute (memory-bound operators
    /// cost their HBM traffic at κ_hbm), memory, time and traffic. Under DualPipe, its rank
    /// ([`dualpipe_rank`]): stages s and pp − 1 − s, half the micro-batches through each, as the
    /// timeline runs them.
    fn price(&self, s: usize, c: &BlockCost<T>) -> PricedStage<T> {
        match dualpipe_rank(self.plan, self.k, s) {
            Some((mirror, counts)) => {
                let rank = BlockCost::stage(self.costs, &counts);
                let half = self.m.clone() / T::int(2);
                let p2p = (self.boundary(s) + self.boundary(mirror)) * half.clone();
                self.price_as(s, c, &rank, &half, p2p)
            }
            None => {
                let p2p = self.boundary(s) * self.m.clone();
                self.price_as(s, c, c, &self.m, p2p)
            }
        }
    }

    /// Stage `s` (its summed costs `own`, for its memory) priced as its device runs it: the
    /// summed costs `c` for `m` micro-batches, sending `p2p` bytes of activations and their
    /// gradients, and under DualPipe the sum of its copies' gradients with its mirror's
    /// ([`BlockCost::grad_sum_bytes`]) over the same link.
    fn price_as(
        &self,
        s: usize,
        own: &BlockCost<T>,
        c: &BlockCost<T>,
        m: &T,
        p2p: T,
    ) -> PricedStage<T> {
        let kap = &self.kap;
        let grad_sum = c.grad_sum_bytes(self.k);
        let traffic = Traffic {
            dp: c.dp_traffic(self.k),
            edp: c.edp_traffic(self.k),
            tp: c.tp_traffic(m),
            p2p: p2p + grad_sum.clone(),
            ep: c.ep_bytes.clone() * m.clone(),
            cp: c.cp_bytes.clone() * m.clone(),
        };
        // The stage's own blocks (under DualPipe its rank also runs the mirrored stage's).
        let items = self
            .plan
            .counts(s)
            .iter()
            .map(|(b, c)| (self.a.blocks[*b].name.clone(), *c))
            .collect();
        let (hidden, hidden_by_compute) = c.dp_hidden_bound(m, kap, self.k);
        PricedStage {
            stage: s as u64,
            items,
            flops: c.compute.clone() * m.clone(),
            backward: (c.backward.clone() - c.recomputed.clone()) * m.clone(),
            weight: c.weight.clone() * m.clone(),
            dualpipe: if self.k.schedule.overlaps_chunks() {
                c.dualpipe_bubble(m, kap, self.k)
            } else {
                T::zero()
            },
            recomputed: c.recomputed.clone() * m.clone(),
            hbm_cost: kap.hbm.clone() * c.step_hbm(m, self.k),
            kernel_cost: c.kernel.clone() * m.clone(),
            memory: self.memory(own, s),
            time: c.time(m, kap, self.k),
            traffic,
            grad_sum,
            hidden,
            hidden_by_compute,
        }
    }
}

/// The stages worth pricing exactly, in order: every stage within a relative 1e-9 of a maximum
/// of the floating-point `rough` (time, full time, memory), so that a near tie cannot hide the
/// true maximum. Stages with the same blocks and neighbours have the same exact times, so one of
/// each kind is priced for the times; their memory also depends on the micro-batches in flight,
/// so one of each kind and count is priced for memory. With `detail`, all stages.
fn stages_to_price(rough: &[RoughStage], plan: &Plan, k: &Knobs, detail: bool) -> Vec<usize> {
    if detail {
        return (0..plan.stages).collect();
    }
    let place = |s: usize| plan.place(s, k.pp);
    let fly = |s: usize| match k.schedule {
        Schedule::Gpipe => k.microbatches,
        Schedule::ZeroBubbleH1 => k.microbatches.min(k.pp),
        Schedule::DualPipe => k.pp + 1,
        Schedule::ZeroBubbleV => {
            crate::strategy::schedule::zero_bubble_v_held(s, k.pp as usize, k.microbatches as usize)
        }
        Schedule::DualPipeV => crate::strategy::schedule::dualpipe_v_held(k.pp as usize),
        _ => k.microbatches.min(k.pp - s as u64),
    };
    // Under DualPipe a stage stands for its rank, whose place is its two stages'.
    let at = |s: usize| (place(s), dualpipe_mirror(k, s).map(place));
    let mut pick: Vec<usize> = Vec::new();
    let mut timed = Vec::new();
    let mut held = Vec::new();
    let measures: [fn(&RoughStage) -> f64; 3] = [|x| x.time, |x| x.full, |x| x.memory];
    for (m, get) in measures.iter().enumerate() {
        let top = rough.iter().map(get).fold(f64::MIN, f64::max);
        for (s, x) in rough.iter().enumerate() {
            if get(x) < top - top.abs() * 1e-9 || pick.contains(&s) {
                continue;
            }
            let p = at(s);
            let new = if m < 2 {
                !timed.contains(&p)
            } else {
                !held.contains(&(p, fly(s)))
            };
            if new {
                held.push((p, fly(s)));
                timed.push(p);
                pick.push(s);
            }
        }
    }
    pick.sort_unstable();
    pick
}

/// The busiest device and the relative cost of a step on it.
struct Busiest<T> {
    /// Position in the priced stages of the stage with the largest time including its own
    /// data-parallel and point-to-point traffic: the busiest device.
    at: usize,
    /// Idle fraction of the pipeline schedule, (pp − 1)/(m·v), of the slowest stage's time
    /// (under ZB-H1, of that time less twice its weight gradients': [`zb_h1_bubble`]).
    bubble_fraction: Rational,
    /// Relative cost of a step, in the fold's number type (the total's split into FLOP and
    /// byte parts aside).
    parts: RelativeParts<T>,
    /// The part of the total that is FLOPs ([`RelativeCost::flop_part`]).
    flop_part: Rational,
}

/// The relative cost's parts in the fold's number type.
struct RelativeParts<T> {
    compute: T,
    kernels: T,
    comm_intra: T,
    comm_inter: T,
    bubble: T,
    hidden: T,
    total: T,
}

impl<T: Priced> Busiest<T> {
    /// The relative cost's values.
    fn relative(&self) -> RelativeCost {
        let p = &self.parts;
        let v = |x: &T| x.value().clone();
        RelativeCost {
            compute: v(&p.compute),
            kernels: v(&p.kernels),
            comm_intra: v(&p.comm_intra),
            comm_inter: v(&p.comm_inter),
            bubble: v(&p.bubble),
            hidden: v(&p.hidden),
            byte_part: v(&p.total) - &self.flop_part,
            flop_part: self.flop_part.clone(),
            total: v(&p.total),
        }
    }

    /// Their formulas.
    fn formulas(&self) -> RelativeFormulas {
        let p = &self.parts;
        let f = |x: &T| x.formula().cloned();
        RelativeFormulas {
            compute: f(&p.compute),
            kernels: f(&p.kernels),
            comm_intra: f(&p.comm_intra),
            comm_inter: f(&p.comm_inter),
            bubble: f(&p.bubble),
            hidden: f(&p.hidden),
            total: f(&p.total),
        }
    }
}

/// ZB-H1's bubble on a stage of step time `time` whose weight gradients take `weight` (both
/// over the step's m micro-batches), with `fraction` = (pp − 1)/m: Qi et al.,
/// arXiv:2401.10241, §3.1, give it as (p − 1)(T_F + T_B − T_W) per step, where 1F1B idles
/// (p − 1)(T_F + T_B + T_W): the per-micro-batch stage time less twice its W, times p − 1.
/// Never negative: a weight gradient's FLOPs are those of a forward product it mirrors (the
/// einsum of the output gradient with the same operand, over the same indices), so T_W ≤ T_F.
fn zb_h1_bubble<T: Priced>(time: &T, weight: &T, fraction: T) -> T {
    (time.clone() - weight.clone() * T::int(2)) * fraction
}

/// κ times the bytes of traffic `t` on the intra- and inter-node links: rings (gradient
/// reductions of each data-parallel group, tensor-parallel collectives) split over the tiers
/// their group crosses, the other traffic on its dimension's tier.
fn tier_costs<T: Priced>(t: &Traffic<T>, links: &Links, kap: &Kappas<T>, k: &Knobs) -> (T, T) {
    let (mut intra, mut inter) = (T::zero(), T::zero());
    let mut add = |tier: Tier, c: T| match tier {
        Tier::Intra => intra = std::mem::take(&mut intra) + c,
        Tier::Inter => inter = std::mem::take(&mut inter) + c,
    };
    // Gradient reductions and tensor-parallel collectives are rings, hierarchical where their
    // group spans nodes: their bytes split over the tiers.
    let rings = [
        (&t.dp, links.mesh.grad_axis()),
        (&t.edp, links.mesh.expert_grad_axis(k.ep)),
        (&t.tp, links.mesh.axis(AxisKind::Tp).clone()),
    ];
    for (bytes, axis) in rings {
        for (tier, share) in axis.tier_fractions() {
            add(
                tier,
                T::constant(links.tier_kappa(tier) * share) * bytes.clone(),
            );
        }
    }
    for (bytes, tier, kappa) in [
        (&t.p2p, links.p2p_tier, &kap.p2p),
        (&t.ep, links.ep_tier, &kap.ep),
        (&t.cp, links.cp_tier, &kap.cp),
    ] {
        add(tier, kappa.clone() * bytes.clone());
    }
    (intra, inter)
}

/// Finds the busiest of the priced stages and prices a step on it: its compute, its traffic on
/// intra- and inter-node links, and the bubble, the longest per-micro-batch stage time idle for
/// the bubble fraction.
fn relative_cost<T: Priced>(
    priced: &[PricedStage<T>],
    links: &Links,
    kap: &Kappas<T>,
    k: &Knobs,
    v: u64,
) -> Result<Busiest<T>, StrategyError> {
    let full: Vec<Rational> = priced
        .iter()
        .map(|p| {
            p.time.value()
                + kap.dp.value() * p.traffic.dp.value()
                + kap.edp.value() * p.traffic.edp.value()
                - p.hidden.value()
                + kap.p2p.value() * p.traffic.p2p.value()
        })
        .collect();
    let bs = (0..full.len())
        .max_by(|x, y| full[*x].cmp(&full[*y]))
        .ok_or(StrategyError::Nothing("stages"))?;
    let tm = (0..priced.len())
        .max_by(|x, y| priced[*x].time.value().cmp(priced[*y].time.value()))
        .ok_or(StrategyError::Nothing("stages"))?;
    let mut bubble_fraction = Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    let fraction = T::constant(bubble_fraction.clone());
    let mut bubble = priced[tm].time.clone() * fraction.clone();
    // What of the slowest stage's FLOPs idles: its time's share for the schedule.
    let mut idle_flops =
        priced[tm].flops.value() + priced[tm].hbm_cost.value() + priced[tm].kernel_cost.value();
    let slowest = &priced[tm];
    if k.overlapped_chunks() {
        // DualPipe and DualPipeV: arXiv:2412.19437 Table 2 ([`BlockCost::dualpipe_bubble`]); its FLOP part
        // in the slowest stage's own proportion, so that times (pp − 1)/m below it comes out.
        bubble = slowest.dualpipe.clone();
        if !slowest.time.value().is_zero() {
            idle_flops = idle_flops * bubble.value() / slowest.time.value()
                * Rational::new((k.microbatches * v).into(), (k.pp - 1).into());
            bubble_fraction = bubble.value() / slowest.time.value();
        }
    } else if k.schedule.splits_backward() {
        bubble = zb_h1_bubble(&slowest.time, &slowest.weight, fraction.clone());
        idle_flops -= slowest.weight.value() * Rational::from_integer(2.into());
        if !slowest.time.value().is_zero() {
            bubble_fraction = bubble.value() / slowest.time.value();
        }
    }
    if k.pp > 1 {
        // The slowest stage's time: a maximum over the partition's stages.
        bubble = bubble.piecewise();
    }
    let busiest = &priced[bs];
    let (intra, inter) = tier_costs(&busiest.traffic, links, kap, k);
    let compute = busiest.flops.clone() + busiest.hbm_cost.clone();
    let kernels = busiest.kernel_cost.clone();
    let hidden = busiest.hidden.clone();
    let total = compute.clone() + kernels.clone() + intra.clone() + inter.clone() + bubble.clone()
        - hidden.clone();
    let mut flop_part = compute.value()
        + kernels.value()
        + idle_flops * Rational::new((k.pp - 1).into(), (k.microbatches * v).into());
    // What overlap saves scales with the links' κ where the traffic bounds it, and is a FLOP
    // part where the compute it runs under does.
    if busiest.hidden_by_compute {
        flop_part -= hidden.value();
    }
    Ok(Busiest {
        at: bs,
        bubble_fraction,
        flop_part,
        parts: RelativeParts {
            compute,
            kernels,
            comm_intra: intra,
            comm_inter: inter,
            bubble,
            hidden,
            total,
        },
    })
}

/// A collective row with its bytes per call in the fold's number type.
fn comm_row<T: Priced>(
    c: &Comm,
    tier: Tier,
    bytes: T,
    count: u64,
    reason: String,
    gradient: bool,
) -> CommRow {
    CommRow {
        collective: c.kind,
        axis: c.axis,
        tier,
        formula: bytes.formula().cloned(),
        bytes: bytes.value().clone(),
        count,
        op: c.op.clone(),
        tensor: c.tensor.clone(),
        reason,
        gradient,
        expert_group: false,
    }
}

/// The collectives of the analysis that the blocks `counts` (block, copies) of one device run
/// per step: per-micro-batch collectives, and gradient reductions once a step (expert weights
/// reduced only among the ranks that hold the same experts).
fn analysis_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
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
            let per_call = b.clone() / T::int(c.calls.into());
            let count = copies * k.microbatches * c.calls as u64;
            let tier = tier_of(c.axis, false);
            comm.push(comm_row(c, tier, per_call, count, c.reason.clone(), false));
        }
        let experts: Vec<&str> = a.blocks[bi]
            .ops
            .iter()
            .filter(|o| o.role == Some(Role::ExpertGemm))
            .map(|o| o.name.as_str())
            .collect();
        for (at, b) in &numbers[bi].grad_comm {
            let c = at.of(&a.blocks[bi]);
            let expert = experts.contains(&c.op.as_str());
            // An expert weight's gradients, under expert parallelism, over the ranks holding
            // the same experts.
            let group = expert && k.ep > 1 && c.axis == AxisKind::Dp;
            let (b, tier) = if group {
                (
                    super::moe::expert_grad_allreduce(b, k.dp, k.cp, k.ep)?,
                    links.mesh.expert_grad_axis(k.ep).tier,
                )
            } else {
                (b.clone(), tier_of(c.axis, true))
            };
            let per_call = b / T::int(c.calls.into());
            if c.axis == AxisKind::Dp && c.kind == CollectiveKind::AllReduce {
                let layer = a.blocks[bi].repeat != Poly::one();
                let saving = row_fp8_gather_saving(&numbers[bi], *at, layer, expert, k)
                    / T::int(c.calls.into());
                // As the step runs it under its ZeRO stage: reduce-scatters and all-gathers.
                for (kind, calls, share) in super::amount::zero_reduction(k) {
                    let mut bytes = per_call.clone() * T::constant(share);
                    if kind == CollectiveKind::AllGather && k.fp8_params {
                        bytes = bytes - saving.clone();
                    }
                    let count = copies * c.calls as u64 * calls;
                    let mut row =
                        comm_row(c, tier, bytes, count, zero_reason(k.zero, &c.reason), true);
                    row.collective = kind;
                    row.expert_group = group;
                    comm.push(row);
                }
                continue;
            }
            let count = copies * c.calls as u64;
            let mut row = comm_row(c, tier, per_call, count, c.reason.clone(), true);
            row.expert_group = group;
            comm.push(row);
        }
    }
    Ok(comm)
}

/// What one all-gather of the weights of the operator of gradient collective `at` (ZeRO 1–2's
/// after the step, or one of ZeRO 3's per layer) does not move with FP8 parameters, all calls
/// together ([`crate::parallel::amount::fp8_gather_saving`] for its weight: a repeated
/// layer's FP8 GEMM, an `expert` one's over its expert-data-parallel group; zero otherwise).
fn row_fp8_gather_saving<T: Priced>(
    n: &BlockNumbers<T>,
    at: CommRef,
    layer: bool,
    expert: bool,
    k: &Knobs,
) -> T {
    // Counted once per operator, on its first gradient (a linear layer's weight, before its
    // bias).
    let CommRef::Grad { op, index: 0 } = at else {
        return T::zero();
    };
    if !layer {
        return T::zero();
    }
    n.fp8_op_weights
        .iter()
        .find(|(o, _)| *o == op)
        .map_or_else(T::zero, |(_, w)| {
            // A device holds E/ep experts' weights, gathered over the ranks holding the same.
            let (held, ranks) = if expert {
                (w.clone() / T::int(k.ep), k.expert_replicas())
            } else {
                (w.clone(), k.replicas())
            };
            super::amount::fp8_gather_saving(held, k, ranks)
        })
}

/// Why a data-parallel gradient collective runs, under ZeRO stage `zero`.
fn zero_reason(zero: u8, reason: &str) -> String {
    match zero {
        0 => reason.to_string(),
        1 => format!("{reason}; ZeRO 1: reduce-scattered to the optimizer shards once a step, the updated weights all-gathered"),
        2 => format!("{reason}; ZeRO 2: each micro-batch's gradients reduce-scattered to their shards, the updated weights all-gathered once a step"),
        _ => format!("{reason}; ZeRO 3 (FSDP): each micro-batch's gradients reduce-scattered, the weights all-gathered before every forward and backward"),
    }
}

/// The context-parallel ring passes of the blocks `counts` per step: forward (cp − 1) steps,
/// backward 2·(cp − 1), plus the forward's again where recomputation reruns the operator.
fn ring_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
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
                (Recompute::Selective, true) => u64::from(op.recomputed),
                _ => 0,
            };
            comm.push(CommRow {
                collective: CollectiveKind::SendRecv,
                axis: AxisKind::Cp,
                tier: links.cp_tier,
                bytes: x.value().clone(),
                formula: x.formula().cloned(),
                count: copies * k.microbatches * (k.cp - 1) * (3 + reruns),
                op: op.name.clone(),
                tensor: "key, value".into(),
                gradient: false,
                expert_group: false,
                reason: "context parallelism passes each rank's keys and values to the next rank of the ring, cp − 1 steps forward; backward passes them again with their gradients".into(),
            });
        }
    }
    comm
}

/// The expert-parallel all-to-alls of the blocks `counts` per step: tokens go to the devices
/// holding their experts and back, forward and backward.
fn all_to_all_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    k: &Knobs,
    links: &Links,
    counts: &[(usize, u64)],
    share: &Rational,
) -> Vec<CommRow> {
    let mut comm = Vec::new();
    for &(bi, copies) in counts {
        let n = &numbers[bi];
        if n.slot_bytes.is_zero() {
            continue;
        }
        let [toward, back, ..] = super::moe::all_to_all_wire(n.slot_bytes.clone(), k, share);
        let row = |per_call: T, calls: u64, tensor: &str, reason: &str| CommRow {
            collective: CollectiveKind::AllToAll,
            axis: AxisKind::Ep,
            tier: links.ep_tier,
            bytes: per_call.value().clone(),
            formula: per_call.formula().cloned(),
            count: copies * k.microbatches * calls,
            op: format!("{} experts", a.blocks[bi].name),
            tensor: tensor.into(),
            reason: reason.into(),
            gradient: false,
            expert_group: false,
        };
        if k.fp8_dispatch {
            comm.push(row(
                toward,
                2,
                "expert slots (FP8)",
                "tokens go to the devices holding their experts, forward (dispatch) and backward (the combine's gradient), in FP8 with a scale per 128 elements (DeepSeek-V3's FP8 dispatch)",
            ));
            comm.push(row(
                back,
                2,
                "expert slots",
                "tokens come back from their experts, forward (combine) and backward (the dispatch's gradient), in bf16",
            ));
        } else {
            comm.push(row(
                back,
                4,
                "expert slots",
                "tokens go to the devices holding their experts and back, forward and backward",
            ));
        }
    }
    comm
}

/// Whole-model FLOPs per step without recomputation, over all devices of one pipeline stage's
/// replicas: forward and backward, less the fused kernels' recomputation.
fn model_flops<T: Priced>(numbers: &[BlockNumbers<T>], k: &Knobs) -> Rational {
    numbers
        .iter()
        .map(|n| {
            let x = &n.exact;
            (x.forward.value() + x.backward.value() - n.kernel_recompute.value()) * r(n.repeat)
        })
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
/// point (`plan_pipeline`, `rough_each`, `stages_to_price`); those stages priced exactly
/// (`StagePricer::price`); the busiest device and its relative cost (`relative_cost`); its
/// collectives (`analysis_rows`, `ring_rows`, `all_to_all_rows`); memory and model FLOPs.
///
/// Over [`Traced`] numbers ([`block_numbers_traced`]) the same steps give each amount's
/// formula too ([`Evaluation::formulas`]).
#[allow(clippy::too_many_arguments)]
pub fn evaluate_with<T: Priced>(
    model: &Model,
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    knobs: &Knobs,
    calib: &Calibration,
    gpus_per_node: u64,
    memory: &Rational,
    detail: bool,
) -> Result<Evaluation, StrategyError> {
    let k = knobs;
    let links = Links::of(k, calib, gpus_per_node);
    let layer_block = layer_blocks(model);
    let share = ep_share(numbers, k, &links.mesh);
    let costs = block_costs(numbers, &layer_block, k, &share)?;
    let kap = links.kappas();
    let plan = plan_pipeline(numbers, &layer_block, k, &kap, &share)?;
    let mut rough: Vec<RoughStage> = Vec::with_capacity(plan.stages);
    rough_each(&plan, numbers, &layer_block, k, &kap, true, None, |x| {
        rough.push(x)
    });
    let pricer = StagePricer {
        a,
        k,
        costs: &costs,
        plan: &plan,
        layer_block: &layer_block,
        kap: links.kap.map(|x| T::constant(x.clone())),
        m: T::int(k.microbatches),
        full_layer_saved: full_layer_saved(numbers, &layer_block, k, |n| n.exact.saved.clone()),
    };
    let pick = stages_to_price(&rough, &plan, k, detail);
    let priced = pricer.price_all(&pick);
    let busy = relative_cost(&priced, &links, &pricer.kap, k, plan.v)?;
    let bs = busy.at;
    let comm = if detail {
        busiest_rows(a, numbers, k, &links, &plan, &layer_block, pick[bs], &share)?
    } else {
        Vec::new()
    };
    let fullest = (0..priced.len())
        .max_by(|x, y| {
            let total = |i: usize| priced[i].memory.total.value();
            total(*x).cmp(total(*y))
        })
        .map(|i| &priced[i].memory);
    let formulas = T::FORMULAS.then(|| Box::new(formulas_of(&priced[bs], &busy, fullest)));
    let fullest = fullest.map(Held::values).unwrap_or_default();
    let feasible = fullest.total <= *memory;
    let reason = (!feasible).then(|| Infeasible {
        need: fullest.total.clone(),
        have: memory.clone(),
    });
    let stages: Vec<Stage> = priced.iter().map(PricedStage::report).collect();
    Ok(Evaluation {
        knobs: k.clone(),
        mesh: links.mesh,
        flops: stages[bs].flops.clone(),
        model_flops: model_flops(numbers, k),
        comm,
        p2p_bytes: priced[bs].traffic.p2p.value().clone(),
        grad_sum_bytes: priced[bs].grad_sum.value().clone(),
        memory: fullest,
        stages,
        bubble_fraction: busy.bubble_fraction.clone(),
        relative: busy.relative(),
        feasible,
        reason,
        formulas,
    })
}

/// The collectives of the device running stage `s` (the busiest): the operators',
/// under context parallelism the ring's, under expert parallelism the all-to-alls'. Under
/// DualPipe, its rank's: both its stages' blocks, each for half the micro-batches.
#[allow(clippy::too_many_arguments)]
fn busiest_rows<T: Priced>(
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    k: &Knobs,
    links: &Links,
    plan: &Plan,
    layer_block: &[bool],
    s: usize,
    share: &Rational,
) -> Result<Vec<CommRow>, StrategyError> {
    let (blocks, k) = match dualpipe_rank(plan, k, s) {
        Some((_, counts)) => (
            counts,
            Knobs {
                microbatches: k.microbatches / 2,
                ..k.clone()
            },
        ),
        None => (plan.counts(s).to_vec(), k.clone()),
    };
    let mut comm = analysis_rows(a, numbers, &k, links, &blocks)?;
    if k.cp > 1 {
        comm.extend(ring_rows(a, numbers, &k, links, layer_block, &blocks));
    }
    if k.ep > 1 {
        comm.extend(all_to_all_rows(a, numbers, &k, links, &blocks, share));
    }
    Ok(comm)
}

/// The formulas of the busiest stage `busiest`, of its relative cost and of the fullest
/// device's memory.
fn formulas_of<T: Priced>(
    busiest: &PricedStage<T>,
    busy: &Busiest<T>,
    fullest: Option<&Held<T>>,
) -> Formulas {
    let f = |x: &T| x.formula().cloned();
    let b = busiest;
    let forward = b.flops.clone() - b.backward.clone() - b.recomputed.clone();
    Formulas {
        compute: f(&b.flops),
        forward: f(&forward),
        backward: f(&b.backward),
        recomputed: f(&b.recomputed),
        hbm_cost: f(&b.hbm_cost),
        p2p_bytes: f(&b.traffic.p2p),
        bubble_fraction: Some(Poly::constant(busy.bubble_fraction.clone())),
        relative: busy.formulas(),
        memory: fullest.map(Held::formulas).unwrap_or_default(),
    }
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

    /// Under DualPipe the screen prices each rank as the exact pricing does (its two stages,
    /// half the micro-batches through each): compute and memory per rank agree to float
    /// precision. gpt3-125m at pp = 4: rank 0 pairs the embedding's stage with the head's.
    #[test]
    fn the_screen_prices_dualpipe_ranks_as_the_exact_pricing() {
        let model = crate::model::ModelLoader::embedded()
            .unwrap()
            .resolve("gpt3-125m")
            .unwrap();
        let mut values = model.values.clone();
        values.insert("B".into(), r(16));
        let k = Knobs {
            pp: 4,
            microbatches: 8,
            schedule: Schedule::DualPipe,
            ..Knobs::data_parallel(2)
        };
        let calib = Calibration::reference().unwrap();
        let a = super::super::analysis::analyse(&model, &Default::default());
        let b = microbatch_bindings(&model, &values, &k);
        let numbers = block_numbers(&a, &b, &KernelEfficiency::of(&calib)).unwrap();
        let e = evaluate(&model, &a, &numbers, &k, &calib, 8, &calib.memory_bytes()).unwrap();
        let links = Links::of(&k, &calib, 8);
        let kap = links.kappas();
        let layer_block = layer_blocks(&model);
        let share = ep_share(&numbers, &k, &links.mesh);
        let plan = plan_pipeline(&numbers, &layer_block, &k, &kap, &share).unwrap();
        let mut rough = Vec::new();
        rough_each(&plan, &numbers, &layer_block, &k, &kap, false, None, |x| {
            rough.push(x)
        });
        assert_eq!((rough.len(), e.stages.len()), (4, 4));
        let close = |x: f64, y: &Rational| {
            let y = float(y);
            (x - y).abs() <= 1e-9 * y.abs()
        };
        for (s, x) in rough.iter().enumerate() {
            let st = &e.stages[s];
            assert!(close(x.memory, &st.memory.total), "rank {s} memory");
            let compute = &st.flops + &st.kernel_cost + &st.hbm_cost;
            assert!(close(x.compute, &compute), "rank {s} compute");
        }
        assert_ne!(e.stages[0].flops, e.stages[1].flops);
        assert_eq!(e.stages[0].flops, e.stages[3].flops);
    }

    /// Counting the embedding and the loss as layers, 126 layers split over 16 stages of 8
    /// chunks as Llama 3 405B's did (Grattafiori et al. 2024, §3.3.2): the first chunk holds
    /// only the embedding, the last only the head, every other chunk one layer; without the
    /// accounting, or with one of the two, 128 chunks do not divide the layers.
    #[test]
    fn the_embedding_and_the_loss_count_as_layers_of_the_split() {
        let (repeats, layer) = ([1, 126, 1], [false, true, false]);
        let both = PipelineSplit {
            embedding: true,
            loss: true,
        };
        let c = interleaved_chunks(&repeats, &layer, 128, both).unwrap();
        assert_eq!(c[0], vec![(0, 1)]);
        assert_eq!(c[127], vec![(2, 1)]);
        assert!(c[1..127].iter().all(|x| *x == vec![(1, 1)]));
        assert!(interleaved_chunks(&repeats, &layer, 128, PipelineSplit::default()).is_none());
        let one = PipelineSplit {
            embedding: true,
            loss: false,
        };
        assert!(interleaved_chunks(&repeats, &layer, 128, one).is_none());
        // 127 units over 127 chunks: the embedding alone first, the head with the last layer.
        let c = interleaved_chunks(&repeats, &layer, 127, one).unwrap();
        assert_eq!(c[0], vec![(0, 1)]);
        assert_eq!(c[126], vec![(1, 1), (2, 1)]);
        // Without accounting the placement is as before: embedding and head with the layers.
        let c = interleaved_chunks(
            &[1, 8, 1],
            &[false, true, false],
            4,
            PipelineSplit::default(),
        )
        .unwrap();
        assert_eq!(
            c,
            vec![
                vec![(0, 1), (1, 2)],
                vec![(1, 2)],
                vec![(1, 2)],
                vec![(1, 2), (2, 1)]
            ]
        );
    }

    proptest! {
        /// Counting the packing's stages a run at a time agrees with counting item by item
        /// where the sums are exact (integer times, limits between integers), for several limits
        /// asked of the same runs (as the partition's bisection asks them).
        #[test]
        fn run_wise_packing_matches_item_wise(
            runs in proptest::collection::vec((0u32..6, 1usize..80), 1..6),
            limits in proptest::collection::vec(0u32..400, 1..8),
            pp in 1usize..64,
        ) {
            let runs: Vec<(f64, usize)> = runs.iter().map(|&(x, c)| (x as f64, c)).collect();
            let t: Vec<f64> = runs
                .iter()
                .flat_map(|&(x, c)| std::iter::repeat_n(x, c))
                .collect();
            for limit in limits {
                let limit = limit as f64 + 0.5;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                prop_assert_eq!(
                    pack_runs(&runs, limit, pp, None).min(pp + 1),
                    pack_items(&t, limit, pp, None).min(pp + 1)
                );
                pack_runs(&runs, limit, usize::MAX, Some(&mut a));
                pack_items(&t, limit, usize::MAX, Some(&mut b));
                prop_assert_eq!(a, b);
            }
        }

        /// The partition is exactly `pp` contiguous, non-empty stages covering every item, and
        /// its largest stage is the smallest any contiguous split achieves (a dynamic programme
        /// over the items is the oracle), up to rounding.
        #[test]
        fn partition_is_optimal(
            runs in proptest::collection::vec((1u32..50, 1usize..30), 1..5),
            scale in 1e-6f64..1e6,
            pp in 1usize..12,
        ) {
            let runs: Vec<(f64, usize)> =
                runs.iter().map(|&(x, c)| (x as f64 * scale / 7.0, c)).collect();
            let t: Vec<f64> = runs
                .iter()
                .flat_map(|&(x, c)| std::iter::repeat_n(x, c))
                .collect();
            let n = t.len();
            let Some(bounds) = partition_runs(&runs, pp) else {
                prop_assert!(pp > n);
                return Ok(());
            };
            prop_assert_eq!(bounds.len(), pp + 1);
            prop_assert_eq!((bounds[0], bounds[pp]), (0, n));
            prop_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
            let got = bounds
                .windows(2)
                .map(|w| t[w[0]..w[1]].iter().sum::<f64>())
                .fold(0.0, f64::max);
            let prefix: Vec<f64> = std::iter::once(0.0)
                .chain(t.iter().scan(0.0, |a, x| {
                    *a += x;
                    Some(*a)
                }))
                .collect();
            let load = |a: usize, b: usize| prefix[b] - prefix[a];
            // best[j][i]: the smallest largest load of the first i items in j stages.
            let mut best = vec![vec![f64::INFINITY; n + 1]; pp + 1];
            best[0][0] = 0.0;
            for j in 1..=pp {
                for i in 1..=n {
                    for h in (j - 1)..i {
                        let x = best[j - 1][h].max(load(h, i));
                        if x < best[j][i] {
                            best[j][i] = x;
                        }
                    }
                }
            }
            prop_assert!(got <= best[pp][n] * (1.0 + 1e-9), "{} > {}", got, best[pp][n]);
        }

        /// The guided search finds the binary search's boundary whatever the guess.
        #[test]
        fn first_true_is_the_boundary(
            lo in 0usize..50,
            len in 0usize..200,
            cut in 0usize..260,
            guess in -10.0f64..300.0,
            special in 0usize..4,
        ) {
            let hi = lo + len;
            let guess = [guess, f64::INFINITY, f64::NAN, guess.floor()][special];
            let want = (lo..hi).find(|&i| i >= cut).unwrap_or(hi);
            prop_assert_eq!(first_true(lo, hi, guess, |i| i >= cut), want);
        }

        /// The screen's maxima over each stage group's representatives (its first, second and
        /// last stage) are the maxima over every stage, bit for bit: pipelines of random depth,
        /// schedule, micro-batches and recomputation, of GPT-3 125M (first and last stages
        /// unlike the others) and of a model of one repeated layer (every stage alike but for
        /// its neighbours).
        #[test]
        fn representatives_give_every_stage_maxima(
            layers in 2u64..80,
            pp in 2u64..40,
            m in 1u64..48,
            schedule in 0usize..3,
            recompute in 0usize..3,
            bare: bool,
        ) {
            let loader = crate::model::ModelLoader::embedded().unwrap();
            let model = if bare {
                let text = "name: layers-only\n\
                    graph:\n  symbols: {B: batch, H: hidden, L: layers}\n  \
                    inputs:\n    x: {dims: [B, H]}\n  \
                    blocks:\n    - name: layer\n      repeat: L\n      input: x\n      \
                    output: fc\n      ops:\n        \
                    - {name: fc, op: matmul, bind: {b: B, k: H, n: H}, in: {x: in}}\n\
                    symbols: {B: 8, H: 16, L: 2}\n";
                loader
                    .load(&crate::diag::Source::new("layers-only.yaml", text.to_string()))
                    .unwrap()
            } else {
                loader.resolve("gpt3-125m").unwrap()
            };
            let mut values = model.values.clone();
            values.insert("L".into(), Rational::from_integer(layers.into()));
            values.insert("B".into(), Rational::from_integer((2 * m * 4).into()));
            let schedule = [Schedule::Gpipe, Schedule::OneFOneB, Schedule::Interleaved][schedule];
            let k = Knobs {
                pp,
                microbatches: m,
                schedule,
                chunks: if schedule == Schedule::Interleaved { 2 } else { 1 },
                recompute: [Recompute::None, Recompute::Selective, Recompute::Full][recompute],
                ..Knobs::data_parallel(2)
            };
            let a = super::super::analysis::analyse(&model, &Default::default());
            let kernels = KernelEfficiency::of(&Calibration::reference().unwrap());
            let b = microbatch_bindings(&model, &values, &k);
            let numbers = block_numbers(&a, &b, &kernels).unwrap();
            let layer_block = layer_blocks(&model);
            // Balances of the order of an H100 node's (any positive values serve the test).
            let kap = Kappas { tp: 2000.0, ep: 2000.0, cp: 2000.0, dp: 20000.0, edp: 20000.0, p2p: 20000.0, hbm: 300.0, overlap: 0.8 };
            let share = ep_share(&numbers, &k, &Mesh::of(&k, 8));
            let Ok(plan) = plan_pipeline(&numbers, &layer_block, &k, &kap, &share) else {
                return Ok(());
            };
            // The screen's way (each group's parts computed beforehand, as a batch shares
            // them), against every stage priced on its own.
            let parts: Vec<StageParts> =
                plan.groups.iter().map(|g| group_parts(&plan, g, &k, &kap)).collect();
            let (mut few, mut all) = (Vec::new(), Vec::new());
            rough_each(&plan, &numbers, &layer_block, &k, &kap, false, Some(&parts), |x| few.push(x));
            rough_each(&plan, &numbers, &layer_block, &k, &kap, true, None, |x| all.push(x));
            prop_assert_eq!(all.len() as u64, pp);
            prop_assert!(few.len() <= 3 * plan.groups.len());
            let most = |r: &[RoughStage], f: fn(&RoughStage) -> f64| {
                r.iter().map(f).fold(f64::MIN, f64::max)
            };
            for f in [
                (|x: &RoughStage| x.time) as fn(&RoughStage) -> f64,
                |x| x.full,
                |x| x.memory,
                |x| x.compute,
            ] {
                prop_assert_eq!(most(&few, f).to_bits(), most(&all, f).to_bits());
            }
            // Every stage's times are its group representative's.
            for (s, x) in all.iter().enumerate() {
                prop_assert!(few.iter().any(|y| y.time == x.time && y.full == x.full && y.memory >= x.memory), "stage {}", s);
            }
        }
    }
}
