//! The cost formulas of a strategy, written once over a number type: exact ([`Rational`]) for
//! what is reported, `f64` for choosing among thousands of strategies (the pipeline partition,
//! the stages worth pricing, `rank`'s screen). Both sides call the same functions, so the
//! floating-point screen cannot drift from the exact pricing: recomputation, expert and
//! context parallelism, ZeRO's divisors and traffic, gradient accumulation, memory in flight.

use super::evaluate::{GRAD_ACCUMULATION_BYTES, GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES};
use crate::rules::CollectiveKind;
use crate::strategy::{Fp8Bytes, Knobs, Precision, Recompute, Schedule};
use crate::sym::Rational;
use num_traits::Zero;
use std::ops::{Add, Div, Mul, Sub};

/// A number the cost formulas compute with.
pub trait Amount:
    Clone
    + Default
    + Zero
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    /// The integer `n`.
    fn int(n: u64) -> Self;
    /// The exact number `r` (a constant: no polynomial in the model's symbols beyond itself).
    fn exact(r: &Rational) -> Self;
    /// The exact number `r`, computed from the model's symbols' values in a way no polynomial
    /// in them gives: a number type that carries formulas gives it none (others, `exact`).
    fn opaque(r: &Rational) -> Self {
        Self::exact(r)
    }
    /// `num / den`.
    fn ratio(num: u64, den: u64) -> Self {
        Self::int(num) / Self::int(den)
    }
    /// Whether this amount is at least `other` at every value of the model's symbols (all
    /// positive): a number type that carries formulas checks that their difference has no
    /// negative coefficient; others cannot tell.
    fn at_least_everywhere(&self, _other: &Self) -> bool {
        false
    }
    /// The same amount, marked as no polynomial in the model's symbols (a maximum or a minimum
    /// of two): a number type that carries formulas drops its formula; others are unchanged.
    fn piecewise(self) -> Self {
        self
    }
}

impl Amount for Rational {
    fn int(n: u64) -> Rational {
        Rational::from_integer(n.into())
    }
    fn exact(r: &Rational) -> Rational {
        r.clone()
    }
}

impl Amount for f64 {
    fn int(n: u64) -> f64 {
        n as f64
    }
    fn exact(r: &Rational) -> f64 {
        float(r)
    }
}

pub use crate::sym::float;

/// Bytes per parameter element of the weights, gradients and optimizer state, and the ZeRO
/// stage from which each is sharded over the replicas (Rajbhandari et al. 2020): bf16 weights
/// and gradients with fp32 master weights and moments (2 + 2 + 12) under the bf16 recipe;
/// fp32 weights and gradients and two fp32 moments, no separate master copy (4 + 4 + 8), under
/// autocast.
pub fn state_bytes(p: Precision) -> [(u64, u8); 3] {
    match p {
        // The FP8 and FP4 recipes keep the bf16 recipe's state; their low-precision weight
        // copies are counted apart ([`fp8_bytes_of`]), over those GEMMs' weights only.
        Precision::Bf16
        | Precision::Fp8
        | Precision::Fp8Current
        | Precision::Fp8Block
        | Precision::Mxfp8
        | Precision::Nvfp4 => [
            (WEIGHT_BYTES as u64, 3),
            (GRAD_BYTES as u64, 2),
            (OPTIMIZER_BYTES as u64, 1),
        ],
        Precision::Autocast => [
            (p.weight_bytes(), 3),
            (p.weight_bytes(), 2),
            (AUTOCAST_OPTIMIZER_BYTES, 1),
        ],
    }
}

/// HBM bytes per parameter element that autocast's forward spends casting a weight to bf16
/// (the fp32 weight read, the bf16 copy written): `torch.autocast` casts the weight of every
/// matmul it runs in bf16, once per autocast region (its cast cache is cleared when the region
/// exits), so once per forward of each micro-batch and again in a recomputed forward.
pub const AUTOCAST_CAST_BYTES: u64 = 6;

/// Optimizer-state bytes per parameter element under autocast: Adam's two fp32 moments (the fp32
/// weights are the model's own, so there is no master copy).
const AUTOCAST_OPTIMIZER_BYTES: u64 = 8;

/// HBM bytes per parameter element of autograd adding an fp32 weight gradient to `.grad`: both
/// fp32 operands read, the sum written.
const AUTOCAST_ACCUMULATION_BYTES: u64 = 12;

/// HBM bytes per micro-batch of adding the weight gradients of `params` parameter elements of
/// one device to its gradient buffer: all of them, or the `1/replicas` share a device keeps
/// when gradients are sharded (ZeRO ≥ 2). The relative cost prices these bytes at κ_hbm; the
/// timeline times them as a streaming pass after each weight-bearing operator.
///
/// * bf16: [`GRAD_ACCUMULATION_BYTES`] per element, the fp32 buffer read and written back;
/// * autocast: the bf16 weight gradient cast to fp32 by the weight cast's backward
///   ([`AUTOCAST_CAST_BYTES`], on every element: the cast runs before any reduction) and added
///   to the fp32 `.grad` by autograd's gradient accumulation
///   (`AUTOCAST_ACCUMULATION_BYTES`).
pub fn grad_accumulation<T: Amount>(params: T, k: &Knobs) -> T {
    let shard = |p: T| {
        if k.zero >= 2 {
            p / T::int(k.replicas().max(1))
        } else {
            p
        }
    };
    match k.precision {
        Precision::Bf16
        | Precision::Fp8
        | Precision::Fp8Current
        | Precision::Fp8Block
        | Precision::Mxfp8
        | Precision::Nvfp4 => shard(params) * T::int(GRAD_ACCUMULATION_BYTES as u64),
        Precision::Autocast => {
            params.clone() * T::int(AUTOCAST_CAST_BYTES)
                + shard(params) * T::int(AUTOCAST_ACCUMULATION_BYTES)
        }
    }
}

/// Bytes per element of the fp32 gradient buffer the optimizer reads: Megatron-LM accumulates
/// and reduces bf16 models' gradients in fp32 (`main_grad`; `--accumulate-allreduce-grads-in-fp32`
/// is forced on with `--bf16` in megatron/arguments.py), as PyTorch FSDP's default
/// `MixedPrecision(reduce_dtype=float32)` does.
pub const MAIN_GRAD_BYTES: u64 = 4;

/// Bytes per element of the fp32 master weights the bf16 recipe's optimizer updates and copies
/// into the bf16 model weights.
const MASTER_WEIGHT_BYTES: u64 = 4;

/// The parameter elements one device holds, as ZeRO shards them: dense ones over the dp·cp
/// replicas ([`Knobs::replicas`]), expert ones over the ranks holding the same experts
/// ([`Knobs::expert_replicas`], Megatron-Core's expert-data-parallel group); and of each, the
/// FP8 GEMM weights.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HeldParams<T> {
    /// Dense parameter elements.
    pub dense: T,
    /// Expert parameter elements (of the device's E/ep experts).
    pub experts: T,
    /// Of `dense`, the FP8 GEMM weights.
    pub fp8_dense: T,
    /// Of `experts`, the FP8 GEMM weights.
    pub fp8_experts: T,
}

impl<T: Amount> HeldParams<T> {
    /// All parameter elements held.
    pub fn params(&self) -> T {
        self.dense.clone() + self.experts.clone()
    }

    /// `n` times as many of each.
    pub fn times(&self, n: T) -> HeldParams<T> {
        HeldParams {
            dense: self.dense.clone() * n.clone(),
            experts: self.experts.clone() * n.clone(),
            fp8_dense: self.fp8_dense.clone() * n.clone(),
            fp8_experts: self.fp8_experts.clone() * n,
        }
    }

    /// The share of these the device's optimizer updates, as (parameter elements, FP8 GEMM
    /// weight elements): all of them without a distributed optimizer (ZeRO 0), each group's
    /// shard with ZeRO ≥ 1.
    pub fn shard(&self, k: &Knobs) -> (T, T) {
        if k.zero == 0 {
            return (
                self.params(),
                self.fp8_dense.clone() + self.fp8_experts.clone(),
            );
        }
        let (dense, experts) = k.shard_groups(true);
        let (dense, experts) = (dense.max(1), experts.max(1));
        if dense == experts {
            let all = self.fp8_dense.clone() + self.fp8_experts.clone();
            return (self.params() / T::int(dense), all / T::int(dense));
        }
        let (dense, experts) = (T::int(dense), T::int(experts));
        (
            self.dense.clone() / dense.clone() + self.experts.clone() / experts.clone(),
            self.fp8_dense.clone() / dense + self.fp8_experts.clone() / experts,
        )
    }
}

impl<T: Amount> Add for HeldParams<T> {
    type Output = HeldParams<T>;

    fn add(self, o: HeldParams<T>) -> HeldParams<T> {
        HeldParams {
            dense: self.dense + o.dense,
            experts: self.experts + o.experts,
            fp8_dense: self.fp8_dense + o.fp8_dense,
            fp8_experts: self.fp8_experts + o.fp8_experts,
        }
    }
}

