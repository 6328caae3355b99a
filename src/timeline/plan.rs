//! The timing plan: what a timeline needs from a strategy's symbolic analysis, evaluated exactly
//! and independent of any machine. Per operator: FLOPs and bytes moved per device and
//! micro-batch; per layer: the order of compute and collectives forward and backward; per step:
//! the gradient reductions; per pipeline stage: the layers it runs. It is what
//! `symshard analyze -o` saves and what `symshard timeline FILE.json` re-times.

use crate::error::{Error, Result};
use crate::model::graph::Block;
use crate::model::Model;
use crate::parallel::analysis::{BlockAnalysis, OpAnalysis};
use crate::parallel::evaluate::{BlockNumbers, Evaluation};
use crate::parallel::{Analysis, Comm, Site};
use crate::rules::{CollectiveKind, FlopClass, Role};
use crate::strategy::{AxisKind, Knobs};
use crate::sym::{Bindings, Poly, Rational};
use num_traits::{One, ToPrimitive, Zero};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The format tag of saved plans.
pub const FORMAT: &str = "symshard-analysis/1";

/// Exact numbers as text (`"123"`, `"7/2"`) so that nothing is lost in JSON.
pub(crate) mod exact {
    use super::Rational;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(r: &Rational, s: S) -> Result<S::Ok, S::Error> {
        crate::sym::ser_rational(r, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Rational, D::Error> {
        let text = String::deserialize(d)?;
        let r: Rational = text
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("`{text}` is not an exact number")))?;
        Ok(r)
    }
}

pub use crate::machine::Collective;

/// The mesh axis of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// Tensor parallelism.
    Tp,
    /// Data parallelism.
    Dp,
    /// Expert parallelism (mixture-of-experts all-to-alls).
    Ep,
    /// The ranks holding the same experts (the gradients of expert weights under expert
    /// parallelism: [`crate::strategy::Mesh::expert_grad_axis`]).
    ExpertDp,
}

/// One collective of a layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanComm {
    /// Its kind.
    pub kind: Collective,
    /// The axis it runs on.
    pub axis: Axis,
    /// Bytes each rank sends on the wire, all calls together.
    #[serde(with = "exact")]
    pub bytes: Rational,
    /// Calls (each pays the latency).
    pub calls: u32,
    /// What it moves (operator or edge, and tensor).
    pub name: String,
}

/// One operator, per device and micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanOp {
    /// Operator name.
    pub name: String,
    /// Whether it is matmul-like (tensor cores) rather than elementwise or normalisation.
    pub matmul: bool,
    /// Whether selective recomputation recomputes it: the attention core under `core_attn`,
    /// or an operator of another module the model's `recompute_modules` name (the name is the
    /// saved format's, from when the attention core was all it recomputed).
    pub attention_core: bool,
    /// Whether it is a fused attention kernel (FlashAttention-style), timed by the table's
    /// attention efficiency.
    #[serde(default)]
    pub fused_attention: bool,
    /// Forward FLOPs.
    #[serde(with = "exact")]
    pub forward_flops: Rational,
    /// Backward FLOPs.
    #[serde(with = "exact")]
    pub backward_flops: Rational,
    /// Of `backward_flops`, the gradients of its parameters (its weight-gradient GEMMs), which
    /// ZB-H1 runs as a step of their own after the input gradient (zero in plans saved before
    /// it existed).
    #[serde(
        default = "no_bytes",
        with = "exact",
        skip_serializing_if = "Zero::is_zero"
    )]
    pub weight_grad_flops: Rational,
    /// Bytes the forward pass reads and writes (`OpRule::io_bytes` with the split indices
    /// divided by their axis sizes).
    #[serde(with = "exact")]
    pub forward_bytes: Rational,
    /// Bytes the backward pass reads and writes, derived from the rule: each gradient einsum
    /// reads the output gradient and its term's other inputs and writes its gradient; other
    /// rules read the output gradient, what they saved and their parameters.
    #[serde(with = "exact")]
    pub backward_bytes: Rational,
    /// Under context parallelism, an attention operator's keys and values on one rank: what
    /// each of the cp − 1 ring steps of its forward pass sends to the next rank (its backward
    /// steps send twice this: the keys and values and their gradients). Zero otherwise.
    #[serde(
        default = "no_bytes",
        with = "exact",
        skip_serializing_if = "Zero::is_zero"
    )]
    pub ring_bytes: Rational,
    /// The GEMMs it runs as: the forward one, then one per input gradient (absent for
    /// operators that are not two-operand contractions, and in plans saved before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemms: Vec<GemmShape>,
    /// Trained parameter elements it owns on one device (zero in plans saved before it
    /// existed): each micro-batch's backward adds their gradient to the fp32 gradient buffer.
    #[serde(
        default = "no_bytes",
        with = "exact",
        skip_serializing_if = "Zero::is_zero"
    )]
    pub params: Rational,
    /// It and the block's next operator are one linear layer as Megatron-LM builds it: the
    /// attention's query, key and value projections, written as separate operators, are one
    /// `ColumnParallelLinear` (`query_key_value` in megatron/model/transformer.py
    /// `ParallelAttention`, 3 × the projection size wide). Its backward runs one input-gradient
    /// GEMM for all of them, then one weight-gradient GEMM (megatron/mpu/layers.py,
    /// `LinearWithGradAccumulationAndAsyncCommunication.backward`), so the collectives that
    /// overlap either half overlap it for the whole group. False in plans saved before it
    /// existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fused_with_next: bool,
    /// Bytes its backward reads and writes in a kernel of its own for vector-parameter
    /// gradients (a bias's reduction over rows, layer normalisation's second pass over its input
    /// and output gradient; [`crate::rules::OpRule::param_grad_kernel_bytes`]), beside the
    /// kernels of `backward_bytes`. Zero in plans saved before it existed.
    #[serde(
        default = "no_bytes",
        with = "exact",
        skip_serializing_if = "Zero::is_zero"
    )]
    pub param_grad_bytes: Rational,
    /// Bytes of autograd's accumulation of gradients, run after its backward: where a tensor
    /// feeds several operators its gradients are summed (each extra one read with the running
    /// sum and the sum written, three times the tensor's bytes) once the last of them, this
    /// operator, has run its backward. Zero in plans saved before it existed.
    #[serde(
        default = "no_bytes",
        with = "exact",
        skip_serializing_if = "Zero::is_zero"
    )]
    pub fan_in_bytes: Rational,
    /// It runs as an FP8 GEMM (a linear layer of a repeated layer under
    /// [`crate::strategy::Precision::Fp8`]): at the table's FP8 peak, with the casts of its
    /// operands ([`crate::parallel::amount::Fp8Operands`]). False in plans saved before it
    /// existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8: bool,
    /// As an FP8 GEMM, it casts its input (the first linear layer of its block to read that
    /// tensor: one cast serves the q, k and v projections of one input).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_casts_input: bool,
    /// The share of its GEMM's weight operand one device holds: 1, or 1/ep for an expert GEMM
    /// under expert parallelism, whose shapes count the weights of all E experts where the
    /// device holds E/ep of them (what its FP8 weight copies and casts cover). 1 in plans saved
    /// before it existed.
    #[serde(default = "whole", with = "exact", skip_serializing_if = "is_whole")]
    pub weight_share: Rational,
    /// An expert GEMM (its rule's role is `expert-gemm`): ZeRO shards its weights and their
    /// optimizer state over the ranks holding the same experts, not over all replicas. False in
    /// plans saved before it existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expert: bool,
}

