//! The work of a step beside its passes: one pass's chain seconds (for the lower bound), the
//! gradient accumulation, the optimizer step, DualPipe's gradient sum, the data-parallel
//! gradient reductions and weight gathers of a block, and the parameters it holds.

use super::*;

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
pub(super) fn grad_bytes(b: &PlanBlock, axis: Axis, kind: impl Fn(Collective) -> bool) -> f64 {
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