/// HBM bytes of each memory-bound kernel of the optimizer step over the parameters `held` by one
/// device, in order (Megatron-LM's mixed-precision optimizer step,
/// megatron/optimizer/optimizer.py, `MixedPrecisionOptimizer.step`), each over the shard it
/// updates ([`HeldParams::shard`]: all of it without a distributed optimizer; with ZeRO ≥ 1 the
/// dense parameters' `1/replicas` and the experts' share among the ranks holding them):
///
/// 1. the gradient norm (apex `multi_tensor_l2norm`) reads the fp32 gradients;
/// 2. Adam (apex `multi_tensor_adam`) reads the fp32 weights, gradients and both moments and
///    writes weights and moments;
/// 3. the gradient buffer is zeroed for the next step (the whole buffer);
/// 4. under the bf16 recipe, the fp32 master weights are copied into the bf16 model weights
///    (under autocast the model weights are the fp32 weights Adam updates: no copy); with FP8
///    parameters the FP8 GEMM weight elements of the shard are written as their FP8 copy
///    instead ([`fp8_gather_saving_per_element`] fewer bytes each: Megatron-LM's distributed
///    optimizer quantizes its fp32 master shard straight into the FP8 parameter).
///
/// The timeline times each as a streaming kernel; the relative cost prices their sum at κ_hbm
/// once a step ([`BlockCost::optimizer_hbm`]).
pub fn optimizer_traffic<T: Amount>(held: &HeldParams<T>, k: &Knobs) -> Vec<T> {
    let (shard, fp8) = held.shard(k);
    let grad = T::int(MAIN_GRAD_BYTES);
    let state = T::int(OPTIMIZER_BYTES as u64);
    let mut kernels = vec![
        shard.clone() * grad.clone(),
        shard.clone() * (state.clone() + grad.clone() + state),
        held.params() * grad,
    ];
    if k.precision != Precision::Autocast {
        let copy = shard * T::int(MASTER_WEIGHT_BYTES + WEIGHT_BYTES as u64);
        kernels.push(copy - fp8 * fp8_gather_saving_per_element(k));
    }
    kernels
}

/// Bytes per parameter element that a micro-batch in flight keeps under autocast: the bf16
/// copy of each weight its forward cast, saved by autograd for the backward's input gradient.
/// Under full recomputation a layer keeps only its input, and its recomputed forward casts the
/// weights again: nothing is kept.
pub fn weight_cast_saved(k: &Knobs) -> u64 {
    match (k.precision, k.recompute) {
        (Precision::Autocast, Recompute::None | Recompute::Selective) => WEIGHT_BYTES as u64,
        _ => 0,
    }
}

/// HBM bytes per micro-batch that a forward pass spends casting the weights of `params`
/// parameter elements of one device (gathered, under ZeRO 3) to bf16: none under bf16,
/// [`AUTOCAST_CAST_BYTES`] each under autocast.
pub fn weight_cast<T: Amount>(params: T, k: &Knobs) -> T {
    match k.precision {
        Precision::Bf16
        | Precision::Fp8
        | Precision::Fp8Current
        | Precision::Fp8Block
        | Precision::Mxfp8
        | Precision::Nvfp4 => T::zero(),
        Precision::Autocast => params * T::int(AUTOCAST_CAST_BYTES),
    }
}

/// Bytes per FP8 GEMM weight element that a gather of the weights does not move with FP8
/// parameters ([`Knobs::fp8_params`]): the element goes as one FP8 copy with its scales (half
/// the recipe's `weight_copy`, which holds the rowwise and the columnwise one) instead of in the
/// precision's weight type. Zero without FP8 parameters.
pub fn fp8_gather_saving_per_element<T: Amount>(k: &Knobs) -> T {
    match k.precision.fp8_bytes().filter(|_| k.fp8_params) {
        Some(b) => {
            T::int(k.precision.weight_bytes()) - T::ratio(b.weight_copy.0, 2 * b.weight_copy.1)
        }
        None => T::zero(),
    }
}

/// Bytes per rank that one all-gather of the weights over `n` ranks does not move for `fp8` FP8
/// GEMM weight elements with FP8 parameters: [`fp8_gather_saving_per_element`] of each, over
/// the (n − 1)/n of them a rank receives. Dense weights are gathered over the dp·cp replicas
/// ([`Knobs::replicas`]), an expert's over the ranks holding the same experts
/// ([`Knobs::expert_replicas`]). Zero without FP8 parameters or without a gather of the
/// weights (ZeRO 0).
pub fn fp8_gather_saving<T: Amount>(fp8: T, k: &Knobs, n: u64) -> T {
    if !k.fp8_params || k.zero == 0 || n <= 1 {
        return T::zero();
    }
    fp8 * fp8_gather_saving_per_element(k) * T::ratio(n - 1, n)
}

/// The all-gathers of the weights a step runs ([`zero_reduction`]): ZeRO 1–2's one after the
/// optimizer step, ZeRO 3's before every micro-batch's forward and backward (2m), none under
/// ZeRO 0.
pub fn weight_gathers(k: &Knobs) -> u64 {
    match k.zero {
        0 => 0,
        1 | 2 => 1,
        _ => 2 * k.microbatches.max(1),
    }
}

/// Bytes per element of one of the FP8 recipe's quantities (`field` of its [`Fp8Bytes`]) under
/// `precision`: zero without an FP8 recipe.
pub fn fp8_bytes_of<T: Amount>(precision: Precision, field: fn(&Fp8Bytes) -> (u64, u64)) -> T {
    precision.fp8_bytes().map_or_else(T::zero, |b| {
        let (n, d) = field(&b);
        T::ratio(n, d)
    })
}

/// The operands of an FP8 GEMM, in elements, from the sizes of its forward product
/// (`batch` products of `rows × inner` by `inner × cols`; the weight is the second operand, as
/// in the `linear`, `matmul` and `expert_matmul` rules): the input it casts each forward, the
/// weight it casts once a step, and the output gradient its backward casts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fp8Operands<T> {
    /// Elements of the input (`batch · rows · inner`).
    pub input: T,
    /// Elements of the weight (`batch · inner · cols`).
    pub weight: T,
    /// Elements of the output gradient (`batch · rows · cols`).
    pub grad: T,
}

impl<T: Amount> Fp8Operands<T> {
    /// The operands of a GEMM of sizes `[batch, rows, cols, inner]`.
    pub fn of([batch, rows, cols, inner]: [T; 4]) -> Fp8Operands<T> {
        Fp8Operands {
            input: batch.clone() * rows.clone() * inner.clone(),
            weight: batch.clone() * inner * cols.clone(),
            grad: batch * rows * cols,
        }
    }

    /// HBM bytes of its casts under the recipe whose bytes are `bytes`: (each forward's input,
    /// each backward's output gradient, the weight once a step).
    pub fn cast_bytes(&self, bytes: Fp8Bytes) -> [T; 3] {
        let c = || T::ratio(bytes.cast.0, bytes.cast.1);
        [
            self.input.clone() * c(),
            self.grad.clone() * c(),
            self.weight.clone() * T::ratio(bytes.weight_cast.0, bytes.weight_cast.1),
        ]
    }
}

/// How a step runs the data-parallel reduction of the gradients, in all-reduce units (an
/// all-reduce moves 2·(n − 1)/n of the bytes per rank; a reduce-scatter or an all-gather half of
/// that), per ZeRO stage (Rajbhandari et al. 2020, §5 and §7.2):
/// * 0: one all-reduce a step;
/// * 1: the optimizer state is sharded, so the gradients are reduce-scattered to their owners
///   once a step and the updated weights all-gathered once: 1/2 + 1/2;
/// * 2: the gradients are sharded too, so each micro-batch's gradients are reduce-scattered as
///   they are produced (a rank keeps only its shard to accumulate into, as DeepSpeed ZeRO-2 and
///   PyTorch FSDP do under gradient accumulation): m/2, and one weight all-gather, 1/2;
/// * 3 (FSDP): as 2, and the weights all-gathered before each forward and each backward of
///   every micro-batch (resharded after use): m/2 + 2·m/2 = 3m/2, the ZeRO paper's 3/2 at one
///   micro-batch.
///
/// Each part is (collective, calls per step of each gradient's reduction, share of the
/// all-reduce's bytes per call).
pub fn zero_reduction(k: &Knobs) -> Vec<(CollectiveKind, u64, Rational)> {
    // Shares of the rules' bf16 gradient all-reduce: fp32 gradients and weights (autocast)
    // move twice its bytes.
    let f = Rational::from_integer(k.precision.wire_factor().into());
    let half = Rational::new(1.into(), 2.into()) * &f;
    let m = k.microbatches.max(1);
    match k.zero {
        0 => vec![(CollectiveKind::AllReduce, 1, f)],
        1 => vec![
            (CollectiveKind::ReduceScatter, 1, half.clone()),
            (CollectiveKind::AllGather, 1, half),
        ],
        2 => vec![
            (CollectiveKind::ReduceScatter, m, half.clone()),
            (CollectiveKind::AllGather, 1, half),
        ],
        _ => vec![
            (CollectiveKind::ReduceScatter, m, half.clone()),
            (CollectiveKind::AllGather, 2 * m, half),
        ],
    }
}