/// One GEMM on one device: `batch` products of a `rows` × `cols` output, summing `inner`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmShape {
    /// Independent products.
    #[serde(with = "exact")]
    pub batch: Rational,
    /// Output rows.
    #[serde(with = "exact")]
    pub rows: Rational,
    /// Output columns.
    #[serde(with = "exact")]
    pub cols: Rational,
    /// Summed extent.
    #[serde(with = "exact")]
    pub inner: Rational,
}

impl GemmShape {
    /// As floats, `[batch, rows, cols, inner]`.
    pub fn to_f64(&self) -> [f64; 4] {
        let f = |r: &Rational| r.to_f64().unwrap_or(f64::MAX);
        [f(&self.batch), f(&self.rows), f(&self.cols), f(&self.inner)]
    }
}

/// One event of a layer's pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Operator `op` computes.
    Compute(usize),
    /// A collective on the critical path.
    Collective(PlanComm),
    /// A collective issued here that the following operators do not wait for (the all-gather
    /// sequence parallelism repeats for a weight gradient overlaps the input gradient's work).
    Overlapped(PlanComm),
    /// A collective on an input gradient, launched as soon as the preceding matmul's input
    /// gradient is computed and overlapped with its weight-gradient GEMM; the following steps
    /// wait for it (Megatron-LM's asynchronous tensor-parallel all-reduce, and reduce-scatter
    /// under sequence parallelism, in the backward of its linear layers).
    AfterDgrad(PlanComm),
}

/// One block (a layer kind), per device and micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanBlock {
    /// Block name.
    pub name: String,
    /// Whether recomputation applies to it (a repeated layer).
    pub layer: bool,
    /// Operators in execution order.
    pub ops: Vec<PlanOp>,
    /// Forward events in order.
    pub forward: Vec<Step>,
    /// Backward events in order.
    pub backward: Vec<Step>,
    /// Per-step gradient reductions, with the operator whose backward makes them ready.
    pub grads: Vec<(usize, PlanComm)>,
    /// Bytes per device of the activation it hands on (a pipeline boundary).
    #[serde(with = "exact")]
    pub boundary_bytes: Rational,
    /// Parameter elements per device.
    #[serde(with = "exact")]
    pub params: Rational,
}

/// Everything a timeline needs, exact and machine-independent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingPlan {
    /// Format tag ([`FORMAT`]).
    pub format: String,
    /// Model name.
    pub model: String,
    /// Symbol values of the whole step (batch `B`, sequence `S`, …).
    pub symbols: std::collections::BTreeMap<String, String>,
    /// The strategy.
    pub knobs: Knobs,
    /// Devices per node when the strategy fixed it; otherwise the calibration's is used.
    pub gpus_per_node: Option<u64>,
    /// Samples per step.
    #[serde(with = "exact")]
    pub samples: Rational,
    /// Tokens per step (0 when the model has no sequence length `S`).
    #[serde(with = "exact")]
    pub tokens: Rational,
    /// Model FLOPs per step, the whole model, forward and backward without recomputation.
    #[serde(with = "exact")]
    pub model_flops: Rational,
    /// Blocks.
    pub blocks: Vec<PlanBlock>,
    /// Layer items in order: the block each runs.
    pub items: Vec<usize>,
    /// Items per pipeline stage (virtual stages: `pp × chunks` of them when interleaved).
    pub stages: Vec<usize>,
    /// Bytes of memory the fullest device needs (0 when unknown, in analyses saved before it
    /// was recorded): each machine's capacity is checked against it.
    #[serde(default = "unknown_memory", with = "exact")]
    pub memory_per_device: Rational,
    /// The symbol of the global batch (the model's `batch` role); `None` in analyses saved
    /// before it was recorded, and for a model without one.
    #[serde(default)]
    pub batch_symbol: Option<String>,
    /// The symbol of the sequence length (the model's `sequence` role); `None` in analyses
    /// saved before it was recorded, and for a model without one.
    #[serde(default)]
    pub sequence_symbol: Option<String>,
    /// The model's settings that change how its operators run ([`Model::settings`]: attention,
    /// loss, training metrics, dropout); empty in analyses saved before they were recorded.
    ///
    /// [`Model::settings`]: crate::model::Model::settings
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// How the model routes its tokens to experts, where it has experts and a known routing:
    /// what node-limited dispatch ([`Knobs::node_dispatch`]) counts the nodes a token reaches
    /// with on the mesh the plan is timed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::parallel::moe::Routing>,
}

