//! The symbolic analysis of a model under a layout: every operator's per-device compute, saved
//! bytes, parameters and collectives, and the redistribution each edge needs — formulas in the
//! model's symbols and the axis sizes `p_dp` and `p_tp`. Done once per layout; a strategy only
//! evaluates it.

use super::layout::{plan, Layout, OpPlan, Place};
use crate::model::{Model, OpNode, Producer};
use crate::rules::law::CollectiveKind;
use crate::rules::rule::tensor_bytes;
use crate::rules::split::{derive, Placement, SplitEntry};
use crate::rules::{FlopClass, Role, Tensor};
use crate::strategy::AxisKind;
use crate::sym::{Poly, SymError};
use petgraph::graph::NodeIndex;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The data-parallel axis size symbol.
pub const DP: &str = "p_dp";
/// The tensor-parallel axis size symbol.
pub const TP: &str = "p_tp";
/// The context-parallel axis size symbol (only in analyses made context-parallel by
/// [`Analysis::context_parallel`]).
pub const CP: &str = "p_cp";
/// The axes in placement order.
pub const AXES: [AxisKind; 2] = [AxisKind::Dp, AxisKind::Tp];

/// Where a collective runs: the pass and the operator (or edge) it belongs to. The timeline
/// places collectives by this, never by their display names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "at", rename_all = "kebab-case")]
pub enum Site {
    /// In the forward pass of operator `op`.
    Forward {
        /// The operator.
        op: String,
    },
    /// In the backward pass of operator `op`.
    Backward {
        /// The operator.
        op: String,
    },
    /// On the edge from `producer` to `consumer`, before the consumer's forward.
    Edge {
        /// The operator whose output moves.
        producer: String,
        /// The operator that reads it.
        consumer: String,
    },
    /// `producer`'s output gathered again for `consumer`'s backward (sequence parallelism).
    Regather {
        /// The operator whose output moves.
        producer: String,
        /// The operator whose backward reads it.
        consumer: String,
    },
    /// The gradient of `producer`'s output, converted before `producer`'s backward.
    Gradient {
        /// The operator whose output's gradient moves.
        producer: String,
    },
}

impl Site {
    /// Whether it runs in the forward pass (an operator's forward, or an edge before its
    /// consumer's): what full recomputation runs again before the backward.
    pub fn in_forward(&self) -> bool {
        matches!(self, Site::Forward { .. } | Site::Edge { .. })
    }
}

/// A collective of one operator or edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comm {
    /// What it is.
    pub kind: CollectiveKind,
    /// The mesh axis it runs on.
    pub axis: AxisKind,
    /// The operator (or edge `producer→consumer`) it belongs to.
    pub op: String,
    /// The tensor it moves.
    pub tensor: String,
    /// Bytes each rank sends on the wire, all calls of one (micro)batch together.
    pub wire_bytes: Poly,
    /// Calls per (micro)batch.
    pub calls: u32,
    /// Why it is needed.
    pub reason: String,
    /// Where it runs.
    pub site: Site,
}

/// One GEMM's sizes on one device, as elements: `batch` products of a `rows` × `cols` output
/// each, summing over `inner`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmDims {
    /// Independent products.
    pub batch: Poly,
    /// Output rows.
    pub rows: Poly,
    /// Output columns.
    pub cols: Poly,
    /// Summed extent.
    pub inner: Poly,
}

impl GemmDims {
    /// The same sizes through `f`.
    pub fn map<E>(&self, f: impl Fn(&Poly) -> Result<Poly, E>) -> Result<GemmDims, E> {
        Ok(GemmDims {
            batch: f(&self.batch)?,
            rows: f(&self.rows)?,
            cols: f(&self.cols)?,
            inner: f(&self.inner)?,
        })
    }
}

/// One operator, analysed: its name and the collectives that carry it, and its formulas
/// ([`OpFormulas`], read through `Deref`), shared by the operators of one kind (a graph of
/// thousands of identical operators holds one copy of them per kind).
#[derive(Debug, Clone)]
pub struct OpAnalysis {
    /// Operator name.
    pub name: String,
    /// Per-(micro)batch collectives of the operator itself (statistics, halos).
    pub comm: Vec<Comm>,
    /// Per-step parameter-gradient reductions.
    pub grad_comm: Vec<Comm>,
    formulas: Arc<OpFormulas>,
}

impl std::ops::Deref for OpAnalysis {
    type Target = OpFormulas;
    fn deref(&self) -> &OpFormulas {
        &self.formulas
    }
}

impl Serialize for OpAnalysis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let f = &*self.formulas;
        let mut st = s.serialize_struct("OpAnalysis", 19)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("rule", &f.rule)?;
        st.serialize_field("class", &f.class)?;
        st.serialize_field("attention_core", &f.attention_core)?;
        st.serialize_field("fused_attention", &f.fused_attention)?;
        st.serialize_field("recompute", &f.recompute)?;
        st.serialize_field("io_bytes", &f.io_bytes)?;
        st.serialize_field("gemms", &f.gemms)?;
        st.serialize_field("backward_io_bytes", &f.backward_io_bytes)?;
        st.serialize_field("forward", &f.forward)?;
        st.serialize_field("backward", &f.backward)?;
        st.serialize_field("saved", &f.saved)?;
        st.serialize_field("recomputable_saved", &f.recomputable_saved)?;
        st.serialize_field("params", &f.params)?;
        st.serialize_field("comm", &self.comm)?;
        st.serialize_field("grad_comm", &self.grad_comm)?;
        st.serialize_field("out", &f.out)?;
        st.serialize_field("out_bytes", &f.out_bytes)?;
        st.serialize_field("ring_bytes", &f.ring_bytes)?;
        st.end()
    }
}