/// How often a step reduces the gradients that are not data-parallel all-reduces
/// ([`zero_reduction`] times those): once, or after each of the `m` micro-batches where ZeRO
/// 2–3 keeps only a shard of the gradients ([`Knobs::shards_gradients`]). Under PyTorch FSDP
/// with tensor parallelism, the stack ZeRO 2–3 stand for here, a replicated weight's
/// tensor-parallel partial gradient (a sequence-parallel norm's) is all-reduced in FSDP's
/// post-backward, before its reduce-scatter (pytorch/pytorch#136237, `FSDPParam`'s
/// `_get_grad_inner_tensor` turning partial placements replicated), so with each of them.
pub fn grad_reductions<T: Amount>(m: &T, k: &Knobs) -> T {
    if k.shards_gradients() {
        m.clone()
    } else {
        T::int(1)
    }
}

/// What data-parallel gradient traffic is multiplied by: the sum of [`zero_reduction`]'s
/// parts, 1 for ZeRO 0–1, (m + 1)/2 for ZeRO 2 and 3m/2 for ZeRO 3.
pub fn dp_traffic_factor<T: Amount>(k: &Knobs) -> T {
    let m = k.microbatches.max(1);
    let f = k.precision.wire_factor();
    match k.zero {
        0 | 1 => T::int(f),
        2 => T::ratio(f * (m + 1), 2),
        _ => T::ratio(f * 3 * m, 2),
    }
}

/// Under DualPipe with more than one stage, the bytes a rank holding `dense` and `experts`
/// parameter elements (its two stages') exchanges per step with the rank holding the other
/// copies of its stages, to sum the two copies' gradients (zero under the other schedules).
/// DualPipe keeps every stage twice, on ranks s and pp − 1 − s (arXiv:2412.19437, Table 2:
/// "Parameter" 2×), and each copy gets the gradients of half the micro-batches, so before the
/// optimizer step each rank adds its mirror's gradients to its own (deepseek-ai/DualPipe,
/// `examples/example_dualpipe.py`: `p0.grad += p1all[pp_size - 1 - rank]`). What a rank
/// exchanges is the gradient of the parameters it updates: all of them without ZeRO, its
/// 1/replicas shard (the experts' 1/expert replicas) under ZeRO ≥ 1, after the data-parallel
/// reduction, in the type that reduction moves (bf16, fp32 under autocast). Both ranks send
/// at once, so a rank sends these bytes once, as a pipeline send, over the pipeline's link.
pub fn dualpipe_grad_sum<T: Amount>(dense: T, experts: T, k: &Knobs) -> T {
    if !k.dualpipe() {
        return T::zero();
    }
    let (d, e) = k.shard_groups(k.zero >= 1);
    let each = T::int(WEIGHT_BYTES as u64 * k.precision.wire_factor());
    (dense / T::int(d) + experts / T::int(e)) * each
}

/// The part of a stage's data-parallel traffic per step that can run while the device
/// computes, in all-reduce units of its gradient bytes (as [`dp_traffic_factor`]; see
/// [`BlockCost::dp_hidden`]): the gradient reduction where it is overlapped
/// (`--overlap-grad-reduce`, ZeRO 2's every micro-batch), ZeRO 1–2's weight gather with
/// `--overlap-param-gather`, and ZeRO 3's per-layer weight gathers.
pub fn dp_overlappable_factor<T: Amount>(k: &Knobs) -> T {
    let m = k.microbatches.max(1);
    let f = k.precision.wire_factor();
    let (grad, gather) = (k.overlap.grad_reduce, k.overlap.param_gather);
    let when = |on: bool, x: T| if on { x } else { T::zero() };
    match k.zero {
        0 => when(grad, T::int(f)),
        1 => when(grad, T::ratio(f, 2)) + when(gather, T::ratio(f, 2)),
        2 => when(grad, T::ratio(f * m, 2)) + when(gather, T::ratio(f, 2)),
        _ => T::int(f * m) + when(grad, T::ratio(f * m, 2)),
    }
}

/// Micro-batches whose activations stage `s` holds at once: all of them under GPipe; under
/// 1F1B as many as the stages from `s` on (at most m); interleaving with `v` chunks its
/// warm-up's forwards and one, in chunks of 1/v of the stage ([`interleaved_peak`]: on rank 0
/// (pp − 1)/(pp·v) more than 1F1B's, Narayanan et al. SC'21 §2.2; on the later ranks more, as
/// every rank runs (v − 1)·pp chunk forwards before its first backward). Under ZB-H1 a
/// micro-batch is held until its weight gradient, which rank `s` defers by `s` backwards, so
/// every stage holds min(m, pp), what 1F1B's first stage holds (Qi et al., arXiv:2401.10241,
/// §3.1: "the same peak memory as 1F1B"; counted whole until the W, though the B frees what
/// only the input gradient reads, so an upper bound). ZB-V holds as many, in chunks of half a
/// stage.
///
/// [`interleaved_peak`]: crate::strategy::schedule::interleaved_peak
pub fn in_flight<T: Amount>(k: &Knobs, v: u64, s: usize) -> T {
    match k.schedule {
        Schedule::Gpipe => T::int(k.microbatches),
        _ if k.pp == 1 => T::int(1),
        Schedule::OneFOneB => T::int(k.microbatches.min(k.pp - s as u64)),
        Schedule::ZeroBubbleH1 => T::int(k.microbatches.min(k.pp)),
        // DeepSeek-V3 Technical Report (arXiv:2412.19437), Table 2: "Activation" per device
        // PP + 1 under DualPipe (PP under 1F1B and ZB1P), in micro-batches of one stage's
        // activations, whole until the weight gradient: a stage taken alone. A rank's two
        // stages are priced together by [`BlockCost::memory`].
        Schedule::DualPipe => T::int(k.pp + 1),
        // ZB-V: the chunks the program holds at its peak ([`zero_bubble_v_held`]), in
        // micro-batches of the rank's two chunks together (pp of them from 2pp − 1 micro-batches
        // on, 1F1B's first stage's). A rank's memory takes its chunks apart, each at its own
        // size ([`BlockCost::memory`]).
        //
        // [`zero_bubble_v_held`]: crate::strategy::schedule::zero_bubble_v_held
        Schedule::ZeroBubbleV => T::ratio(
            crate::strategy::schedule::zero_bubble_v_held(
                s,
                k.pp as usize,
                k.microbatches as usize,
            ),
            2,
        ),
        // DualPipeV: 2pp + 1 chunk micro-batches on every rank ([`dualpipe_v_held`]), in
        // micro-batches of the rank's two chunks together; taken apart as ZB-V's are.
        //
        // [`dualpipe_v_held`]: crate::strategy::schedule::dualpipe_v_held
        Schedule::DualPipeV => {
            T::ratio(crate::strategy::schedule::dualpipe_v_held(k.pp as usize), 2)
        }
        Schedule::Interleaved if v > 1 => T::ratio(
            crate::strategy::schedule::interleaved_peak(
                s,
                k.pp as usize,
                k.microbatches as usize,
                v as usize,
            ),
            v,
        ),
        Schedule::Interleaved => T::int(k.microbatches.min(k.pp - s as u64)),
    }
}