/// [`crate::model::Model::settings`] keyed by name.
pub fn setting_map(model: &crate::model::Model) -> BTreeMap<String, String> {
    model
        .settings()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn unknown_memory() -> Rational {
    Rational::zero()
}

fn whole() -> Rational {
    Rational::one()
}

fn is_whole(r: &Rational) -> bool {
    r.is_one()
}

fn no_bytes() -> Rational {
    Rational::zero()
}

fn axis_of(a: AxisKind) -> Axis {
    if a == AxisKind::Dp {
        Axis::Dp
    } else {
        Axis::Tp
    }
}

fn plan_comm(c: &Comm, bytes: &Rational, name: String) -> PlanComm {
    PlanComm {
        kind: Collective::of(c.kind),
        axis: axis_of(c.axis),
        bytes: bytes.clone(),
        calls: c.calls.max(1),
        name,
    }
}

/// The blocks of a strategy: [`plan_blocks`] with expert parallelism applied. Under `ep > 1`
/// every mixture-of-experts block gains its four all-to-alls per micro-batch on the expert
/// stream — dispatch after the `moe_dispatch` operator and combine before the `moe_combine`
/// operator in the forward pass, their gradients in reverse in the backward pass, each moving
/// (ep − 1)/ep of the device's expert slots (nccl-tests doc/PERFORMANCE.md) — its expert
/// weights' gradients are reduced only among the dp·cp/ep ranks holding the same experts (on
/// [`Axis::ExpertDp`]), and a device holds 1/ep of the expert weights.
pub fn strategy_blocks(
    model: &Model,
    analysis: &Analysis,
    numbers: &[BlockNumbers],
    b: &Bindings,
    knobs: &Knobs,
) -> Result<Vec<PlanBlock>> {
    let mut blocks = plan_blocks(model, analysis, numbers, b)?;
    if knobs.precision.is_fp8() {
        for (block, ba) in blocks.iter_mut().zip(&analysis.blocks) {
            for (op, oa) in block.ops.iter_mut().zip(&ba.ops) {
                op.fp8 = block.layer && oa.linear_input.is_some();
                op.fp8_casts_input = op.fp8 && oa.fp8_casts_input;
            }
        }
    }
    if knobs.ep <= 1 {
        return Ok(blocks);
    }
    let r = |v: u64| Rational::from_integer(v.into());
    let ep = r(knobs.ep);
    for ((block, ba), n) in blocks.iter_mut().zip(&analysis.blocks).zip(numbers) {
        let find = |role: Role| ba.ops.iter().position(|o| o.role == Some(role));
        let experts: Vec<usize> = (0..ba.ops.len())
            .filter(|&k| ba.ops[k].role == Some(Role::ExpertGemm))
            .collect();
        if let (Some(dispatch), Some(combine)) = (find(Role::MoeDispatch), find(Role::MoeCombine)) {
            // The flat all-to-all's bytes, which depend on no machine: the timeline moves them
            // node by node where the strategy says so, on the mesh it times them on
            // ([`TimingPlan::routing`]).
            let flat = crate::parallel::moe::wire_share(knobs, None, 1);
            let [dispatch_wire, combine_wire, combine_grad_wire, dispatch_grad_wire] =
                crate::parallel::moe::all_to_all_wire(n.slot_bytes.clone(), knobs, &flat);
            let a2a = |what: &str, bytes: &Rational| PlanComm {
                kind: Collective::AllToAll,
                axis: Axis::Ep,
                bytes: bytes.clone(),
                calls: 1,
                name: format!("{} {what}", ba.name),
            };
            let at = |steps: &[Step], k: usize| {
                steps
                    .iter()
                    .position(|s| matches!(s, Step::Compute(j) if *j == k))
            };
            let missing =
                || Error::Internal(format!("block `{}`: no dispatch or combine step", ba.name));
            let i = at(&block.forward, dispatch).ok_or_else(missing)?;
            block
                .forward
                .insert(i + 1, Step::Collective(a2a("dispatch", &dispatch_wire)));
            let i = at(&block.forward, combine).ok_or_else(missing)?;
            block
                .forward
                .insert(i, Step::Collective(a2a("combine", &combine_wire)));
            let i = at(&block.backward, combine).ok_or_else(missing)?;
            block.backward.insert(
                i + 1,
                Step::Collective(a2a("combine gradient", &combine_grad_wire)),
            );
            let i = at(&block.backward, dispatch).ok_or_else(missing)?;
            block.backward.insert(
                i,
                Step::Collective(a2a("dispatch gradient", &dispatch_grad_wire)),
            );
        }
        for (k, c) in block.grads.iter_mut() {
            if c.axis == Axis::Dp && experts.contains(k) {
                c.bytes = crate::parallel::moe::expert_grad_allreduce(
                    &c.bytes, knobs.dp, knobs.cp, knobs.ep,
                )?;
                c.axis = Axis::ExpertDp;
            }
        }
        block.params = &block.params - &n.expert_params + &n.expert_params / &ep;
        // A device reads and writes the weights of its E/ep experts only: the rule's bytes
        // (its forward reads the weight, its backward reads it and writes its gradient) count
        // every expert's. Its FLOPs stay: E/ep experts, each with ep devices' slots.
        let dtype = r(u64::from(model.dtype_bytes));
        let share = crate::parallel::moe::held_share(Some(Role::ExpertGemm), knobs.ep);
        for &k in &experts {
            let op = &mut block.ops[k];
            let elsewhere = &op.params * &dtype * (Rational::one() - &share);
            op.forward_bytes = &op.forward_bytes - &elsewhere;
            op.backward_bytes = &op.backward_bytes - &elsewhere * r(2);
            op.params = &op.params * &share;
            op.weight_share = share.clone();
        }
    }
    Ok(blocks)
}

/// The blocks of a plan: per block, its operators' FLOPs and bytes per device and micro-batch
/// and its forward, backward and gradient steps, under the analysis' layout at the micro-batch
/// bindings `b` (everything of a plan that does not depend on the pipeline).
pub fn plan_blocks(
    model: &Model,
    analysis: &Analysis,
    numbers: &[BlockNumbers],
    b: &Bindings,
) -> Result<Vec<PlanBlock>> {
    let context_parallel = b
        .get(crate::parallel::analysis::CP)
        .is_some_and(|c| *c > Rational::one());
    model
        .blocks
        .iter()
        .zip(&analysis.blocks)
        .zip(numbers)
        .enumerate()
        .map(|(index, ((blk, ba), n))| {
            plan_block(index, (blk, ba, n), numbers, b, context_parallel)
        })
        .collect()
}

/// The execution index of the operator of block `ba` named `name`.
fn op_position(ba: &BlockAnalysis, name: &str) -> Option<usize> {
    ba.ops.iter().position(|o| o.name == name)
}

/// `p` at the bindings `b`.
fn eval(p: &Poly, b: &Bindings) -> Result<Rational> {
    p.eval(b)
        .map_err(|e| Error::Usage(format!("cannot evaluate: {e}")))
}

/// Block `index` of a plan ([`plan_blocks`]): the model's block `blk`, its analysis `ba` and
/// its numbers `n`.
fn plan_block(
    index: usize,
    (blk, ba, n): (&Block, &BlockAnalysis, &BlockNumbers),
    numbers: &[BlockNumbers],
    b: &Bindings,
    context_parallel: bool,
) -> Result<PlanBlock> {
    let ev = |p: &Poly| eval(p, b);
    let mut sites = Sites::new(ba.ops.len());
    let mut ops = Vec::new();
    let mut grads = Vec::new();
    for (k, (_, op)) in blk.ops().zip(&ba.ops).enumerate() {
        ops.push(plan_op(op, b, context_parallel)?);
        for c in &op.comm {
            let pc = plan_comm(c, &ev(&c.wire_bytes)?, format!("{} {}", c.op, c.tensor));
            if matches!(c.site, Site::Backward { .. }) {
                sites.after_bwd[k].push(pc);
            } else {
                sites.after[k].push(pc);
            }
        }
        for c in &op.grad_comm {
            let pc = plan_comm(c, &ev(&c.wire_bytes)?, format!("{} {}", c.op, c.tensor));
            grads.push((k, pc));
        }
    }
    sites.place_edges(ba, b)?;
    let grouped = fused_projections(index, blk, ba);
    for &k in &grouped {
        ops[k].fused_with_next = true;
    }
    // A sum of activations hands its output gradient to every input: no backward kernel.
    for (k, node) in blk.ops().enumerate() {
        if node.rule.passes_gradient_through() {
            ops[k].backward_flops = Rational::zero();
            ops[k].weight_grad_flops = Rational::zero();
            ops[k].backward_bytes = Rational::zero();
        }
    }
    for (k, bytes) in gradient_sums(index, blk, numbers, &grouped, |i| {
        ev(&ba.ops[i].out_local_bytes)
    })? {
        ops[k].fan_in_bytes += bytes;
    }
    scattered_bias_gradients(ba, b, &mut ops)?;
    for k in fused_elementwise(index, blk, ba) {
        if sites.none_between(k) {
            let twice = ev(&ba.ops[k].out_local_bytes)? * Rational::from_integer(2.into());
            let (head, tail) = ops.split_at_mut(k + 1);
            fuse_into(&mut head[k], &mut tail[0], &twice);
        }
    }
    let forward = sites.forward(ops.len());
    let backward = sites.backward(&ops, ba);
    Ok(PlanBlock {
        name: ba.name.clone(),
        layer: blk.repeat != Poly::one(),
        ops,
        forward,
        backward,
        grads,
        boundary_bytes: n.exact.boundary.clone(),
        params: n.exact.params.clone(),
    })
}

/// Operator `op` of a plan's block at the bindings `b`, before the block's fusions and
/// gradient sums.
fn plan_op(op: &OpAnalysis, b: &Bindings, context_parallel: bool) -> Result<PlanOp> {
    let ev = |p: &Poly| eval(p, b);
    let fb = ev(&op.io_bytes)? + ev(&op.loss_pass_bytes[0])?;
    Ok(PlanOp {
        name: op.name.clone(),
        matmul: op.class == FlopClass::Matmul,
        attention_core: op.recomputed,
        fused_attention: op.fused_attention,
        forward_flops: ev(&op.forward)?,
        backward_flops: ev(&op.backward)? + ev(&op.recompute)?,
        weight_grad_flops: ev(&op.weight_grad)?,
        backward_bytes: ev(&op.backward_io_bytes)? + ev(&op.loss_pass_bytes[1])?
            - ev(&op.param_grad_bytes[1])?,
        param_grad_bytes: ev(&op.param_grad_bytes[0])?,
        forward_bytes: fb,
        ring_bytes: if context_parallel {
            ev(&op.ring_bytes)?
        } else {
            Rational::zero()
        },
        gemms: op
            .gemms
            .iter()
            .map(|g| {
                Ok(GemmShape {
                    batch: ev(&g.batch)?,
                    rows: ev(&g.rows)?,
                    cols: ev(&g.cols)?,
                    inner: ev(&g.inner)?,
                })
            })
            .collect::<Result<_>>()?,
        params: ev(&op.params)?,
        fused_with_next: false,
        fan_in_bytes: Rational::zero(),
        fp8: false,
        fp8_casts_input: false,
        weight_share: Rational::one(),
        expert: op.role == Some(Role::ExpertGemm),
    })
}

/// Under sequence parallelism a row-parallel layer's output is reduce-scattered over the
/// sequence, and Megatron-LM adds its bias after that (`skip_bias_add`, then the
/// bias-dropout-add on the sequence shard): the bias gradient reduces 1/tp of the rows.
fn scattered_bias_gradients(ba: &BlockAnalysis, b: &Bindings, ops: &mut [PlanOp]) -> Result<()> {
    let tp = b
        .get(crate::parallel::analysis::TP)
        .cloned()
        .unwrap_or_else(Rational::one);
    if tp <= Rational::one() {
        return Ok(());
    }
    for c in &ba.edges {
        let Site::Edge { producer, .. } = &c.site else {
            continue;
        };
        let scattered = c.axis == AxisKind::Tp && c.kind == CollectiveKind::ReduceScatter;
        let Some(k) = op_position(ba, producer).filter(|_| scattered) else {
            continue;
        };
        let [own, shared] = &ba.ops[k].param_grad_bytes;
        // Only a bias (an einsum's one-parameter term), whose kernel reads dy alone.
        if ba.ops[k].class == FlopClass::Matmul && own == shared && !own.is_zero() {
            let dy = eval(&ba.ops[k].out_local_bytes, b)?;
            let cut = &dy - &dy / &tp;
            ops[k].param_grad_bytes = &ops[k].param_grad_bytes - &cut;
        }
    }
    Ok(())
}

/// A block's collectives by where its passes run them, per operator (by execution index).
struct Sites {
    /// Before the operator's forward: edge conversions into it.
    before_fwd: Vec<Vec<PlanComm>>,
    /// After the operator's forward: its own collectives.
    after: Vec<Vec<PlanComm>>,
    /// Before the operator's backward: conversions of the gradient it makes.
    before_bwd: Vec<Vec<PlanComm>>,
    /// Beside the operator's backward: what sequence parallelism gathers again for it.
    overlapped: Vec<Vec<PlanComm>>,
    /// After the operator's backward: its own backward collectives.
    after_bwd: Vec<Vec<PlanComm>>,
    /// At the end of the block's backward: conversions whose operator lives elsewhere.
    tail_bwd: Vec<PlanComm>,
}

impl Sites {
    fn new(ops: usize) -> Sites {
        Sites {
            before_fwd: vec![Vec::new(); ops],
            after: vec![Vec::new(); ops],
            before_bwd: vec![Vec::new(); ops],
            overlapped: vec![Vec::new(); ops],
            after_bwd: vec![Vec::new(); ops],
            tail_bwd: Vec::new(),
        }
    }

    /// Places the block's edge conversions: forward ones before their consumer, backward ones
    /// before the producer's backward (or at the end of the block's backward when it lives
    /// elsewhere).
    fn place_edges(&mut self, ba: &BlockAnalysis, b: &Bindings) -> Result<()> {
        for c in &ba.edges {
            let pc = plan_comm(c, &eval(&c.wire_bytes, b)?, c.op.clone());
            match &c.site {
                // Gathered again for the consumer's backward.
                Site::Regather { consumer, .. } => match op_position(ba, consumer) {
                    Some(k) => self.overlapped[k].push(pc),
                    None => self.tail_bwd.push(pc),
                },
                Site::Gradient { producer } => match op_position(ba, producer) {
                    Some(k) => self.before_bwd[k].push(pc),
                    None => self.tail_bwd.push(pc),
                },
                Site::Edge { consumer, .. } => match op_position(ba, consumer) {
                    Some(k) => self.before_fwd[k].push(pc),
                    None => self.before_fwd[0].push(pc),
                },
                Site::Forward { op } | Site::Backward { op } => {
                    return Err(Error::Check(format!(
                        "block `{}`: operator `{op}`'s own collective listed among its edges",
                        ba.name
                    )))
                }
            }
        }
        Ok(())
    }

    /// Whether no collective runs between operator `k` and operator `k + 1`, in either pass.
    fn none_between(&self, k: usize) -> bool {
        let alone = |v: &[Vec<PlanComm>], i: usize| v[i].is_empty();
        alone(&self.after, k)
            && alone(&self.before_fwd, k + 1)
            && alone(&self.after_bwd, k + 1)
            && alone(&self.before_bwd, k)
            && alone(&self.overlapped, k)
    }

    /// The forward steps of a block of `ops` operators, taking its forward collectives.
    fn forward(&mut self, ops: usize) -> Vec<Step> {
        let mut forward = Vec::new();
        for k in 0..ops {
            forward.extend(self.before_fwd[k].drain(..).map(Step::Collective));
            forward.push(Step::Compute(k));
            forward.extend(self.after[k].drain(..).map(Step::Collective));
        }
        forward
    }

    /// The backward steps of a block of operators `ops`, taking its backward collectives.
    fn backward(&mut self, ops: &[PlanOp], ba: &BlockAnalysis) -> Vec<Step> {
        let mut backward: Vec<Step> = Vec::new();
        for k in (0..ops.len()).rev() {
            // Right after a weight-bearing matmul's backward, its input-gradient collectives
            // overlap the weight gradient.
            let after_matmul = matches!(backward.last(),
                Some(Step::Compute(j)) if ops[*j].matmul && !ops[*j].fused_attention
                    && ba.ops[*j].params != Poly::zero());
            for c in self.before_bwd[k].drain(..) {
                let overlappable = after_matmul
                    && c.axis == Axis::Tp
                    && matches!(c.kind, Collective::AllReduce | Collective::ReduceScatter);
                backward.push(if overlappable {
                    Step::AfterDgrad(c)
                } else {
                    Step::Collective(c)
                });
            }
            backward.extend(self.overlapped[k].drain(..).map(Step::Overlapped));
            backward.push(Step::Compute(k));
            backward.extend(self.after_bwd[k].drain(..).map(Step::Collective));
        }
        backward.extend(self.tail_bwd.drain(..).map(Step::Collective));
        backward
    }
}

/// The readers of each operator's output within block `index`, by execution index (an operator
/// that reads one output twice is listed twice).
fn block_consumers(index: usize, blk: &Block) -> Vec<Vec<usize>> {
    use crate::model::graph::Producer;
    let at: std::collections::HashMap<_, usize> =
        blk.order.iter().enumerate().map(|(i, v)| (*v, i)).collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); blk.order.len()];
    for (j, node) in blk.ops().enumerate() {
        for (_, p) in &node.inputs {
            if let Producer::Op { block, node: v } = p {
                if let (true, Some(&i)) = (*block == index, at.get(v)) {
                    consumers[i].push(j);
                }
            }
        }
    }
    consumers
}