/// What an operator's analysis holds but for its name and collectives: the same for every
/// operator of one kind (rule, bindings, input kinds, splits and place among the saved
/// tensors).
#[derive(Debug, Clone, PartialEq)]
pub struct OpFormulas {
    /// Rule name.
    pub rule: String,
    /// What its rule declares it is in a mixture of experts ([`Role`]).
    pub role: Option<Role>,
    /// FLOP class.
    pub class: FlopClass,
    /// Whether its work grows with the square of the sequence (the attention core that selective
    /// recomputation drops).
    pub attention_core: bool,
    /// Whether it is a fused attention kernel (it keeps no S×S tensor, so selective
    /// recomputation has nothing to drop from it).
    pub fused_attention: bool,
    /// Whether selective recomputation recomputes it: a non-fused attention-core operator
    /// under `core_attn`, or one of another module the model's `recompute_modules` name
    /// ([`crate::model::OpNode::recomputed`]).
    pub recomputed: bool,
    /// Whether selective recomputation discards its output too (an output-discarding module's
    /// operator): the copies its readers save are recomputed, not kept.
    pub discards_output: bool,
    /// Backward FLOPs per device that recompute forward work inside the kernel (device work,
    /// not model FLOPs); in neither `forward` nor `backward`.
    pub recompute: Poly,
    /// Bytes per device the forward kernel reads and writes (the rule's inputs and output, or
    /// its `io`, with split indices divided by their axis sizes).
    pub io_bytes: Poly,
    /// Where it is a linear layer outside the attention core and not a router
    /// ([`crate::rules::OpRule::linear_input`], [`crate::model::OpNode::router`]), what FP8
    /// training runs in FP8 inside a repeated layer: the position of its activation input.
    pub linear_input: Option<usize>,
    /// Whether, as an FP8 GEMM, it casts its activation input: the first linear layer of its
    /// block to read that tensor (the q, k and v projections of one input are one
    /// Transformer Engine module, which casts its input once).
    pub fp8_casts_input: bool,
    /// The elements of the input the casting layer keeps in FP8 for the backward (half the
    /// bf16 bytes of what it keeps; zero for the others): their bytes are a recipe's
    /// ([`crate::strategy::Fp8Bytes::saved`]).
    pub fp8_saved_elements: Poly,
    /// Whether that FP8 copy replaces the bf16 one, which no earlier operator of its block
    /// keeps; otherwise both are kept.
    pub fp8_replaces_bf16: bool,
    /// Per-device sizes of the GEMMs it runs as (forward, then one per input gradient; see
    /// [`crate::rules::OpRule::gemms`]), with split indices divided; empty when it is not a
    /// two-operand contraction.
    pub gemms: Vec<GemmDims>,
    /// Bytes per device the backward kernels read and write
    /// ([`crate::rules::OpRule::backward_io_bytes`], split indices divided).
    pub backward_io_bytes: Poly,
    /// Bytes per device of the backward's own kernel for vector-parameter gradients (a bias's
    /// reduction, layer normalisation's second pass), and the share of `backward_io_bytes` it
    /// takes from the other backward kernels ([`crate::rules::OpRule::param_grad_kernel_bytes`],
    /// split indices divided).
    pub param_grad_bytes: [Poly; 2],
    /// Bytes per device of its output.
    pub out_local_bytes: Poly,
    /// Bytes a loss moves beyond `io_bytes` and `backward_io_bytes` (forward, backward) where
    /// it runs as separate fp32 passes ([`crate::rules::OpRule::fp32_pass_bytes`], the model's
    /// [`crate::model::LossMode::Fp32`]), and (forward) its evaluations as training metrics
    /// ([`crate::rules::OpRule::metric_pass_bytes`] × the model's `train_metrics`); zero for
    /// every other operator.
    pub loss_pass_bytes: [Poly; 2],
    /// The splits chosen.
    pub plan: OpPlan,
    /// The split table entry of those splits (rule symbols and axis sizes).
    pub entry: SplitEntry,
    /// Forward FLOPs per device.
    pub forward: Poly,
    /// Backward FLOPs per device.
    pub backward: Poly,
    /// Of `backward`, the gradients of its parameters per device (the weight-gradient GEMMs
    /// ZB-H1 defers: [`crate::rules::split::PassSplit::weight_compute`]).
    pub weight_grad: Poly,
    /// Bytes saved for backward per device (an input another operator of the block already
    /// keeps is not counted again).
    pub saved: Poly,
    /// The saved inputs: (input position, bytes per device).
    pub saved_inputs: Vec<(usize, Poly)>,
    /// The part of `saved` that selective recomputation drops: what an attention-core operator
    /// saves of its own or of another attention-core operator's outputs (its inputs from outside
    /// the core must stay, to recompute from).
    pub recomputable_saved: Poly,
    /// Trained parameter elements owned, per device.
    pub params: Poly,
    /// Forward output placement per axis (dp, tp).
    pub out: [Place; 2],
    /// Output bytes of the whole logical tensor.
    pub out_bytes: Poly,
    /// Bytes per device of the keys and values an attention operator (work quadratic in the
    /// sequence) reads: its inputs named `key` and `value`, what context parallelism passes
    /// around its ring once per step (zero for other operators).
    pub ring_bytes: Poly,
}

/// One block, analysed.
#[derive(Debug, Clone, Serialize)]
pub struct BlockAnalysis {
    /// Block name.
    pub name: String,
    /// Copies.
    pub repeat: Poly,
    /// Its operators in execution order.
    pub ops: Vec<OpAnalysis>,
    /// Redistribution on its edges, per (micro)batch (forward and backward).
    pub edges: Vec<Comm>,
    /// Bytes per device of the tensor it hands to the next block (a pipeline boundary).
    pub boundary_bytes: Poly,
}

/// A whole model, analysed under one layout.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The model's name.
    pub model: String,
    /// The layout.
    pub layout: Layout,
    /// Blocks.
    pub blocks: Vec<BlockAnalysis>,
    /// Whether some parameter is tied between operators (shared embeddings).
    pub tied: bool,
    /// The model's sequence symbol (its `sequence` role), what context parallelism cuts; `None`
    /// for a model without a sequence (image sides are not one).
    pub sequence: Option<String>,
    /// The symbols of the model's expert routing (its `experts`, `top_k` and group roles), what
    /// the node-limited dispatch counts nodes with.
    #[serde(skip)]
    pub routing: Option<super::moe::RoutingSymbols>,
}