/// A block's amounts for one micro-batch on one device, before any strategy choice but the
/// layout: exact, or as floats.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Amounts<T> {
    /// Forward FLOPs.
    pub forward: T,
    /// Backward FLOPs, recomputation inside fused kernels included.
    pub backward: T,
    /// Of `backward`, the weight gradients (what ZB-H1 defers to its W steps).
    pub weight: T,
    /// Forward FLOPs of what selective recomputation recomputes (the attention core, or the
    /// model's `recompute_modules`; the names are from when the core was all it recomputed).
    pub attention_forward: T,
    /// Saved bytes.
    pub saved: T,
    /// Saved bytes selective recomputation frees (the attention core's, and the outputs an
    /// output-discarding module discards).
    pub attention_saved: T,
    /// Parameter elements.
    pub params: T,
    /// Per-microbatch tensor-parallel wire bytes.
    pub tp_bytes: T,
    /// The part of `tp_bytes` the forward pass sends (collectives of an operator's forward, and
    /// of an edge before its consumer's): what full recomputation sends again.
    pub tp_forward: T,
    /// Per-step data-parallel gradient wire bytes.
    pub dp_grad: T,
    /// Per-step tensor-parallel gradient wire bytes.
    pub tp_grad: T,
    /// Boundary activation bytes.
    pub boundary: T,
    /// HBM bytes the memory-bound (not matmul-like) operators read and write, forward and
    /// backward.
    pub hbm: T,
    /// The forward part of `hbm` (what full recomputation moves again).
    pub hbm_forward: T,
    /// The forward HBM bytes of the memory-bound operators selective recomputation recomputes
    /// (what it moves again).
    pub attention_hbm: T,
    /// Context-parallel ring bytes one forward pass sends: (cp − 1) steps of every attention
    /// operator's keys and values. The backward pass sends twice this (keys and values again,
    /// and their gradients).
    pub ring_forward: T,
    /// The part of `ring_forward` of operators selective recomputation recomputes (what it
    /// sends again).
    pub ring_core_forward: T,
    /// FLOP-equivalents the forward's kernels take beyond their FLOPs at the matmul plateau
    /// (size-dependent efficiency, launch cost: [`super::kernels`]).
    pub kernel_forward: T,
    /// The same for the backward's kernels.
    pub kernel_backward: T,
    /// The part of `kernel_forward` of the operators selective recomputation recomputes (what
    /// it runs again).
    pub kernel_attention_forward: T,
    /// FLOP-equivalents the forward's FP8 GEMMs (see [`Precision::Fp8`]) would save at the
    /// table's FP8 peak: their FLOPs times 1 − bf16 peak ÷ FP8 peak (zero without an FP8 peak).
    /// Counted for every block; only a repeated layer's are spent, and only under FP8.
    pub fp8_gain_forward: T,
    /// The same for the backward's FP8 GEMMs.
    pub fp8_gain_backward: T,
    /// [`Amounts::fp8_gain_forward`] at the table's FP4 peak (NVFP4's GEMMs).
    pub fp4_gain_forward: T,
    /// The same for the backward.
    pub fp4_gain_backward: T,
    /// Elements of the forward's casts of the FP8 GEMMs' inputs ([`Fp8Operands`]; one cast per
    /// input tensor, however many layers read it).
    pub fp8_cast_forward: T,
    /// Elements of the backward's casts of the FP8 GEMMs' output gradients.
    pub fp8_cast_backward: T,
    /// Weight elements of the FP8 GEMMs: what a step casts once and keeps FP8 copies of.
    pub fp8_weights: T,
    /// Elements of the FP8 GEMMs' inputs kept in FP8 for the backward
    /// ([`super::analysis::OpFormulas::fp8_saved_elements`]).
    pub fp8_saved_elements: T,
    /// Of those, the elements whose bf16 copy the FP8 one replaces
    /// ([`super::analysis::OpFormulas::fp8_replaces_bf16`]).
    pub fp8_replaced_elements: T,
}

impl<T> Amounts<T> {
    /// The same amounts through `f` (exact to floats: [`float`]).
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> Amounts<U> {
        Amounts {
            forward: f(&self.forward),
            backward: f(&self.backward),
            weight: f(&self.weight),
            attention_forward: f(&self.attention_forward),
            saved: f(&self.saved),
            attention_saved: f(&self.attention_saved),
            params: f(&self.params),
            tp_bytes: f(&self.tp_bytes),
            tp_forward: f(&self.tp_forward),
            dp_grad: f(&self.dp_grad),
            tp_grad: f(&self.tp_grad),
            boundary: f(&self.boundary),
            hbm: f(&self.hbm),
            hbm_forward: f(&self.hbm_forward),
            attention_hbm: f(&self.attention_hbm),
            ring_forward: f(&self.ring_forward),
            ring_core_forward: f(&self.ring_core_forward),
            kernel_forward: f(&self.kernel_forward),
            kernel_backward: f(&self.kernel_backward),
            kernel_attention_forward: f(&self.kernel_attention_forward),
            fp8_gain_forward: f(&self.fp8_gain_forward),
            fp8_gain_backward: f(&self.fp8_gain_backward),
            fp4_gain_forward: f(&self.fp4_gain_forward),
            fp4_gain_backward: f(&self.fp4_gain_backward),
            fp8_cast_forward: f(&self.fp8_cast_forward),
            fp8_cast_backward: f(&self.fp8_cast_backward),
            fp8_weights: f(&self.fp8_weights),
            fp8_saved_elements: f(&self.fp8_saved_elements),
            fp8_replaced_elements: f(&self.fp8_replaced_elements),
        }
    }
}

/// A block's parameters and traffic as expert parallelism sees them.
#[derive(Debug, Clone, Default)]
pub struct ExpertView<T> {
    /// Dense parameter elements (ZeRO shards them over dp·cp).
    pub dense: T,
    /// Expert parameter elements held (ZeRO shards them over the ranks holding the same
    /// experts).
    pub experts: T,
    /// Per-step data-parallel gradient wire bytes.
    pub dp_grad: T,
    /// Of `dp_grad`, the expert weights' under expert parallelism, reduced over the ranks
    /// holding the same experts (zero without it, where every gradient is reduced over the
    /// replicas).
    pub expert_dp_grad: T,
    /// Expert-parallel all-to-all wire bytes per micro-batch.
    pub ep_bytes: T,
    /// Weight elements of the FP8 GEMMs a device holds: the expert GEMMs' of its E/ep
    /// experts.
    pub fp8_weights: T,
    /// Of those, the expert GEMMs' (its E/ep experts').
    pub fp8_experts: T,
}

impl<T> ExpertView<T> {
    /// The same view through `f`.
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> ExpertView<U> {
        ExpertView {
            dense: f(&self.dense),
            experts: f(&self.experts),
            dp_grad: f(&self.dp_grad),
            expert_dp_grad: f(&self.expert_dp_grad),
            ep_bytes: f(&self.ep_bytes),
            fp8_weights: f(&self.fp8_weights),
            fp8_experts: f(&self.fp8_experts),
        }
    }
}

/// The parts of a pipeline rank whose memory is counted apart ([`BlockCost::rank_memory`]):
/// one summed cost per class of parts (parts of a class hold the same copies), numbered in
/// order of first appearance; each part's class, in the rank's order; and whether the second
/// class is DualPipe's mirrored stage, whose state the rank holds beside its own.
#[derive(Debug, Clone)]
pub struct Apart<T> {
    /// One part of each class.
    pub classes: Vec<BlockCost<T>>,
    /// Each part's class.
    pub class: Vec<usize>,
    /// Under DualPipe: `classes[1]` is the mirrored stage.
    pub mirror: bool,
}

/// One block's per-micro-batch costs under a strategy's recomputation and expert parallelism;
/// summed over the blocks of a stage ([`BlockCost::stage`]), a stage's.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockCost<T> {
    /// FLOPs, forward, backward and recomputed.
    pub compute: T,
    /// FLOP-equivalents its kernels take beyond `compute` at the matmul plateau, recomputation
    /// included ([`super::kernels`]).
    pub kernel: T,
    /// HBM bytes of the memory-bound operators, recomputation included (the gradient
    /// accumulation, which depends on the ZeRO stage, is added by [`BlockCost::hbm_traffic`]).
    pub hbm: T,
    /// Tensor-parallel wire bytes per micro-batch.
    pub tp_bytes: T,
    /// Tensor-parallel gradient wire bytes per step.
    pub tp_grad: T,
    /// Data-parallel gradient wire bytes per step (before ZeRO-3's factor).
    pub dp_grad: T,
    /// Of `dp_grad`, what the ranks holding the same experts reduce under expert parallelism
    /// ([`ExpertView::expert_dp_grad`]).
    pub expert_dp_grad: T,
    /// Activation bytes one micro-batch keeps for the backward pass.
    pub saved: T,
    /// Dense parameter elements.
    pub params: T,
    /// Expert parameter elements held.
    pub params_expert: T,
    /// Expert-parallel all-to-all wire bytes per micro-batch.
    pub ep_bytes: T,
    /// Context-parallel ring bytes per micro-batch.
    pub cp_bytes: T,
    /// Boundary activation bytes (what a pipeline stage ending here sends; not summed by
    /// [`BlockCost::stage`]).
    pub boundary: T,
    /// The backward pass's part of `compute` (recomputation runs in it).
    pub backward: T,
    /// Of `backward`, the weight gradients ([`Amounts::weight`]).
    pub weight: T,
    /// The part of `backward` that recomputation reruns of the forward (the layer's forward
    /// under full recomputation, the attention core's under selective).
    pub recomputed: T,
    /// The backward pass's part of `kernel`.
    pub kernel_backward: T,
    /// The backward pass's part of `hbm`.
    pub hbm_backward: T,
    /// Weight elements of the FP8 GEMMs (zero but under FP8): cast once a step, and kept in
    /// FP8 copies beside the bf16 weights, at the recipe's bytes ([`Fp8Bytes`]).
    pub fp8_weights: T,
    /// Of those, the expert GEMMs' (sharded and gathered over the ranks holding the same
    /// experts).
    pub fp8_experts: T,
}

/// Machine balance (FLOP-equivalents per byte) of the links of each parallel dimension and of
/// HBM.
#[derive(Debug, Clone)]
pub struct Kappas<T> {
    /// Tensor-parallel links.
    pub tp: T,
    /// Expert-parallel links.
    pub ep: T,
    /// Context-parallel links.
    pub cp: T,
    /// Gradient-reduction links.
    pub dp: T,
    /// Gradient-reduction links of the ranks holding the same experts (expert weights under
    /// expert parallelism).
    pub edp: T,
    /// Pipeline point-to-point links.
    pub p2p: T,
    /// HBM.
    pub hbm: T,
    /// The share of an overlapped collective's time that overlapping it with compute saves:
    /// 1 − the table's `comm_contention`.
    pub overlap: T,
}