/// Where autograd sums gradients in a block's backward: for every activation that feeds `c > 1`
/// operator inputs of the block (the projections Megatron-LM runs as one layer counting once),
/// `c − 1` sums of its gradient, each reading two and writing one (three times its bytes per
/// device), charged to the consumer that runs first forward and so last backward. `local(i)`
/// gives the bytes per device of operator `i`'s output; an input from another block has the
/// size that block hands on (the layer's own input that of the block before it).
fn gradient_sums(
    index: usize,
    blk: &Block,
    numbers: &[BlockNumbers],
    grouped: &[usize],
    local: impl Fn(usize) -> Result<Rational>,
) -> Result<Vec<(usize, Rational)>> {
    use crate::model::graph::Producer;
    use std::collections::BTreeMap;
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Source {
        Local(usize),
        Block(usize),
    }
    let mut readers: BTreeMap<Source, Vec<usize>> = block_consumers(index, blk)
        .into_iter()
        .enumerate()
        .map(|(i, list)| (Source::Local(i), list))
        .collect();
    // Tensors from outside the block: another block's output, or the block's own input (what
    // the block before it hands on).
    for (j, node) in blk.ops().enumerate() {
        for (_, p) in &node.inputs {
            let source = match p {
                Producer::Op { block, .. } if *block != index => Source::Block(*block),
                Producer::BlockInput if index > 0 => Source::Block(index - 1),
                _ => continue,
            };
            readers.entry(source).or_default().push(j);
        }
    }
    let three = Rational::from_integer(3.into());
    let mut out = Vec::new();
    for (source, all) in readers {
        // The later of a grouped pair of projections reads as the earlier (one layer).
        let list: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&j| !(j > 0 && grouped.contains(&(j - 1)) && all.contains(&(j - 1))))
            .collect();
        if list.len() < 2 {
            continue;
        }
        let bytes = match source {
            Source::Local(i) => local(i)?,
            Source::Block(b) => match numbers.get(b) {
                Some(n) => n.exact.boundary.clone(),
                None => continue,
            },
        };
        let sums = Rational::from_integer(((list.len() - 1) as i64).into());
        let first = *list.iter().min().unwrap_or(&0);
        out.push((first, bytes * &three * sums));
    }
    Ok(out)
}