fn place_of(plan: &OpPlan, entry: &SplitEntry, t: &Tensor, placements: &[Placement]) -> [Place; 2] {
    let mut out = [Place::Replicate, Place::Replicate];
    for (n, s) in entry.splits.iter().enumerate() {
        let k = if s.axis == AxisKind::Dp.name() { 0 } else { 1 };
        let tag = plan.tag(k);
        out[k] = match placements[n] {
            Placement::Partial(_) => Place::Partial,
            _ if t.has(&s.index) => Place::Shard(tag),
            _ => Place::Replicate,
        };
    }
    out
}

/// The all-gather sequence parallelism repeats of `producer`'s sharded output for the backward
/// of `consumer`, the reader whose backward runs first.
fn regather_comm(kind: CollectiveKind, wire: Poly, producer: &str, consumer: &str) -> Comm {
    Comm {
        kind,
        axis: AxisKind::Tp,
        op: format!("{producer}→{consumer} (backward)"),
        tensor: producer.to_string(),
        wire_bytes: wire,
        calls: 1,
        site: Site::Regather {
            producer: producer.to_string(),
            consumer: consumer.to_string(),
        },
        reason: format!("sequence parallelism keeps `{producer}` sharded and gathers it again for the backward pass of `{consumer}`"),
    }
}

/// Analyses every operator of `model` under `layout`.
pub fn analyse(model: &Model, layout: &Layout) -> Analysis {
    let (mut blocks, index, tied) = analyse_ops(model, layout);
    let mut regather = saved_once(model, &mut blocks, &index);
    // Edges: forward conversions and backward gradient conversions.
    for (bi, block) in model.blocks.iter().enumerate() {
        let (edges, grads) = forward_edges(block, bi, &blocks, &index);
        let mut edges = edges;
        edges.extend(gradient_edges(&blocks, grads));
        blocks[bi].edges.extend(edges);
        blocks[bi].edges.append(&mut regather[bi]);
        if let Some(o) = block.output {
            let (_, oi) = index[&(bi, o)];
            let op = &blocks[bi].ops[oi];
            blocks[bi].boundary_bytes = local(&op.out_bytes, &op.out);
        }
    }
    Analysis {
        model: model.name.clone(),
        layout: layout.clone(),
        blocks,
        tied,
        sequence: model.roles.sequence.clone(),
        routing: super::moe::RoutingSymbols::of(model),
    }
}

/// Where each operator's analysis is: (block, node) → (block, position).
type OpIndex = BTreeMap<(usize, NodeIndex), (usize, usize)>;

/// Each block's operators analysed (alike operators once), where each is, and whether a
/// parameter is tied.
fn analyse_ops(model: &Model, layout: &Layout) -> (Vec<BlockAnalysis>, OpIndex, bool) {
    let mut blocks: Vec<BlockAnalysis> = Vec::new();
    let mut index = OpIndex::new();
    let mut tied = false;
    let mut alike: HashMap<String, OpAnalysis> = HashMap::new();
    for (bi, block) in model.blocks.iter().enumerate() {
        let mut ops = Vec::new();
        for (oi, &n) in block.order.iter().enumerate() {
            let node = &block.graph[n];
            tied |= node
                .inputs
                .iter()
                .any(|(_, p)| matches!(p, Producer::Tied(_)));
            ops.push(analyse_alike(model, node, layout, &mut alike));
            index.insert((bi, n), (bi, oi));
        }
        blocks.push(BlockAnalysis {
            name: block.name.clone(),
            repeat: block.repeat.clone(),
            ops,
            edges: Vec::new(),
            boundary_bytes: Poly::zero(),
        });
    }
    (blocks, index, tied)
}

/// The producer of an operator's `k`-th input, where it is an analysed operator (the block's
/// own output for a repeated block's input).
fn producer_of(
    block: &crate::model::Block,
    bi: usize,
    node: &OpNode,
    k: usize,
    index: &OpIndex,
) -> Option<(usize, usize)> {
    match &node.inputs[k].1 {
        Producer::Op {
            block: pb,
            node: pn,
        } => index.get(&(*pb, *pn)).copied(),
        Producer::BlockInput => block.output.and_then(|o| index.get(&(bi, o)).copied()),
        _ => None,
    }
}