impl<T> Kappas<T> {
    /// The same balances through `f`.
    pub fn map<U>(&self, f: impl Fn(&T) -> U) -> Kappas<U> {
        Kappas {
            tp: f(&self.tp),
            ep: f(&self.ep),
            cp: f(&self.cp),
            dp: f(&self.dp),
            edp: f(&self.edp),
            p2p: f(&self.p2p),
            hbm: f(&self.hbm),
            overlap: f(&self.overlap),
        }
    }
}

impl<T: Amount> BlockCost<T> {
    /// A block's costs: recomputation adds the forward FLOPs, HBM bytes and ring passes it
    /// reruns and keeps only the activations it does not rerun (full: the layer's input;
    /// selective: all but the attention core's); `layer` says whether the block is a repeated
    /// layer, which is what recomputation applies to. Of the strategy, only the recomputation,
    /// the precision and (through `e`) the expert-parallel degree matter.
    pub fn of(
        x: &Amounts<T>,
        e: ExpertView<T>,
        layer: bool,
        recompute: Recompute,
        precision: Precision,
    ) -> BlockCost<T> {
        let fp8 = [e.fp8_weights.clone(), e.fp8_experts.clone()];
        let c = Self::of_bf16(x, e, layer, recompute);
        match precision.fp8_bytes() {
            Some(bytes) if layer => c.with_fp8(x, recompute, bytes, fp8),
            _ => c,
        }
    }

    /// [`BlockCost::of`] with every GEMM in bf16.
    fn of_bf16(
        x: &Amounts<T>,
        e: ExpertView<T>,
        layer: bool,
        recompute: Recompute,
    ) -> BlockCost<T> {
        let zero = T::zero;
        let full_layer = reruns_forward(recompute, layer);
        // Full recomputation reruns the layer's whole forward, its tensor-parallel collectives
        // and its expert-parallel dispatch and combine included (Megatron-LM's
        // `CheckpointFunction` calls the forward again, and its collectives with it); selective
        // recomputation reruns operators that have none.
        let (extra, saved, extra_hbm, ring_again, kernel_again, tp_again) = match (recompute, layer)
        {
            (Recompute::Full, true) => (
                x.forward.clone(),
                x.boundary.clone(),
                x.hbm_forward.clone(),
                x.ring_forward.clone(),
                x.kernel_forward.clone(),
                x.tp_forward.clone(),
            ),
            (Recompute::Selective, true) => (
                x.attention_forward.clone(),
                x.saved.clone() - x.attention_saved.clone(),
                x.attention_hbm.clone(),
                x.ring_core_forward.clone(),
                x.kernel_attention_forward.clone(),
                zero(),
            ),
            _ => (zero(), x.saved.clone(), zero(), zero(), zero(), zero()),
        };
        BlockCost {
            compute: x.forward.clone() + x.backward.clone() + extra.clone(),
            kernel: x.kernel_forward.clone() + x.kernel_backward.clone() + kernel_again.clone(),
            hbm: x.hbm.clone() + extra_hbm.clone(),
            tp_bytes: x.tp_bytes.clone() + tp_again,
            tp_grad: x.tp_grad.clone(),
            dp_grad: e.dp_grad,
            expert_dp_grad: e.expert_dp_grad,
            saved,
            params: e.dense,
            params_expert: e.experts,
            // The forward's dispatch and combine are half the four all-to-alls.
            ep_bytes: if full_layer {
                e.ep_bytes * T::ratio(3, 2)
            } else {
                e.ep_bytes
            },
            // Forward sends the ring once, backward twice, recomputation once more.
            cp_bytes: T::int(3) * x.ring_forward.clone() + ring_again,
            boundary: x.boundary.clone(),
            backward: x.backward.clone() + extra.clone(),
            weight: x.weight.clone(),
            recomputed: extra,
            kernel_backward: x.kernel_backward.clone() + kernel_again,
            hbm_backward: x.hbm.clone() - x.hbm_forward.clone() + extra_hbm,
            fp8_weights: zero(),
            fp8_experts: zero(),
        }
    }

    /// These costs of a repeated layer with its FP8 GEMMs run in FP8 ([`Precision::Fp8`] and
    /// the other recipes, whose `bytes` they are): their time at the FP8 peak (`kernel` falls
    /// by the FLOP-equivalents saved, so it may be negative; the FLOPs themselves are
    /// unchanged), their casts as HBM traffic, their inputs saved in FP8 with their scales,
    /// and their weights' FP8 copies. Full recomputation reruns the forward's GEMMs and casts,
    /// and keeps only the layer's input (no FP8 GEMM input is saved).
    fn with_fp8(
        mut self,
        x: &Amounts<T>,
        recompute: Recompute,
        bytes: Fp8Bytes,
        [fp8_weights, fp8_experts]: [T; 2],
    ) -> BlockCost<T> {
        let full = recompute == Recompute::Full;
        let again = |v: &T| if full { v.clone() } else { T::zero() };
        let per = |(n, d): (u64, u64)| T::ratio(n, d);
        let (gain_forward, gain_backward) = if bytes.fp4 {
            (&x.fp4_gain_forward, &x.fp4_gain_backward)
        } else {
            (&x.fp8_gain_forward, &x.fp8_gain_backward)
        };
        let gain_backward = gain_backward.clone() + again(gain_forward);
        let cast_backward =
            (x.fp8_cast_backward.clone() + again(&x.fp8_cast_forward)) * per(bytes.cast);
        let cast_forward = x.fp8_cast_forward.clone() * per(bytes.cast);
        self.kernel = self.kernel - gain_forward.clone() - gain_backward.clone();
        self.kernel_backward = self.kernel_backward - gain_backward;
        self.hbm = self.hbm + cast_forward + cast_backward.clone();
        self.hbm_backward = self.hbm_backward + cast_backward;
        if !full {
            // Each input kept at the recipe's bytes, less the 2 bytes of each bf16 copy it
            // replaces.
            self.saved = self.saved + x.fp8_saved_elements.clone() * per(bytes.saved)
                - x.fp8_replaced_elements.clone() * T::int(2);
        }
        self.fp8_weights = fp8_weights;
        self.fp8_experts = fp8_experts;
        self
    }

    /// The sum of `costs[b]` times `copies` over the (block, copies) of a stage.
    pub fn stage(costs: &[BlockCost<T>], counts: &[(usize, u64)]) -> BlockCost<T> {
        let mut s = BlockCost::default();
        for &(b, copies) in counts {
            let c = &costs[b];
            let n = T::int(copies);
            let add = |sum: &mut T, x: &T| *sum = sum.clone() + x.clone() * n.clone();
            add(&mut s.compute, &c.compute);
            add(&mut s.kernel, &c.kernel);
            add(&mut s.hbm, &c.hbm);
            add(&mut s.tp_bytes, &c.tp_bytes);
            add(&mut s.tp_grad, &c.tp_grad);
            add(&mut s.dp_grad, &c.dp_grad);
            add(&mut s.expert_dp_grad, &c.expert_dp_grad);
            add(&mut s.saved, &c.saved);
            add(&mut s.params, &c.params);
            add(&mut s.params_expert, &c.params_expert);
            add(&mut s.ep_bytes, &c.ep_bytes);
            add(&mut s.cp_bytes, &c.cp_bytes);
            add(&mut s.backward, &c.backward);
            add(&mut s.weight, &c.weight);
            add(&mut s.recomputed, &c.recomputed);
            add(&mut s.kernel_backward, &c.kernel_backward);
            add(&mut s.hbm_backward, &c.hbm_backward);
            add(&mut s.fp8_weights, &c.fp8_weights);
            add(&mut s.fp8_experts, &c.fp8_experts);
        }
        s
    }

    /// One copy's FLOP-equivalents for one micro-batch, without what is paid once a step or
    /// depends on the ZeRO stage: what a pipeline partition balances.
    pub fn block_time(&self, kap: &Kappas<T>) -> T {
        self.compute.clone()
            + self.kernel.clone()
            + kap.hbm.clone() * self.hbm.clone()
            + kap.tp.clone() * self.tp_bytes.clone()
            + kap.ep.clone() * self.ep_bytes.clone()
            + kap.cp.clone() * self.cp_bytes.clone()
    }

    /// HBM bytes per micro-batch: the memory-bound operators' and the addition of the weight
    /// gradients to the fp32 gradient buffer ([`grad_accumulation`]).
    pub fn hbm_traffic(&self, k: &Knobs) -> T {
        let params = self.params.clone() + self.params_expert.clone();
        let traffic = self.hbm.clone() + grad_accumulation(params.clone(), k);
        match k.precision {
            Precision::Bf16
            | Precision::Fp8
            | Precision::Fp8Current
            | Precision::Fp8Block
            | Precision::Mxfp8
            | Precision::Nvfp4 => traffic,
            Precision::Autocast => traffic + weight_cast(params, k),
        }
    }