/// Operator `first` run inside `second`'s kernel: `second` takes its FLOPs and bytes, less the
/// intermediate tensor (`twice` its bytes: written by `first`, read by `second`, and the same for
/// its gradient backward), and `first` launches no kernel.
fn fuse_into(first: &mut PlanOp, second: &mut PlanOp, twice: &Rational) {
    let merged = |a: &Rational, b: &Rational| a + b - twice;
    second.forward_flops += &first.forward_flops;
    second.backward_flops += &first.backward_flops;
    second.weight_grad_flops += &first.weight_grad_flops;
    second.forward_bytes = merged(&first.forward_bytes, &second.forward_bytes);
    // A second operator that passes its gradient through writes no intermediate gradient.
    second.backward_bytes = if second.backward_bytes.is_zero() {
        first.backward_bytes.clone()
    } else {
        merged(&first.backward_bytes, &second.backward_bytes)
    };
    second.param_grad_bytes += &first.param_grad_bytes;
    second.fan_in_bytes += &first.fan_in_bytes;
    first.fan_in_bytes = Rational::zero();
    first.forward_flops = Rational::zero();
    first.backward_flops = Rational::zero();
    first.weight_grad_flops = Rational::zero();
    first.forward_bytes = Rational::zero();
    first.backward_bytes = Rational::zero();
    first.param_grad_bytes = Rational::zero();
}