/// The saved bytes with every tensor kept once (see below); returns, per block, the gathers
/// that sequence parallelism reruns in the backward pass.
fn saved_once(model: &Model, blocks: &mut [BlockAnalysis], index: &OpIndex) -> Vec<Vec<Comm>> {
    // A tensor read by several operators (the input of q, k and v projections) is saved once;
    // so is an output its producer keeps for its own backward (softmax's probabilities, ReLU's
    // output) and a reader keeps again as its input: autograd saves references to one tensor.
    // Under sequence parallelism a sequence-sharded tensor that a tensor-parallel operator reads
    // whole is kept sharded and gathered again in the backward pass, as Megatron-LM does
    // (Korthikanti et al. 2022 §4.2.3).
    let mut regather: Vec<Vec<Comm>> = vec![Vec::new(); model.blocks.len()];
    let mut kinds = SavedKinds::new();
    for (bi, block) in model.blocks.iter().enumerate() {
        // The tensors of the block some operator already keeps for the backward.
        let mut kept: BTreeSet<String> = BTreeSet::new();
        // The inputs some linear layer of the block casts to FP8 (under FP8 training).
        let mut fp8_cast: BTreeSet<String> = BTreeSet::new();
        for (oi, &n) in block.order.iter().enumerate() {
            let node = &block.graph[n];
            let op = blocks[bi].ops[oi].formulas.clone();
            let mut s = Saved::of(&op);
            if op.recomputed {
                let inputs: Poly = op.saved_inputs.iter().map(|(_, b)| b.clone()).sum();
                s.recomputable = &s.saved - &inputs;
            }
            for (k, bytes) in &op.saved_inputs {
                let Some(key) = node.input_key(*k) else {
                    continue;
                };
                let producer = producer_of(block, bi, node, *k, index);
                let mut keep = bytes.clone();
                if let Some((pb, pi)) = producer {
                    let p = &blocks[pb].ops[pi];
                    let reads_whole = matches!(op.plan.tp, Some((_, super::layout::Tag::Feature)));
                    if p.out[1] == Place::Shard(super::layout::Tag::Seq) && reads_whole {
                        keep = bytes.checked_div(&Poly::symbol(TP)).expect("axis symbol");
                        // A later reader runs its backward earlier: the gather serves the
                        // reader whose backward comes first (the q, k and v projections of
                        // one input all need it for their weight gradients).
                        let gathered = regather[bi].iter_mut().find(|c| {
                            matches!(&c.site, Site::Regather { producer, .. } if *producer == p.name)
                        });
                        if let Some(c) = gathered {
                            *c = regather_comm(c.kind, c.wire_bytes.clone(), &p.name, &node.name);
                        } else if !kept.contains(&key) {
                            if let Some((kind, wire)) =
                                convert(p.out[1], Place::Replicate, &p.out_bytes, &p.out, 1)
                            {
                                regather[bi].push(regather_comm(kind, wire, &p.name, &node.name));
                            }
                        }
                    }
                }
                if op.linear_input == Some(*k) && fp8_cast.insert(key.clone()) {
                    s.fp8_casts_input = true;
                    let half =
                        &keep * &Poly::constant(crate::sym::Rational::new(1.into(), 2.into()));
                    s.fp8_saved_elements = half;
                    s.fp8_replaces_bf16 = !kept.contains(&key);
                }
                s.saved -= bytes;
                if !kept.contains(&key) {
                    s.saved += &keep;
                    // Recomputed with its reader, or discarded by its producer's module and
                    // recomputed before its reader's backward (output-discarding
                    // checkpointing): not kept between the passes.
                    let from = producer.map(|(pb, pi)| &blocks[pb].ops[pi].formulas);
                    let rerun =
                        from.is_some_and(|p| (op.recomputed && p.recomputed) || p.discards_output);
                    if rerun {
                        s.recomputable += &keep;
                    }
                    kept.insert(key);
                }
            }
            s.set(&mut blocks[bi].ops[oi], &mut kinds);
            // An output its producer keeps (already in its `saved`): a later reader keeping it
            // again adds nothing.
            if node
                .rule
                .saved
                .iter()
                .any(|t| t.name == node.rule.output.name)
            {
                kept.insert(OpNode::output_key(bi, n));
            }
        }
    }
    regather
}

/// What an operator keeps for the backward pass, given the tensors the operators before it
/// keep: the fields of [`OpFormulas`] that [`saved_once`] sets.
struct Saved {
    saved: Poly,
    recomputable: Poly,
    fp8_saved_elements: Poly,
    fp8_replaces_bf16: bool,
    fp8_casts_input: bool,
}

/// The formulas made for an operator's saved bytes, by the formulas they were made from (kept
/// alive so that their addresses stay theirs).
type SavedKinds = HashMap<usize, (Arc<OpFormulas>, Vec<Arc<OpFormulas>>)>;

impl Saved {
    fn of(f: &OpFormulas) -> Saved {
        Saved {
            saved: f.saved.clone(),
            recomputable: f.recomputable_saved.clone(),
            fp8_saved_elements: f.fp8_saved_elements.clone(),
            fp8_replaces_bf16: f.fp8_replaces_bf16,
            fp8_casts_input: f.fp8_casts_input,
        }
    }

    fn matches(&self, f: &OpFormulas) -> bool {
        self.saved == f.saved
            && self.recomputable == f.recomputable_saved
            && self.fp8_saved_elements == f.fp8_saved_elements
            && self.fp8_replaces_bf16 == f.fp8_replaces_bf16
            && self.fp8_casts_input == f.fp8_casts_input
    }

    /// Gives `op` these saved bytes, sharing the formulas of an operator of its kind that
    /// already has them.
    fn set(self, op: &mut OpAnalysis, kinds: &mut SavedKinds) {
        if self.matches(&op.formulas) {
            return;
        }
        let key = Arc::as_ptr(&op.formulas) as usize;
        let (_, made) = kinds
            .entry(key)
            .or_insert_with(|| (op.formulas.clone(), Vec::new()));
        if let Some(f) = made.iter().find(|f| self.matches(f)) {
            op.formulas = f.clone();
            return;
        }
        let f = Arc::new(OpFormulas {
            saved: self.saved,
            recomputable_saved: self.recomputable,
            fp8_saved_elements: self.fp8_saved_elements,
            fp8_replaces_bf16: self.fp8_replaces_bf16,
            fp8_casts_input: self.fp8_casts_input,
            ..(*op.formulas).clone()
        });
        made.push(f.clone());
        op.formulas = f;
    }
}

/// Gradients arriving at each producer: (producer location) → per-axis consumer placements.
type Arriving = BTreeMap<(usize, usize), Vec<[Place; 2]>>;