    /// HBM bytes of the stage's optimizer step, once a step, over the parameters its device
    /// holds ([`optimizer_traffic`]), and under FP8 the casts of the FP8 GEMMs' weights on the
    /// step's first micro-batch (with FP8 parameters, the transposed copy made from the gathered
    /// weight: [`Knobs::fp8_bytes`]).
    pub fn optimizer_hbm(&self, k: &Knobs) -> T {
        let held = HeldParams {
            dense: self.params.clone(),
            experts: self.params_expert.clone(),
            fp8_dense: self.fp8_dense(),
            fp8_experts: self.fp8_experts.clone(),
        };
        let cast = k
            .fp8_bytes()
            .map_or_else(T::zero, |b| T::ratio(b.weight_cast.0, b.weight_cast.1));
        optimizer_traffic(&held, k)
            .into_iter()
            .fold(self.fp8_weights.clone() * cast, |sum, b| sum + b)
    }

    /// HBM bytes of a stage for `m` micro-batches: each micro-batch's ([`Self::hbm_traffic`])
    /// and the optimizer step's.
    pub fn step_hbm(&self, m: &T, k: &Knobs) -> T {
        self.hbm_traffic(k) * m.clone() + self.optimizer_hbm(k)
    }

    /// FLOP-equivalents of a stage's compute for `m` micro-batches (these summed costs):
    /// FLOPs, what their kernels take beyond them, and HBM bytes (the optimizer step's
    /// included) at κ_hbm.
    pub fn compute_time(&self, m: &T, kap: &Kappas<T>, k: &Knobs) -> T {
        (self.compute.clone() + self.kernel.clone()) * m.clone()
            + kap.hbm.clone() * self.step_hbm(m, k)
    }

    /// FLOP-equivalents of what a stage (these summed costs) runs for `m` micro-batches apart
    /// from its gradient reduction and pipeline sends: compute, HBM traffic, and tensor-,
    /// expert- and context-parallel traffic.
    pub fn time(&self, m: &T, kap: &Kappas<T>, k: &Knobs) -> T {
        self.compute_time(m, kap, k)
            + kap.tp.clone() * self.tp_traffic(m, k)
            + kap.ep.clone() * self.ep_bytes.clone() * m.clone()
            + kap.cp.clone() * self.cp_bytes.clone() * m.clone()
    }

    /// FLOP-equivalents of one micro-batch's backward pass through these summed costs
    /// (recomputation included): FLOPs, what their kernels take beyond them, HBM bytes at κ_hbm.
    pub fn backward_time(&self, kap: &Kappas<T>) -> T {
        self.backward.clone()
            + self.kernel_backward.clone()
            + kap.hbm.clone() * self.hbm_backward.clone()
    }

    /// DualPipe's idle FLOP-equivalents per step on a stage of these summed costs, for `m`
    /// micro-batches: the DeepSeek-V3 Technical Report's (arXiv:2412.19437) Table 2 bubble,
    /// (PP/2 − 1)(F&B + B − 3W), per micro-batch times m, against 1F1B's (PP − 1)(F + B).
    /// With `m·F` the forward's compute and half the stage's tensor-, expert- and
    /// context-parallel traffic, `m·B` the full backward's compute (recomputation included)
    /// and the other half (the backward mirrors each forward collective: exact for the expert
    /// all-to-alls and tensor-parallel all-reduces, while a recomputed forward's collectives
    /// are counted in the forward's half), `m·W` the weight-gradient FLOPs, and F&B = F + B − H
    /// with H what an overlapped forward and backward chunk hide: each chunk's communication
    /// under the other's compute, at most the two, at the share overlap saves (`kap.overlap`).
    /// The optimizer's HBM traffic, once a step, idles in neither. Under DualPipeV (deepseek-ai/
    /// DualPipe's README: the same bubble for its PP = 2pp chunks) these summed costs are a
    /// rank's two chunks, each micro-batch through both: (pp − 1) chunks' F&B + B − 3W, half
    /// the rank's.
    pub fn dualpipe_bubble(&self, m: &T, kap: &Kappas<T>, k: &Knobs) -> T {
        if k.pp < 2 {
            return T::zero();
        }
        let share = if k.schedule == Schedule::DualPipeV {
            T::ratio(k.pp - 1, 2 * k.microbatches)
        } else {
            T::ratio(k.pp / 2 - 1, k.microbatches)
        };
        let comm = self.time(m, kap, k) - self.compute_time(m, kap, k);
        let half = comm / T::int(2);
        let f_compute = self.forward_time(kap) * m.clone();
        let b_compute = self.backward_time(kap) * m.clone();
        let under = |c: &T, w: &T| {
            if c < w {
                c.clone()
            } else {
                w.clone()
            }
        };
        let h =
            (under(&half, &b_compute) + under(&half, &f_compute)).piecewise() * kap.overlap.clone();
        let f = f_compute + half.clone();
        let b = b_compute + half;
        let f_and_b = f + b.clone() - h;
        let w = self.weight.clone() * m.clone();
        let idle = f_and_b + b - w * T::int(3);
        idle * share
    }

    /// The same for one micro-batch's forward pass.
    pub fn forward_time(&self, kap: &Kappas<T>) -> T {
        (self.compute.clone() - self.backward.clone())
            + (self.kernel.clone() - self.kernel_backward.clone())
            + kap.hbm.clone() * (self.hbm.clone() - self.hbm_backward.clone())
    }

    /// FLOP-equivalents that overlapping saves of a stage's data-parallel traffic per step
    /// ([`Self::dp_traffic`] at κ_dp), for `m` micro-batches: the smaller of the traffic that
    /// can run while the device computes and the compute it can run under, times the share of
    /// an overlapped collective's time that overlapping saves (`kap.overlap`: 1 − the table's
    /// `comm_contention`, the share of compute throughput a running collective takes, by which
    /// the timeline slows the compute it overlaps). As Megatron-LM's and PyTorch's data
    /// parallelism run it (and the timeline times it):
    ///
    /// * ZeRO 0–1: the gradients are reduced bucket by bucket during the last micro-batch's
    ///   backward (`--overlap-grad-reduce`; PyTorch DDP's buckets): the all-reduce (ZeRO 0) or
    ///   reduce-scatter (ZeRO 1) against one micro-batch's backward;
    /// * ZeRO 2: each micro-batch's gradients are reduce-scattered during its own backward:
    ///   m reduce-scatters against m backwards;
    /// * ZeRO 3: every layer's weights are gathered ahead of its forward and backward, and its
    ///   gradients reduce-scattered during the backward: all of it against m forwards and
    ///   backwards;
    /// * ZeRO 1–2's weight all-gather after the optimizer step runs under the next step's first
    ///   forward with `--overlap-param-gather`, and exposed without.
    ///
    /// Without `--overlap-grad-reduce` the gradient reductions run after the backward, exposed.
    /// A pipeline stage other than the first can also hide its reduction in the drain of the
    /// pipeline (the timeline launches it there); that is not credited, so this may credit
    /// less than the timeline hides, never more than the compute it names. Not a polynomial:
    /// the smaller of two.
    pub fn dp_hidden(&self, m: &T, kap: &Kappas<T>, k: &Knobs) -> T {
        self.dp_hidden_bound(m, kap, k).0
    }

    /// [`Self::dp_hidden`], and whether the compute the traffic runs under (not the traffic)
    /// is the smaller: then what overlap saves does not scale with the links' κ.
    pub fn dp_hidden_bound(&self, m: &T, kap: &Kappas<T>, k: &Knobs) -> (T, bool) {
        // ZeRO 3's per-layer gathers overlap always, ZeRO 1–2's with --overlap-param-gather.
        let [(dense, dense_saving), (expert, expert_saving)] = self.dp_groups(k);
        let run = if k.fp8_params && (k.overlap.param_gather || k.zero >= 3) {
            kap.dp.clone() * (dense * dp_overlappable_factor(k) - dense_saving)
                + kap.edp.clone() * (expert * dp_overlappable_factor(k) - expert_saving)
        } else {
            kap.dp.clone() * dense * dp_overlappable_factor(k)
                + kap.edp.clone() * expert * dp_overlappable_factor(k)
        };
        let (f, b) = (self.forward_time(kap), self.backward_time(kap));
        let when = |on: bool, x: T| if on { x } else { T::zero() };
        let window = match k.zero {
            0 | 1 => b + when(k.zero == 1 && k.overlap.param_gather, f),
            2 => b * m.clone() + when(k.overlap.param_gather, f),
            _ => (f + b) * m.clone(),
        };
        let by_compute = window < run;
        let hidden = if by_compute { window.piecewise() } else { run };
        (hidden * kap.overlap.clone(), by_compute)
    }

    /// Tensor-parallel bytes of a stage for `m` micro-batches: per-micro-batch collectives and
    /// gradient ones ([`grad_reductions`] times).
    pub fn tp_traffic(&self, m: &T, k: &Knobs) -> T {
        self.tp_bytes.clone() * m.clone() + self.tp_grad.clone() * grad_reductions::<T>(m, k)
    }