/// The operators `k` of a block that run inside the kernel of operator `k + 1`, its only
/// consumer, as Megatron-LM fuses them: a `scale` feeding a `softmax` (the attention scores'
/// scaling, which `FusedScaleMaskSoftmax` applies inside the softmax kernel, the mask with it;
/// megatron/model/fused_softmax.py) and a `dropout` feeding an `add` (the residual connection's
/// `bias_dropout_add_fused_train`, one fused kernel; megatron/model/transformer.py). The
/// caller also requires that no collective runs between the two.
fn fused_elementwise(index: usize, blk: &Block, ba: &BlockAnalysis) -> Vec<usize> {
    const PAIRS: [(&str, &str); 2] = [("scale", "softmax"), ("dropout", "add")];
    let consumers = block_consumers(index, blk);
    let n = consumers.len();
    // An operator whose output leaves the block (a later block's input) is not fused away.
    (0..n.saturating_sub(1))
        .filter(|&k| {
            PAIRS.contains(&(ba.ops[k].rule.as_str(), ba.ops[k + 1].rule.as_str()))
                && consumers[k] == [k + 1]
                && blk.output != Some(blk.order[k])
        })
        .collect()
}

/// The operators `k` of a block that Megatron-LM runs as one linear layer with operator
/// `k + 1`: neighbours in execution order applying the same weight-bearing matmul rule to the
/// same input, split by tensor parallelism on the same index, whose outputs each reach the
/// attention (an attention-core or fused-attention operator, directly or through one operator
/// in between, as rotary embeddings sit between the projections and the scores). These are the
/// query, key and value projections, which Megatron-LM's `ParallelAttention` computes with its
/// one `query_key_value` `ColumnParallelLinear` (megatron/model/transformer.py).
fn fused_projections(index: usize, blk: &Block, ba: &BlockAnalysis) -> Vec<usize> {
    use crate::model::graph::Producer;
    let nodes: Vec<_> = blk.ops().collect();
    let n = nodes.len();
    let consumers = block_consumers(index, blk);
    let attention = |j: usize| ba.ops[j].attention_core || ba.ops[j].fused_attention;
    let feeds_attention = |i: usize| {
        consumers[i]
            .iter()
            .any(|&j| attention(j) || consumers[j].iter().any(|&l| attention(l)))
    };
    let activations = |i: usize| -> Vec<&Producer> {
        nodes[i]
            .inputs
            .iter()
            .map(|(_, p)| p)
            .filter(|p| !matches!(p, Producer::Param | Producer::Tied(_)))
            .collect()
    };
    let projection = |i: usize| {
        let o = &ba.ops[i];
        o.class == FlopClass::Matmul
            && !o.fused_attention
            && o.params != Poly::zero()
            && o.plan.tp.is_some()
            && feeds_attention(i)
    };
    (0..n.saturating_sub(1))
        .filter(|&k| {
            projection(k)
                && projection(k + 1)
                && ba.ops[k].rule == ba.ops[k + 1].rule
                && ba.ops[k].plan.tp == ba.ops[k + 1].plan.tp
                && activations(k) == activations(k + 1)
        })
        .collect()
}