/// Block `bi`'s forward conversions between producers and consumers (one per producer, axis
/// and placement pair), and the placements the input gradients arrive in at each producer.
fn forward_edges(
    block: &crate::model::Block,
    bi: usize,
    blocks: &[BlockAnalysis],
    index: &OpIndex,
) -> (Vec<Comm>, Arriving) {
    let mut fwd: BTreeMap<(String, usize, String, String), Comm> = BTreeMap::new();
    // Gradients arriving at each producer: (producer location) → per-axis consumer placements.
    let mut grads = Arriving::new();
    for &n in &block.order {
        let node = &block.graph[n];
        let (_, ci) = index[&(bi, n)];
        let formulas = blocks[bi].ops[ci].formulas.clone();
        let entry = &formulas.entry;
        for (k, (input, _)) in node.inputs.iter().enumerate() {
            let src = producer_of(block, bi, node, k, index);
            let Some((pb, pi)) = src else { continue };
            let t = &node.rule.inputs[k];
            let want = place_of(
                &blocks[bi].ops[ci].plan,
                entry,
                t,
                &entry.forward.inputs[k].placements,
            );
            let p = &blocks[pb].ops[pi];
            for (a, axis) in AXES.iter().enumerate() {
                if let Some((kind, bytes)) = convert(p.out[a], want[a], &p.out_bytes, &p.out, a) {
                    let key = (
                        p.name.clone(),
                        a,
                        format!("{:?}", p.out[a]),
                        format!("{:?}", want[a]),
                    );
                    fwd.entry(key).or_insert(Comm {
                        kind,
                        axis: *axis,
                        op: format!("{}→{}", p.name, node.name),
                        tensor: p.name.clone(),
                        wire_bytes: bytes,
                        calls: 1,
                        site: Site::Edge {
                            producer: p.name.clone(),
                            consumer: node.name.clone(),
                        },
                        reason: format!(
                            "forward: `{}` leaves {} on {}, `{}` reads `{input}` as {}",
                            p.name,
                            p.out[a],
                            axis.name(),
                            node.name,
                            want[a]
                        ),
                    });
                }
            }
            if t.grad {
                let dname = format!("d{}", t.name);
                if let Some(g) = entry.backward.outputs.iter().find(|o| o.tensor == dname) {
                    let got = place_of(&blocks[bi].ops[ci].plan, entry, t, &g.placements);
                    grads.entry((pb, pi)).or_default().push(got);
                }
            }
        }
    }
    (fwd.into_values().collect(), grads)
}

/// The backward conversions of the gradients arriving at each producer: partial sums reduced
/// once, and each other sharded placement converted once, to the producer's output placement.
fn gradient_edges(blocks: &[BlockAnalysis], grads: Arriving) -> Vec<Comm> {
    let mut edges = Vec::new();
    for ((pb, pi), got) in grads {
        let p = &blocks[pb].ops[pi];
        for (a, axis) in AXES.iter().enumerate() {
            let target = match p.out[a] {
                Place::Partial => Place::Replicate,
                other => other,
            };
            let mut froms: Vec<Place> = Vec::new();
            if got.iter().any(|g| g[a] == Place::Partial) {
                froms.push(Place::Partial);
            }
            for g in &got {
                if matches!(g[a], Place::Shard(_)) && g[a] != target && !froms.contains(&g[a]) {
                    froms.push(g[a]);
                }
            }
            for from in froms {
                if let Some((kind, bytes)) = convert(from, target, &p.out_bytes, &p.out, a) {
                    edges.push(Comm {
                            kind,
                            axis: *axis,
                            op: format!("d{}", p.name),
                            tensor: format!("d{}", p.name),
                            wire_bytes: bytes,
                            calls: 1,
                            site: Site::Gradient {
                                producer: p.name.clone(),
                            },
                            reason: format!("backward: the gradient of `{}` arrives as {from} on {}, `{}` needs it as {target}", p.name, axis.name(), p.name),
                        });
                }
            }
        }
    }
    edges
}

/// Bytes per device of a tensor of `total` bytes with placement `place`.
fn local(total: &Poly, place: &[Place; 2]) -> Poly {
    let mut p = total.clone();
    for (a, sym) in [(0, DP), (1, TP)] {
        if matches!(place[a], Place::Shard(_)) {
            p = p.checked_div(&Poly::symbol(sym)).expect("axis symbol");
        }
    }
    p
}

/// The collective converting `from` into `to` on axis `a`, with its wire bytes per rank.
fn convert(
    from: Place,
    to: Place,
    total: &Poly,
    place: &[Place; 2],
    a: usize,
) -> Option<(CollectiveKind, Poly)> {
    let kind = match (from, to) {
        (f, t) if f == t => return None,
        (Place::Partial, Place::Replicate) => CollectiveKind::AllReduce,
        (Place::Partial, Place::Shard(_)) => CollectiveKind::ReduceScatter,
        (Place::Shard(_), Place::Replicate) => CollectiveKind::AllGather,
        (Place::Shard(_), Place::Shard(_)) => CollectiveKind::AllToAll,
        _ => return None,
    };
    let other = 1 - a;
    let mut group = total.clone();
    if matches!(place[other], Place::Shard(_)) {
        group = group
            .checked_div(&Poly::symbol([DP, TP][other]))
            .expect("axis symbol");
    }
    let n = Poly::symbol([DP, TP][a]);
    Some((kind, kind.wire_bytes(&group, &n)))
}

fn op_entry(node: &OpNode, plan: &OpPlan, model: &Model) -> SplitEntry {
    let splits = plan.splits();
    derive(&node.rule, &splits, model.dtype_bytes).expect("layouts only split splittable indices")
}

/// [`analyse_op`], once per kind of operator: an operator analyses as an earlier one with the
/// same rule (one name is one rule in a model), bindings, attention and router marks, kinds of inputs
/// (own parameter, tied parameter, other) and splits, but for its name, so a graph of
/// thousands of identical operators is derived once and copied with the name changed.
fn analyse_alike(
    model: &Model,
    node: &OpNode,
    layout: &Layout,
    alike: &mut HashMap<String, OpAnalysis>,
) -> OpAnalysis {
    let plan = plan(node, layout, model);
    let kinds: Vec<u8> = node
        .inputs
        .iter()
        .map(|(_, p)| match p {
            Producer::Param => 0,
            Producer::Tied(_) => 1,
            _ => 2,
        })
        .collect();
    let key = format!(
        "{}|{:?}|{}|{:?}|{}|{kinds:?}|{plan:?}",
        node.rule.name, node.bind, node.attention_core, node.recompute, node.router
    );
    if let Some(a) = alike.get(&key) {
        let mut a = a.clone();
        rename(&mut a, &node.name);
        return a;
    }
    let a = analyse_op(model, node, layout);
    alike.insert(key, a.clone());
    a
}

/// Gives an analysed operator, and the collectives it runs, the name `name`.
fn rename(a: &mut OpAnalysis, name: &str) {
    a.name = name.to_string();
    for c in a.comm.iter_mut().chain(a.grad_comm.iter_mut()) {
        c.op = name.to_string();
        match &mut c.site {
            Site::Forward { op } | Site::Backward { op } => *op = name.to_string(),
            _ => {}
        }
    }
}