    /// Data-parallel bytes of a stage per step over the dp·cp replicas (ZeRO-3's weight
    /// gathers included; the weight gathers in FP8 with FP8 parameters:
    /// [`fp8_gather_saving`]). Under expert parallelism the expert weights' are apart
    /// ([`Self::edp_traffic`]).
    pub fn dp_traffic(&self, k: &Knobs) -> T {
        let [(dense, saving), _] = self.dp_groups(k);
        self.group_traffic(dense, saving, k)
    }

    /// Under expert parallelism, the data-parallel bytes of a stage per step over the ranks
    /// holding the same experts: the expert weights' gradient reductions and gathers (zero
    /// without it).
    pub fn edp_traffic(&self, k: &Knobs) -> T {
        let [_, (expert, saving)] = self.dp_groups(k);
        self.group_traffic(expert, saving, k)
    }

    /// Under DualPipe, the bytes a rank of these summed costs (its two stages') sends per step
    /// to sum its copies' gradients with its mirror's ([`dualpipe_grad_sum`]).
    pub fn grad_sum_bytes(&self, k: &Knobs) -> T {
        dualpipe_grad_sum(self.params.clone(), self.params_expert.clone(), k)
    }

    /// A group's traffic from its gradient bytes and what FP8 parameters save it.
    fn group_traffic(&self, grads: T, saving: T, k: &Knobs) -> T {
        let traffic = grads * dp_traffic_factor(k);
        if k.fp8_params {
            traffic - saving
        } else {
            traffic
        }
    }

    /// Per data-parallel group (the replicas, then the ranks holding the same experts): its
    /// gradient bytes per step, and the bytes per rank that the step's [`weight_gathers`]
    /// (ZeRO 1–2's after the optimizer step, ZeRO 3's per layer) do not move for its FP8 GEMM
    /// weights with FP8 parameters ([`fp8_gather_saving`]). Without expert parallelism every
    /// weight is the replicas'.
    fn dp_groups(&self, k: &Knobs) -> [(T, T); 2] {
        let n = T::int(weight_gathers(k));
        let dense = fp8_gather_saving(self.fp8_dense(), k, k.replicas());
        let experts = fp8_gather_saving(self.fp8_experts.clone(), k, k.expert_replicas());
        if k.ep <= 1 {
            return [
                (self.dp_grad.clone(), (dense + experts) * n),
                (T::zero(), T::zero()),
            ];
        }
        [
            (
                self.dp_grad.clone() - self.expert_dp_grad.clone(),
                dense * n.clone(),
            ),
            (self.expert_dp_grad.clone(), experts * n),
        ]
    }

    /// The dense FP8 GEMM weight elements (all but the experts').
    fn fp8_dense(&self) -> T {
        self.fp8_weights.clone() - self.fp8_experts.clone()
    }

    /// Weights, gradients and optimizer state of a stage on one device: dense state sharded by
    /// ZeRO over dp·cp, expert state over the dp·cp/ep ranks that hold the same experts
    /// (Megatron-Core's expert-data-parallel group; `ep` divides dp·cp).
    pub fn state(&self, k: &Knobs) -> [T; 3] {
        let state = state_bytes(k.precision).map(|(bytes, stage)| {
            let (dense, experts) = k.shard_groups(k.zero >= stage);
            let (dense, experts) = (T::int(dense), T::int(experts));
            self.params.clone() * T::int(bytes) / dense
                + self.params_expert.clone() * T::int(bytes) / experts
        });

        // Transformer Engine's FP8 weight copies are of the weights a device computes with, not
        // sharded by ZeRO (zero but under FP8); under ZeRO 3 they are the gathered weights a
        // micro-batch in flight keeps for its backward (torchtitan's docs/float8.md: unsharded
        // FP8 weights are saved for the backward unless `force_recompute_fp8_weight_in_bwd`).
        // With FP8 parameters they are the weights: the bf16 weight beside them is not kept,
        // whole under ZeRO 1–2 and the device's shard under ZeRO 3.
        let [w, g, o] = state;
        let mut w =
            w + self.fp8_weights.clone() * fp8_bytes_of::<T>(k.precision, |b| b.weight_copy);
        if k.fp8_params {
            let (dense, experts) = k.shard_groups(k.zero >= 3);
            w = w
                - self.fp8_dense() * T::ratio(WEIGHT_BYTES as u64, dense)
                - self.fp8_experts.clone() * T::ratio(WEIGHT_BYTES as u64, experts);
        }
        // Under DualPipe a rank also holds its mirrored stage's ([`BlockCost::rank_memory`]).
        [w, g, o]
    }

    /// What one micro-batch in flight keeps for the backward: the saved activations, and under
    /// autocast the bf16 copies of the weights each micro-batch's graph keeps for the
    /// backward's input gradients (not under full recomputation: the recomputed forward casts
    /// them again).
    fn held_per_microbatch(&self, k: &Knobs) -> T {
        let casts = weight_cast_saved(k);
        if casts > 0 {
            self.saved.clone() + (self.params.clone() + self.params_expert.clone()) * T::int(casts)
        } else {
            self.saved.clone()
        }
    }

    /// Memory of the device that runs stage `s` (of these summed costs) with `v` chunks:
    /// weights, gradients and optimizer state, and activations ([`BlockCost::activations`]).
    pub fn memory(&self, k: &Knobs, v: u64, s: usize, full_layer_saved: &T) -> [T; 4] {
        let [w, g, o] = self.state(k);
        [w, g, o, self.activations(k, v, s, full_layer_saved)]
    }

    /// Memory of pipeline rank `s`, these its summed costs, whose parts are held `apart`:
    /// under DualPipe its stage s and its mirrored stage pp − 1 − s (DeepSeek-V3 Technical
    /// Report, arXiv:2412.19437, Table 2: "Parameter" 2× against 1F1B's 1×;
    /// deepseek-ai/DualPipe places stages s and pp − 1 − s on rank s), these costs its own
    /// stage's; under ZB-V its chunks s and 2pp − 1 − s; interleaved with `v` chunks, its chunks
    /// in order. The state of all its parts, and at each moment of its program the
    /// micro-batches it holds of each class of parts
    /// ([`crate::strategy::schedule::rank_held`]), the largest of those sums. Exact for parts of
    /// different sizes, as rank 0 pairs the embedding's chunk with the head's.
    pub fn rank_memory(
        &self,
        apart: &Apart<T>,
        k: &Knobs,
        v: u64,
        s: usize,
        full_layer_saved: &T,
    ) -> [T; 4] {
        let [mut w, mut g, mut o] = self.state(k);
        if let (true, Some(mirror)) = (apart.mirror, apart.classes.get(1)) {
            let [w2, g2, o2] = mirror.state(k);
            (w, g, o) = (w + w2, g + g2, o + o2);
        }
        let (parts, class) = (&apart.classes, &apart.class);
        // What a micro-batch of each class holds.
        let each: Vec<T> = parts.iter().map(|x| x.held_per_microbatch(k)).collect();
        let shape = (s, k.pp as usize, k.microbatches as usize, v as usize);
        let held = crate::strategy::schedule::rank_held(k.schedule, shape, class);
        let act = if each.iter().all(|x| *x == each[0]) {
            // Parts holding the same: their largest count, a polynomial.
            let most = held.iter().map(|x| x.iter().sum::<u64>()).max();
            each[0].clone() * T::int(most.unwrap_or(0))
        } else {
            let sums: Vec<T> = held
                .iter()
                .map(|counts| {
                    let terms = each.iter().zip(counts);
                    terms.fold(T::zero(), |sum, (e, n)| sum + e.clone() * T::int(*n))
                })
                .collect();
            let mut most: Option<&T> = None;
            for x in &sums {
                if most.is_none_or(|y| x > y) {
                    most = Some(x);
                }
            }
            let act = most.cloned().unwrap_or_default();
            // The largest at every value of the symbols (as rank 0's embedding chunk against
            // its plain ones): a polynomial; otherwise the largest here.
            if sums.iter().all(|x| act.at_least_everywhere(x)) {
                act
            } else {
                act.piecewise()
            }
        };
        [w, g, o, recomputing(k, act, full_layer_saved)]
    }

    /// Activation bytes of a stage: what each micro-batch in flight saves, and under full
    /// recomputation the largest layer's activations again (`full_layer_saved`) while it is
    /// recomputed.
    pub fn activations(&self, k: &Knobs, v: u64, s: usize, full_layer_saved: &T) -> T {
        let act = self.held_per_microbatch(k) * in_flight(k, v, s);
        recomputing(k, act, full_layer_saved)
    }
}

/// Whether a block's forward runs again before its backward, its collectives with it: a
/// repeated layer's under full recomputation (Megatron-LM's `CheckpointFunction` calls the
/// forward again). Selective recomputation reruns operators that have no collective.
pub fn reruns_forward(recompute: Recompute, layer: bool) -> bool {
    layer && recompute == Recompute::Full
}