/// Builds a plan of a strategy from its analysis and evaluation. `values` are the model's
/// symbol values for the whole step, `b` those of one micro-batch.
#[allow(clippy::too_many_arguments)]
pub fn build_plan(
    model: &Model,
    analysis: &Analysis,
    numbers: &[BlockNumbers],
    evaluation: &Evaluation,
    values: &Bindings,
    b: &Bindings,
    knobs: &Knobs,
    gpus_per_node: Option<u64>,
) -> Result<TimingPlan> {
    let blocks = strategy_blocks(model, analysis, numbers, b, knobs)?;
    let mut items = Vec::new();
    for (bi, n) in numbers.iter().enumerate() {
        items.extend(std::iter::repeat_n(bi, n.repeat as usize));
    }
    let v = knobs.virtual_chunks();
    let stages: Vec<usize> = if v > 1 {
        let repeats: Vec<u64> = numbers.iter().map(|n| n.repeat).collect();
        let layer: Vec<bool> = blocks.iter().map(|b| b.layer).collect();
        let chunks = knobs.pp * v;
        crate::parallel::evaluate::interleaved_chunks(
            &repeats,
            &layer,
            chunks,
            knobs.pipeline_split,
        )
        .ok_or_else(|| {
            let layers: u64 = repeats
                .iter()
                .zip(&layer)
                .filter(|(_, l)| **l)
                .map(|(r, _)| r)
                .sum();
            Error::from(knobs.interleaved_layers(layers))
        })?
        .iter()
        .map(|c| c.iter().map(|(_, n)| *n as usize).sum())
        .collect()
    } else {
        evaluation
            .stages
            .iter()
            .map(|s| s.items.iter().map(|(_, c)| *c as usize).sum())
            .collect()
    };
    let get = |s: &str| values.get(s).cloned();
    let samples = model
        .batch_value(values)
        .cloned()
        .unwrap_or_else(Rational::one);
    // Tokens only where the model has a sequence (its declared or inferred `sequence` role;
    // vision families have none, their `S` being an image side).
    let tokens = match model.roles.sequence.as_deref().and_then(get) {
        Some(s) => &samples * s,
        None => Rational::zero(),
    };
    let plan = TimingPlan {
        format: FORMAT.into(),
        model: model.name.clone(),
        symbols: values
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        knobs: knobs.clone(),
        gpus_per_node,
        samples,
        tokens,
        model_flops: evaluation.model_flops.clone(),
        memory_per_device: evaluation.memory.total.clone(),
        batch_symbol: model.batch.clone(),
        sequence_symbol: model.roles.sequence.clone(),
        settings: setting_map(model),
        routing: crate::parallel::evaluate::routing_of(numbers).cloned(),
        blocks,
        items,
        stages,
    };
    // The strategy and the model were checked before: a plan built from them that fails its
    // own check is a bug, not bad input (a plan read from a file is checked in `load`).
    plan.check()
        .map_err(|m| Error::Internal(format!("the plan built does not hold: {m}")))?;
    Ok(plan)
}