fn analyse_op(model: &Model, node: &OpNode, layout: &Layout) -> OpAnalysis {
    let plan = plan(node, layout, model);
    let entry = op_entry(node, &plan, model);
    let f = |p: &Poly| node.model_formula(p);
    let attention_core = node.attention_core && !node.rule.fused_attention;
    let (comm, grad_comm) = op_collectives(node, &entry);
    // What one device holds of a tensor's `bytes`: divided by each split of its indices.
    let shard = |t: &Tensor, bytes: Poly| {
        entry
            .splits
            .iter()
            .filter(|s| t.has(&s.index))
            .fold(bytes, |b, s| b.checked_div(&s.size).expect("axis symbol"))
    };
    // Saved tensors that are inputs: kept once per producer in the block (see `analyse`).
    let saved_inputs: Vec<(usize, Poly)> = node
        .rule
        .saved
        .iter()
        .filter_map(|t| {
            let k = node.rule.inputs.iter().position(|i| i.name == t.name)?;
            Some((k, shard(t, f(&tensor_bytes(t, model.dtype_bytes)))))
        })
        .collect();
    let params: Poly = node
        .rule
        .inputs
        .iter()
        .enumerate()
        .filter(|(k, _)| node.owns_param(*k))
        .map(|(_, t)| shard(t, node.elements(t)))
        .sum();
    let out = place_of(
        &plan,
        &entry,
        &node.rule.output,
        &entry.forward.outputs[0].placements,
    );
    let bytes = op_bytes(model, node, &plan);
    let mut recompute = f(&node.rule.recompute_flops);
    for s in &entry.splits {
        recompute = recompute.checked_div(&s.size).expect("axis symbol");
    }
    let ring_bytes = ring_bytes(model, node, &shard);
    let formulas = OpFormulas {
        rule: node.rule.name.clone(),
        role: node.rule.role,
        class: node.rule.class,
        attention_core,
        fused_attention: node.rule.fused_attention,
        recomputed: node.recomputed(&model.recompute_modules),
        discards_output: node.discards_output(&model.recompute_modules),
        recompute,
        io_bytes: bytes.io,
        backward_io_bytes: bytes.backward_io,
        param_grad_bytes: bytes.param_grad,
        out_local_bytes: bytes.out_local,
        loss_pass_bytes: bytes.loss_pass,
        linear_input: node
            .rule
            .linear_input()
            .filter(|_| !attention_core && !node.rule.fused_attention && !node.router),
        fp8_casts_input: false,
        fp8_saved_elements: Poly::zero(),
        fp8_replaces_bf16: false,
        gemms: gemm_dims(node, &entry),
        forward: f(&entry.forward.compute),
        backward: f(&entry.backward.compute),
        weight_grad: f(&entry.backward.weight_compute),
        saved: f(&entry.saved_bytes),
        recomputable_saved: Poly::zero(),
        saved_inputs,
        params,
        out,
        out_bytes: f(&tensor_bytes(&node.rule.output, model.dtype_bytes)),
        ring_bytes,
        plan,
        entry,
    };
    OpAnalysis {
        name: node.name.clone(),
        comm,
        grad_comm,
        formulas: Arc::new(formulas),
    }
}

/// What one device of `node` sends around the context-parallel ring per micro-batch: the
/// inputs its rule rings (`shard`: a device's part of a tensor's bytes), where its work is
/// quadratic in the declared sequence (attention; never an image side).
fn ring_bytes(model: &Model, node: &OpNode, shard: &dyn Fn(&Tensor, Poly) -> Poly) -> Poly {
    let quadratic = model.roles.sequence.as_deref().is_some_and(|s| {
        node.model_formula(&node.rule.forward_flops())
            .degree_in(s)
            .1
            >= 2
    });
    if !quadratic {
        return Poly::zero();
    }
    node.rule
        .inputs
        .iter()
        .filter(|t| node.rule.rings(t))
        .map(|t| shard(t, node.model_formula(&tensor_bytes(t, model.dtype_bytes))))
        .sum()
}

/// The collectives an operator's own splits need: per micro-batch (forward and backward,
/// but for the partial output and the input gradients, which the edges resolve) and its
/// parameters' gradient reductions.
fn op_collectives(node: &OpNode, entry: &SplitEntry) -> (Vec<Comm>, Vec<Comm>) {
    let f = |p: &Poly| node.model_formula(p);
    let mut comm = Vec::new();
    let mut grad_comm = Vec::new();
    let axis_of = |name: &str| {
        if name == AxisKind::Dp.name() {
            AxisKind::Dp
        } else {
            AxisKind::Tp
        }
    };
    let to_comm = |c: &crate::rules::split::CollectiveCost, backward: bool| Comm {
        kind: c.kind,
        axis: axis_of(&c.axis),
        op: node.name.clone(),
        tensor: c.tensor.clone(),
        wire_bytes: f(&c.wire_bytes),
        calls: c.count,
        reason: c.reason.clone(),
        site: if backward {
            Site::Backward {
                op: node.name.clone(),
            }
        } else {
            Site::Forward {
                op: node.name.clone(),
            }
        },
    };
    for c in &entry.forward.collectives {
        // Partial outputs are resolved on the edges, where the consumer's needs are known.
        if c.kind == CollectiveKind::AllReduce && c.tensor == node.rule.output.name {
            continue;
        }
        comm.push(to_comm(c, false));
    }
    for c in &entry.backward.collectives {
        let k = node
            .rule
            .inputs
            .iter()
            .position(|t| format!("d{}", t.name) == c.tensor);
        match k {
            // A tied parameter's gradient is added into its owner's, which is reduced once.
            Some(k) if matches!(node.inputs[k].1, Producer::Tied(_)) => {}
            Some(k) if node.rule.inputs[k].param => grad_comm.push(to_comm(c, true)),
            // Input gradients are resolved on the edges.
            Some(_) => {}
            None => comm.push(to_comm(c, true)),
        }
    }
    (comm, grad_comm)
}