/// Activations `act` held in flight, and under full recomputation the largest layer's
/// activations again (`full_layer_saved`) while it is recomputed.
fn recomputing<T: Amount>(k: &Knobs, act: T, full_layer_saved: &T) -> T {
    if k.recompute == Recompute::Full {
        act + full_layer_saved.clone()
    } else {
        act
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(n: u64, d: u64) -> Rational {
        Rational::new(n.into(), d.into())
    }

    proptest! {
        /// The one formula on exact amounts, converted, equals the same formula on the amounts
        /// converted first, to float precision: the screen and the exact pricing agree.
        #[test]
        fn exact_and_float_costs_agree(
            v in proptest::collection::vec((1u64..1_000_000_000, 1u64..64), 17),
            e in proptest::collection::vec(0u64..1_000_000, 4),
            recompute in 0usize..3,
            zero in 0u8..4,
            layer: bool,
            m in 1u64..64,
            copies in 1u64..100,
            fp8 in 0usize..6,
            ep in 0usize..3,
        ) {
            let a: Vec<Rational> = v.iter().map(|&(n, d)| q(n, d)).collect();
            let x = Amounts {
                forward: a[0].clone(), backward: a[1].clone(), weight: a[1].clone() / q(3, 1),
                attention_forward: a[2].clone(),
                saved: a[3].clone() + a[4].clone(), attention_saved: a[4].clone(),
                params: a[5].clone(), tp_bytes: a[6].clone() + a[7].clone(),
                tp_forward: a[7].clone(), dp_grad: a[7].clone(),
                tp_grad: a[8].clone(), boundary: a[9].clone(), hbm: a[10].clone(),
                hbm_forward: a[11].clone(), attention_hbm: a[12].clone(),
                ring_forward: a[13].clone() + a[14].clone(), ring_core_forward: a[14].clone(),
                kernel_forward: a[15].clone() + a[16].clone(), kernel_backward: a[15].clone(),
                kernel_attention_forward: a[16].clone(),
                fp8_gain_forward: a[0].clone() / q(2, 1), fp8_gain_backward: a[1].clone() / q(2, 1),
                fp4_gain_forward: a[0].clone() * q(3, 4), fp4_gain_backward: a[1].clone() * q(3, 4),
                fp8_cast_forward: a[6].clone(), fp8_cast_backward: a[8].clone(),
                fp8_weights: a[5].clone(),
                fp8_saved_elements: a[3].clone() / q(3, 1), fp8_replaced_elements: a[3].clone() / q(5, 1),
            };
            let ev = ExpertView {
                dense: a[5].clone(),
                experts: q(e[0], 1),
                dp_grad: a[7].clone() + q(e[1], 1),
                expert_dp_grad: q(e[1], 1),
                ep_bytes: q(e[2], 3),
                fp8_weights: a[5].clone(),
                fp8_experts: q(0, 1),
            };
            let evf = ev.map(float);
            let recompute = [Recompute::None, Recompute::Selective, Recompute::Full][recompute];
            let precision = [Precision::Bf16, Precision::Fp8, Precision::Fp8Current, Precision::Fp8Block, Precision::Mxfp8, Precision::Nvfp4][fp8];
            let k = Knobs {
                pp: 4,
                microbatches: m,
                zero,
                recompute,
                precision,
                ep: [1, 2, 4][ep],
                ..Knobs::data_parallel(4)
            };
            let exact = BlockCost::of(&x, ev, layer, recompute, precision);
            let rough = BlockCost::of(&x.map(float), evf, layer, recompute, precision);
            let kap = Kappas { tp: q(7, 2), ep: q(5, 1), cp: q(3, 1), dp: q(11, 1), edp: q(17, 1), p2p: q(13, 1), hbm: q(1, 3), overlap: q(4, 5) };
            let kapf = kap.map(float);
            let se = BlockCost::stage(std::slice::from_ref(&exact), &[(0, copies)]);
            let sf = BlockCost::stage(std::slice::from_ref(&rough), &[(0, copies)]);
            let close = |a: &Rational, b: f64| {
                let a = float(a);
                prop_assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
                Ok(())
            };
            close(&se.time(&Rational::int(m), &kap, &k), sf.time(&(m as f64), &kapf, &k))?;
            close(&se.dp_traffic(&k), sf.dp_traffic(&k))?;
            close(&se.edp_traffic(&k), sf.edp_traffic(&k))?;
            close(
                &se.dp_hidden(&Rational::int(m), &kap, &k),
                sf.dp_hidden(&(m as f64), &kapf, &k),
            )?;
            for (a, b) in se.state(&k).iter().zip(sf.state(&k)) {
                close(a, b)?;
            }
            for s in 0..4 {
                close(&se.activations(&k, 1, s, &q(5, 1)), sf.activations(&k, 1, s, &5.0))?;
            }
        }
    }

    /// What overlapping saves: the smaller of the overlappable data-parallel traffic (at κ_dp)
    /// and the compute it runs under, times 1 − the contention share; nothing where the
    /// reduction is not overlapped.
    #[test]
    fn overlap_saves_the_smaller_of_the_traffic_and_the_compute_under_it() {
        let q = |n: u64, d: u64| Rational::ratio(n, d);
        let kap = Kappas {
            tp: q(1, 1),
            ep: q(1, 1),
            cp: q(1, 1),
            dp: q(10, 1),
            edp: q(10, 1),
            p2p: q(1, 1),
            hbm: q(2, 1),
            overlap: q(4, 5),
        };
        // Backward: 300 FLOPs, 20 FLOP-equivalents of kernels, 40 HBM bytes (at κ_hbm 2):
        // 400; forward: 100 + 10 + 2 · 20 = 150. Gradients: 30 wire bytes a step, 300 at κ_dp.
        let c = BlockCost {
            compute: q(400, 1),
            backward: q(300, 1),
            kernel: q(30, 1),
            kernel_backward: q(20, 1),
            hbm: q(60, 1),
            hbm_backward: q(40, 1),
            dp_grad: q(30, 1),
            ..BlockCost::default()
        };
        assert_eq!(c.backward_time(&kap), q(400, 1));
        assert_eq!(c.forward_time(&kap), q(150, 1));
        let m = q(4, 1);
        let at = |zero: u8, grad: bool, gather: bool| {
            let mut k = Knobs::data_parallel(8);
            k.zero = zero;
            k.microbatches = 4;
            k.overlap.grad_reduce = grad;
            k.overlap.param_gather = gather;
            c.dp_hidden(&m, &kap, &k)
        };
        let saved = |x: u64| q(4, 5) * q(x, 1);
        // ZeRO 0: the all-reduce (300) under one backward (400).
        assert_eq!(at(0, true, false), saved(300));
        assert_eq!(at(0, false, false), q(0, 1));
        // ZeRO 1: the reduce-scatter (150); the weight gather (150) too under the next forward
        // with --overlap-param-gather.
        assert_eq!(at(1, true, false), saved(150));
        assert_eq!(at(1, true, true), saved(300));
        // ZeRO 2: four reduce-scatters (600) under four backwards (1600).
        assert_eq!(at(2, true, false), saved(600));
        // ZeRO 3: 4 · (300 + 150) = 1800 of gathers and reduce-scatters under four forwards
        // and backwards (2200); without overlapped reductions the gathers alone (1200).
        assert_eq!(at(3, true, false), saved(1800));
        assert_eq!(at(3, false, false), saved(1200));
        // A backward shorter than the reduction hides only itself.
        let short = BlockCost {
            backward: q(100, 1),
            compute: q(200, 1),
            ..c.clone()
        };
        let mut k = Knobs::data_parallel(8);
        k.microbatches = 4;
        assert_eq!(short.dp_hidden(&m, &kap, &k), saved(100 + 20 + 80));
    }

    /// ZeRO-3 gathers the weights before each forward and backward of every micro-batch and
    /// reduce-scatters each micro-batch's gradients: 3m/2 times the all-reduce bytes, the ZeRO
    /// paper's 3/2 at one micro-batch (Rajbhandari et al. 2020, §7.2.2); ZeRO-2 reduce-scatters
    /// every micro-batch and gathers the weights once, (m + 1)/2; ZeRO 0–1 move one all-reduce's
    /// bytes. The factor is the sum of the parts `zero_reduction` lists.
    #[test]
    fn zero_traffic_factors() {
        let at = |zero: u8, microbatches: u64| Knobs {
            zero,
            microbatches,
            ..Knobs::data_parallel(8)
        };
        assert_eq!(dp_traffic_factor::<Rational>(&at(3, 1)), q(3, 2));
        assert_eq!(dp_traffic_factor::<Rational>(&at(3, 4)), q(6, 1));
        assert_eq!(dp_traffic_factor::<Rational>(&at(2, 4)), q(5, 2));
        assert_eq!(dp_traffic_factor::<Rational>(&at(1, 4)), q(1, 1));
        assert_eq!(dp_traffic_factor::<f64>(&at(0, 4)), 1.0);
        for zero in 0..=3 {
            for m in [1, 3, 8] {
                let k = at(zero, m);
                let parts: Rational = zero_reduction(&k)
                    .into_iter()
                    .map(|(_, calls, share)| share * q(calls, 1))
                    .sum();
                assert_eq!(
                    parts,
                    dp_traffic_factor::<Rational>(&k),
                    "zero {zero}, m {m}"
                );
            }
        }
    }
}