impl PlanOp {
    /// The kind of kernel it runs as.
    pub fn class(&self) -> crate::machine::KernelClass {
        use crate::machine::KernelClass;
        match KernelClass::of(self.fused_attention, self.matmul) {
            KernelClass::Matmul if self.fp8 => KernelClass::Fp8Matmul,
            c => c,
        }
    }

    /// Its FP8 operands, where it is an FP8 GEMM.
    pub fn fp8_operands(&self) -> Option<crate::parallel::amount::Fp8Operands<Rational>> {
        let g = self.gemms.first().filter(|_| self.fp8)?;
        let mut ops = crate::parallel::amount::Fp8Operands::of([
            g.batch.clone(),
            g.rows.clone(),
            g.cols.clone(),
            g.inner.clone(),
        ]);
        ops.weight *= &self.weight_share;
        Some(ops)
    }

    /// Kernels one pass launches ([`crate::machine::KernelClass::kernels`]).
    pub fn kernels(&self, backward: bool) -> u32 {
        self.class().kernels(backward)
    }
}

impl TimingPlan {
    /// Checks the plan's consistency (a saved file may have been edited).
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "unknown analysis format `{}` (expected `{FORMAT}`)",
                self.format
            ));
        }
        crate::strategy::check_knobs(&self.knobs).map_err(|e| e.to_string())?;
        if let Some(g) = self.gpus_per_node {
            crate::strategy::check_gpus_per_node(g).map_err(|e| e.to_string())?;
        }
        let v = self.knobs.virtual_chunks();
        if self.stages.len() as u64 != self.knobs.pp * v {
            return Err(format!(
                "{} stages listed for pp × chunks = {}",
                self.stages.len(),
                self.knobs.pp * v
            ));
        }
        if self.stages.contains(&0) {
            return Err("a pipeline stage has no layers".into());
        }
        if self.stages.iter().sum::<usize>() != self.items.len() {
            return Err("the stages do not cover the layer items".into());
        }
        if self.knobs.schedule == crate::strategy::Schedule::Interleaved
            && v > 1
            && !self.knobs.microbatches.is_multiple_of(self.knobs.pp)
        {
            return Err(format!(
                "interleaved-1f1b needs the micro-batches ({}) to be a multiple of pp ({})",
                self.knobs.microbatches, self.knobs.pp
            ));
        }
        for &i in &self.items {
            if i >= self.blocks.len() {
                return Err(format!("layer item names block {i}, which does not exist"));
            }
        }
        for b in &self.blocks {
            let n = b.ops.len();
            let bad_step = |s: &Step| matches!(s, Step::Compute(k) if *k >= n);
            if b.forward.iter().chain(&b.backward).any(bad_step) || b.grads.iter().any(|g| g.0 >= n)
            {
                return Err(format!("block `{}` names an operator it lacks", b.name));
            }
            let negative = b.ops.iter().any(|o| {
                [
                    &o.forward_flops,
                    &o.backward_flops,
                    &o.weight_grad_flops,
                    &o.forward_bytes,
                    &o.backward_bytes,
                    &o.ring_bytes,
                ]
                .iter()
                .any(|v| v < &&Rational::zero())
            });
            if negative || b.boundary_bytes < Rational::zero() {
                return Err(format!("block `{}` has a negative amount", b.name));
            }
            if let Some(o) = b
                .ops
                .iter()
                .find(|o| o.weight_grad_flops > o.backward_flops)
            {
                return Err(format!(
                    "operator `{}` of block `{}`: `weight_grad_flops` exceeds `backward_flops`, of which it is a part",
                    o.name, b.name
                ));
            }
        }
        let ring = self
            .blocks
            .iter()
            .any(|b| b.ops.iter().any(|o| !o.ring_bytes.is_zero()));
        if ring && self.knobs.cp <= 1 {
            return Err("ring bytes are listed, but cp = 1".into());
        }
        if self.samples.to_f64().is_none_or(|s| s <= 0.0) {
            return Err("`samples` must be positive".into());
        }
        Ok(())
    }

    /// Reads a plan saved by `symshard analyze -o`.
    pub fn load(path: &Path) -> Result<TimingPlan> {
        let text = crate::diag::read_text(path)?;
        let plan: TimingPlan = serde_json::from_str(&text)
            .map_err(|e| Error::at(path, e.line(), e.column(), e.to_string()))?;
        plan.check().map_err(|m| Error::at(path, 1, 1, m))?;
        Ok(plan)
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}