/// An operator's HBM bytes per device (memory-bound kernels, forward and backward, the
/// parameter gradients', a loss's fp32 passes, its output) under the plan's splits.
struct OpBytes {
    io: Poly,
    backward_io: Poly,
    param_grad: [Poly; 2],
    loss_pass: [Poly; 2],
    out_local: Poly,
}

fn op_bytes(model: &Model, node: &OpNode, plan: &OpPlan) -> OpBytes {
    let f = |p: &Poly| node.model_formula(p);
    let per_device = |(r, w): (Poly, Poly)| {
        let splits = plan.splits();
        let shares = splits.iter().map(|s| (s.index.as_str(), s.size.clone()));
        f(&per_device_bytes(&r, &w, shares).expect("axis sizes are symbols"))
    };
    let io_bytes = per_device(node.rule.io_bytes(model.dtype_bytes));
    let backward_io_bytes = per_device(node.rule.backward_io_bytes(model.dtype_bytes));
    let (own, shared) = node.rule.param_grad_kernel_bytes(model.dtype_bytes);
    let param_grad_bytes = [
        per_device((own, Poly::zero())),
        per_device((shared, Poly::zero())),
    ];
    let loss_pass_bytes = if node.rule.fp32_passes {
        let (fwd, bwd) = node.rule.loss_pass_bytes(
            model.dtype_bytes,
            model.loss == crate::model::LossMode::Fp32,
            model.train_metrics,
        );
        [
            per_device((fwd, Poly::zero())),
            per_device((bwd, Poly::zero())),
        ]
    } else {
        [Poly::zero(), Poly::zero()]
    };
    let out_local_bytes = per_device((
        Poly::zero(),
        tensor_bytes(&node.rule.output, model.dtype_bytes),
    ));
    OpBytes {
        io: io_bytes,
        backward_io: backward_io_bytes,
        param_grad: param_grad_bytes,
        loss_pass: loss_pass_bytes,
        out_local: out_local_bytes,
    }
}

/// The sizes of an operator's GEMMs on one device.
fn gemm_dims(node: &OpNode, entry: &SplitEntry) -> Vec<GemmDims> {
    let f = |p: &Poly| node.model_formula(p);
    let local = |names: &[String]| -> Poly {
        names
            .iter()
            .map(|i| {
                let mut e = f(&Poly::symbol(i));
                for s in entry.splits.iter().filter(|s| &s.index == i) {
                    e = e.checked_div(&s.size).expect("axis symbol");
                }
                e
            })
            .product()
    };
    node.rule
        .gemms()
        .iter()
        .map(|g| GemmDims {
            batch: local(&g.batch),
            rows: local(&g.rows),
            cols: local(&g.cols),
            inner: local(&g.inner),
        })
        .collect()
}

impl Analysis {
    /// How many distinct formula sets ([`OpFormulas`]) its operators hold: operators of one
    /// kind share one, so a graph of thousands of identical operators holds a few.
    pub fn distinct_formulas(&self) -> usize {
        let mut seen: BTreeSet<usize> = BTreeSet::new();
        for blk in &self.blocks {
            for op in &blk.ops {
                seen.insert(Arc::as_ptr(&op.formulas) as usize);
            }
        }
        seen.len()
    }

    /// The same analysis with the symbols of `b` replaced by their values (partial evaluation:
    /// what stays symbolic is what a search still varies), so that evaluating it many times is
    /// cheap.
    pub fn bind(&self, b: &crate::sym::Bindings) -> Result<Analysis, SymError> {
        self.clone().into_bound(b)
    }

    /// [`Analysis::bind`] in place: an analysis of thousands of operators is not copied
    /// whole before every formula in it is replaced anyway.
    pub fn into_bound(self, b: &crate::sym::Bindings) -> Result<Analysis, SymError> {
        let f = |p: &Poly| p.bind(b);
        let comm = |c: &Comm| -> Result<Comm, SymError> {
            Ok(Comm {
                wire_bytes: f(&c.wire_bytes)?,
                ..c.clone()
            })
        };
        let mut out = self;
        let mut kinds = Kinds::default();
        for blk in &mut out.blocks {
            blk.repeat = f(&blk.repeat)?;
            blk.boundary_bytes = f(&blk.boundary_bytes)?;
            blk.edges = blk.edges.iter().map(comm).collect::<Result<_, _>>()?;
            for op in &mut blk.ops {
                op.formulas = kinds.map(&op.formulas, |x| x.bound(b))?;
                op.comm = op.comm.iter().map(comm).collect::<Result<_, _>>()?;
                op.grad_comm = op.grad_comm.iter().map(comm).collect::<Result<_, _>>()?;
            }
        }
        Ok(out)
    }
}

/// The formulas an analysis-wide change made of each operator kind's formulas, made once per
/// kind: keyed by the address of the formulas they were made from, kept alive with them.
#[derive(Default)]
struct Kinds(HashMap<usize, (Arc<OpFormulas>, Arc<OpFormulas>)>);

impl Kinds {
    fn map<E>(
        &mut self,
        from: &Arc<OpFormulas>,
        change: impl FnOnce(&OpFormulas) -> Result<OpFormulas, E>,
    ) -> Result<Arc<OpFormulas>, E> {
        let key = Arc::as_ptr(from) as usize;
        if let Some((_, to)) = self.0.get(&key) {
            return Ok(to.clone());
        }
        let to = Arc::new(change(from)?);
        self.0.insert(key, (from.clone(), to.clone()));
        Ok(to)
    }
}

impl OpFormulas {
    /// These formulas with the symbols of `b` replaced by their values.
    fn bound(&self, b: &crate::sym::Bindings) -> Result<OpFormulas, SymError> {
        self.try_map(true, |p| p.bind(b))
    }

    /// These formulas on one rank of a context-parallel group (see
    /// [`Analysis::context_parallel`]): every amount but the parameters, which each rank holds
    /// whole.
    fn context_parallel(&self, sequence: Option<&str>) -> OpFormulas {
        match self.try_map(false, |p| {
            Ok::<_, std::convert::Infallible>(per_cp_rank(p, sequence))
        }) {
            Ok(op) => op,
            Err(never) => match never {},
        }
    }

