//! Evaluating an analysis for one strategy: exact per-device FLOPs, collectives, point-to-point
//! bytes and memory, the pipeline partition, and the relative cost of DESIGN §3.

use super::amount::{float, Amount, Amounts, Apart, BlockCost, ExpertView, Kappas};
use super::analysis::{Analysis, BlockAnalysis, Comm, CP, DP, TP};
use super::kernels::KernelEfficiency;
use super::traced::{At, Fix, Priced, Traced};
use crate::calib::{Calibration, MachineRef};
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

mod estimate;
mod partition;
mod price;
mod rows;
pub use estimate::*;
pub use partition::*;
use price::*;
use rows::*;

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

/// Evaluates every block of an analysis for one microbatch, operator by operator (the
/// reference [`block_numbers_summed`] is held to).
/// `kernels` prices what the blocks' kernels take beyond their FLOPs (the table's
/// size-dependent efficiencies and launch cost; [`KernelEfficiency::plateau`] for none).
pub fn block_numbers(
    a: &Analysis,
    b: &Bindings,
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers>, StrategyError> {
    each_block(a, b, None, kernels)
}

/// [`block_numbers`] with each amount's formula in the model's symbols ([`Fix`]).
pub fn block_numbers_traced(
    a: &Analysis,
    b: &Bindings,
    fix: &Fix,
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers<Traced>>, StrategyError> {
    each_block(a, b, Some(fix), kernels)
}

/// [`block_numbers`] over any [`Priced`] number: values, or formulas where `fix` is given.
fn each_block<T: Priced>(
    a: &Analysis,
    b: &Bindings,
    fix: Option<&Fix>,
    kernels: &KernelEfficiency,
) -> Result<Vec<BlockNumbers<T>>, StrategyError> {
    let at = At { bindings: b, fix };
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
            if c.site.in_forward() {
                add(&mut n.exact.tp_forward, bytes.clone());
            }
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
            if c.site.in_forward() {
                add(&mut n.exact.tp_forward, bytes.clone());
            }
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
    /// Whether it runs in the forward pass ([`Site::in_forward`] of the analysis's collective):
    /// full recomputation runs it again before the backward. False for backward and per-step
    /// collectives, and for rows whose count holds every pass (context-parallel rings,
    /// expert-parallel all-to-alls).
    ///
    /// [`Site::in_forward`]: crate::parallel::Site::in_forward
    #[serde(skip)]
    pub in_forward: bool,
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

/// The model's routing, as the blocks that dispatch to experts carry it.
pub fn routing_of<T>(numbers: &[BlockNumbers<T>]) -> Option<&super::moe::Routing> {
    numbers.iter().find_map(|n| n.routing.as_ref())
}

/// The share of a device's expert slots each all-to-all of `k` puts on the expert-parallel links
/// of `mesh` ([`super::moe::wire_share`], with the model's routing).
pub fn ep_share<T>(numbers: &[BlockNumbers<T>], k: &Knobs, mesh: &Mesh) -> Rational {
    super::moe::wire_share(k, routing_of(numbers), mesh.ep_nodes(k.ep))
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

/// Evaluates a strategy on `machine` (its `memory` the bytes a device may fill). With `detail`,
/// the collectives of the busiest device are listed (slower; `rank` asks only for its top rows).
///
/// The steps: the links and their balance (`Links::of`); each block's exact costs
/// (`block_costs`); the pipeline partition and the stages that matter, chosen in floating
/// point (`plan_pipeline`, `rough_each`, `stages_to_price`); those stages priced exactly
/// (`StagePricer::price`); the busiest device and its relative cost (`relative_cost`); its
/// collectives (`analysis_rows`, `ring_rows`, `all_to_all_rows`); memory and model FLOPs.
///
/// Over [`Traced`] numbers ([`block_numbers_traced`]) the same steps give each amount's
/// formula too ([`Evaluation::formulas`]).
pub fn evaluate_with<T: Priced>(
    model: &Model,
    a: &Analysis,
    numbers: &[BlockNumbers<T>],
    knobs: &Knobs,
    machine: MachineRef,
    detail: bool,
) -> Result<Evaluation, StrategyError> {
    let k = knobs;
    let memory = machine.memory;
    let links = Links::of(k, machine.calib, machine.gpus_per_node());
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
    let mut comm = analysis_rows(a, numbers, &k, links, layer_block, &blocks)?;
    if k.cp > 1 {
        comm.extend(ring_rows(a, numbers, &k, links, layer_block, &blocks));
    }
    if k.ep > 1 {
        comm.extend(all_to_all_rows(
            a,
            numbers,
            &k,
            links,
            layer_block,
            &blocks,
            share,
        ));
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
    machine: MachineRef,
) -> Result<Evaluation, StrategyError> {
    evaluate_with(model, a, numbers, knobs, machine, true)
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
        let memory = calib.memory_bytes();
        let machine = MachineRef::new(&calib, 8, &memory);
        let e = evaluate(&model, &a, &numbers, &k, machine).unwrap();
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