    /// Every formula through `f` (the parameters too where `params`).
    fn try_map<E>(
        &self,
        params: bool,
        f: impl Fn(&Poly) -> Result<Poly, E>,
    ) -> Result<OpFormulas, E> {
        let mut op = self.clone();
        for p in [
            &mut op.forward,
            &mut op.backward,
            &mut op.weight_grad,
            &mut op.recompute,
            &mut op.io_bytes,
            &mut op.backward_io_bytes,
            &mut op.out_local_bytes,
            &mut op.saved,
            &mut op.recomputable_saved,
            &mut op.fp8_saved_elements,
            &mut op.out_bytes,
            &mut op.ring_bytes,
        ] {
            *p = f(p)?;
        }
        if params {
            op.params = f(&op.params)?;
        }
        for p in op
            .param_grad_bytes
            .iter_mut()
            .chain(op.loss_pass_bytes.iter_mut())
            .chain(op.saved_inputs.iter_mut().map(|(_, p)| p))
        {
            *p = f(p)?;
        }
        op.gemms = op
            .gemms
            .iter()
            .map(|g| g.map(&f))
            .collect::<Result<_, _>>()?;
        Ok(op)
    }
}

/// Context parallelism (Megatron-Core's `--context-parallel-size`) applied to a formula of one
/// device's work on one micro-batch: every term that grows with the sequence `S` is divided
/// by the axis size `p_cp` (each rank holds S/cp tokens of every sequence; an attention term,
/// quadratic in S, is divided once, since a rank computes its S/cp queries against all S keys,
/// and causal load balancing gives every rank the same share); terms free of S stay whole. `S`
/// is `sequence`, the model's sequence symbol; without one nothing is divided.
pub fn per_cp_rank(p: &Poly, sequence: Option<&str>) -> Poly {
    let Some(sequence) = sequence else {
        return p.clone();
    };
    let cp = Poly::symbol(CP);
    let mut free = Poly::zero();
    let mut seq = Poly::zero();
    for (m, c) in p.terms() {
        if m.exponent(sequence) != 0 {
            seq.add_term(m.clone(), c.clone());
        } else {
            free.add_term(m.clone(), c.clone());
        }
    }
    free + seq.checked_div(&cp).expect("the axis symbol is a monomial")
}

impl Analysis {
    /// The same analysis on one rank of a context-parallel group of `p_cp` ranks: per-token
    /// work, saved bytes, HBM traffic, tensor-parallel collectives, edges, pipeline boundaries
    /// and ring bytes through [`per_cp_rank`]; parameters unchanged (replicated over cp); the
    /// data-parallel gradient reductions over the dp × cp ranks that hold the same weights
    /// (`p_dp` replaced by `p_dp · p_cp`). At `p_cp = 1` it evaluates exactly as `self`.
    pub fn context_parallel(&self) -> Analysis {
        self.clone().into_context_parallel()
    }

    /// The same analysis without each operator's split table entry ([`OpFormulas::entry`],
    /// every formula of the split's derivation): the analysis itself reads the entries to
    /// price its edges, nothing after it does, and they are most of its memory. `rank` keeps
    /// an analysis of every layout it prices, of every operator of a graph of thousands.
    pub fn without_split_entries(mut self) -> Analysis {
        let empty = || crate::rules::split::PassSplit {
            compute: Poly::zero(),
            weight_compute: Poly::zero(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            collectives: Vec::new(),
        };
        let mut kinds = Kinds::default();
        for blk in &mut self.blocks {
            for op in &mut blk.ops {
                let f = kinds.map(&op.formulas, |x| {
                    Ok::<_, std::convert::Infallible>(OpFormulas {
                        entry: SplitEntry {
                            splits: Vec::new(),
                            forward: empty(),
                            backward: empty(),
                            saved_bytes: Poly::zero(),
                        },
                        ..x.clone()
                    })
                });
                op.formulas = f.unwrap_or_else(|e| match e {});
            }
        }
        self
    }

    /// [`Analysis::context_parallel`] in place (see [`Analysis::into_bound`]).
    pub fn into_context_parallel(self) -> Analysis {
        let sequence = self.sequence.clone();
        let g = |p: &Poly| per_cp_rank(p, sequence.as_deref());
        let replicas = &Poly::symbol(DP) * &Poly::symbol(CP);
        let tokens = |c: &Comm| Comm {
            wire_bytes: g(&c.wire_bytes),
            ..c.clone()
        };
        let mut out = self;
        let mut kinds = Kinds::default();
        for blk in &mut out.blocks {
            blk.boundary_bytes = g(&blk.boundary_bytes);
            blk.edges = blk.edges.iter().map(tokens).collect();
            for op in &mut blk.ops {
                let f = kinds.map(&op.formulas, |x| {
                    Ok::<_, std::convert::Infallible>(x.context_parallel(sequence.as_deref()))
                });
                op.formulas = f.unwrap_or_else(|e| match e {});
                op.comm = op.comm.iter().map(tokens).collect();
                for c in &mut op.grad_comm {
                    if c.axis == AxisKind::Dp {
                        c.wire_bytes = c
                            .wire_bytes
                            .substitute(DP, &replicas)
                            .expect("substituting a monomial");
                    }
                }
            }
        }
        out
    }
}

/// Bytes read and written per device: `read + write` with every split index replaced by its
/// share, index ÷ axis size (the split divides the index evenly).
pub fn per_device_bytes<'a>(
    read: &Poly,
    write: &Poly,
    splits: impl IntoIterator<Item = (&'a str, Poly)>,
) -> Result<Poly, String> {
    let mut per = read + write;
    for (index, size) in splits {
        let share = Poly::symbol(index)
            .checked_div(&size)
            .map_err(|e| e.to_string())?;
        per = per.substitute(index, &share).map_err(|e| e.to_string())?;
    }
    Ok(per)
}
